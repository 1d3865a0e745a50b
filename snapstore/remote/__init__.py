"""Remotes: push, fetch and clone checkpoints through S3-compatible object storage.

The remote is an existing engine (AWS S3, GCS and R2 in their S3 modes, Ceph, SeaweedFS, MinIO);
snapstore runs no server of its own.  The layout and the commit protocol are in docs/remote.md:

* ``layout``: the names and byte formats of the remote objects (packs, bundles, refs, config);
* ``transport``: the only module that imports obstore (lazily: ``snapstore --version`` never
  loads it), mapping its errors onto :mod:`snapstore.errors`;
* ``credentials``: AWS keys from the environment or a profile, never stored;
* ``state``: what the local store remembers about each remote (its settings, which chunks and
  records are known to be there, the refs last seen);
* ``closure``: what a set of checkpoints reaches, in order;
* ``push``, ``fetch``, ``refs``: the protocol; ``verify``, ``doctor``: checking a remote;
* ``crypto``, ``keys``: optional client-side encryption, a layer over the transport.
"""
