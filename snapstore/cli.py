"""The ``snapstore`` command line: a thin layer over :class:`snapstore.Store`.

Each command parses its options, calls one Store method, and formats the result.  Errors are
printed as ``snapstore: error: <one line>`` with the exit code of their class (snapstore.errors).
Heavy modules are imported inside the commands so that ``--help`` and start-up stay cheap.
"""

from __future__ import annotations

import os
import sys

import click

from snapstore.errors import EXIT_OK, SnapstoreError, UsageError

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class Ctx:
    def __init__(self, store_dir: str | None, directory: str | None, lock_timeout: float):
        self.store_dir = store_dir
        self.directory = directory or "."
        self.lock_timeout = lock_timeout

    def open(self):
        from snapstore.store import Store

        return Store.find(self.directory, store=self.store_dir, lock_timeout=self.lock_timeout)


def _echo_json(doc) -> None:
    from snapstore.render import dump_json

    click.echo(dump_json(doc))


def _warn(message: str) -> None:
    click.echo(f"snapstore: warning: {message}", err=True)


@click.group(context_settings=CONTEXT)
@click.option(
    "--store",
    "store_dir",
    envvar="SNAPSTORE_STORE",
    metavar="DIR",
    help="Use the store in DIR (default: the nearest .snapstore at or above the current directory).",
)
@click.option(
    "-C",
    "directory",
    metavar="DIR",
    help="Run as if started in DIR.",
)
@click.option(
    "--lock-timeout",
    type=float,
    default=30.0,
    envvar="SNAPSTORE_LOCK_TIMEOUT",
    show_default=True,
    help="Seconds to wait for another writer before failing with exit code 5.",
)
@click.version_option(package_name="snapstore", prog_name="snapstore")
@click.pass_context
def cli(ctx, store_dir, directory, lock_timeout):
    """Checkpoints of a directory tree, without git: snapshot, list, show, cat, verify.

    Exit codes: 0 ok, 1 differences (diff), 2 usage, 3 no store / store exists, 4 unknown
    checkpoint or path, 5 store locked, 6 store damaged, 7 unknown store format, 8 file-system
    error, 9 conflict, 10 unsafe path, 11 refused by a hook, 70 internal error.
    """
    ctx.obj = Ctx(store_dir, directory, lock_timeout)


@cli.command(context_settings=CONTEXT)
@click.option("--store", "init_store", metavar="DIR", help="Keep the store in DIR, outside the tree.")
@click.option(
    "--compression",
    type=click.IntRange(1, 22),
    default=3,
    show_default=True,
    help="zstd level for new chunks.",
)
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")
@click.pass_obj
def init(obj: Ctx, init_store, compression, quiet):
    """Create a store for the tree in the current directory (in ./.snapstore by default)."""
    from snapstore.store import Store

    with Store.init(obj.directory, store=init_store or obj.store_dir, compression_level=compression) as store:
        if not quiet:
            click.echo(f"initialised an empty store in {store.store_dir} for {store.root}")


def _parse_meta(pairs: tuple[str, ...]) -> dict[str, str]:
    meta = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--meta takes KEY=VALUE, not {pair!r}")
        meta[key] = value
    return meta


def _read_conversation(source: str | None):
    if source is None:
        return None
    import json

    try:
        if source == "-":
            text = sys.stdin.read()
        else:
            with open(source, encoding="utf-8") as f:
                text = f.read()
    except OSError as exc:
        raise UsageError(f"cannot read the conversation from {source}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise UsageError(f"the conversation in {source} is not UTF-8 text") from exc
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"the conversation in {source} is not valid JSON: {exc}") from exc
    if not isinstance(doc, list):
        raise UsageError("the conversation must be a JSON list of messages")
    return doc


