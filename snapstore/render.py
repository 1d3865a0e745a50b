"""Human-readable formatting for the CLI (sizes, times, tables, progress)."""

from __future__ import annotations

import sys
import time

from snapstore.tree.paths import display
from snapstore.units import human_size
from snapstore.units import printable as printable  # the one escaping helper (re-exported)
from snapstore.units import printable_bytes as printable_bytes

TYPE_CHECKING = False  # no `typing` at run time: a plain CLI snapshot imports this module
if TYPE_CHECKING:
    from typing import Any

    from snapstore.ops.diff import Change
    from snapstore.ops.gc import GcReport
    from snapstore.ops.history import Version
    from snapstore.ops.maintenance import MaintenanceReport
    from snapstore.ops.repair import RepairReport
    from snapstore.ops.restore import RestoreReport
    from snapstore.ops.restore.recovery import RecoverReport
    from snapstore.ops.retention import PruneReport
    from snapstore.ops.revert import RevertReport, UnknownChange
    from snapstore.ops.stats import StoreStats
    from snapstore.ops.textdiff import LineCounts
    from snapstore.ops.upgrade import UpgradeReport
    from snapstore.ops.verify import VerifyReport
    from snapstore.records.checkpoint import Checkpoint
    from snapstore.records.oplog import Operation


def size(n: int | float) -> str:
    """``14.2 KiB``-style sizes (the one formatter: :func:`snapstore.units.human_size`)."""
    return human_size(n)


def local_time(time_ns: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(time_ns / 1e9))


def changes_summary(stats: dict[str, Any]) -> str:
    return f"+{stats.get('added', 0)} ~{stats.get('modified', 0)} -{stats.get('deleted', 0)}"


def table(rows: list[list[str]]) -> str:
    """Left-aligned columns separated by two spaces; the last column is not padded."""
    if not rows:
        return ""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for r in rows:
        cells = [c.ljust(w) for c, w in zip(r[:-1], widths[:-1])] + [r[-1]]
        out.append("  ".join(cells).rstrip())
    return "\n".join(out)


def one_line(text: str, width: int = 50) -> str:
    text = printable(" ".join(text.split()))
    return text if len(text) <= width else text[: width - 1] + "…"


#: C1 controls and DEL, which JSON may carry raw, as JSON escapes (a terminal obeys them raw).
_JSON_C1 = {c: f"\\u{c:04x}" for c in range(0x7F, 0xA0)}


def dump_json(doc: Any) -> str:
    """``--json`` output: UTF-8 text, every control character escaped the JSON way (JSON
    escapes C0 itself; C1 and DEL too here, so that no control character reaches a terminal)."""
    import json  # only for --json output (its import pulls in re)

    out = json.dumps(doc, indent=2, ensure_ascii=False)
    return out if out.isascii() else out.translate(_JSON_C1)


def _terminal() -> Any:
    """stderr as it is, for the progress line's own control sequences (the CLI shows control
    characters in what it prints escaped: see :func:`printable`)."""
    return getattr(sys.stderr, "unfiltered", sys.stderr)


