"""Why the edit tool's similarity level uses rapidfuzz and a threshold of 0.9 (issue 13).

``python -m benchmarks.edit_match``: scores realistic near-misses (what a model gets wrong when it
quotes code: a typo, a changed identifier, a missing line) and different code that must not
match, with rapidfuzz's normalised Indel ratio and difflib's SequenceMatcher ratio, and times a
full sliding-window search (the similarity level's work) over a 5,000-line file with each.
"""

from __future__ import annotations

import difflib
import statistics
import time

from rapidfuzz.fuzz import ratio

from snapstore.ops.edit import SIMILARITY_THRESHOLD, _norm

BLOCK = """def load_config(path):
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    return Config(**data)"""

CASES = [
    ("typo in a name (should match)", BLOCK.replace("load_config", "laod_config")),
    ("one char dropped (should match)", BLOCK.replace('encoding="utf-8"', 'encoding="utf8"')),
    ("quote style (should match)", BLOCK.replace('"utf-8"', "'utf-8'")),
    ("a stale line (should match)", BLOCK.replace("return Config(**data)", "return Config.from_dict(data)")),
    ("another function (must not)", """def save_config(path, config):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(config.to_dict(), f)
    return path"""),
    ("another statement (must not)", """def load_cache(path):
    with gzip.open(path) as f:
        rows = pickle.load(f)
    return Cache(rows)"""),
]


def difflib_ratio(a: str, b: str) -> float:
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def rf_ratio(a: str, b: str) -> float:
    return ratio(a, b) / 100.0


def norm(block: str) -> str:
    return "\n".join(_norm(x) for x in block.split("\n"))


def search_time(fn, lines: list[str], wanted: str, n: int) -> float:
    start = time.perf_counter()
    for i in range(len(lines) - n + 1):
        fn("\n".join(lines[i : i + n]), wanted)
    return time.perf_counter() - start


def main() -> None:
    print(f"threshold {SIMILARITY_THRESHOLD}")
    print(f"{'case':<34} {'rapidfuzz':>9} {'difflib':>9}")
    for name, variant in CASES:
        a, b = norm(BLOCK), norm(variant)
        print(f"{name:<34} {rf_ratio(a, b):9.3f} {difflib_ratio(a, b):9.3f}")
    filler = [f"    value_{i} = compute(value_{i - 1}, {i})" for i in range(5000)]
    wanted = norm(CASES[0][1])
    for label, fn in (("rapidfuzz", rf_ratio), ("difflib", difflib_ratio)):
        times = [search_time(fn, filler, wanted, 4) for _ in range(3)]
        print(f"sliding search, 5,000 lines, {label:<9}: {statistics.median(times) * 1000:8.1f} ms")


if __name__ == "__main__":
    main()