@cli.command(context_settings=CONTEXT)
@click.option("-m", "--message", default="", help="What this checkpoint is.")
@click.option("--tag", "tags", multiple=True, metavar="NAME", help="Name it (repeatable); a tag moves to the newest checkpoint that takes it.")
@click.option("--task", metavar="NAME", help="The agent task or session it belongs to.")
@click.option("--meta", "meta", multiple=True, metavar="KEY=VALUE", help="Free metadata, e.g. the tool call (repeatable).")
@click.option("--conversation", "conversation_src", metavar="FILE|-", help="A JSON list of messages to keep with it.")
@click.option("--skip-unchanged", is_flag=True, help="Record nothing (and print the parent) when nothing changed.")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")
@click.option("--json", "as_json", is_flag=True, help="Print the checkpoint as JSON.")
@click.pass_obj
def snapshot(obj: Ctx, message, tags, task, meta, conversation_src, skip_unchanged, quiet, as_json):
    """Record the tree as a new checkpoint and print its id and what changed."""
    from snapstore.render import Progress, changes_summary, size

    metadata = _parse_meta(meta)
    messages = _read_conversation(conversation_src)
    progress = Progress("snapshot", enabled=not quiet and not as_json)
    with obj.open() as store:
        try:
            cp = store.snapshot(
                message,
                tags=tags,
                task=task,
                metadata=metadata,
                conversation=messages,
                skip_unchanged=skip_unchanged,
                progress=progress,
            )
        finally:
            progress.close()
    if as_json:
        _echo_json({**cp.to_json(), "reused": cp.reused, "warnings": list(cp.warnings)})
        return
    if quiet:
        return
    for w in cp.warnings:
        _warn(w)
    if cp.reused:
        click.echo(f"{cp.short_id} unchanged (no new checkpoint)")
        return
    st = cp.stats
    skipped = sum(st.get("skipped", {}).values())
    extra = f", {skipped} skipped" if skipped else ""
    click.echo(f"{cp.short_id} {changes_summary(st)} files, {size(st.get('new_bytes', 0))} new{extra}")


@cli.command(name="list", context_settings=CONTEXT)
@click.option("--task", metavar="NAME", help="Only the checkpoints of this task.")
@click.option("--all", "include_all", is_flag=True, help="Include the safety checkpoints that restores record.")
@click.option("-n", "--limit", type=click.IntRange(min=1), help="Show at most N rows.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON: {\"checkpoints\": [...]}.")
@click.pass_obj
def list_(obj: Ctx, task, include_all, limit, as_json):
    """List checkpoints, newest first; #N in the first column is a valid reference."""
    from snapstore.render import changes_summary, local_time, one_line, table

    with obj.open() as store:
        rows = store.checkpoints(task=task, include_safety=include_all)
    if limit:
        rows = rows[:limit]
    numbered = _number(rows)
    if as_json:
        _echo_json({"checkpoints": [{**c.to_json(), "index": n} for n, c in numbered]})
        return
    if not rows:
        click.echo("no checkpoints yet")
        return
    lines = []
    for n, c in numbered:
        label = c.message if not c.tags else f"{c.message} [{', '.join(c.tags)}]"
        lines.append(
            [
                f"#{n}" if n else "safety",
                c.short_id,
                local_time(c.time_ns),
                one_line(label) or "-",
                c.task or "-",
                changes_summary(c.stats),
            ]
        )
    click.echo(table(lines))


def _number(rows):
    """Pair rows with their ``#N`` (safety checkpoints have none: N counts visible rows)."""
    out, n = [], 0
    for c in rows:
        if c.is_safety:
            out.append((None, c))
        else:
            n += 1
            out.append((n, c))
    return out


