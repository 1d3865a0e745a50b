"""Hostile input, the remote surface: a bucket writer plants shapes of msgpack bombs under every
kind of key a reader decodes (a ref, the config, gc's plan, a bundle, a pack footer, a
checkpoint record, a conversation record).  Each trial checks that the reader refuses it in one
error naming it (exit 6's class), that its Python allocations stay within a few times the
object, and that the sound refs are still served.  (The named cases with numbers are
tests/test_remote_hostile.py; this varies the shapes.)
"""

from __future__ import annotations

import random
import sys
import tracemalloc
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from remote_helpers import make_store, sample_tree  # noqa: E402
from torture_tally import FULL  # noqa: E402

from snapstore.errors import CorruptError  # noqa: E402
from snapstore.remote import layout  # noqa: E402
from snapstore.storage.objects import chunk_id  # noqa: E402
from snapstore.store import Store  # noqa: E402

CASE = pytest.mark.torture_case("hostile input")
SIZE = 2 << 20


def _array(n: int) -> bytes:
    return b"\xdd" + n.to_bytes(4, "big")


def _shape(name: str, rng: random.Random) -> bytes:
    """About SIZE bytes of one hostile msgpack shape."""
    if name == "empty lists":
        return _array(SIZE) + b"\x90" * SIZE
    if name == "empty maps":
        return _array(SIZE) + b"\x80" * SIZE
    if name == "pairs of lists":
        return _array(SIZE // 3) + b"\x92\x90\x90" * (SIZE // 3)
    if name == "short strings":
        return _array(SIZE // 3) + b"\xa2ab" * (SIZE // 3)
    if name == "small ints in maps":
        return _array(SIZE // 4) + b"\x81\x01\x02\xc0"[:3] * (SIZE // 4)
    if name == "deep nesting":
        return b"\x91" * SIZE + b"\xc0"
    if name == "ext types":
        return _array(SIZE // 3) + b"\xd4\x01\x00" * (SIZE // 3)
    if name == "lying length":
        return _array(0xFFFFFFFF) + b"\x90" * 16
    if name == "binary lies":
        return b"\xc6\xff\xff\xff\xff" + b"\0" * 64
    return rng.randbytes(SIZE)


SHAPES = ["empty lists", "empty maps", "pairs of lists", "short strings", "small ints in maps",
          "deep nesting", "ext types", "lying length", "binary lies", "random bytes"]
KINDS = ["ref", "config", "gc plan", "bundle", "footer", "checkpoint record", "conversation record"]


def _plant(remote, kind: str, data: bytes) -> str:
    """Put ``data`` where ``kind`` is decoded; the key a reader's error names."""
    if kind == "ref":
        remote.overwrite("refs/aaa", data)
        return "refs/aaa"
    if kind == "config":
        remote.overwrite("config", data)
        return "config"
    if kind == "gc plan":
        remote.overwrite("gc/plan", data)
        return "gc/plan"
    ref = layout.parse_ref("refs/default", remote.read("refs/default"))
    cid, rec = layout.parse_bundle(ref.bundle, remote.read(ref.bundle)).checkpoints[-1]
    needs: list[str] = []
    if kind == "checkpoint record":
        cid, rec = chunk_id(data), data
    elif kind in ("footer", "conversation record"):
        if kind == "footer":
            pack = layout.PACK_MAGIC + b"\0" * layout.NONCE + data + len(data).to_bytes(4, "big") + layout.PACK_MAGIC
        else:
            pack = layout.encode_pack([], [], [(chunk_id(data), data)])
        needs = [layout.pack_key(chunk_id(pack))]
        remote.overwrite(needs[0], pack)
    body = layout.encode_bundle("aaa", "w" * 16, 1, [(cid, rec)], needs, None)
    if kind == "bundle":
        body = layout.BUNDLE_MAGIC + data
    key = layout.bundle_key("aaa", 1, "w" * 16, body)
    remote.overwrite(key, body)
    remote.overwrite("refs/aaa", layout.encode_ref(layout.Ref(cid, key, 1, "w" * 16)))
    return needs[0] if needs else key


def _cases() -> list[tuple[str, str]]:
    every = [(k, s) for k in KINDS for s in SHAPES]
    return every if FULL else random.Random(38).sample(every, 14)


@CASE
@pytest.mark.parametrize(("kind", "shape"), _cases())
def test_a_planted_shape_is_refused_in_bounded_memory(remote, tmp_path, kind, shape):
    with make_store(tmp_path / "a", sample_tree("a")) as a:
        remote.add_to(a)
        a.snapshot("sound")
        a.push()
    data = _shape(shape, random.Random(f"{kind}/{shape}"))
    named = _plant(remote, kind, data)
    (tmp_path / "c").mkdir()
    with Store.init(tmp_path / "c") as c:
        remote.add_to(c)
        if kind == "gc plan":
            c.fetch(["default"])

        def call() -> object:
            if kind == "gc plan":
                return c.remote_gc(grace_s=0, window_s=0)
            if kind == "config":
                return c.remote_ls()
            return c.fetch(["aaa"])

        tracemalloc.start()
        try:
            with pytest.raises(CorruptError) as exc:
                call()
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert named in str(exc.value) or "refs/aaa" in str(exc.value), str(exc.value)
        assert "\n" not in str(exc.value) and len(str(exc.value)) < 2000
        assert peak < 4 * len(data) + (2 << 20), (kind, shape, peak)
        if kind not in ("config", "gc plan"):
            report = c.fetch(keep_going=True)
            assert [r.name for r in report.refs] == ["default"] and len(report.problems) == 1
            assert c.verify().ok
