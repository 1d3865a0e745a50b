"""A format-2 store stays readable by the snapstore that wrote it: it is written in the map form
until ``upgrade``, and a fetch that brings it compact conversation records (pushed from a
format-3 store) makes it format 3 in the same transaction, so an older reader says "upgrade
snapstore" (exit 7) rather than "damaged"."""

from __future__ import annotations

from remote_helpers import make_store, remote, seaweed  # noqa: F401

from snapstore.store import Store
from tests.conversation_legacy import forms


def test_a_fetch_of_compact_records_makes_a_format_2_store_format_3(remote, tmp_path):  # noqa: F811
    chat = [{"role": "user", "content": f"step {i} " * 40} for i in range(5)]
    with make_store(tmp_path / "a", {"x": b"x"}) as a, make_store(tmp_path / "b", {"y": b"y"}) as b:
        with b.backend.write() as batch:
            batch.put("meta", b"format", b"2")
        b.snapshot("own", conversation=chat[:2])
        assert b.format_version == 2 and forms(b)["compact"] == 0
        remote.add_to(a)
        remote.add_to(b)
        for n in range(1, 4):
            a.snapshot(f"a{n}", task="t", conversation=chat[:n + 1])
        assert a.format_version == 3 and forms(a)["compact"] > 0
        a.push()
        b.fetch()
        assert forms(b)["compact"] > 0 and b.format_version == 3
        assert b.verify().ok
    with Store.open(tmp_path / "b") as b:
        assert b.conversation("latest") == chat[:2]
