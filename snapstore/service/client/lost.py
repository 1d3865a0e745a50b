"""What a client says when the resident service stopped before answering.

The service acknowledged the request (and the client confirmed it), so it may have done the
work: the command is never run a second time.  Once the service process is gone (its pid came
with the acknowledgement), its transactions are final, and the request's row
(:mod:`snapstore.records.requests`; every transaction the request committed updated it) says
what happened: no row, nothing was written; a checkpoint, a finished operation or an exit code,
it finished; a journaled restore not finished, the next writing command finishes it; a restore
with no journal yet, the tree was not touched; an edit whose write was announced, the file's
hash says whether it was written."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from snapstore.platform import processes

#: How long a client waits for a service that dropped its connection to end (or to record the
#: request), before saying it cannot tell.
WAIT_SECONDS = 60.0


def report(store_dir: str, rid: str, command: str, ack: bytes, *, silent: bool = False) -> int:
    """Print one line about request ``rid`` (``command``) and return the exit code to use.

    ``silent``: the service did not end but sent nothing (not even a heartbeat) for
    protocol.SILENCE seconds: stopped (SIGSTOP), wedged or starved.  Its outcome is read once,
    without waiting for it to end."""
    from snapstore.errors import ServiceStoppedError, SnapstoreError

    try:
        pid = int(ack or b"0")
    except ValueError:
        pid = 0
    try:
        row, pending, root = _outcome(store_dir, bytes.fromhex(rid), 0 if silent else pid)
    except SnapstoreError as exc:
        return _say(f"error: the service stopped before answering {command}, and its store cannot be read: {exc}; it is not run again", ServiceStoppedError.exit_code)
    if silent and _alive(pid) and not _finished(row, command):
        return _say(f"error: the service (pid {pid}) stopped answering in the middle of {command} and still runs: what it "
                    "does is recorded in the store (see 'snapstore list' and 'snapstore oplog'); it is not run again",
                    ServiceStoppedError.exit_code)
    if row is None and command == "hook":  # (a hook always exits 0: the agent's call goes on)
        return _say("the service stopped before answering the hook: it recorded no checkpoint", 0)
    if row is None:
        return _say(f"error: the service stopped before {command} took effect; nothing was changed", ServiceStoppedError.exit_code)
    if row.get("stage") == "writing" and "exit" not in row:
        return _edit_outcome(command, row, root, store_dir)
    if _finished(row, command):
        code = int(row.get("exit", 0))
        return _say(f"the service stopped after the command finished: {_summary(command, row, code)}", code)
    return _say(f"error: {_unfinished(command, row, pending, root, store_dir)}", ServiceStoppedError.exit_code)


def taken_here(store_dir: str, rid: str, command: str, ack: bytes) -> bool:
    """Whether a ``snapshot`` the stopped service left without effect is to be taken in this
    process instead (it then says so on stderr): the service is gone (waited for as
    :func:`report` does) and its request's row is absent, so it recorded nothing and never
    will.  A snapshot is the command a person or an agent runs most; failing it because the
    service that would have made it faster died would make the service a risk."""
    from snapstore.errors import SnapstoreError

    if command != "snapshot":
        return False
    try:
        pid = int(ack or b"0")
    except ValueError:
        return False
    try:
        row, _, _ = _outcome(store_dir, bytes.fromhex(rid), pid)
    except (SnapstoreError, ValueError):
        return False
    if row is not None or _alive(pid):
        return False
    _say("the service stopped before the snapshot took effect: taking it in this process", 0)
    return True


def _finished(row: dict[str, Any] | None, command: str) -> bool:
    """Whether the request's row says it finished (an exit code, a finished operation, or the
    checkpoint that is a snapshot's whole effect)."""
    if row is None:
        return False
    return "exit" in row or row.get("stage") == "done" or ("checkpoint" in row and command in ("snapshot", "hook"))


