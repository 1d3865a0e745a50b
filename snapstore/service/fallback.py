"""Why a command did not go the fast way: recorded, shown by ``serve --status``, hinted once.

The native client hands a command to the Python client, and the Python client runs it without
the service, for many ordinary reasons (no service, a local command, ``--help``).  Two reasons
are a mistake the user can fix, and each costs every command a Python start or a whole
in-process run: the service **refused** a client of another installation or version (its
version tag names the package version, the protocol and the install path), or closed the
connection without a word (an older service that cannot read the request).  Those are recorded
in ``<store>/fallbacks.json`` (cause -> count, last time, what to do) and the first one of each
cause prints one line on stderr.  Stdlib only: the client imports it.
"""

from __future__ import annotations

import json
import os
import time

FILE = "fallbacks.json"
#: The most the file may hold (it is ours; a bigger one is not read).
MAX_BYTES = 64 << 10

#: cause -> what happened and what to do (the hint printed once, kept in the record).
CAUSES = {
    "native-client-refused": (
        "the service refused the native client (built for another snapstore installation or "
        "version), so the Python client answered and every command paid a Python start; rebuild "
        "it: run 'make setup' in a checkout, or reinstall snapstore"
    ),
    "service-did-not-answer": (
        "the store's service closed the connection without answering (a service started by an "
        "older snapstore cannot read this one's requests), so commands run without it (slower); "
        "restart it: 'snapstore serve --stop' (or end its process) then 'snapstore serve --detach'"
    ),
    "python-client-refused": (
        "the store's service runs another snapstore installation or version, so commands of this "
        "one run without it (slower); restart it from this installation: 'snapstore serve --stop' "
        "then 'snapstore serve --detach'"
    ),
}


def read(store_dir: str) -> dict[str, dict[str, object]]:
    """The recorded fallbacks (empty when none, or when the file is not ours to trust)."""
    try:
        fd = os.open(os.path.join(store_dir, FILE), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return {}
    try:
        data = os.read(fd, MAX_BYTES + 1)
    except OSError:
        return {}
    finally:
        os.close(fd)
    try:
        doc = json.loads(data) if len(data) <= MAX_BYTES else {}
    except ValueError:
        return {}
    if not isinstance(doc, dict):
        return {}
    return {k: v for k, v in doc.items() if k in CAUSES and isinstance(v, dict)}


def note(store_dir: str, cause: str, detail: str = "") -> str | None:
    """Record one fallback of ``cause``; the hint to print when this cause was never hinted.

    Best effort: a store directory we cannot write still gets the hint (once per process)."""
    doc = read(store_dir)
    entry = doc.setdefault(cause, {})
    count = entry.get("count")
    entry["count"] = (count if isinstance(count, int) else 0) + 1
    entry["last"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    entry["why"] = CAUSES[cause]
    if detail:
        entry["detail"] = detail[:500]
    first = not entry.get("hinted")
    entry["hinted"] = True
    _write(store_dir, doc)
    return f"snapstore: note: {CAUSES[cause]} (shown once; 'snapstore serve --status' lists fallbacks)" if first else None


def _write(store_dir: str, doc: dict[str, dict[str, object]]) -> None:
    tmp = os.path.join(store_dir, f".{FILE}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError:
        return
    try:
        os.write(fd, json.dumps(doc, indent=1, sort_keys=True).encode())
    finally:
        os.close(fd)
    try:
        os.replace(tmp, os.path.join(store_dir, FILE))
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