class Progress:
    """A progress line on stderr, only when stderr is a terminal and output is not quiet.
    Counted in bytes (``unit_bytes``), it shows the rate and the time left once there is a
    rate to go by (half a second of progress)."""

    def __init__(self, label: str, enabled: bool = True, unit_bytes: bool = True, then: str = ""):
        self.label = label
        self.enabled = enabled and sys.stderr.isatty()
        self.unit_bytes = unit_bytes
        self.then = then  # what comes once the count is done (clone: the restore), shown until close
        self._last = 0.0
        self._shown = False
        self._start: float | None = None

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if self._start is None:
            self._start = now
        if now - self._last < 0.1 and done < total:
            return
        self._last = now
        line = self.line(done, total, now - self._start)
        if self.then and total and done >= total:
            line = f"{printable(self.label)}: {size(done) if self.unit_bytes else done} done; {self.then}"
        _terminal().write(f"\r{line}\x1b[K")
        _terminal().flush()
        self._shown = True

    def line(self, done: int, total: int, elapsed: float) -> str:
        """``push [#####.....]  45.0% 12.3 MiB / 27.3 MiB  4.1 MiB/s  ETA 4 s``."""
        pct = min(100.0, 100 * done / total) if total else 100.0
        width = 30
        filled = int(width * pct / 100)
        amount = f"{size(done)} / {size(total)}" if self.unit_bytes else f"{done} / {total}"
        out = f"{printable(self.label)} [{'#' * filled}{'.' * (width - filled)}] {pct:5.1f}% {amount}"
        if self.unit_bytes and elapsed >= 0.5 and done > 0:
            rate = done / elapsed
            out += f"  {size(rate)}/s"
            if done < total:
                out += f"  ETA {_duration((total - done) / rate)}"
        return out

    def close(self) -> None:
        if self._shown:
            _terminal().write("\r\x1b[K")
            _terminal().flush()


def _duration(seconds: float) -> str:
    s = int(seconds + 0.5)
    return f"{s} s" if s < 60 else f"{s // 60}:{s % 60:02d}" if s < 3600 else f"{s // 3600} h {s % 3600 // 60:02d}"


# -- the CLI's renderings of library results (pure formatting: no store access) ------------


def snapshot_line(cp: Checkpoint) -> str:
    """``3f2a9c1b0d4e +2 ~5 -1 files, 14.2 KiB new`` (or ``... unchanged``)."""
    if cp.reused:
        return f"{cp.short_id} unchanged (no new checkpoint)"
    st = cp.stats
    skipped = sum(st.get("skipped", {}).values())
    extra = f", {skipped} skipped" if skipped else ""
    return f"{cp.short_id} {changes_summary(st)} files, {size(st.get('new_bytes', 0))} new{extra}"


def checkpoint_rows(numbered: list[tuple[int | None, Checkpoint]]) -> list[list[str]]:
    """Rows of ``snapstore list``: #N, id, time, message [tags], task, actor, +/~/-."""
    rows = []
    for n, c in numbered:
        label = c.message if not c.tags else f"{c.message} [{', '.join(c.tags)}]"
        rows.append(
            [
                (f"#{n}" if n else "-") + (" safety" if c.is_safety else ""),
                c.short_id,
                local_time(c.time_ns),
                one_line(label) or "-",
                c.task or "-",
                c.actor or "-",
                changes_summary(c.stats),
            ]
        )
    return [[printable(cell) for cell in row] for row in rows]  # (a task name is text from outside)


def _json_path(path: str) -> str:
    import os

    return os.fsencode(path).decode("utf-8", "backslashreplace")


def summary_lines(info: dict[str, Any]) -> list[str]:
    """``snapstore show``: the record, the conversation preview, the changed files."""
    st = info["stats"]
    out = [
        f"checkpoint {info['id']}",
        f"time:     {local_time(int(info['timestamp'] * 1e9))}",
        f"message:  {info['message'] or '-'}",
    ]
    if info["task"]:
        out.append(f"task:     {info['task']}")
    if info["tags"]:
        out.append(f"tags:     {', '.join(info['tags'])}")
    if info.get("actor"):
        why = info["metadata"].get("attributed")
        out.append(f"actor:    {info['actor']}" + (f" ({why})" if isinstance(why, str) and why else ""))
    out.append(f"parent:   {info['parent'][:12] if info['parent'] else '-'}")
    out.append(f"files:    {st.get('files', 0)} ({size(st.get('bytes', 0))}), {size(st.get('new_bytes', 0))} new")
    for key, value in info["metadata"].items():
        out.append(f"meta:     {key}={value}")
    convo = info["conversation"]
    if convo is None:
        out.append("conversation: no conversation stored")
    else:
        out.append(f"conversation: {convo['messages']} message(s)")
        if convo["last_user"] is not None:
            out.append(f"  user:      {convo['last_user']}")
        if convo["last_assistant"] is not None:
            out.append(f"  assistant: {convo['last_assistant']}")
    if info["changes"]:
        out.append("")
        for c in info["changes"]:
            counts = "bin" if c["binary"] else f"+{c['added']} -{c['removed']}"
            out.append(f"{c['status']} {counts:>12}  {_json_path(c['path'])}")
    return [printable(line) for line in out]  # (messages, tasks, metadata, paths: text from outside)


