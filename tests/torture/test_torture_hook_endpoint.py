"""Hostile input to the http hook endpoint (issue 38: the hook surface in the torture suite).

One service answering Claude Code's http hooks gets seeded random hostile requests from its own
user (who passes the peer check: the part another user never reaches): garbage and binary
request lines, headers past the limits, a wrong or missing token, wrong Host, Content-Length
missing, negative, absurd or larger than the body, bodies cut short, JSON nested deep, connections
opened and left silent or closed half-way.  Each trial is a few such requests, then one valid
event: it must be answered (200) in time and recorded, the service must still run, and at the
end the store verifies and holds exactly the valid events' checkpoints.
"""

from __future__ import annotations

import http.client
import json
import random
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from torture_tally import scaled

from snapstore.integrations import settings
from snapstore.service import daemon, http_hooks
from snapstore.store import Store

CASE = pytest.mark.torture_case("hostile input")
TRIALS = scaled(6, 60)
SESSION = "torture-http"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, int, str]]:
    tree = tmp_path_factory.mktemp("hook-endpoint") / "proj"
    tree.mkdir()
    (tree / "a.txt").write_text("a\n")
    Store.init(tree).close()
    try:
        settings.integrate_claude_code(str(tree), http=True, home=str(tree.parent / "home"))
    except Exception as exc:  # noqa: BLE001 - refused where other users run processes
        pytest.skip(f"--http is refused here: {exc}")
    store_dir = str(tree / ".snapstore")
    port, token = http_hooks.load(store_dir) or (0, "")
    daemon.start_detached(store_dir, 600)
    try:
        yield tree, port, token
    finally:
        daemon.stop(store_dir)


def hostile(rng: random.Random, port: int, token: str) -> bytes:
    """One hostile request's bytes."""
    good_head = f"POST /snapstore/hook/claude-code HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n"
    kind = rng.choice(["garbage", "long-line", "many-headers", "no-length", "bad-length", "short-body",
                       "wrong-token", "wrong-host", "deep-json", "not-json", "cut-head"])
    if kind == "garbage":
        return rng.randbytes(rng.randint(1, 4096))
    if kind == "long-line":
        return b"POST /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n"
    if kind == "many-headers":
        return good_head.encode() + b"".join(b"X-%d: y\r\n" % i for i in range(200)) + b"\r\n"
    if kind == "no-length":
        return good_head.encode() + b"\r\n{}"
    if kind == "bad-length":
        return good_head.encode() + rng.choice([b"Content-Length: -5\r\n", b"Content-Length: 99999999999\r\n",
                                                b"Content-Length: x\r\n"]) + b"\r\n{}"
    if kind == "short-body":
        return good_head.encode() + b"Content-Length: 1000\r\n\r\n{\"hook"
    if kind == "wrong-token":
        return good_head.replace(token, "x" * len(token)).encode() + b"Content-Length: 2\r\n\r\n{}"
    if kind == "wrong-host":
        return good_head.replace(f"127.0.0.1:{port}", "evil.example").encode() + b"Content-Length: 2\r\n\r\n{}"
    if kind in ("deep-json", "not-json"):
        body = b"[" * 100000 + b"]" * 100000 if kind == "deep-json" else rng.randbytes(2000)
        return good_head.encode() + b"Content-Length: %d\r\n\r\n" % len(body) + body
    return good_head.encode()[: rng.randint(1, len(good_head) - 1)]


def send_hostile(data: bytes, port: int, rng: random.Random) -> None:
    conn = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        conn.sendall(data)
        if rng.random() < 0.5:
            conn.shutdown(socket.SHUT_WR)
            conn.settimeout(10)
            while conn.recv(65536):
                pass
    except OSError:
        pass  # (the service may close early: that is an answer too)
    finally:
        conn.close()


def valid_event(port: int, token: str, tree: Path, n: int) -> tuple[int, float]:
    (tree / "a.txt").write_text(f"version {n}\n")
    start = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    event = {"hook_event_name": "PostToolUse", "session_id": SESSION, "cwd": str(tree), "tool_name": "Write",
             "tool_use_id": f"t{n}", "tool_input": {"file_path": str(tree / "a.txt")}}
    conn.request("POST", "/snapstore/hook/claude-code", body=json.dumps(event), headers={"Authorization": f"Bearer {token}"})
    status = conn.getresponse().status
    return status, time.monotonic() - start


@CASE
@pytest.mark.parametrize("seed", range(TRIALS))
def test_hostile_requests_leave_the_endpoint_serving(served: tuple[Path, int, str], seed: int):
    tree, port, token = served
    rng = random.Random(seed)
    for _ in range(4):
        send_hostile(hostile(rng, port, token), port, rng)
    silent = socket.create_connection(("127.0.0.1", port), timeout=10)  # opened and left silent
    try:
        status, took = valid_event(port, token, tree, seed)
    finally:
        silent.close()
    assert status == 200 and took < 5.0, (status, took)
    info = daemon.status(str(tree / ".snapstore"))
    assert info is not None and info["http"]["listening"], info
    with Store.open(tree) as store:
        mine = [c for c in store.checkpoints(task=SESSION) if c.metadata.get("tool_use_id") == f"t{seed}"]
        assert len(mine) == 1
        if seed == TRIALS - 1:
            assert store.verify().ok