@cli.command(context_settings=CONTEXT)
@click.argument("ref", default="latest")
@click.option("--conversation", "show_conversation", is_flag=True, help="Print the conversation stored with it.")
@click.option("--task", metavar="NAME", help="Resolve REF among this task's checkpoints.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def show(obj: Ctx, ref, show_conversation, task, as_json):
    """Show a checkpoint: its record, the files it changed against its parent (lines +/-),
    and its conversation (message count, last user and assistant messages)."""
    from snapstore.errors import RefError
    from snapstore.render import dump_json, local_time, size

    if task:
        ref = f"{ref}@{task}"
    with obj.open() as store:
        if show_conversation:
            cp = store.resolve(ref)
            messages = store.conversation(cp.id)
            if messages is None:
                raise RefError(f"no conversation stored with checkpoint {cp.short_id}")
            click.echo(dump_json(messages))
            return
        info = store.summary(ref)
    if as_json:
        _echo_json(info)
        return
    st = info["stats"]
    click.echo(f"checkpoint {info['id']}")
    click.echo(f"time:     {local_time(int(info['timestamp'] * 1e9))}")
    click.echo(f"message:  {info['message'] or '-'}")
    if info["task"]:
        click.echo(f"task:     {info['task']}")
    if info["tags"]:
        click.echo(f"tags:     {', '.join(info['tags'])}")
    click.echo(f"parent:   {info['parent'][:12] if info['parent'] else '-'}")
    click.echo(f"files:    {st.get('files', 0)} ({size(st.get('bytes', 0))}), {size(st.get('new_bytes', 0))} new")
    for key, value in info["metadata"].items():
        click.echo(f"meta:     {key}={value}")
    convo = info["conversation"]
    if convo is None:
        click.echo("conversation: no conversation stored")
    else:
        click.echo(f"conversation: {convo['messages']} message(s)")
        if convo["last_user"] is not None:
            click.echo(f"  user:      {convo['last_user']}")
        if convo["last_assistant"] is not None:
            click.echo(f"  assistant: {convo['last_assistant']}")
    if info["changes"]:
        click.echo("")
        for c in info["changes"]:
            counts = "bin" if c["binary"] else f"+{c['added']} -{c['removed']}"
            click.echo(f"{c['status']} {counts:>12}  {_json_path(c['path'])}")


def _json_path(path: str) -> str:
    from snapstore.tree.paths import display

    return display(os.fsencode(path))


@cli.command(name="log", context_settings=CONTEXT)
@click.argument("path")
@click.option("--task", metavar="NAME", help="Only this task's checkpoints.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON: {\"path\": ..., \"versions\": [...]}.")
@click.pass_obj
def log_(obj: Ctx, path, task, as_json):
    """List the checkpoints in which PATH changed, oldest version first, with lines +/-.

    Bring one back with `snapstore restore REF -- PATH`.
    """
    from snapstore.render import local_time, one_line, size, table

    with obj.open() as store:
        versions = store.history(path, task=task)
    if as_json:
        _echo_json({"path": path, "versions": [v.to_json() for v in versions]})
        return
    if not versions:
        click.echo(f"{path} did not change in any checkpoint")
        return
    rows = []
    for v in versions:
        cp = v.checkpoint
        counts = "bin" if v.binary else f"+{v.added} -{v.removed}"
        what = {"A": "added", "M": "modified", "D": "deleted", "T": "replaced", "X": "mode"}[v.status]
        rows.append([cp.short_id, local_time(cp.time_ns), what, size(v.entry.size) if v.entry else "-", counts, one_line(cp.message) or "-"])
    click.echo(table(rows))


@cli.command(context_settings=CONTEXT)
@click.argument("ref")
@click.argument("path")
@click.pass_obj
def cat(obj: Ctx, ref, path):
    """Write the exact bytes of PATH (relative to the tree root) in checkpoint REF to stdout."""
    out = sys.stdout.buffer
    with obj.open() as store:
        for data in store.iter_bytes(ref, path):
            out.write(data)
    out.flush()


@cli.command(context_settings=CONTEXT)
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but problems.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_obj
def verify(obj: Ctx, quiet, as_json):
    """Re-read and re-hash every chunk, resolve every reference; exit 6 if anything is wrong."""
    from snapstore.errors import CorruptError
    from snapstore.render import Progress, size

    progress = Progress("verify", enabled=not quiet and not as_json, unit_bytes=False)
    with obj.open() as store:
        try:
            report = store.verify(progress=progress)
        finally:
            progress.close()
    if as_json:
        _echo_json(report.to_json())
    else:
        for p in report.problems:
            click.echo(f"problem: {p}")
        if not quiet:
            status = "ok" if report.ok else f"{len(report.problems)} problem(s)"
            click.echo(
                f"verified {report.chunks} chunks ({size(report.bytes_read)}), {report.streams} streams, "
                f"{report.checkpoints} checkpoints, {report.files} file entries: {status}"
            )
    if not report.ok:
        raise _Exit(CorruptError.exit_code)


@cli.command(context_settings=CONTEXT)
@click.argument("refs", nargs=-1)
@click.option("--stat", "show_stat", is_flag=True, help="Lines added and removed per file.")
@click.option("-p", "--patch", is_flag=True, help="A unified diff (binary files are named, not shown).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON: {\"changes\": [...]}.")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing; the exit code says (0 same, 1 different).")
@click.pass_obj
def diff(obj: Ctx, refs, show_stat, patch, as_json, quiet):
    """Compare checkpoints: none = latest vs the tree, one = REF vs the tree, two = A vs B.

    Paths after `--` limit the comparison (a file, or a directory and all below it).
    Exit code 0 when there is no difference, 1 when there is (like diff(1)).
    """
    refs, paths = _split_paths(refs)
    if len(refs) > 2:
        raise UsageError("diff takes at most two checkpoints (put paths after --)")
    a = refs[0] if refs else "latest"
    b = refs[1] if len(refs) == 2 else None
    with obj.open() as store:
        changes = store.diff(a, b, paths=paths or None)
        if not quiet:
            _print_changes(changes, show_stat, patch, as_json)
    if changes:
        raise _Exit(1)


def _split_paths(args: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """Split click's arguments at the first ``--`` (click drops it; we get it via sys.argv)."""
    argv = sys.argv[1:] if _ARGV is None else _ARGV
    if "--" in argv:
        n_paths = len(argv) - argv.index("--") - 1
        if n_paths:
            return list(args[:-n_paths]), list(args[-n_paths:])
    return list(args), []


def _print_changes(changes, show_stat, patch, as_json) -> None:
    from snapstore.ops import textdiff

    if as_json:
        docs = []
        for c in changes:
            doc = c.to_json()
            if show_stat:
                added, removed, binary = textdiff.line_counts(c)
                doc.update(added=added, removed=removed, binary=binary)
            docs.append(doc)
        _echo_json({"changes": docs})
        return
    if show_stat:
        rows = []
        for c in changes:
            added, removed, binary = textdiff.line_counts(c)
            rows.append((c, added, removed, binary))
        width = max((len(c.display_path) for c, *_ in rows), default=0)
        total_a = total_r = 0
        for c, added, removed, binary in rows:
            detail = "Bin" if binary else f"{added + removed:5d} {'+' * min(added, 40)}{'-' * min(removed, 40)}"
            click.echo(f" {c.display_path.ljust(width)} | {detail}")
            total_a += added
            total_r += removed
        click.echo(f" {len(rows)} file(s) changed, {total_a} insertion(s)(+), {total_r} deletion(s)(-)")
    elif not patch:
        for c in changes:
            click.echo(f"{c.status}\t{c.display_path}")
    if patch:
        out = sys.stdout.buffer
        for c in changes:
            out.write(textdiff.unified(c))
        out.flush()


@cli.command(context_settings=CONTEXT)
@click.argument("ref")
@click.argument("paths", nargs=-1)
@click.option("--files-only", "mode", flag_value="files", default=True, help="Restore the files (the default).")
@click.option("--conversation-only", "mode", flag_value="conversation", help="Output the conversation; leave the tree untouched.")
@click.option("--both", "mode", flag_value="both", help="Restore the files and output the conversation.")
@click.option("-o", "--output", metavar="FILE|-", help="Write the conversation as JSON to FILE (stdout with -, the default).")
@click.option("--task", metavar="NAME", help="Resolve REF among this task's checkpoints.")
@click.option("-n", "--dry-run", is_flag=True, help="Print what would change; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")
@click.pass_obj
def restore(obj: Ctx, ref, paths, mode, output, task, dry_run, as_json, quiet):
    """Make the tree equal to checkpoint REF (or only PATHS, given after `--`).

    The tree is first recorded as a safety checkpoint, so `snapstore undo` puts it back.
    Ignored files, .git and the store are never touched; no prompt, ever. With
    --conversation-only or --both, the checkpoint's conversation is written as JSON
    (to -o FILE, or stdout; the report then goes to stderr).
    """
    if paths and mode == "conversation":
        raise UsageError("paths go with restoring files, not with --conversation-only")
    if task:
        ref = f"{ref}@{task}"
    with obj.open() as store:
        result = store.rewind(
            ref,
            files=mode in ("files", "both"),
            conversation=mode in ("conversation", "both"),
            paths=list(paths) or None,
            dry_run=dry_run,
        )
    to_stderr = result.conversation is not None and output in (None, "-")
    if result.conversation is not None:
        _write_json_output(result.conversation, output)
    if result.report is not None:
        _print_report(result.report, as_json, quiet, err=to_stderr)
    elif not quiet and not to_stderr:
        click.echo(f"wrote the conversation of {result.checkpoint.short_id} ({len(result.conversation)} messages) to {output}")


def _write_json_output(doc, output: str | None) -> None:
    from snapstore.render import dump_json

    text = dump_json(doc) + "\n"
    if output in (None, "-"):
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    tmp = f"{output}.snapstore-tmp.{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, output)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        from snapstore.errors import TreeIOError

        raise TreeIOError(f"cannot write {output}: {exc.strerror}") from exc


@cli.command(context_settings=CONTEXT)
@click.option("-n", "--dry-run", is_flag=True, help="Print what would change; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")
@click.pass_obj
def undo(obj: Ctx, dry_run, as_json, quiet):
    """Put the tree back as it was before the last restore or undo (undo again to redo)."""
    with obj.open() as store:
        report = store.undo(dry_run=dry_run)
    _print_report(report, as_json, quiet)


def _print_report(report, as_json, quiet, err: bool = False) -> None:
    if as_json:
        click.echo(__import__("json").dumps(report.to_json(), indent=2), err=err)
        return
    if quiet:
        return
    for w in report.warnings:
        _warn(w)
    verb = {"A": "create", "M": "write", "D": "delete", "T": "replace", "X": "chmod"}
    if report.dry_run:
        for c in report.changes:
            click.echo(f"would {verb[c.status]:7} {c.display_path}", err=err)
        click.echo(f"{len(report.changes)} path(s) would change (dry run: nothing was changed)", err=err)
        return
    counts = {s: sum(1 for c in report.changes if c.status == s) for s in "AMDTX"}
    what = "restored" if report.kind == "restore" else "undid"
    click.echo(
        f"{what} {report.target.short_id}: +{counts['A']} ~{counts['M'] + counts['T'] + counts['X']} "
        f"-{counts['D']} paths; the tree before is checkpoint {report.safety.short_id} "
        "('snapstore undo' puts it back)",
        err=err,
    )


@cli.command(context_settings=CONTEXT)
@click.option("--json", "as_json", is_flag=True, help="Print JSON: {\"operations\": [...]}.")
@click.pass_obj
def oplog(obj: Ctx, as_json):
    """List restores and undos, newest first."""
    from snapstore.render import local_time, table

    with obj.open() as store:
        ops = store.operations()
    if as_json:
        _echo_json({"operations": [op.to_json() for op in ops]})
        return
    if not ops:
        click.echo("no restores yet")
        return
    rows = [
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
    click.echo(table(rows))


# -- retention and garbage collection (prune, delete, gc, stats, config) ---------------------


@cli.command(context_settings=CONTEXT)
@click.option("--keep-last", type=int, metavar="N", help="Keep the N newest checkpoints (safety ones not counted).")
@click.option("--keep-within", metavar="DURATION", help="Keep every checkpoint younger than DURATION (30m, 12h, 7d, 2w).")
@click.option("--keep-tagged", is_flag=True, help="Keep every checkpoint a tag names.")
@click.option("--task", metavar="NAME", help="Only consider (and count) the checkpoints of this task.")
@click.option("-n", "--dry-run", is_flag=True, help="Print what would be removed; remove nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")
@click.pass_obj
def prune(obj: Ctx, keep_last, keep_within, keep_tagged, task, dry_run, as_json, quiet):
    """Remove the checkpoints no --keep rule keeps (run `snapstore gc` to free their data).

    Checkpoints that `undo` can still reach (the newest 10 operations) and those of a pending
    restore are always kept.
    """
    from snapstore.render import local_time, one_line

    with obj.open() as store:
        report = store.prune(
            keep_last=keep_last, keep_within=keep_within, keep_tagged=keep_tagged, task=task, dry_run=dry_run
        )
    if as_json:
        _echo_json(report.to_json())
        return
    if quiet:
        return
    verb = "would remove" if dry_run else "removed"
    for c in report.removed:
        click.echo(f"{verb} {c.short_id} {local_time(c.time_ns)} {one_line(c.message) or '-'}")
    protected = f" ({report.protected} kept because undo needs them)" if report.protected else ""
    tail = " (dry run: nothing was changed)" if dry_run else (
        "; run 'snapstore gc' to free their space" if report.removed else ""
    )
    click.echo(f"{verb} {len(report.removed)} checkpoint(s), kept {report.kept}{protected}{tail}")


@cli.command(context_settings=CONTEXT)
@click.argument("ref")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")
@click.pass_obj
def delete(obj: Ctx, ref, quiet):
    """Remove checkpoint REF: its record, its log entry and the tags naming it.

    Its data stays until `snapstore gc`. Checkpoints that `undo` can still reach are refused.
    """
    with obj.open() as store:
        cp = store.delete(ref)
    if not quiet:
        click.echo(f"deleted {cp.short_id}; run 'snapstore gc' to free its space")


@cli.command(context_settings=CONTEXT)
@click.option("--compact", is_flag=True, help="Also rewrite the store file so the disk space comes back.")
@click.option("-n", "--dry-run", is_flag=True, help="Print what would be removed; remove nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")
@click.pass_obj
def gc(obj: Ctx, compact, dry_run, as_json, quiet):
    """Remove the data no checkpoint reaches (holds the writer lock while it runs)."""
    from snapstore.render import size

    with obj.open() as store:
        report = store.gc(compact=compact, dry_run=dry_run)
    if as_json:
        _echo_json(report.to_json())
        return
    if quiet:
        return
    verb = "would remove" if dry_run else "removed"
    click.echo(
        f"{verb} {report.chunks_removed} of {report.chunks} chunks, {report.streams_removed} streams, "
        f"{report.conversations_removed} conversation records: {size(report.bytes_removed)} logical, "
        f"{size(report.stored_bytes_removed)} stored"
        + (" (dry run: nothing was changed)" if dry_run else "")
    )
    if report.compacted:
        click.echo(
            f"compacted the store file: {size(report.size_before)} -> {size(report.size_after)} "
            f"({size(report.disk_freed)} freed on disk)"
        )


@cli.command(context_settings=CONTEXT)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def stats(obj: Ctx, as_json):
    """Checkpoints, tasks, sizes, dedup and compression ratios, size on disk."""
    from snapstore.render import size

    with obj.open() as store:
        st = store.stats()
    if as_json:
        _echo_json(st.to_json())
        return
    rows = [
        ("checkpoints", f"{st.checkpoints} (+{st.safety_checkpoints} safety)"),
        ("tasks", str(st.tasks)),
        ("latest", f"{st.latest[:12] if st.latest else '-'}: {st.latest_files} files, {size(st.latest_bytes)}"),
        ("logical bytes", f"{size(st.logical_bytes)} over all checkpoints"),
        ("unique bytes", size(st.unique_bytes)),
        ("stored bytes", size(st.stored_bytes)),
        ("dedup ratio", f"{st.dedup_ratio:.2f}"),
        ("compression", f"{st.compression_ratio:.2f}"),
        ("chunks", f"{st.chunks} ({st.streams} multi-chunk streams)"),
        ("on disk", size(st.disk_size)),
    ]
    for name, value in rows:
        click.echo(f"{name + ':':15} {value}")


@cli.command(context_settings=CONTEXT)
@click.argument("key", required=False)
@click.argument("value", required=False)
@click.option("--unset", is_flag=True, help="Reset KEY to its default.")
@click.pass_obj
def config(obj: Ctx, key, value, unset):
    """Print all settings, print KEY, or set KEY to VALUE (e.g. retention.keep-last 100)."""
    with obj.open() as store:
        if key is None:
            if unset:
                raise UsageError("--unset needs a KEY")
            values = store.config()
        elif unset or value is not None:
            values = {key: store.config_set(key, None if unset else value)}
        else:
            values = {key: store.config_get(key)}
    if key is not None and not unset and value is None:
        click.echo(values[key])
        return
    for k, v in values.items():
        click.echo(f"{k} = {v}")


_ARGV: list[str] | None = None


class _Exit(Exception):
    def __init__(self, code: int):
        self.code = code


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the exit code."""
    global _ARGV
    _ARGV = list(argv) if argv is not None else None
    try:
        cli.main(args=argv, prog_name="snapstore", standalone_mode=False)
        return EXIT_OK
    except _Exit as exc:
        return exc.code
    except SnapstoreError as exc:
        _fail(exc.message)
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.Abort:
        _fail("interrupted")
        return 130
    except click.ClickException as exc:
        _fail(exc.format_message())
        return 2
    except KeyboardInterrupt:
        _fail("interrupted")
        return 130
    except BrokenPipeError:
        # The reader went away (``snapstore cat ... | head``): not an error of ours.
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return EXIT_OK
    except Exception as exc:  # a bug: one line, and the traceback only on request
        if os.environ.get("SNAPSTORE_DEBUG"):
            raise
        _fail(f"internal error: {type(exc).__name__}: {exc} (set SNAPSTORE_DEBUG=1 for details)")
        return 70


def _fail(message: str) -> None:
    first = " ".join(str(message).split())
    try:
        click.echo(f"snapstore: error: {first}", err=True)
    except Exception:
        pass


def run() -> None:
    sys.exit(main())
