"""Rebuild the markdown page from JSON results: ``python -m benchmarks.regen --out FILE A.json [B.json]``.

The first file is the main run (its machine, run line and floors); rows, facts, corpora and
notes of the others (e.g. a ``--heavy-only`` run) are appended, so a run split in two for time
still gives one page with one targets table.
"""

from __future__ import annotations

import argparse
import json

from .mdfile import write_generated
from .measure import Series
from .report import Row, render_markdown

_KNOWN = {"corpus", "scenario", "label", "pair", "snapstore", "ratio", "target_max_ratio", "verdict", "extra"}


def _series(doc: dict) -> Series:
    s = Series(seconds=list(doc.get("runs_s", [])), note=doc.get("note", ""), na=doc.get("na", ""))
    peak = doc.get("peak_rss_kib")
    s.rss_kib = [peak] * len(s.seconds) if peak is not None else []
    s.bytes = list(doc.get("runs_bytes", []))
    return s


def rows_of(doc: dict) -> list[Row]:
    """The rows of a results document, as the harness built them."""
    out = []
    for r in doc["rows"]:
        other_name = next(k for k in r if k not in _KNOWN)
        out.append(Row(r["corpus"], r["scenario"], r["label"], r["pair"], _series(r["snapstore"]),
                       _series(r[other_name]), other_name, r.get("extra", {})))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.regen", description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("results", nargs="+")
    a = p.parse_args(argv)
    docs = []
    for path in a.results:
        with open(path) as f:
            docs.append(json.load(f))
    main_doc = docs[0]
    rows = rows_of(main_doc)
    facts = main_doc["facts"]
    meta = {k: v for k, v in main_doc.items() if k not in ("rows", "summary_targets", "issue11_targets", "facts")}
    for path, doc in zip(a.results[1:], docs[1:], strict=True):
        rows += rows_of(doc)
        for key, value in doc["facts"].items():
            if isinstance(value, list):
                facts.setdefault(key, []).extend(value)
            elif key not in facts:
                facts[key] = value
        meta["corpora"].update(doc.get("corpora", {}))
        meta["notes"] = [*meta["notes"], f"Rows of the corpora {', '.join(doc.get('corpora', {}))} come from a "
                         f"separate run ({path}, {doc['started']}, load average "
                         f"{'/'.join(f'{x:.1f}' for x in doc['load_average']['start'])} at its start):",
                         *doc["notes"]]
    write_generated(a.out, render_markdown(rows, facts, meta) + "\n", "benchmarks.run")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
