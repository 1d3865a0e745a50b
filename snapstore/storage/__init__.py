"""Storage: where bytes go and how they come back.

Owns the content-defined chunker (where bytes are cut), the object layer (chunks hashed with
BLAKE3, compressed with zstd, verified on read; streams as index trees over chunks), the
key-value :class:`~snapstore.storage.backend.Backend` protocol with its in-memory
(``memory``) and LMDB implementations (``lmdb_env``: opening a store's files safely;
``lmdb_backend``: views and batches; ``lmdb_compact`` and ``lmdb_generations``: compaction into
a new generation that every process follows), and the writer lock.  Nothing here knows about
files, manifests or checkpoints.  Imports only :mod:`snapstore.errors`.
"""
