"""The service process: one per store, keeping it open and running CLI commands for clients.

A request runs the ordinary CLI (``snapstore.cli.main``) in this process with the client's
arguments, working directory, ``SNAPSTORE_*`` environment and stdout encoding; stdout and stderr
are streamed back as frames.  So output, JSON and exit codes are those of an in-process run by
construction.  What the service adds is what it keeps between commands: the open store (LMDB
environment, caches, the manifest memo) and, with the watcher, the set of paths that changed.

Requests are served one at a time (the process-wide cwd, environment and stdio are switched for
each).  Only the store's owner may connect (the socket is 0600 and the peer's uid is checked).
The service exits after ``idle_timeout`` seconds without a request, on ``stop``, and when its
tree disappears or is replaced.
"""

from __future__ import annotations

import contextlib
import gc
import io
import json
import logging
import os
import select
import socket
import sys
import time
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any, cast

from snapstore.errors import LockedError, TreeIOError
from snapstore.integrations.agents import AGENTS
from snapstore.ops.snapshot.idle_check import IdleCheck
from snapstore.platform import unix
from snapstore.records import requests
from snapstore.service import http_hooks, protocol
from snapstore.service.server import environment, http_endpoint
from snapstore.service.server.heartbeat import Beating
from snapstore.store import Store

if TYPE_CHECKING:
    from snapstore.cli.app import Ctx

log = logging.getLogger("snapstore.service")

#: The commands that take a checkpoint first (a plain snapshot; not a hook event, which often
#: takes none): the watcher's mapping scan is made while the client confirms the request.
_CHECKPOINTING = frozenset({"snapshot"})

DEFAULT_IDLE_TIMEOUT = 1800.0
#: Seconds without a request before the idle maintenance pass (gathering small loose packs).
MAINTAIN_AFTER = 10.0
#: Seconds a connected client has to send its request.
REQUEST_TIMEOUT = 5.0


class _FrameWriter(io.RawIOBase):
    """A binary stream whose writes go to the client as frames of one channel."""

    def __init__(self, frames: Beating, channel: bytes):
        self._frames, self._channel = frames, channel

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        payload = bytes(data)
        if payload:
            self._frames.send(self._channel, payload)
        return len(payload)


class _Borrowed:
    """The resident store lent to one command: ``with`` and ``close`` do not close it; every
    other attribute is the store's."""

    def __init__(self, store: Store):
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def close(self) -> None:
        return None

    def __enter__(self) -> Store:
        return self._store

    def __exit__(self, *exc: object) -> None:
        return None