_STATUS_WORDS = {"A": "added", "M": "modified", "D": "deleted", "T": "replaced", "X": "mode", "R": "renamed"}


def history_rows(versions: list[Version]) -> list[list[str]]:
    """Rows of ``snapstore log PATH``."""
    rows = []
    for v in versions:
        cp = v.checkpoint
        counts = "bin" if v.binary else f"+{v.added} -{v.removed}"
        what = _STATUS_WORDS.get(v.status, v.status)
        rows.append(
            [cp.short_id, local_time(cp.time_ns), what, size(v.entry.size) if v.entry else "-", counts, one_line(cp.message) or "-"]
        )
    return rows


def name_status_lines(changes: list[Change]) -> list[str]:
    """``diff``'s default output: status and path (git's ``R<similarity>`` with both paths)."""
    from snapstore.ops.renames import Renamed

    out = []
    for c in changes:
        if isinstance(c, Renamed):
            old, new = display(c.old_path), display(c.path)
            out.append(f"R{c.similarity:03d}\t{old}\t{new}")
        else:
            out.append(f"{c.status}\t{c.display_path}")
    return out


def stat_lines(changes: list[Change], counts: list[LineCounts]) -> list[str]:
    """``diff --stat``: one line per path with a +/- bar (or why it has none), then totals."""
    labels = [c.display_path for c in changes]
    width = max((len(label) for label in labels), default=0)
    out = []
    total_a = total_r = 0
    for label, n in zip(labels, counts):
        detail = n.note or f"{n.added + n.removed:5d} {'+' * min(n.added, 40)}{'-' * min(n.removed, 40)}"
        out.append(f" {label.ljust(width)} | {detail}")
        total_a += n.added
        total_r += n.removed
    out.append(f" {len(changes)} file(s) changed, {total_a} insertion(s)(+), {total_r} deletion(s)(-)")
    return out


_VERBS = {"A": "create", "M": "write", "D": "delete", "T": "replace", "X": "chmod", "R": "rename"}


def restore_lines(report: RestoreReport) -> list[str]:
    """What a restore or undo did (or would do, in a dry run), and how to take it back."""
    if report.dry_run:
        out = [f"would {_VERBS.get(c.status, c.status):7} {c.display_path}" for c in report.changes]
        out.append(f"{len(report.changes)} path(s) would change (dry run: nothing was changed)")
        return out
    counts = {s: sum(1 for c in report.changes if c.status == s) for s in "AMDTX"}
    summary = f"+{counts['A']} ~{counts['M'] + counts['T'] + counts['X']} -{counts['D']} paths"
    target = report.target
    label = f" ({one_line(target.message)})" if target.message else ""
    if report.kind == "undo":
        head = f"undid the last operation: the tree now equals checkpoint {target.short_id}{label}, {summary}"
    else:
        head = f"restored {target.short_id}{label}: {summary}"
    if report.safety is None:
        return [head]
    return [f"{head}; the tree before is checkpoint {report.safety.short_id} ('snapstore undo' puts it back)"]


