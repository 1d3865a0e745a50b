"""Claude Code session transcripts: find one, cut it at a checkpoint, write it as a new session.

A transcript is a JSONL file, ``~/.claude/projects/<project>/<session id>.jsonl`` (the project
directory's path with every character other than a letter or digit turned into ``-``), one JSON
object per line: ``type`` (``user``, ``assistant``, ``system``, ``summary`` and bookkeeping
kinds), and for messages ``uuid``, ``parentUuid`` (the previous message, null at the start),
``sessionId``, ``timestamp`` (ISO 8601, UTC) and ``message`` (``role``, ``content``; an
assistant's ``tool_use`` blocks are answered by ``tool_result`` blocks of the next user line).
``claude --resume ID`` opens the file of that id in the project's directory.

Cutting at a checkpoint keeps the lines up to the checkpoint: up to the last message of the
conversation stored with it when it has one (the hooks store the transcript at a prompt and at
the end of a turn), else up to its time, and for an "after tool" checkpoint through the
result of the call it closes (its ``tool_use_id``: the result is written after the hook ran, and
the files hold what the call did); then takes out the tool calls that have no results (the
model's API refuses an unanswered ``tool_use``), re-linking the lines after a dropped one.  The cut is written under
a new session id, every line's ``sessionId`` rewritten; the original file is never touched.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import stat
import uuid as _uuid
from typing import IO, Any

from snapstore.errors import RefError, UsageError
from snapstore.integrations import bounded_json

#: Kinds of line a transcript holds (others are kept as they are, but not needed to resume).
MESSAGE_TYPES = ("user", "assistant", "system")
#: The largest transcript read (a longer one is left out, and said so).
MAX_TRANSCRIPT_BYTES = 256 << 20
#: The longest line read (a pasted screenshot is a few MiB of base64); a longer one is skipped.
MAX_LINE_BYTES = 16 << 20
#: The most JSON values one line may hold, and all the lines read together: what memory the
#: decoded transcript takes is bounded by these, not by how the file is shaped.
MAX_LINE_VALUES = 200_000
MAX_TRANSCRIPT_VALUES = 2_000_000


def projects_dir(home: str | None = None) -> str:
    return os.path.join(home if home is not None else os.path.expanduser("~"), ".claude", "projects")


def project_slug(project: str) -> str:
    """The directory name Claude Code gives a project's transcripts."""
    return re.sub(r"[^A-Za-z0-9]", "-", os.path.abspath(project))


def check_session(session: str) -> None:
    """Refuse (UsageError) what cannot be a session id (it becomes a file name)."""
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,128}", session):
        raise UsageError(f"{session!r} is not a Claude Code session id")


def find(session: str, project: str, home: str | None = None) -> str:
    """The transcript of ``session``: in the project's directory, else in any project's."""
    check_session(session)
    base = projects_dir(home)
    first = os.path.join(base, project_slug(project), session + ".jsonl")
    if os.path.isfile(first):
        return first
    try:
        folders = sorted(os.listdir(base))
    except OSError:
        folders = []
    for folder in folders:
        candidate = os.path.join(base, folder, session + ".jsonl")
        if os.path.isfile(candidate):
            return candidate
    raise RefError(f"no transcript of session {session} under {base} (pass --transcript FILE)")


def read_transcript(path: str | None, warnings: list[str] | None = None) -> list[Any] | None:
    """The transcript's messages (JSONL), tolerating a missing file, a file still being written
    and a partial or damaged line (skipped); None when there is no readable transcript.

    Only a regular file is read (a FIFO or a device would block or never end, a directory has
    no lines), up to :data:`MAX_TRANSCRIPT_BYTES`, one line at a time: a line longer than
    :data:`MAX_LINE_BYTES`, holding more than :data:`MAX_LINE_VALUES` values or nested deeper
    than :data:`bounded_json.MAX_DEPTH` is skipped, and reading stops once the lines read hold
    :data:`MAX_TRANSCRIPT_VALUES`; each is said in ``warnings``.  Bytes that are not UTF-8 are
    kept as lone surrogates, which the store replaces (and says so).
    """
    if not path:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            _note(warnings, f"the transcript {path} is not a regular file: not stored")
            return None
        if st.st_size > MAX_TRANSCRIPT_BYTES:
            _note(warnings, f"the transcript {path} is larger than {MAX_TRANSCRIPT_BYTES >> 20} MiB: not stored")
            return None
        with os.fdopen(os.dup(fd), "rb") as f:
            return _read_lines_of(f, path, warnings)
    except OSError:
        return None
    finally:
        os.close(fd)


