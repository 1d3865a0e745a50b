"""The four contestants, each with its own store over the same working tree.

- ``snap-cli``: ``snapstore`` processes (store outside the tree, ``--store DIR``).
- ``git-cli``: a shadow git driven as Cline drives it: a separate GIT_DIR whose core.worktree is
  the tree; checkpoint = ``git add -A`` + ``git commit -q --allow-empty --no-verify``.
- ``snap-lib``: ``snapstore.Store`` calls in a child Python process (benchmarks.worker).
- ``snap-svc``: the ``snap-cli`` commands with the store's resident service running
  (``snapstore serve --detach``), so each command is a thin client's round trip.
- ``snap-watch``: ``snap-lib`` with ``Store.open(..., watch=True)`` (the inotify watcher).
- ``pygit2``: libgit2 calls in a child Python process (benchmarks.worker).

Every operation returns ``(seconds, peak RSS KiB)`` or raises :class:`NotBuilt`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

from .measure import disk_bytes, output, run


class NotBuilt(Exception):
    """The operation does not exist (yet) in this contestant."""


class OpFailed(RuntimeError):
    pass


# Set by run.py --snapstore-at REV: a directory holding an exported ``snapstore`` package, used
# instead of the checkout (which others may be editing while the benchmark runs).
SNAPSTORE_SRC: str | None = None


#: Contestants whose restores leave the tree's ``syncfs`` to a flusher thread within
#: ``lmdb_durability.FLUSH_DELAY`` (durability ``normal`` in a watching Store: the service, a
#: library loop with ``watch=True``).
DEFERS_SYNC = ("snap-svc", "snap-auto", "snap-watch")


def let_sync_settle(name: str) -> None:
    """After a timed restore by ``name``, wait (untimed) for the sync it left for later, so it
    lands on no other contestant's timed operation (it is off the restore's critical path, not
    free: an agent's next step, a second later, is what it overlaps in real use)."""
    if name in DEFERS_SYNC:
        import time

        time.sleep(1.5)


def snap_env() -> dict[str, str]:
    # An installed snapstore runs from cached bytecode (pip compiles it at install time); a
    # machine-wide PYTHONDONTWRITEBYTECODE would make every CLI process recompile every module
    # and measure the compiler, not snapstore.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    if SNAPSTORE_SRC is not None:
        # No empty entry: an empty PYTHONPATH element is the cwd (the tree, a stdlib copy that
        # the edits change), which -P does not remove.
        env["PYTHONPATH"] = os.pathsep.join(p for p in (SNAPSTORE_SRC, env.get("PYTHONPATH", "")) if p)
    return env


def _package_dir() -> str:
    if SNAPSTORE_SRC is not None:
        return os.path.join(SNAPSTORE_SRC, "snapstore")
    import snapstore

    return os.path.dirname(snapstore.__file__)


def has_service() -> bool:
    """Whether the snapstore under test has the resident service (``snapstore serve``)."""
    client = os.path.join(_package_dir(), "service", "client")  # a module, then a package (issue 39)
    return os.path.exists(client + ".py") or os.path.exists(os.path.join(client, "__init__.py"))


def has_watch() -> bool:
    """Whether the snapstore under test has ``Store.open(..., watch=True)``."""
    try:
        with open(os.path.join(_package_dir(), "store.py")) as f:
            return "watch: bool" in f.read()
    except OSError:
        return False


def snapstore_argv() -> list[str]:
    if SNAPSTORE_SRC is not None:  # -P: the cwd (the tree, a stdlib copy) must not go on sys.path
        if has_service():  # (service/client.py, a package since issue 39: both looked for)
            # what the console script runs: the thin client, which asks a running service
            return [sys.executable, "-P", "-c", "from snapstore.service.client import run; run()"]
        return [sys.executable, "-P", "-m", "snapstore"]
    exe = os.path.join(os.path.dirname(sys.executable), "snapstore")
    return [exe] if os.path.exists(exe) else [sys.executable, "-m", "snapstore"]