def revert_lines(report: RevertReport) -> list[str]:
    """One line per path a revert considered (status, path, conflicting lines), then a total."""
    lines = []
    for o in report.outcomes:
        text = f"{o.status:<9} {display(o.path)}"
        if o.conflicts and o.status == "conflict":
            ranges = ", ".join(c.describe() for c in o.conflicts)
            text += f": {ranges or 'whole file'}"
        if o.note:
            text += f" ({o.note})"
        lines.append(text)
    lines.extend(unknown_lines(report.unknown))
    if report.dry_run:
        lines.append(f"dry run: revert of {report.what} would change {report.changed} path(s); nothing was changed")
    elif report.op_seq is None:
        lines.append(f"revert of {report.what}: nothing to change")
    else:
        lines.append(f"revert of {report.what}: {report.changed} path(s) changed; 'snapstore undo' puts them back")
    return lines


def unknown_lines(unknown: list[UnknownChange]) -> list[str]:
    """The ``unknown`` changes an actor revert listed: a heading, then one line per checkpoint."""
    if not unknown:
        return []
    taken = [u for u in unknown if u.taken]
    if taken:
        head = f"taken back too: {len(taken)} checkpoint(s) labelled unknown (no event says who made them):"
    else:
        head = (
            f"left alone: {len(unknown)} checkpoint(s) labelled unknown (no event says who made them; "
            "--include-unknown takes them back too):"
        )
    out = [head]
    for u in unknown:
        names = ", ".join(display(p) for p in u.paths[:8]) + (f", ... ({len(u.paths)} paths)" if len(u.paths) > 8 else "")
        out.append(f"  {u.checkpoint.short_id} {one_line(u.checkpoint.message, 40)}: {names}")
    return out


def oplog_rows(ops: list[Operation]) -> list[list[str]]:
    """Rows of ``snapstore oplog``."""
    return [
        [
            f"op {op.seq}",
            local_time(op.time_ns),
            op.kind,
            f"to {op.target[:12]}",
            f"before {op.before[:12]}",
            f"{op.changed} path(s)" + (f" in {', '.join(op.paths)}" if op.paths else ""),
        ]
        for op in ops
    ]


def verify_line(report: VerifyReport) -> str:
    status = "ok" if report.ok else f"{len(report.problems)} problem(s)"
    return (
        f"verified {report.chunks} chunks" + (f" in {report.packs} packs" if report.packs else "")
        + f" ({size(report.bytes_read)} read), {report.streams} streams, "
        f"{report.checkpoints} checkpoints, {report.files} file entries: {status}"
    )


def repair_line(report: RepairReport) -> str:
    left = report.damaged - report.repaired
    line = (
        f"repaired {report.repaired} of {report.damaged} damaged chunk(s) from the working tree "
        f"({report.files_read} file(s) read)"
    )
    return line + (f"; {left} not in the tree any more (listed above)" if left else "")


def prune_lines(report: PruneReport) -> list[str]:
    verb = "would remove" if report.dry_run else "removed"
    out = [f"{verb} {c.short_id} {local_time(c.time_ns)} {one_line(c.message) or '-'}" for c in report.removed]
    protected = f" ({report.protected} kept because undo needs them)" if report.protected else ""
    if report.dry_run:
        tail = " (dry run: nothing was changed)"
    else:
        tail = "; run 'snapstore gc' to free their space" if report.removed else ""
    out.append(f"{verb} {len(report.removed)} checkpoint(s), kept {report.kept}{protected}{tail}")
    return out


def maintain_line(reports: list[MaintenanceReport]) -> str:
    if not reports:
        return "no maintenance pass is due"
    full = sum(1 for r in reports if r.full)
    return (
        f"{len(reports)} maintenance pass(es)" + (f" ({full} full)" if full else "")
        + f": {sum(r.chunks_moved for r in reports)} chunks moved, "
        f"{sum(r.packs_gathered for r in reports)} packs gathered into "
        f"{sum(r.packs_written for r in reports)}"
        + ("; the store file compacted" if any(r.compacted for r in reports) else "")
        + _gathered(sum(r.conversations_gathered for r in reports))
    )


def _gathered(n: int) -> str:
    return f"; {n} conversation records compressed against the messages before them" if n else ""


