"""The targets table of issue 11 (service, watcher, long history) for docs/benchmarks.md."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .measure import fmt_seconds

if TYPE_CHECKING:
    from .report import Row

MB = 1000 * 1000
RESOLVE_TARGET_S = 0.005
RSS_77K_TARGET = 150 * MB


def _find(rows: list[Row], corpus: str, scenario: str, pair: str) -> Row | None:
    return next((r for r in rows if (r.corpus, r.scenario, r.pair) == (corpus, scenario, pair)), None)


def _ratio_target(rows: list[Row], floors: dict, name: str, key: tuple[str, str, str],
                  limit: float) -> list[str]:
    r = _find(rows, *key)
    if r is None or r.ratio() is None:
        why = "not measured in this run" if r is None else (r.snap.na or "n/a")
        return [name, f"<= {limit:g}x", why, "n/a", ""]
    ratio = r.ratio() or 0.0
    snap, other = r.snap.median() or 0.0, r.other.median() or 0.0
    measured = f"{ratio:.2f}x ({fmt_seconds(snap)} vs {fmt_seconds(other)})"
    met = ratio <= limit
    bound = ""
    if not met:
        if key[2] == "svc" and (floors.get("client_roundtrip_s") or floors.get("client_version_s")):
            if floors.get("client_roundtrip_s"):
                f = floors["client_roundtrip_s"]
                what = "a command answered by the service on an empty store (`snapstore list -n 1`: the client and a round trip)"
            else:
                f = floors["client_version_s"]
                what = "a bare client process (`snapstore --version`: interpreter start + client import)"
            bound = (f"{what} costs {fmt_seconds(f)} = {f / other:.2f}x {r.other_name}; the "
                     f"service's own work is the other {fmt_seconds(max(snap - f, 0))}")
        elif key[2] == "watch" and floors.get("fsync_s"):
            f = floors["fsync_s"]
            floor = limit * other
            bound = (f"the target allows {fmt_seconds(floor)}; snapstore's durable commit (one "
                     f"fsync here {fmt_seconds(f)}; {r.other_name} does not sync) explains "
                     f"{min(f / snap, 1):.0%} of its {fmt_seconds(snap)}, the rest is the "
                     f"snapshot's own work in Python (not profiled here)")
        elif floors.get("python_start_s"):
            f = floors["python_start_s"]
            bound = f"interpreter start alone {fmt_seconds(f)} = {f / other:.2f}x {r.other_name}"
    return [name, f"<= {limit:g}x", measured, "met" if met else "MISSED", bound]


def issue11_targets(rows: list[Row], facts: dict, floors: dict) -> list[list[str]]:
    """The targets table of issue 11: measured value, met or missed, what bounds a missed one."""
    out = [
        _ratio_target(rows, floors, "no-change checkpoint, CLI with service", ("stdlib", "no-change", "svc"), 0.4),
        _ratio_target(rows, floors, "1-file checkpoint, CLI with service", ("stdlib", "edit-1", "svc"), 0.4),
        _ratio_target(rows, floors, "100-file checkpoint, CLI with service", ("stdlib", "edit-100", "svc"), 0.5),
        _ratio_target(rows, floors, "restore 100 files, CLI with service", ("stdlib", "restore-100", "svc"), 1.0),
        _ratio_target(rows, floors, "diff --stat, CLI with service", ("stdlib", "diff-100", "svc"), 0.5),
        _ratio_target(rows, floors, "150-step replay, per checkpoint, with service", ("stdlib", "replay", "svc"), 0.5),
        _ratio_target(rows, floors, "no-change on the 77k-file tree, with service",
                      ("stdlib-x10", "no-change", "svc"), 0.05),
        _ratio_target(rows, floors, "library watch=True: no-change", ("stdlib", "no-change", "watch"), 0.05),
        _ratio_target(rows, floors, "library watch=True: 1-file", ("stdlib", "edit-1", "watch"), 0.1),
        _ratio_target(rows, floors, "no-change CLI without service", ("stdlib", "no-change", "cli"), 2.0),
    ]
    res = facts.get("resolve")
    name = f"resolve any ref at {res['checkpoints']:,} checkpoints" if res else "resolve any ref at 10,000 checkpoints"
    if res:
        timed = {k: v for k, v in res["library"].items() if "median_s" in v}
        worst_label, worst = max(timed.items(), key=lambda kv: kv[1]["median_s"])
        met = worst["median_s"] <= RESOLVE_TARGET_S
        cli, svc = res.get("cli_show_latest"), res.get("cli_show_latest_service")
        measured = (f"library: slowest {worst_label} {fmt_seconds(worst['median_s'])} (median); CLI "
                    f"`show latest` {fmt_seconds(cli)}, {fmt_seconds(svc)} with service")
        bound = "" if met else f"{worst_label} reads more records than the index keys it needs"
        least = floors.get("client_roundtrip_s") or floors.get("client_version_s")
        if svc and svc > RESOLVE_TARGET_S and least:
            bound += (("; " if bound else "") + f"CLI: a command through the service costs at least {fmt_seconds(least)}")
        out.append([name, "<= 5 ms", measured, "met (library)" if met else "MISSED", bound])
    else:
        out.append([name, "<= 5 ms", "not measured in this run", "n/a", ""])
    peaks = [max(r.snap.rss_kib) * 1024 for r in rows
             if r.corpus == "stdlib-x10u" and r.scenario == "initial" and r.snap.rss_kib]
    if peaks:
        peak = max(peaks)
        out.append(["peak RSS, 77k-file checkpoint (stdlib-x10u initial)", "<= 150 MB", f"{peak / MB:.0f} MB",
                    "met" if peak <= RSS_77K_TARGET else "MISSED", ""])
    else:
        out.append(["peak RSS, 77k-file checkpoint", "<= 150 MB", "not measured in this run (full run only)",
                    "n/a", ""])
    return out


def floors_line(floors: dict) -> str:
    if not floors:
        return ""
    return (f"Floors on this machine (medians): `python -c pass` {fmt_seconds(floors.get('python_start_s'))}, "
            f"`snapstore --version` (handed to the Python client) {fmt_seconds(floors.get('client_version_s'))}, "
            f"`snapstore list -n 1` answered by a service (the native client and a round trip) "
            f"{fmt_seconds(floors.get('client_roundtrip_s'))}, "
            f"one fsync of a 4 KiB write {fmt_seconds(floors.get('fsync_s'))}.")


def resolve_lines(facts: dict) -> list[str]:
    res = facts.get("resolve")
    if not res:
        return []
    lib = ", ".join(f"`{v['ref']}` {fmt_seconds(v['median_s'])} (max {fmt_seconds(v['max_s'])})"
                    if "median_s" in v else f"`{v['ref']}` {v['error']}" for v in res["library"].values())
    return [
        f"**Resolve at {res['checkpoints']:,} checkpoints** (records written through the library in "
        f"{res['build_seconds']:.1f} s; `Store.resolve`, store open, 20 calls each, median): {lib}. "
        f"CLI `snapstore show latest`: {fmt_seconds(res['cli_show_latest'])} as a process without the "
        f"service, {fmt_seconds(res['cli_show_latest_service'])} with it "
        f"({res['service_requests']} requests reached the service).",
        "",
    ]


