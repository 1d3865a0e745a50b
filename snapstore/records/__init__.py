"""Records: the typed things stored as byte streams.

Checkpoint records, manifests (path -> entry), conversations (incremental message lists),
references (``latest~N``, tags, ``@task``) and the operation log.  Each record type knows its
encoding and validates what it decodes.  Imports :mod:`snapstore.storage` and
:mod:`snapstore.errors` only.
"""