def _read_lines_of(f: IO[bytes], path: str, warnings: list[str] | None) -> list[Any] | None:
    messages: list[Any] = []
    skipped: list[str] = []
    total = values = 0
    n = 0
    while True:
        line, size = _next_line(f)
        if not size:
            break
        n += 1
        total += size
        if total > MAX_TRANSCRIPT_BYTES:  # it grew while being read
            _note(warnings, f"the transcript {path} is larger than {MAX_TRANSCRIPT_BYTES >> 20} MiB: not stored")
            return None
        if line is None:
            skipped.append(f"line {n}: longer than {MAX_LINE_BYTES >> 20} MiB")
            continue
        if not line.strip():
            continue
        text = line.decode("utf-8", "surrogateescape")
        try:
            doc, count = bounded_json.loads_counted(text, max_chars=MAX_LINE_BYTES, max_values=MAX_LINE_VALUES)
            if values + count > MAX_TRANSCRIPT_VALUES:
                _note(warnings, f"the transcript {path} holds more than {MAX_TRANSCRIPT_VALUES} JSON values: "
                                f"stored up to line {n - 1}")
                break
            messages.append(doc)
            values += count
        except bounded_json.Unbounded as exc:
            skipped.append(f"line {n}: {exc.reason}")
        except ValueError:  # the partial last line of a transcript being written, or damage
            continue
    if skipped:
        more = f" (and {len(skipped) - 3} more)" if len(skipped) > 3 else ""
        _note(warnings, f"{len(skipped)} line(s) of the transcript {path} left out: {'; '.join(skipped[:3])}{more}")
    return messages


def _next_line(f: IO[bytes]) -> tuple[bytes | None, int]:
    """The next line and its size in bytes; None for a line over :data:`MAX_LINE_BYTES`, which
    is read past in bounded pieces (never held whole)."""
    line = f.readline(MAX_LINE_BYTES + 1)
    if len(line) <= MAX_LINE_BYTES or line.endswith(b"\n"):
        return line, len(line)
    size = len(line)
    del line
    while True:
        piece = f.readline(1 << 20)
        size += len(piece)
        if not piece or piece.endswith(b"\n"):
            return None, size


def _note(warnings: list[str] | None, text: str) -> None:
    if warnings is not None:
        warnings.append(text)


def read_lines(path: str) -> list[dict[str, Any]]:
    """The transcript's objects (a damaged or partial line is skipped, as Claude Code does)."""
    messages = read_transcript(path)
    if messages is None:
        raise RefError(f"cannot read the transcript {path} (not a regular file, missing or unreadable)")
    return [m for m in messages if isinstance(m, dict)]


def cut(
    lines: list[dict[str, Any]], stored: list[Any] | None, time_ns: int, tool_use_id: str | None = None
) -> list[dict[str, Any]]:
    """The lines up to the checkpoint (see the module's docstring).  ``tool_use_id`` names the
    call an "after tool" checkpoint closes: its result, written after the checkpoint, is kept,
    since the files hold what the call did."""
    end = None
    if stored:
        last = next((m.get("uuid") for m in reversed(stored) if isinstance(m, dict) and m.get("uuid")), None)
        found = [i for i, line in enumerate(lines) if last is not None and line.get("uuid") == last]
        if found:
            end = found[-1] + 1
        else:  # the original lost those lines (or is another file): the stored ones are the cut
            lines = [m for m in stored if isinstance(m, dict)]
            end = len(lines)
    if end is None:
        end = 0
        for i, line in enumerate(lines):
            stamp = _stamp_ns(line.get("timestamp"))
            if stamp is not None and stamp > time_ns:
                break
            end = i + 1
    if tool_use_id:
        end = max(end, _result_end(lines, tool_use_id))
    return _answered(lines[:end])


def _result_end(lines: list[dict[str, Any]], tool_use_id: str) -> int:
    """Just past the line answering ``tool_use_id`` (0 when no line does)."""
    for i, line in enumerate(lines):
        if tool_use_id in _tool_uses(line, "tool_result"):
            return i + 1
    return 0


def _stamp_ns(value: Any) -> int | None:
    if not isinstance(value, str):
        return None
    try:
        when = _dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=_dt.timezone.utc)
    return int(when.timestamp() * 1_000_000) * 1000


def _tool_uses(line: dict[str, Any], kind: str) -> set[str]:
    message = line.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return set()
    key = "id" if kind == "tool_use" else "tool_use_id"
    return {str(b.get(key)) for b in content if isinstance(b, dict) and b.get("type") == kind}