class Service:
    """Serve one store on its Unix socket until idle, stopped, or its tree is gone."""

    def __init__(self, store_dir: str, *, idle_timeout: float = DEFAULT_IDLE_TIMEOUT):
        self.store_dir = os.path.realpath(store_dir)
        self.idle_timeout = idle_timeout
        self.store = Store.open(store=self.store_dir, watch=True)
        self.store.maintain_after_snapshot = False  # (done when idle: _maintain)
        self.idle_check = IdleCheck(self.store.context)  # (the watcher's check, when idle)
        self.started = time.time()
        self.requests = 0
        #: Requests served by each kind of client ("native", "python"), the last one's kind,
        #: and requests refused (cause -> count, last client and version).
        self.clients: dict[str, int] = {}
        self.last_client: str | None = None
        self.refused: dict[str, dict[str, object]] = {}
        self.last_error: str | None = None
        self._stop = False
        #: The http hooks' port while they are answered, or why they are not.
        self.http_port: int | None = None
        self.http_refused: str | None = None
        self._lock_fd: int | None = None
        self._null_stdin: IO[str] | None = None
        self._dir_fd = os.open(self.store_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        st = os.fstat(self._dir_fd)
        self._store_id = (st.st_dev, st.st_ino)
        st = os.stat(self.store.root)
        self._tree_id = (st.st_dev, st.st_ino)

    # -- life cycle -----------------------------------------------------------------------

    def _take_instance_lock(self) -> None:
        import fcntl

        path = os.path.join(self.store_dir, protocol.LOCK_NAME)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise LockedError(f"a service is already running for {self.store_dir}") from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._lock_fd = fd

    def _bind(self) -> socket.socket:
        path = os.path.join(self.store_dir, protocol.SOCKET_NAME)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # a stale socket of a killed service (we hold the instance lock)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_umask = os.umask(0o177)  # the socket is created 0600: only the owner connects
        try:
            if len(os.fsencode(path)) < 100:
                sock.bind(path)
            else:
                here = os.getcwd()
                os.chdir(self.store_dir)
                try:
                    sock.bind(protocol.SOCKET_NAME)
                finally:
                    os.chdir(here)
        finally:
            os.umask(old_umask)
        sock.listen(16)
        return sock

    def serve(self, ready: IO[str] | None = None) -> None:
        """Run until stopped; ``ready`` gets a line once the socket accepts connections."""
        if os.stat(self.store_dir).st_uid != os.getuid():
            raise TreeIOError(f"{self.store_dir} belongs to another user: not serving it")
        self._take_instance_lock()
        listener = self._bind()
        web = self._listen_http()
        log.info("serving %s (tree %s), pid %d", self.store_dir, self.store.root, os.getpid())
        if ready is not None:
            ready.write("ready\n")
            ready.flush()
        last = time.monotonic()
        swept = self.requests
        maintained = -1  # the request count at the last idle maintenance pass
        try:
            sockets: list[Any] = [listener] + ([web.wake_r] if web is not None else [])
            while not self._stop:
                readable, _, _ = select.select(sockets, [], [], 1.0)
                if not readable and swept != self.requests:
                    swept = self.requests
                    _sweep()
                elif (
                    not readable
                    and maintained != self.requests
                    and time.monotonic() - last > MAINTAIN_AFTER
                ):
                    maintained = self.requests
                    self._maintain(lambda: bool(select.select(sockets, [], [], 0)[0]))
                elif not readable:
                    self._follow_compaction()
                    self.idle_check.step()  # (cheap until the watcher's check is due)
                for ready_sock in readable:
                    served = self.requests
                    if ready_sock is listener:
                        conn, _ = listener.accept()
                        with conn, self.idle_check.held():  # (an idle check's walk waits meanwhile)
                            self._handle(conn)
                    elif web is not None:  # complete hook events, read by the endpoint's threads
                        with self.idle_check.held():
                            web.run_pending(self._run_http_hook)
                    if self.requests != served:  # status requests do not keep it alive
                        last = time.monotonic()
                    gc.freeze()
                # Holding the http hooks' port is what keeps it ours (http_hooks): no idle exit.
                if web is None and time.monotonic() - last > self.idle_timeout:
                    log.info("idle for %.0f s: exiting", self.idle_timeout)
                    break
                if not self._tree_still_there():
                    log.info("the tree %s is gone or was replaced: exiting", self.store.root)
                    break
        finally:
            with contextlib.suppress(OSError):  # through the directory: the tree may have moved
                os.unlink(protocol.SOCKET_NAME, dir_fd=self._dir_fd)
            os.close(self._dir_fd)
            listener.close()
            if web is not None:
                web.close()
                http_hooks.SERVING.pop(self.store_dir, None)
            http_hooks.NOT_SERVING.pop(self.store_dir, None)
            self.store.close()
            self._no_stdin().close()
            if self._lock_fd is not None:
                os.close(self._lock_fd)

    def _listen_http(self) -> http_endpoint.Endpoint | None:
        """The http hook endpoint, when the store has one configured and it can be served;
        why not is logged and kept for ``status`` (the prompt hook refuses turns meanwhile)."""
        got = http_hooks.listen(self.store_dir)
        if got is None:
            return None
        if isinstance(got, str):
            self.http_refused = http_hooks.NOT_SERVING[self.store_dir] = got
            log.warning("NOT answering the agent's http hooks: %s", got)
            return None
        sock, port, token = got
        web = http_endpoint.Endpoint(sock, port, token, AGENTS)
        web.start()
        self.http_port = port
        http_hooks.SERVING[self.store_dir] = port
        log.info("answering agent hooks at %s", http_hooks.url(port, "AGENT"))
        return web

    def _maintain(self, waiting: Callable[[], bool] = lambda: False) -> None:
        """Maintenance when idle (``maintenance.auto``).  When a pass is due and
        ``maintenance.detach`` allows, it runs in a process of its own (this loop serves
        requests one at a time, and a full pass's step compresses for about a second).
        Otherwise one bounded pass runs here: each step holds the writer lock briefly; a store
        busy with another writer is left for the next idle time, and the pass stops between
        steps as soon as a request is ``waiting`` (a checkpoint waits for one step at most,
        plus the plan)."""
        from snapstore.errors import SnapstoreError

        try:
            if self.store.config_get("maintenance.auto") != "true":
                return
            if self.store.maintain_in_background():
                log.info("idle maintenance: started in a process of its own")
                return
            report = self.store.maintain(lock_timeout=0.2, stop=waiting)
        except SnapstoreError as exc:
            log.info("idle maintenance skipped: %s", exc)
            return
        if report is not None:
            log.info("idle maintenance: %s", report.to_json())

    def _follow_compaction(self) -> None:
        """Let go of a generation a detached maintenance pass compacted away (an idle service
        would hold it open, and its bytes on disk, until its next request)."""
        from snapstore.errors import SnapstoreError

        try:
            self.store.follow_compaction()
        except SnapstoreError as exc:
            log.info("following a compaction failed: %s", exc)

    def _tree_still_there(self) -> bool:
        try:
            st = os.stat(self.store.root)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == self._tree_id

    # -- requests -------------------------------------------------------------------------

    def _handle(self, conn: socket.socket) -> None:
        uid = unix.peer_uid(conn)  # (None where the system cannot tell: the socket's directory guards it)
        if uid is not None and uid != os.getuid():
            log.warning("refused a connection from uid %d", uid)
            return
        conn.settimeout(REQUEST_TIMEOUT)
        try:
            frame = protocol.recv_frame(conn)
            if frame is None:
                return
            request = protocol.decode_request(frame[1])
            op = request.get("op", "run")
            if request.get("v") != protocol.version_tag() and op not in ("status", "stop"):
                # (another installation may still ask what runs here, and stop it)
                self._refused(request)
                protocol.send_frame(conn, b"n", b"version")
                return
            if op == "status":
                protocol.send_frame(conn, b"a", b"")
                protocol.send_frame(conn, b"o", json.dumps(self.status()).encode())
                protocol.send_frame(conn, b"x", b"0")
                return
            if op == "stop":
                self._stop = True
                protocol.send_frame(conn, b"a", b"")
                protocol.send_frame(conn, b"x", b"0")
                return
            if not self._is_mine(str(request.get("store", ""))) or "cwd" not in request:
                protocol.send_frame(conn, b"n", b"store")
                return
            # The ack names this process: a client that loses the answer waits for it to end
            # before reading what the request recorded (service.client.lost).
            protocol.send_frame(conn, b"a", str(os.getpid()).encode())
            watcher = self.store.context.watcher
            if watcher is not None and request.get("command") in _CHECKPOINTING:
                watcher.begin_scan()  # (it runs while the client wakes to confirm)
            # Run only once the client confirms it saw the acknowledgement: a client that gave
            # up waiting (and runs the command itself) closes without confirming.
            go = protocol.recv_frame(conn)
            if go is None or go[0] != b"g":
                log.info("a client gave up before the acknowledgement: its request is not run")
                return
            conn.settimeout(None)
            self.requests += 1
            client = str(request.get("client", "native"))
            self.clients[client] = self.clients.get(client, 0) + 1
            self.last_client = client
            with Beating(conn) as frames:  # (a client takes a silent service for stopped)
                self._run(frames, request)
        except (OSError, ValueError) as exc:  # the client went away or sent garbage
            self.last_error = f"{type(exc).__name__}: {exc}"
            log.warning("request failed: %s", self.last_error)
        finally:
            if self.store.context.watcher is not None:
                self.store.context.watcher.drop_scan()

    def _is_mine(self, path: str) -> bool:
        """Whether ``path`` names this service's store directory, still at the names the
        service works with: the same directory at ``path``, at the service's store path, and
        its tree at the service's root (three ``stat`` calls on every request's path, where
        resolving the name took one per component).  A store or tree moved away is refused,
        so no request runs against paths that now name something else; the loop then exits."""
        try:
            st, own = os.stat(path), os.stat(self.store_dir)
        except (OSError, ValueError):
            return False
        return (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino) == self._store_id and self._tree_still_there()

    def _provide(self, ctx: Ctx) -> Store:
        located = Store.locate(ctx.directory, store=ctx.store_dir)
        if not self._is_mine(located):
            return Store.find(ctx.directory, store=ctx.store_dir, lock_timeout=ctx.lock_timeout)
        if ctx.store_dir is not None:
            self.store.check_tree(ctx.directory)
        self.store.set_lock_timeout(ctx.lock_timeout)  # each request's own --lock-timeout
        return cast(Store, _Borrowed(self.store))

    def _run(self, frames: Beating, request: dict[str, Any]) -> int:
        """Run the request's command; its exit code goes out (``x``) as soon as its output and
        outcome are, before the service takes its own directory and environment back."""
        encoding = str(request.get("encoding") or "utf-8")
        errors = str(request.get("errors") or "strict")
        out = io.TextIOWrapper(io.BufferedWriter(_FrameWriter(frames, b"o"), 1 << 16), encoding=encoding, errors=errors)
        err = io.TextIOWrapper(io.BufferedWriter(_FrameWriter(frames, b"e"), 1 << 12), encoding=encoding, errors="backslashreplace")
        stdin = request.get("stdin")  # a hook's event, read by the client
        return self._invoke(
            [str(a) for a in request.get("argv", [])], str(request["cwd"]), dict(request.get("env", {})),
            stdin if isinstance(stdin, str) else None, out, err, str(request.get("command") or ""), _request_id(request),
            answer=lambda code: frames.send(b"x", str(code).encode()),
        )

    def _run_http_hook(self, agent: str, body: str) -> str:
        """An agent's hook event received over HTTP (service.http_hooks): run in the tree's root
        like a hook the agent started there; its stdout is the answer."""
        out, err = io.StringIO(), io.StringIO()
        self.requests += 1
        self._invoke(["hook", agent], self.store.root, {}, body, out, err, "hook", None)
        return out.getvalue().strip()

    def _invoke(
        self, argv: list[str], cwd: str, env: dict[str, str], stdin: str | None, out: Any, err: Any,
        command: str, rid: bytes | None, answer: Callable[[int], None] | None = None,
    ) -> int:
        """Run one command line as the client's; ``answer`` gets the exit code once the
        command's output is flushed and its outcome recorded, and before the client's directory
        and environment are swapped back for the service's (off the answer's path)."""
        from snapstore.cli import lean
        from snapstore.cli import main as cli_main

        context = self.store.context
        context.after_answer = []
        request = None  # (the request's, kept for the kill seam after the answer)
        with self._client_context(cwd, env):
            saved = sys.stdout, sys.stderr, sys.stdin
            sys.stdout, sys.stderr = out, err
            if stdin is not None:
                sys.stdin = io.StringIO(stdin)
            else:  # (commands that read stdin run in the client's process)
                sys.stdin = self._no_stdin()
            if rid is not None:
                self._begin_request(rid, command)
            try:
                # A plain snapshot (what agents send after every tool call) skips click's
                # parsing, as in-process: the same body, the same bytes (cli.lean).
                code = lean.main(argv, opener=self._provide) if command == "snapshot" else None
                if command == "hook":  # (an agent's every tool event: click-free too)
                    from snapstore.cli.commands_agent import plain_hook

                    code = plain_hook(argv, opener=self._provide)
                if code is None:
                    code = cli_main(argv, open_store=self._provide)
                if rid is not None:
                    self._record_outcome(rid, command, code)
                    requests.seam(self.store.context.request, "after-command")
            finally:
                request, context.request = context.request, None
                self.store.backend.stamp = None
                for stream in (out, err):
                    with contextlib.suppress(OSError, ValueError):
                        stream.flush()
                if sys.stdin is not self._null_stdin:
                    sys.stdin.close()
                sys.stdout, sys.stderr, sys.stdin = saved
            try:
                if answer is not None:
                    answer(code)
            finally:  # (a client gone before its answer too: the work holds the writer lock)
                self._after_answer(request)  # (in the client's environment, as the command ran)
        return code

    def _after_answer(self, request: requests.Request | None) -> None:
        """The work the command left for after its answer (``StageContext.after_answer``: the
        record of the tree a restore left), in order, before the next request is taken.  The
        client has its answer: a failure goes to the service's log."""
        context = self.store.context
        work, context.after_answer = context.after_answer or [], None
        if work:
            requests.seam(request, "after-answer")
        for job in work:
            try:
                job()
            except Exception as exc:  # noqa: BLE001 - logged: nobody waits for this answer
                log.warning("after the answer: %s", exc)

    def _no_stdin(self) -> IO[str]:
        """The empty stdin of a request without one: one ``/dev/null`` kept open across requests
        (reopened if a command closed it)."""
        if self._null_stdin is None or self._null_stdin.closed:
            self._null_stdin = open(os.devnull)  # noqa: SIM115 - kept for the next requests
        return self._null_stdin

    def _begin_request(self, rid: bytes, command: str) -> None:
        """Every transaction the request makes carries its id (its stages add what they did:
        records.requests), so a request without a row provably wrote nothing."""
        request = requests.Request(rid, command)
        self.store.context.request = request
        self.store.backend.stamp = lambda batch: requests.stamp(batch, request)

    def _record_outcome(self, rid: bytes, command: str, code: int) -> None:
        """The exit code in the request's row before the answer goes out, unless the row says
        it all already (a checkpoint recorded, an operation finished, with exit 0): a command
        that committed nothing (an unchanged snapshot, an undo with nothing to undo) gets a row
        of its own, so a client that loses the answer can tell "done" from "never happened".

        No extra sync: every commit already writes its data pages (lmdb_env), and a lost answer
        means this process died, not the machine (whose clients die with it)."""
        if command in protocol.READ_ONLY_COMMANDS:
            return
        from snapstore.errors import SnapstoreError

        request = self.store.context.request
        backend = self.store.backend
        backend.stamp = None  # (the outcome is not one of the command's writes)
        try:
            with backend.read() as view:
                row = requests.find(view, rid) or {}
            if code == 0 and (row.get("stage") == "done" or ("checkpoint" in row and command in protocol.SELF_RECORDING_COMMANDS)):
                return  # the effect's own row says it all (service.client.lost reads exit 0)
            if code == 0 and command == "hook" and not row:
                # A hook's effect is its checkpoints; one that recorded none committed nothing,
                # and no row is what service.client.lost reads as that (a hook always exits 0): no
                # fsynced commit on each of an agent's no-change tool events.
                return
            with backend.write() as batch:
                requests.record(batch, request, exit=code)
        except SnapstoreError as exc:  # the store cannot take it: the answer still goes out
            log.warning("cannot record request %s: %s", rid.hex(), exc)

    def _client_context(self, cwd: str, env: dict[str, str]) -> contextlib.AbstractContextManager[None]:
        """The request's directory and forwarded variables (``TZ`` among them) for the command,
        the service's own back after it (:mod:`.environment`)."""
        return environment.client_context(cwd, env)

    def _refused(self, request: dict[str, Any]) -> None:
        """Count a request refused for its version (``serve --status`` shows it)."""
        entry = self.refused.setdefault("version", {"count": 0})
        count = entry["count"]
        entry["count"] = (count if isinstance(count, int) else 0) + 1
        entry["last_client"] = str(request.get("client", "native"))
        entry["last_version"] = str(request.get("v", ""))[:300]
        entry["last"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        log.warning("refused a %s client of another version (%s)", entry["last_client"], entry["last_version"])

    def status(self) -> dict[str, Any]:
        """What ``serve --status`` prints."""
        return {
            "version": protocol.version_tag(),
            "clients": dict(self.clients),
            "last_client": self.last_client,
            "refused": dict(self.refused),
            "pid": os.getpid(),
            "store": self.store_dir,
            "tree": self.store.root,
            "uptime_s": round(time.time() - self.started, 1),
            "requests": self.requests,
            "idle_timeout_s": self.idle_timeout,
            "last_error": self.last_error,
            "watcher": _with_idle_checks(self.store.watch_status(), self.idle_check.passed),
            "http": self._http_status(),
        }

    def _http_status(self) -> dict[str, Any] | None:
        if self.http_port is not None:
            return {"port": self.http_port, "listening": True}
        return None if self.http_refused is None else {"listening": False, "refused": self.http_refused}


def _with_idle_checks(status: dict[str, Any] | None, passed: int) -> dict[str, Any] | None:
    """The watcher's status with ``idle_checks``: the consistency walks made while idle."""
    return None if status is None else {**status, "idle_checks": passed}


def _sweep() -> None:
    """Collect cyclic garbage once, when idle.  Between requests every object is frozen out
    of the collector (``gc.freeze``, O(1)): the watcher's state (a few objects per file of
    the tree) is long-lived, and a full collection walks all of it (8 ms of a 1-file
    checkpoint at 100k files, measured); what a request left in cycles is collected here,
    after the first idle second."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()


def _request_id(request: dict[str, Any]) -> bytes | None:
    rid = request.get("id")
    if not isinstance(rid, str):
        return None
    try:
        raw = bytes.fromhex(rid)
    except ValueError:
        return None
    return raw if len(raw) == 16 else None


def main(argv: list[str]) -> int:
    """``python -m snapstore.service.server STORE_DIR IDLE_TIMEOUT``: run one service."""
    from snapstore.errors import SnapstoreError

    logging.basicConfig(level=logging.INFO, format="%(asctime)s service[%(process)d] %(message)s")
    try:
        Service(argv[0], idle_timeout=float(argv[1])).serve()
    except SnapstoreError as exc:
        sys.stderr.write(f"snapstore: error: {exc}\n")
        return exc.exit_code
    return 0