def _summary(command: str, row: dict[str, Any], code: int) -> str:
    """What a finished request did, from its row."""
    parts = []
    if "op" in row:
        parts.append(f"operation {row['op']} ({row.get('kind', command)}, {row.get('changed', 0)} path(s) changed; see 'snapstore oplog')")
    if "checkpoint" in row:
        label = "checkpoint before the edit" if command == "edit" else "checkpoint"
        parts.append(f"{label} {str(row['checkpoint'])[:12]} recorded")
    if row.get("stage") == "writing" and code == 0:
        parts.append(f"{row.get('path')} written")
    if not parts:
        parts.append("nothing to record" if code == 0 else "it recorded nothing")
    return f"{command}: " + ", ".join(parts) + f" (exit {code}); it is not run again"


def _unfinished(command: str, row: dict[str, Any], pending: bool, root: str, store_dir: str) -> str:
    """The line for a request that had begun and not finished when the service stopped."""
    stopped = f"the service stopped in the middle of {command}"
    if row.get("stage") == "begun":
        kind = row.get("kind", "restore")
        if pending:
            return (f"{stopped}: its {kind} is partly applied; the next writing command finishes it "
                    "(run 'snapstore recover' to finish it now, or 'snapstore recover --back' to roll it back); it is not run again")
        return f"{stopped}: its {kind} was begun and has been finished or rolled back since (see 'snapstore oplog'); it is not run again"
    # A restore, undo or revert touches the tree only once its journal is recorded ("begun");
    # an edit writes its file only once the write is announced ("writing").
    if command in ("restore", "undo", "revert"):
        what = [f"a safety checkpoint {str(row['safety'])[:12]}"] if "safety" in row else []
        if "reverted" in row:
            what.append(f"the reverted tree as checkpoint {str(row['reverted'])[:12]}")
        recorded = f" (it had recorded {' and '.join(what)})" if what else ""
        return f"the service stopped before {command} changed the tree; nothing in the tree was changed{recorded}; it is not run again"
    if command == "edit":
        recorded = f" (checkpoint {str(row['checkpoint'])[:12]} of the tree before it was recorded)" if "checkpoint" in row else ""
        return f"the service stopped before {command} took effect; the file was not changed{recorded}; it is not run again"
    if command in ("snapshot", "hook"):
        # (the contents it stored and no checkpoint names are found again by the next snapshot)
        return f"the service stopped before {command} took effect; no checkpoint was recorded, nothing was changed; it is not run again"
    return (f"{stopped}, after it had changed the store ({row.get('writes', 1)} transaction(s)) and before it finished; "
            "it is not run again: see 'snapstore list' and 'snapstore oplog'")


def _edit_outcome(command: str, row: dict[str, Any], root: str, store_dir: str) -> int:
    """An edit stopped around its write: the file says whether the write happened."""
    from snapstore.errors import ServiceStoppedError, SnapstoreError
    from snapstore.ops.edit import content_hash
    from snapstore.ops.edit_target import Target

    path = str(row.get("path"))
    try:
        now = content_hash(Target(root, path, store_dir).read())
    except (SnapstoreError, OSError) as exc:
        line = f"the service stopped while {command} wrote {path}, which cannot be read now ({exc}); it is not run again"
    else:
        if now == row.get("new"):
            return _say(f"the service stopped after the command finished: {command}: {path} written; it is not run again", 0)
        if now == row.get("old"):
            line = f"the service stopped before {command} took effect; {path} was not changed; it is not run again"
        else:
            line = f"the service stopped while {command} wrote {path}, which now holds another version (see 'snapstore diff'); it is not run again"
    return _say(f"error: {line}", ServiceStoppedError.exit_code)


def _outcome(store_dir: str, rid: bytes, pid: int) -> tuple[dict[str, Any] | None, bool, str]:
    """The request's row once the service is gone (or the row is final), whether a restore is
    pending, and the tree's root."""
    from snapstore.records import requests
    from snapstore.store import Store

    deadline = time.monotonic() + WAIT_SECONDS
    with Store.open(store=store_dir) as store:
        while True:
            with store.backend.read() as view:
                row = requests.find(view, rid)
            final = row is not None and "exit" in row
            if final or not _alive(pid) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        with store.backend.read() as view:  # read again: the service may have ended meanwhile
            row = requests.find(view, rid)
        return row, store.pending_restore() is not None, store.root


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (the service's parent has not reaped it) is gone for our purpose.
    return not processes.is_zombie(pid)


def _say(line: str, code: int) -> int:
    sys.stderr.write(f"snapstore: {line}\n")
    sys.stderr.flush()
    return code
