"""Store statistics: what the checkpoints hold, what the store keeps, and what that costs.

* ``logical_bytes``: the sum over all checkpoints of the bytes of their files (what a copy of
  every checkpoint would take);
* ``unique_bytes``: the plain bytes of every stored chunk (data, index nodes, manifests,
  conversations) once;
* ``stored_bytes``: the bytes of the stored chunk values (after zstd);
* ``dedup_ratio`` = logical / unique, ``compression_ratio`` = unique / stored;
* ``disk_size``: the size of the LMDB file (see ``gc --compact``);
* ``tables``: per table, its records, their keys and values (``payload``) and the bytes of the
  pages holding them (``pages``): where the store's space goes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from snapstore.records.checkpoint import Checkpoint
from snapstore.storage.backend import Backend


@dataclass
class StoreStats:
    """Counts and sizes of a store (see the module docstring)."""

    checkpoints: int = 0
    safety_checkpoints: int = 0
    tasks: int = 0
    latest: str | None = None
    latest_files: int = 0
    latest_bytes: int = 0
    logical_bytes: int = 0
    unique_bytes: int = 0
    stored_bytes: int = 0
    packs: int = 0
    format: int = 0
    chunks: int = 0
    streams: int = 0
    disk_size: int = 0
    tables: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def dedup_ratio(self) -> float:
        return self.logical_bytes / self.unique_bytes if self.unique_bytes else 0.0

    @property
    def compression_ratio(self) -> float:
        return self.unique_bytes / self.stored_bytes if self.stored_bytes else 0.0

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["dedup_ratio"] = round(self.dedup_ratio, 3)
        doc["compression_ratio"] = round(self.compression_ratio, 3)
        return doc


def collect(backend: Backend, checkpoints: Sequence[Checkpoint]) -> StoreStats:
    """The statistics of the store of ``backend`` holding ``checkpoints`` (oldest first)."""
    from snapstore.ops.gc import chunk_sizes

    all_ = list(checkpoints)
    st = StoreStats()
    st.checkpoints = sum(1 for c in all_ if not c.is_safety)
    st.safety_checkpoints = len(all_) - st.checkpoints
    st.tasks = len({c.task for c in all_ if c.task is not None})
    users = [c for c in all_ if not c.is_safety]
    if users:
        latest = users[-1]
        st.latest = latest.id
        st.latest_files = int(latest.stats.get("files", 0))
        st.latest_bytes = int(latest.stats.get("bytes", 0))
    st.logical_bytes = sum(int(c.stats.get("bytes", 0)) for c in all_)
    for _, stored, plain in chunk_sizes(backend):
        st.chunks += 1
        st.stored_bytes += stored
        st.unique_bytes += plain
    for _, size, _ in backend.value_sizes("packs"):  # format 2: the chunks' bytes are here
        st.packs += 1
        st.stored_bytes += size
    with backend.read() as view:
        st.streams = view.count("streams")
        fmt = view.get("meta", b"format")
    st.format = int(fmt) if fmt is not None and fmt.isdigit() else 0
    st.disk_size = backend.disk_size()
    from snapstore.storage.backend import TABLES

    for table in TABLES:
        records = payload = 0
        for key, stored, _ in backend.value_sizes(table):
            records += 1
            payload += len(key) + stored
        if records:
            st.tables[table] = {"records": records, "payload": payload, "pages": backend.table_pages(table)}
    return st
