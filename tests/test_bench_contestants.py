"""The benchmark sees what this snapstore has: a check of the harness's own detection, which
once looked for a module the service's split had moved (issue 39) and quietly dropped every
service row from `make bench`."""

from __future__ import annotations

from benchmarks import competitors


def test_the_benchmark_finds_this_snapstores_service_and_watching_store():
    assert competitors.has_service()
    assert competitors.has_watch()


def test_an_exported_snapstore_is_run_through_its_service_client(monkeypatch):
    """With ``--snapstore-at`` (SNAPSTORE_SRC: another revision's checkout), the commands go to
    that revision's thin client, which asks its service; ``python -m snapstore`` never does."""
    from pathlib import Path

    monkeypatch.setattr(competitors, "SNAPSTORE_SRC", str(Path(competitors.__file__).resolve().parents[1]))
    argv = competitors.snapstore_argv()
    assert "from snapstore.service.client import run; run()" in argv, argv
