"""Operations: the pipeline stages built on storage, records and the tree.

Snapshot, restore (safety, plan, apply, journal), diff and text diffs, per-file history, verify,
garbage collection, retention and statistics.  A stage receives what it needs (a backend, the
root, the excluded paths) rather than the :class:`~snapstore.store.Store`, and never imports the
facade or the CLI.
"""
