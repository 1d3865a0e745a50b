"""What a client says when the resident service stopped before answering.

The service acknowledged the request, so it may have done the work: the command is never run
a second time.  Once the service process is gone (its pid came with the acknowledgement), its
transactions are final, and the request's row (:mod:`snapstore.records.requests`), written in
the transaction of the request's effect, says what happened: a checkpoint recorded, an
operation finished, an operation begun (the next writing command finishes it), a command's exit
code, or nothing at all.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

#: How long a client waits for a service that dropped its connection to end (or to record the
#: request), before saying it cannot tell.
WAIT_SECONDS = 60.0


def report(store_dir: str, rid: str, command: str, ack: bytes) -> int:
    """Print one line about request ``rid`` (``command``) and return the exit code to use."""
    from snapstore.errors import ServiceStoppedError, SnapstoreError

    try:
        pid = int(ack or b"0")
    except ValueError:
        pid = 0
    try:
        row, pending = _outcome(store_dir, bytes.fromhex(rid), pid)
    except SnapstoreError as exc:
        return _say(f"error: the service stopped before answering {command}, and its store cannot be read: {exc}", ServiceStoppedError.exit_code)
    what = f"the service stopped before answering {command!r}"
    if row is None:
        if pending:
            return _say(f"error: {what}: a restore it began is not finished; the next writing command finishes it ('snapstore recover' does now)", ServiceStoppedError.exit_code)
        return _say(f"error: {what}, and nothing of it was recorded: it did not take effect (run it again if it is still wanted)", ServiceStoppedError.exit_code)
    if row.get("stage") == "begun":
        kind = row.get("kind", "restore")
        return _say(f"error: {what}, in the middle of its {kind}: the next writing command finishes it ('snapstore recover' does now); it is not run again", ServiceStoppedError.exit_code)
    if "op" in row:
        code = int(row.get("exit", 0))
        return _say(f"warning: {what}, after it finished: operation {row['op']} ({row.get('kind', 'restore')}, {row.get('changed', 0)} path(s)); it is not run again (see 'snapstore oplog')", code)
    if "exit" in row:
        code = int(row["exit"])
        return _say(f"warning: {what}, after it finished (exit {code}): it is not run again", code)
    if "checkpoint" in row:
        cp = str(row["checkpoint"])[:12]
        if command in ("snapshot", "hook"):
            return _say(f"warning: {what}, after it recorded checkpoint {cp}", 0)
        return _say(f"error: {what}, after it recorded checkpoint {cp} and before it finished (for an edit: the file may not hold it; see 'snapstore diff {cp}'); it is not run again", ServiceStoppedError.exit_code)
    return _say(f"error: {what}; what it did is unclear: see 'snapstore list' and 'snapstore oplog'", ServiceStoppedError.exit_code)


def _outcome(store_dir: str, rid: bytes, pid: int) -> tuple[dict[str, Any] | None, bool]:
    """The request's row once the service is gone (or the row is final), and whether a restore
    is pending."""
    from snapstore.records import requests
    from snapstore.store import Store

    deadline = time.monotonic() + WAIT_SECONDS
    with Store.open(store=store_dir) as store:
        while True:
            with store.backend.read() as view:
                row = requests.find(view, rid)
            final = row is not None and ("exit" in row or "op" in row or ("checkpoint" in row and row.get("command") in ("snapshot", "hook")))
            if final or not _alive(pid) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        with store.backend.read() as view:  # read again: the service may have ended meanwhile
            row = requests.find(view, rid)
        return row, store.pending_restore() is not None


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
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().split(b") ", 1)[-1][:1] != b"Z"
    except OSError:
        return True


def _say(line: str, code: int) -> int:
    sys.stderr.write(f"snapstore: {line}\n")
    sys.stderr.flush()
    return code