def _answered(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``lines`` without the tool calls that have no result in them (the model's API refuses
    an unanswered ``tool_use``): each such block is taken out of its message, a line left with
    no content is dropped, and the ``parentUuid`` of what followed it names its parent instead.
    A call answered in the lines is kept, whatever was asked beside it (parallel calls)."""
    asked: set[str] = set()
    answered: set[str] = set()
    for line in lines:
        asked |= _tool_uses(line, "tool_use")
        answered |= _tool_uses(line, "tool_result")
    pending = asked - answered
    if not pending:
        return lines
    out: list[dict[str, Any]] = []
    dropped: dict[Any, Any] = {}  # uuid of a dropped line -> its parent
    for line in lines:
        parent = line.get("parentUuid")
        while parent in dropped:
            parent = dropped[parent]
        if "parentUuid" in line and parent != line.get("parentUuid"):
            line = {**line, "parentUuid": parent}
        if _tool_uses(line, "tool_use") & pending:
            message = line["message"]
            kept = [b for b in message["content"] if not (isinstance(b, dict) and b.get("type") == "tool_use" and str(b.get("id")) in pending)]
            if not kept:
                dropped[line.get("uuid")] = parent
                continue
            line = {**line, "message": {**message, "content": kept}}
        out.append(line)
    return out


def _closed_call(metadata: Any) -> str | None:
    """The tool call an "after tool" checkpoint closes (its ``tool_use_id``), else None."""
    if not isinstance(metadata, dict) or metadata.get("event") not in ("PostToolUse", "PostToolUseFailure"):
        return None
    found = metadata.get("tool_use_id")
    return found if isinstance(found, str) and found else None


def problems(lines: list[dict[str, Any]], session: str) -> list[str]:
    """What makes ``lines`` not a transcript ``claude --resume`` can open (empty: none)."""
    out = []
    seen: set[str] = set()
    for n, line in enumerate(lines, 1):
        kind = line.get("type")
        if not isinstance(kind, str):
            out.append(f"line {n}: no type")
            continue
        if kind in MESSAGE_TYPES:
            uid, parent = line.get("uuid"), line.get("parentUuid")
            if not isinstance(uid, str) or not uid:
                out.append(f"line {n}: a {kind} line without a uuid")
            if parent is not None and parent not in seen:
                out.append(f"line {n}: parentUuid {parent} is not an earlier line")
            if line.get("sessionId") != session:
                out.append(f"line {n}: sessionId is not {session}")
            if kind != "system" and not isinstance(line.get("message"), dict):
                out.append(f"line {n}: a {kind} line without a message")
            if isinstance(uid, str):
                seen.add(uid)
    asked = set().union(*(_tool_uses(x, "tool_use") for x in lines)) if lines else set()
    answered = set().union(*(_tool_uses(x, "tool_result") for x in lines)) if lines else set()
    if asked - answered:
        out.append(f"tool calls without results: {', '.join(sorted(asked - answered))}")
    return out


def as_new_session(lines: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """``lines`` under a new session id (every ``sessionId`` rewritten), checked to open."""
    session = str(_uuid.uuid4())
    rewritten = [{**line, "sessionId": session} if "sessionId" in line or line.get("type") in MESSAGE_TYPES else line for line in lines]
    found = problems(rewritten, session)
    if found:
        raise UsageError("the cut transcript would not open: " + "; ".join(found[:3]))
    return session, rewritten


def write_session(session: str, lines: list[dict[str, Any]], folder: str) -> str:
    """Write a session's lines as ``folder/<session>.jsonl`` (owner-only, atomically); its path."""
    from snapstore.tree.atomic import write_file_atomic

    path = os.path.join(folder, session + ".jsonl")
    text = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
    write_file_atomic(path, text.encode("utf-8", "surrogateescape"), 0o600)
    return path


class SessionRewind:
    """What :func:`rewind` did: the checkpoint, the files' restore report (None with
    ``files=False``), and the new session (its id and transcript; None on a dry run)."""

    def __init__(self, checkpoint: Any, report: Any, session: str | None, path: str | None, kept: int, total: int):
        self.checkpoint = checkpoint
        self.report = report
        self.session = session
        self.path = path
        #: Lines of the original transcript kept in the new one, and how many it had.
        self.kept, self.total = kept, total


def rewind(
    store: Any, session: str, ref: str, *, files: bool = True, transcript: str | None = None,
    home: str | None = None, dry_run: bool = False,
) -> SessionRewind:
    """Go back to checkpoint ``ref`` of Claude Code session ``session``: the files through the
    normal (journaled, undoable) restore, and the conversation as a new session cut there, which
    ``claude --resume`` opens; the original transcript is left as it is."""
    check_session(session)
    target = store.resolve(ref, task=session)
    if target.task != session:
        raise RefError(f"checkpoint {target.short_id} is not of session {session} (its task is {target.task})")
    source = transcript or find(session, store.root, home)
    lines = read_lines(source)
    kept = cut(lines, store.conversation(target.id), target.time_ns, _closed_call(target.metadata))
    if not kept:
        raise RefError(f"the transcript has nothing before checkpoint {target.short_id}: no session to resume")
    new, rewritten = as_new_session(kept)  # checked before any file is touched
    report = store.rewind(target.id, files=True, conversation=False, dry_run=dry_run).report if files else None
    if dry_run:
        return SessionRewind(target, report, None, None, len(kept), len(lines))
    path = write_session(new, rewritten, os.path.dirname(os.path.abspath(source)))
    return SessionRewind(target, report, new, path, len(kept), len(lines))
