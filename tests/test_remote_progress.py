"""Progress of remote transfers counts bytes (issue 41, req 4): a push's reaches 100% only
after its last upload (the ref included), a fetch's counts the bytes it reads; the line shows
the rate and the time left; nothing is shown off a terminal."""

from __future__ import annotations

import pytest
from remote_helpers import Counting, make_store, remote, seaweed  # noqa: F401 - fixtures

from snapstore.remote import layout
from snapstore.render import Progress
from snapstore.store import Store
from snapstore.testing import random_bytes


def test_push_progress_counts_bytes_and_ends_after_the_last_upload(remote, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setattr(layout, "PACK_TARGET", 1 << 20)  # several packs from a few MiB
    events: list[tuple] = []
    Counting(monkeypatch, lambda kind, key: events.append((kind, key)))
    files = {f"d/f{i}.bin": random_bytes(700_000, f"p{i}") for i in range(5)}
    with make_store(tmp_path / "a", files) as a:
        remote.add_to(a)
        a.snapshot("one")
        report = a.push(progress=lambda done, total: events.append(("progress", done, total)))
    shown = [e for e in events if e[0] == "progress"]
    totals = {t for _, _, t in shown}
    assert totals == {report.bytes_new + 1}  # plain bytes of the new data, + 1 for the commit
    dones = [d for _, d, _ in shown]
    assert dones == sorted(dones) and dones[0] == 0
    assert report.packs >= 3 and len({d for d in dones if 0 < d < report.bytes_new + 1}) >= report.packs - 1
    last_write = max(i for i, e in enumerate(events) if e[0] in ("create", "update"))
    full = [i for i, e in enumerate(events) if e[0] == "progress" and e[1] == e[2]]
    assert full and min(full) > last_write  # 100% only once the bundle and the ref are written


def test_fetch_progress_counts_the_bytes_read(remote, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setattr(layout, "PACK_TARGET", 1 << 20)
    files = {f"d/f{i}.bin": random_bytes(700_000, f"q{i}") for i in range(3)}
    with make_store(tmp_path / "a", files) as a:
        remote.add_to(a)
        a.snapshot("one")
        a.push()
    (tmp_path / "b").mkdir()
    shown: list[tuple[int, int]] = []
    with Store.in_memory(tmp_path / "b") as b:
        remote.add_to(b)
        report = b.fetch(progress=lambda done, total: shown.append((done, total)))
    read = report.refs[0].bytes_read
    done, total = shown[-1]
    assert done == total and read - 10_000 < done <= read  # the objects' bytes (the small bundle aside)
    assert [d for d, _ in shown] == sorted(d for d, _ in shown)
    assert read > 2_000_000  # bytes, not objects


def test_the_line_shows_bytes_rate_and_time_left():
    p = Progress("push")
    line = p.line(12_900_000, 27_300_000, 3.0)
    assert "47.3%" in line and "12.3 MiB / 26.0 MiB" in line and "4.1 MiB/s" in line and "ETA 3 s" in line
    assert "ETA" not in p.line(27_300_000, 27_300_000, 6.0)  # done: no time left shown
    assert "/s" not in p.line(100, 1000, 0.1)  # no rate before there is one to go by


def test_nothing_is_shown_off_a_terminal(remote, tmp_path, run_cli):  # noqa: F811
    with make_store(tmp_path / "a", {"a.bin": random_bytes(300_000, "t")}) as a:
        a.snapshot("one")
    cwd = tmp_path / "a"
    assert run_cli("remote", "add", "origin", remote.url, *remote.cli_args(), cwd=cwd).code == 0
    r = run_cli("push", cwd=cwd)
    assert r.code == 0 and r.err == ""


@pytest.mark.parametrize("flag", ["-q", "--json"])
def test_quiet_and_json_show_no_progress_even_on_a_terminal(remote, tmp_path, run_cli, monkeypatch, flag):  # noqa: F811
    import sys

    with make_store(tmp_path / "a", {"a.bin": random_bytes(300_000, "u")}) as a:
        a.snapshot("one")
    cwd = tmp_path / "a"
    assert run_cli("remote", "add", "origin", remote.url, *remote.cli_args(), cwd=cwd).code == 0
    made: list[Progress] = []
    real = Progress.__init__

    def init(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        real(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(Progress, "__init__", init)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    r = run_cli("push", flag, cwd=cwd)
    assert r.code == 0
    assert made and not any(p.enabled for p in made)


def test_a_clone_line_says_it_restores_once_the_bytes_are_in(monkeypatch):
    import io
    import sys

    from snapstore import render

    out = io.StringIO()
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    monkeypatch.setattr(render, "_terminal", lambda: out)
    p = Progress("clone", then="checking and restoring the tree")
    p(1 << 20, 4 << 20)
    assert "25.0%" in out.getvalue() and "restoring" not in out.getvalue()
    p(4 << 20, 4 << 20)
    assert out.getvalue().rsplit("\r", 1)[-1].startswith("clone: 4.0 MiB done; checking and restoring the tree")
