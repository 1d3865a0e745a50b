"""Outages of the remote: transient failures retried with backoff over a bounded budget.

A real outage, from the client's side: the client talks to SeaweedFS through a TCP proxy on
127.0.0.1 that the test takes down mid-push (its listener closed, every open connection reset,
so new requests are refused) and brings back on the same port a few seconds later.  The push
rides it out; with a short budget and the proxy down for good, it fails in one line, exit 13,
once the budget is spent.  The retry policy itself (what is transient, the shared outage
clock, a listing resumed, the budget's sources) is checked on a scripted transport.
"""

from __future__ import annotations

import os
import socket
import struct
import threading
import time

import pytest
from canned_http import canned
from helpers import assert_one_line_error
from remote_helpers import make_store, seaweed  # noqa: F401 - the fixture

from snapstore.errors import RemoteError, UsageError
from snapstore.remote import retry
from snapstore.remote.s3errors import TransientError
from snapstore.remote.transport import Listed, Transport
from snapstore.store import Store
from snapstore.testing import assert_trees_equal, random_bytes, read_tree


class Proxy:
    """A TCP forwarder to ``target`` that can go down (refusing and resetting) and come back."""

    def __init__(self, target: int) -> None:
        self.target = target
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = probe.getsockname()[1]
        probe.close()
        self.sent = 0  # bytes forwarded client -> engine
        self.cut_at: int | None = None  # go down once this many bytes have gone up
        self.went_down = threading.Event()
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self.up()

    def up(self) -> None:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", self.port))
        s.listen(64)
        self._listener = s
        threading.Thread(target=self._accept, args=(s,), daemon=True).start()

    def down(self) -> None:
        """Close the listener (new connections are refused) and reset every open one."""
        s, self._listener = self._listener, None
        if s is not None:
            try:
                s.shutdown(socket.SHUT_RDWR)  # (wakes the accepting thread: close alone does not)
            except OSError:
                pass
            s.close()
        with self._lock:
            conns, self._conns = self._conns, []
        for c in conns:
            try:
                c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST
                c.close()
            except OSError:
                pass

    def _accept(self, s: socket.socket) -> None:
        while True:
            try:
                client, _ = s.accept()
            except OSError:
                return
            try:
                engine = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns += [client, engine]
            threading.Thread(target=self._pump, args=(client, engine, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(engine, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, up: bool) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
                if up:
                    self.sent += len(data)
                    if self.cut_at is not None and self.sent >= self.cut_at:
                        self.cut_at = None
                        self.down()  # (from this thread: mid-request, not after it)
                        self.went_down.set()
        except OSError:
            pass
        for c in (src, dst):
            try:
                c.close()
            except OSError:
                pass


@pytest.fixture
def proxied(seaweed, monkeypatch):  # noqa: F811 - the fixture
    for k, v in seaweed.env.items():
        monkeypatch.setenv(k, v)
    proxy = Proxy(seaweed.s3_port)
    yield proxy, f"http://127.0.0.1:{proxy.port}"
    proxy.down()


def _big_tree(root, seed: str) -> None:
    with make_store(root, {"blob.bin": random_bytes(12 << 20, seed), "a.txt": b"a\n"}) as s:
        s.snapshot("big")


def test_a_push_rides_out_an_outage_mid_upload(proxied, tmp_path, run_cli, monkeypatch):
    proxy, endpoint = proxied
    said: list[str] = []
    monkeypatch.setattr(retry, "_say", said.append)  # (what a terminal's stderr shows)
    url = f"s3://snapbucket/outage-{os.urandom(4).hex()}"
    _big_tree(tmp_path / "a", "outage")
    assert run_cli("remote", "add", "origin", url, "--endpoint", endpoint, cwd=tmp_path / "a").code == 0
    outage: list[float] = []

    proxy.cut_at = proxy.sent + (3 << 20)

    def cut() -> None:  # once 3 MB of the pack have gone up: down for 4 s, then back
        if not proxy.went_down.wait(60):
            return
        outage.append(time.monotonic())
        time.sleep(4)
        proxy.up()
        outage.append(time.monotonic())

    cutter = threading.Thread(target=cut)
    cutter.start()
    t0 = time.monotonic()
    r = run_cli("push", "--retry-budget", "30", cwd=tmp_path / "a")
    took = time.monotonic() - t0
    cutter.join()
    assert r.code == 0, r.err
    assert len(outage) == 2 and outage[0] < t0 + took  # the outage happened during the push
    assert took >= 4  # it waited for the engine, not failed at once
    assert r.err == ""  # not a terminal: no notes
    assert len(said) == 2 and "not answering" in said[0] and "answers again" in said[1]
    (tmp_path / "b").mkdir()
    with Store.in_memory(tmp_path / "b") as b:
        b.remote_add("origin", url, endpoint=endpoint)
        b.pull()
        assert_trees_equal(read_tree(tmp_path / "a"), read_tree(tmp_path / "b"))


def test_a_lasting_outage_fails_in_one_line_once_the_budget_is_spent(proxied, tmp_path, run_cli, monkeypatch):
    proxy, endpoint = proxied
    said: list[str] = []
    monkeypatch.setattr(retry, "_say", said.append)
    url = f"s3://snapbucket/gone-{os.urandom(4).hex()}"
    with make_store(tmp_path / "a", {"a.txt": b"a\n"}) as a:
        a.snapshot("one")
    assert run_cli("remote", "add", "origin", url, "--endpoint", endpoint, cwd=tmp_path / "a").code == 0
    proxy.down()
    t0 = time.monotonic()
    r = run_cli("push", "--retry-budget", "3", cwd=tmp_path / "a")
    took = time.monotonic() - t0
    assert r.code == RemoteError.exit_code == 13
    assert_one_line_error(r.err)
    assert said == ["the remote is not answering (connection refused); retrying for up to 3 s"]
    assert "connection refused" in r.err and "gave up after 3 s of retries" in r.err
    assert 3 <= took < 15
    r = run_cli("push", "--retry-budget", "0", cwd=tmp_path / "a")  # 0: no retries at all
    assert r.code == 13 and "no retries" in r.err and len(said) == 1


# -- the policy, on a scripted transport ------------------------------------------------------


class Scripted(Transport):
    """Fails as scripted: each item of ``script`` is an exception to raise, or None to succeed."""

    def __init__(self, script: list[BaseException | None]) -> None:
        self.script = script
        self.calls = 0

    def get_range(self, key: str, start: int, end: int) -> bytes | None:
        self.calls += 1
        step = self.script.pop(0) if self.script else None
        if step is not None:
            raise step
        return b"ok"

    def list(self, prefix: str, start_after: str | None = None):  # type: ignore[override]
        keys = [f"k{i}" for i in range(6)]
        for k in keys:
            if start_after is not None and k <= start_after:
                continue
            if k == "k3" and self.script:
                step = self.script.pop(0)
                if step is not None:
                    raise step
            yield Listed(k, 1, 0)


def _transient() -> TransientError:
    return TransientError("cannot read x on the remote: connection refused (GET http://e/x)", "connection refused")


def test_transient_failures_are_retried_and_said_once(monkeypatch):
    said: list[str] = []
    slept: list[float] = []
    inner = Scripted([_transient(), _transient(), _transient()])
    t = retry.RetryingTransport(inner, 60, notify=said.append, sleep=slept.append)
    assert t.get_range("x", 0, 2) == b"ok"
    assert inner.calls == 4 and t.retries == 3
    assert len(said) == 2 and "connection refused" in said[0] and "answers again" in said[1]
    assert all(retry.MIN_BACKOFF_S <= s <= retry.MAX_BACKOFF_S for s in slept)


def test_other_failures_are_not_retried():
    inner = Scripted([RemoteError("the remote refused to read x: AccessDenied: ...")])
    t = retry.RetryingTransport(inner, 60, notify=lambda m: None, sleep=lambda s: None)
    with pytest.raises(RemoteError, match="AccessDenied"):
        t.get_range("x", 0, 2)
    assert inner.calls == 1


def test_the_outage_clock_is_shared_and_bounded(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(retry.time, "monotonic", lambda: clock[0])

    def sleep(s: float) -> None:
        clock[0] += s

    inner = Scripted([_transient()] * 1000)
    t = retry.RetryingTransport(inner, 10, notify=lambda m: None, sleep=sleep)
    with pytest.raises(RemoteError, match="gave up after 10 s"):
        t.get_range("x", 0, 2)
    assert 10 <= clock[0] < 10.5
    calls = inner.calls
    with pytest.raises(RemoteError):  # the same outage: no second budget
        t.get_range("x", 0, 2)
    assert inner.calls == calls + 1


def test_a_listing_resumes_after_the_last_key_it_gave():
    inner = Scripted([_transient()])
    t = retry.RetryingTransport(inner, 60, notify=lambda m: None, sleep=lambda s: None)
    assert [e.key for e in t.list("x/")] == [f"k{i}" for i in range(6)]  # no key twice, none lost


def test_the_budget_comes_from_the_option_the_environment_the_config_or_the_default(monkeypatch):
    monkeypatch.delenv(retry.ENV, raising=False)
    retry.set_budget(None)
    assert retry.budget() == retry.DEFAULT_BUDGET_S == 60
    assert retry.budget("15") == 15
    monkeypatch.setenv(retry.ENV, "7")
    assert retry.budget("15") == 7
    retry.set_budget(3)
    try:
        assert retry.budget("15") == 3
    finally:
        retry.set_budget(None)
    monkeypatch.setenv(retry.ENV, "forever")
    with pytest.raises(UsageError, match=retry.ENV):
        retry.budget()


def test_the_store_setting_sets_the_budget(tmp_path, run_cli, monkeypatch):
    monkeypatch.delenv(retry.ENV, raising=False)
    with make_store(tmp_path / "a", {"a.txt": b"a"}) as a:
        a.snapshot("one")
    assert run_cli("config", "remote.retry-budget", "5", cwd=tmp_path / "a").code == 0
    r = run_cli("config", "remote.retry-budget", cwd=tmp_path / "a")
    assert r.text.strip() == "5"
    assert run_cli("config", "remote.retry-budget", "9999", cwd=tmp_path / "a").code == UsageError.exit_code
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    assert run_cli("config", "remote.retry-budget", "1", cwd=tmp_path / "a").code == 0
    assert run_cli("remote", "add", "origin", "s3://b/p", "--endpoint", "http://127.0.0.1:9", cwd=tmp_path / "a").code == 0
    r = run_cli("push", cwd=tmp_path / "a")
    assert r.code == 13 and "gave up after 1 s of retries" in r.err


def test_slowdown_is_retried_then_named(monkeypatch):
    """An engine answering 503 SlowDown: retried with backoff, then named in plain words."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    body = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
            b"<Message>Please reduce your request rate.</Message></Error>")
    from snapstore.remote import transport as tr
    from snapstore.remote.names import parse_url

    retry.set_budget(1.5)
    try:
        with canned("503 Slow Down", body) as server:
            t = tr.connect(parse_url("s3://b/p"), endpoint=server.endpoint)
            with pytest.raises(RemoteError) as info:
                t.get("config")
    finally:
        retry.set_budget(None)
    assert server.hits >= 3
    message = str(info.value)
    assert "SlowDown" in message and "slow down" in message and "gave up after 1.5 s" in message
    assert "\n" not in message


def test_a_reports_request_count_includes_retries():
    from snapstore.remote.transport import CountingTransport

    inner = Scripted([_transient(), _transient()])
    t = CountingTransport(retry.RetryingTransport(inner, 60, notify=lambda m: None, sleep=lambda s: None))
    assert t.get_range("x", 0, 2) == b"ok"
    assert t.requests == inner.calls == 3
