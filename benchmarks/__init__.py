"""Benchmark harness (issue 5): snapstore against shadow git (CLI) and libgit2 (pygit2).

Run ``python -m benchmarks.run --quick`` (about two minutes) or ``make bench`` (the full set,
which rewrites docs/benchmarks.md).  See docs/benchmarks.md for the method.
"""