def gc_lines(report: GcReport) -> list[str]:
    verb = "would remove" if report.dry_run else "removed"
    out = [
        f"{verb} {report.chunks_removed} of {report.chunks} chunks, {report.streams_removed} streams, "
        f"{report.conversations_removed} conversation records: {size(report.bytes_removed)} logical, "
        f"{size(report.stored_bytes_removed)} stored" + (" (dry run: nothing was changed)" if report.dry_run else "")
        + _gathered(report.conversations_gathered)
    ]
    p = report.packs
    if p.packs_rewritten or p.packs_removed or p.deltas_made_whole:
        out.append(
            f"{verb} {p.packs_removed} dead pack(s), "
            f"{'would rewrite' if report.dry_run else 'rewrote'} {p.packs_rewritten} of {p.packs} "
            f"({p.chunks_moved} live chunks moved, {p.deltas_made_whole} deltas stored whole): "
            f"packs {size(p.stored_before)} -> {size(p.stored_after)}"
        )
    c = report.consolidated
    if c.packs_rewritten:
        out.append(
            f"{'would gather' if report.dry_run else 'gathered'} {c.packs_rewritten} of {c.packs} "
            f"pack(s) in path order ({c.chunks_moved} live chunks)"
            + ("" if report.dry_run else f": packs {size(c.stored_before)} -> {size(c.stored_after)}")
        )
    if report.compacted:
        out.append(
            f"compacted the store file: {size(report.size_before)} -> {size(report.size_after)} "
            f"({size(report.disk_freed)} freed on disk)"
        )
    return out


def upgrade_line(report: UpgradeReport) -> str:
    if report.already:
        return f"the store is already in format {report.format_before}: nothing to do"
    return (
        f"upgraded the store from format {report.format_before} to {report.format_after}: "
        f"{report.chunks} chunks into {report.packs} packs, {report.conversations} conversation records compact; "
        f"{size(report.size_before)} -> {size(report.size_after)} on disk"
    )


def stats_lines(st: StoreStats) -> list[str]:
    rows = [
        ("checkpoints", f"{st.checkpoints} (+{st.safety_checkpoints} safety)"),
        ("tasks", str(st.tasks)),
        ("latest", f"{st.latest[:12] if st.latest else '-'}: {st.latest_files} files, {size(st.latest_bytes)}"),
        ("logical bytes", f"{size(st.logical_bytes)} over all checkpoints"),
        ("unique bytes", size(st.unique_bytes)),
        ("stored bytes", size(st.stored_bytes)),
        ("dedup ratio", f"{st.dedup_ratio:.2f}"),
        ("compression", f"{st.compression_ratio:.2f}"),
        ("chunks", f"{st.chunks} ({st.streams} multi-chunk streams) in {st.packs} packs"),
        ("format", f"{st.format}" + (" (run 'snapstore upgrade' to convert it to format 3)" if st.format in (1, 2) else "")),
        ("on disk", size(st.disk_size)),
    ]
    biggest = sorted(st.tables.items(), key=lambda kv: -kv[1]["pages"])[:5]
    if biggest:
        rows.append((
            "tables",
            ", ".join(f"{name} {size(t['pages'])} ({size(t['payload'])} of records)" for name, t in biggest),
        ))
    return [f"{name + ':':15} {value}" for name, value in rows]


def recover_line(report: RecoverReport) -> str:
    """What ``snapstore recover`` did (or would do)."""
    if not report.pending:
        return "no interrupted restore to finish"
    target = (report.target or "")[:12]
    verbs = {"forward": "finished", "back": "rolled back", "abandon": "abandoned"}
    if report.dry_run:
        would = {"forward": "finish", "back": "roll back", "abandon": "abandon"}[report.mode]
        return f"would {would} the interrupted {report.kind} to {target} ({report.steps} step(s)); nothing was changed"
    tail = f"; the tree as it was is checkpoint {report.safety[:12]}" if report.safety else ""
    return f"{verbs[report.mode]} the interrupted {report.kind} to {target} ({report.steps} step(s)){tail}"