def git_env(gitdir: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(GIT_DIR=gitdir, LC_ALL="C", GIT_CONFIG_NOSYSTEM="1", GIT_TERMINAL_PROMPT="0")
    env.pop("GIT_WORK_TREE", None)
    env.pop("GIT_INDEX_FILE", None)
    return env


def init_shadow_git(gitdir: str, tree: str) -> None:
    env = git_env(gitdir)
    output(["git", "init", "-q", "--bare", gitdir], env=env)
    settings = {
        "core.bare": "false",
        "core.worktree": tree,
        "user.name": "bench",
        "user.email": "bench@example.invalid",
        "commit.gpgsign": "false",
        # Auto gc would pack (detached, in the background) in the middle of the measurements.
        "gc.auto": "0",
        "maintenance.auto": "false",
    }
    for key, value in settings.items():
        output(["git", "config", key, value], env=env)


class SnapCLI:
    name = "snap-cli"
    family = "snapstore"

    def __init__(self, tree: str, store: str):
        self.tree, self.store = tree, store
        self.argv = snapstore_argv()
        self._help: dict[str, str | None] = {}

    def _cmd(self, *args: str) -> list[str]:
        return [*self.argv, "--store", self.store, *args]

    def setup(self) -> None:
        shutil.rmtree(self.store, ignore_errors=True)
        run([*self.argv, "init", "--store", self.store, "-q"], cwd=self.tree, env=snap_env())

    def help_text(self, command: str) -> str | None:
        if command not in self._help:
            res = subprocess.run([*self.argv, command, "--help"], capture_output=True, text=True,
                                 env=snap_env())
            self._help[command] = res.stdout if res.returncode == 0 else None
        return self._help[command]

    def checkpoint(self, msg: str):
        p = run(self._cmd("snapshot", "-m", msg, "-q"), cwd=self.tree, env=snap_env())
        return p.seconds, p.rss_kib

    def latest(self) -> dict:
        doc = json.loads(output(self._cmd("list", "--json", "-n", "1"), cwd=self.tree, env=snap_env()))
        return doc["checkpoints"][0]

    def latest_id(self) -> str:
        return self.latest()["id"]

    def restore(self, ref: str):
        text = self.help_text("restore")
        if text is None:
            raise NotBuilt("snapstore restore")
        extra = [flag for flag in ("--yes", "--quiet") if flag in text]
        p = run(self._cmd("restore", ref, *extra), cwd=self.tree, env=snap_env())
        return p.seconds, p.rss_kib

    def diff(self, a: str, b: str):
        text = self.help_text("diff")
        if text is None or "--stat" not in text:
            raise NotBuilt("snapstore diff --stat")
        p = run(self._cmd("diff", a, b, "--stat"), cwd=self.tree, ok=(0, 1), env=snap_env())
        return p.seconds, p.rss_kib

    def status(self):
        if self.help_text("diff") is None:
            raise NotBuilt("snapstore diff")
        p = run(self._cmd("diff"), cwd=self.tree, ok=(0, 1), env=snap_env())
        return p.seconds, p.rss_kib

    def disk_bytes(self) -> int:
        return disk_bytes(self.store)

    def retention(self, keep_last: int) -> float:
        """`prune --keep-last N` then `gc --compact`; returns the seconds both took."""
        a = run(self._cmd("prune", "--keep-last", str(keep_last), "-q"), cwd=self.tree, env=snap_env())
        b = run(self._cmd("gc", "--compact", "-q"), cwd=self.tree, env=snap_env())
        return a.seconds + b.seconds

    def close(self) -> None:
        pass


class SnapSvc(SnapCLI):
    """``snapstore`` processes answered by the store's resident service.

    The service is started after the initial checkpoint (``start_service``) and stopped at the
    end; ``requests()`` reads ``serve --status`` so the harness can check the commands really
    went through it (a client silently falling back would measure snap-cli twice).
    """

    name = "snap-svc"

    def __init__(self, tree: str, store: str):
        super().__init__(tree, store)
        self.pid: int | None = None
        self.supported: bool | None = None

    def start_service(self) -> None:
        if self.help_text("serve") is None:
            self.supported = False
            return
        run(self._cmd("serve", "--detach", "--idle-timeout", "7200"), cwd=self.tree, env=snap_env())
        self.supported = True
        self.pid = self.service_status().get("pid")

    def service_status(self) -> dict:
        if not self.supported:
            return {}
        res = subprocess.run(self._cmd("serve", "--status"), cwd=self.tree, env=snap_env(),
                             capture_output=True, text=True)
        return json.loads(res.stdout) if res.returncode == 0 and res.stdout.strip() else {}

    def requests(self) -> int | None:
        doc = self.service_status()
        return int(doc["requests"]) if "requests" in doc else None

    def service_peak_rss_kib(self) -> int | None:
        """VmHWM of the service process (the clients' RSS is only the thin client's)."""
        if self.pid is None:
            return None
        try:
            with open(f"/proc/{self.pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1])
        except OSError:
            return None
        return None

    def _require(self) -> None:
        if self.supported is False:  # (None: before start_service, e.g. the initial checkpoint)
            raise NotBuilt("snapstore serve")

    def checkpoint(self, msg: str):
        self._require()
        return super().checkpoint(msg)

    def restore(self, ref: str):
        self._require()
        return super().restore(ref)

    def diff(self, a: str, b: str):
        self._require()
        return super().diff(a, b)

    def status(self):
        self._require()
        return super().status()

    def stop_service(self) -> None:
        if self.supported:
            subprocess.run(self._cmd("serve", "--stop"), cwd=self.tree, env=snap_env(), capture_output=True)
        self.pid = None


class GitCLI:
    name = "git-cli"
    family = "git"

    def __init__(self, tree: str, gitdir: str):
        self.tree, self.gitdir = tree, gitdir
        self.env = git_env(gitdir)

    def setup(self) -> None:
        shutil.rmtree(self.gitdir, ignore_errors=True)
        init_shadow_git(self.gitdir, self.tree)

    def _git(self, *args: str, ok=(0,)):
        return run(["git", *args], cwd=self.tree, env=self.env, ok=ok)

    def checkpoint(self, msg: str):
        a = self._git("add", "-A")
        b = self._git("commit", "-q", "--allow-empty", "--no-verify", "-m", msg)
        return a.seconds + b.seconds, max(a.rss_kib, b.rss_kib)

    def latest_id(self) -> str:
        return output(["git", "rev-parse", "HEAD"], cwd=self.tree, env=self.env).strip()

    def restore(self, ref: str):
        a = self._git("reset", "-q", "--hard", ref)
        b = self._git("clean", "-fdq")
        return a.seconds + b.seconds, max(a.rss_kib, b.rss_kib)

    def diff(self, a: str, b: str):
        p = self._git("diff", "--stat", a, b)
        return p.seconds, p.rss_kib

    def status(self):
        p = self._git("status", "--porcelain")
        return p.seconds, p.rss_kib

    def disk_bytes(self) -> int:
        return disk_bytes(os.path.join(self.gitdir, "objects"))

    def gc_bytes(self) -> tuple[int, float]:
        """Objects bytes after ``git gc`` (on a copy, so the measured repository stays as is)."""
        with tempfile.TemporaryDirectory(dir=os.path.dirname(self.gitdir)) as tmp:
            copy = os.path.join(tmp, "git")
            shutil.copytree(self.gitdir, copy, symlinks=True)
            p = run(["git", "gc", "-q"], cwd=self.tree, env=git_env(copy))
            return disk_bytes(os.path.join(copy, "objects")), p.seconds

    def close(self) -> None:
        pass


class LibWorker:
    """A child process making in-process library calls (snapstore.Store or pygit2)."""

    def __init__(self, kind: str, tree: str, store: str):
        self.kind, self.tree, self.store = kind, tree, store
        self.name = {"snap": "snap-lib", "snapwatch": "snap-watch"}.get(kind, "pygit2")
        self.family = "git" if kind == "pygit2" else "snapstore"
        self.proc: subprocess.Popen | None = None
        self._caps: dict | None = None
        self.last: dict = {}

    def setup(self) -> None:
        self.close()
        if self.kind != "pygit2":
            shutil.rmtree(self.store, ignore_errors=True)
            run([*snapstore_argv(), "init", "--store", self.store, "-q"], cwd=self.tree, env=snap_env())
        else:
            shutil.rmtree(self.store, ignore_errors=True)
            init_shadow_git(self.store, self.tree)

    def start(self) -> None:
        """(Re)start the child, so its peak RSS covers one scenario."""
        self.close()
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (SNAPSTORE_SRC, here, env.get("PYTHONPATH", "")) if p
        )
        env.pop("GIT_DIR", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-P", "-m", "benchmarks.worker", self.kind, self.tree, self.store],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=here,  # not the tree: ``-m`` puts the cwd first on sys.path (the tree is a stdlib)
        )

    def _call(self, **req) -> dict:
        if self.proc is None:
            self.start()
        assert self.proc and self.proc.stdin and self.proc.stdout
        try:
            self.proc.stdin.write(json.dumps(req) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except OSError as exc:
            raise OpFailed(f"{self.name} worker died before {req['op']}: {exc}") from exc
        if not line:
            raise OpFailed(f"{self.name} worker died during {req['op']}")
        res = json.loads(line)
        if "na" in res:
            raise NotBuilt(res["na"])
        if "error" in res:
            raise OpFailed(f"{self.name} {req['op']}: {res['error']}")
        self.last = res
        return res

    def rss_kib(self) -> int:
        return self._call(op="rss")["rss_kib"]

    def checkpoint(self, msg: str):
        return self._call(op="checkpoint", msg=msg)["t"], None

    def latest_id(self) -> str:
        return self.last["id"]

    def restore(self, ref: str):
        return self._call(op="restore", ref=ref)["t"], None

    def diff(self, a: str, b: str):
        return self._call(op="diff", a=a, b=b)["t"], None

    def status(self):
        return self._call(op="status")["t"], None

    def disk_bytes(self) -> int:
        return disk_bytes(os.path.join(self.store, "objects") if self.kind == "pygit2" else self.store)

    def close(self) -> None:
        if self.proc is not None:
            try:
                if self.proc.stdin:
                    self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
                    self.proc.stdin.close()
                self.proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
            if self.proc.stdout:
                self.proc.stdout.close()
            self.proc = None
