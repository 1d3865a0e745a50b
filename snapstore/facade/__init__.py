"""The Store facade, in sibling parts over one base: ``base`` (state, loading and resolving
records, and what every writer shares: finishing an interrupted restore, a safety checkpoint),
``reading`` (list, show, diff, cat, conversations, verify), ``going_back`` (restore, undo,
rewind, revert, recover), ``upkeep`` (prune, delete, gc, repair, stats, config, relocate,
upgrade, maintenance), ``tags`` (tag, untag, the UI's change token) and ``remotes`` (remote
settings, push, fetch, pull, clone).  :class:`snapstore.store.Store` combines them with
opening, snapshotting and the edit tool; each method takes the lock it needs, calls one stage in
:mod:`snapstore.ops` or :mod:`snapstore.remote`, and runs hooks.  More: docs/packages/facade.md.
"""
