"""The benchmark sees what this snapstore has: a check of the harness's own detection, which
once looked for a module the service's split had moved (issue 39) and quietly dropped every
service row from `make bench`."""

from __future__ import annotations

from benchmarks import competitors


def test_the_benchmark_finds_this_snapstores_service_and_watching_store():
    assert competitors.has_service()
    assert competitors.has_watch()
