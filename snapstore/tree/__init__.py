"""The working tree: walking it, ignoring what should be ignored, and the stat cache.

Path rules (what a safe relative path is), ignore files with git's semantics, the walk that never
follows links and skips ``.git`` and stores, the stat cache with the racy-file rule, and the
tree's current manifest without storing anything.  Imports records, storage and errors.
"""
