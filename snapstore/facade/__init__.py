"""The Store facade, in parts: ``base`` (state, loading and resolving records), ``reading``
(list, show, diff, cat, conversations, verify), ``going_back`` (restore, undo, rewind, recover)
and ``upkeep`` (prune, delete, gc, stats, config, relocate).  :class:`snapstore.store.Store`
combines them with opening and snapshotting; each method is one CLI command's library call.
"""
