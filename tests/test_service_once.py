"""No command through the service is applied twice (issue 22 class 2).

A real service is SIGKILLed after doing a command's work and before answering (a test seam,
``SNAPSTORE_TEST_KILL_SERVICE=after-command``, forwarded by the client like every SNAPSTORE_
variable), or at a random moment during it: the client never runs the command again, says
what the store recorded, and the tree and the store agree with what it said.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import subprocess_env

from snapstore.errors import ServiceStoppedError
from snapstore.service import daemon
from snapstore.store import Store
from snapstore.testing import build_tree, read_tree

CLIENT = [sys.executable, "-c", "from snapstore.service.client import run; run()"]
KILL = {"SNAPSTORE_TEST_KILL_SERVICE": "after-command"}


def client(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(CLIENT + list(args), cwd=cwd, capture_output=True, env=subprocess_env(**env), timeout=120)


def local(*args: str, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "snapstore", *args], cwd=cwd, capture_output=True, env=subprocess_env(), timeout=120)


@pytest.fixture
def project(tmp_path: Path):  # type: ignore[no-untyped-def]
    root = tmp_path / "proj"
    build_tree(root, {"a.txt": b"one\n", "b.txt": b"bee\n"})
    with Store.init(root) as s:
        s.snapshot("first")
        (root / "a.txt").write_bytes(b"two\n")
        (root / "c.txt").write_bytes(b"new\n")
        s.snapshot("second")
    yield root
    daemon.stop(str(root / ".snapstore"))


def start(root: Path) -> int:
    info = daemon.start_detached(str(root / ".snapstore"), 60)
    return int(info["pid"])


def ops(root: Path) -> int:
    with Store.open(root) as s:
        return len(s.operations())


def test_an_undo_whose_answer_was_lost_is_not_undone_again(project: Path):
    assert local("restore", "latest~1", "-q", cwd=project).returncode == 0
    restored = read_tree(project)
    assert local("undo", "-q", cwd=project).returncode == 0
    undone = read_tree(project)
    assert undone != restored
    before = ops(project)
    start(project)
    done = client("undo", cwd=project, **KILL)  # undoes the undo: the restored tree again
    assert done.returncode == 0, done.stderr
    assert done.stderr.startswith(b"snapstore: the service stopped after the command finished: undo: operation")
    assert read_tree(project) == restored  # once; run twice it would be `undone` again
    assert ops(project) == before + 1


def test_an_edit_whose_answer_was_lost_is_not_applied_again(project: Path):
    start(project)
    done = client("edit", "b.txt", "--old", "bee", "--new", "bee\ninserted", cwd=project, **KILL)
    assert done.returncode == 0, done.stderr
    assert b"after the command finished: edit:" in done.stderr and b"b.txt written" in done.stderr
    assert (project / "b.txt").read_bytes() == b"bee\ninserted\n"


def test_a_restore_whose_answer_was_lost_records_one_operation(project: Path):
    before = ops(project)
    start(project)
    done = client("restore", "latest~1", cwd=project, **KILL)
    assert done.returncode == 0, done.stderr
    assert ops(project) == before + 1
    assert (project / "a.txt").read_bytes() == b"one\n"
    # ... and the next undo has something to undo (no empty operation recorded on top)
    assert local("undo", "-q", cwd=project).returncode == 0
    assert (project / "a.txt").read_bytes() == b"two\n"


def test_a_snapshot_whose_answer_was_lost_is_reported_not_repeated(project: Path):
    (project / "b.txt").write_bytes(b"changed\n")
    with Store.open(project) as s:
        count = len(s.checkpoints())
    start(project)
    done = client("snapshot", "-m", "third", cwd=project, **KILL)
    assert done.returncode == 0, done.stderr
    assert b"after the command finished: snapshot: checkpoint" in done.stderr
    with Store.open(project) as s:
        assert len(s.checkpoints()) == count + 1 and s.checkpoints()[0].message == "third"


def test_a_revert_whose_answer_was_lost_is_not_reverted_again(project: Path):
    start(project)
    done = client("revert", "latest", cwd=project, **KILL)
    assert done.returncode == 0, done.stderr
    assert (project / "a.txt").read_bytes() == b"one\n" and not (project / "c.txt").exists()
    with Store.open(project) as s:
        assert len(s.operations()) == 1


def test_a_read_only_command_is_run_again_here(project: Path):
    start(project)
    done = client("verify", "-q", cwd=project, **KILL)  # (prints nothing: nothing reached us)
    assert done.returncode == 0 and done.stderr == b"", done.stderr


def test_a_read_only_command_cut_short_says_so(project: Path):
    start(project)
    done = client("list", cwd=project, **KILL)  # its lines went out before the kill
    assert done.returncode == ServiceStoppedError.exit_code
    assert b"second" in done.stdout and b"may be incomplete" in done.stderr


STOPPED = ServiceStoppedError.exit_code


def kill_at(point: str) -> dict[str, str]:
    return {"SNAPSTORE_TEST_KILL_SERVICE": point}


def checkpoints(root: Path) -> int:
    with Store.open(root) as s:
        return len(s.checkpoints())


def test_an_edit_of_an_unchanged_tree_killed_after_its_write_is_not_applied_again(project: Path):
    """No checkpoint is recorded (the tree is unchanged since the last one): the write's own
    row, and the file, say the edit happened."""
    start(project)
    done = client("edit", "b.txt", "--old", "bee", "--new", "bee\ninserted", cwd=project, **kill_at("before-exit"))
    assert done.returncode == 0, done.stderr
    assert done.stderr.endswith(b"\nsnapstore: the service stopped after the command finished: edit: b.txt written; it is not run again\n")
    assert (project / "b.txt").read_bytes() == b"bee\ninserted\n"


def test_an_edit_killed_before_its_write_says_the_file_was_not_changed(project: Path):
    start(project)
    done = client("edit", "b.txt", "--old", "bee", "--new", "bee\ninserted", cwd=project, **kill_at("before-writing"))
    assert done.returncode == STOPPED, done.stderr
    assert b"before edit took effect; the file was not changed" in done.stderr
    assert (project / "b.txt").read_bytes() == b"bee\n"


def test_a_snapshot_killed_before_its_commit_is_taken_in_process(project: Path):
    """Nothing was recorded and the service is gone: the snapshot is taken here, once, and
    says so (tests/test_autostart.py: with the native client too)."""
    (project / "b.txt").write_bytes(b"changed\n")
    count = checkpoints(project)
    start(project)
    done = client("snapshot", "-m", "third", cwd=project, **kill_at("before-checkpoint"))
    assert done.returncode == 0, done.stderr
    assert done.stderr == b"snapstore: the service stopped before the snapshot took effect: taking it in this process\n"
    assert checkpoints(project) == count + 1


def test_an_unchanged_snapshot_whose_answer_was_lost_says_it_finished(project: Path):
    """It commits nothing, so its outcome gets a row of its own."""
    start(project)
    assert client("snapshot", "--skip-unchanged", cwd=project).returncode == 0
    count = checkpoints(project)
    done = client("snapshot", "--skip-unchanged", cwd=project, **KILL)
    assert done.returncode == 0, done.stderr
    assert done.stderr.startswith(b"snapstore: the service stopped after the command finished: snapshot: nothing to record")
    assert checkpoints(project) == count


def test_a_restore_killed_before_its_journal_left_the_tree_alone(project: Path):
    tree, before = read_tree(project), ops(project)
    start(project)
    done = client("restore", "latest~1", cwd=project, **kill_at("before-begun"))
    assert done.returncode == STOPPED
    assert b"before restore changed the tree; nothing in the tree was changed" in done.stderr
    assert read_tree(project) == tree and ops(project) == before


def test_a_restore_killed_in_the_middle_is_finished_by_recover(project: Path):
    with Store.open(project) as s:
        target = s.checkpoints()[1].id
    before = ops(project)
    start(project)
    done = client("restore", "latest~1", cwd=project, **kill_at("mid-restore"))
    assert done.returncode == STOPPED
    assert b"the service stopped in the middle of restore: its restore is partly applied" in done.stderr
    assert b"'snapstore recover'" in done.stderr
    assert local("recover", cwd=project).returncode == 0
    assert ops(project) == before + 1
    with Store.open(project) as s:
        assert s.diff(target) == []  # the tree is the target: finished, once


def test_a_revert_killed_before_it_touched_the_tree_changed_nothing(project: Path):
    tree, before = read_tree(project), ops(project)
    start(project)
    done = client("revert", "latest", cwd=project, **kill_at("before-begun"))
    assert done.returncode == STOPPED
    assert b"before revert changed the tree" in done.stderr and b"reverted tree as checkpoint" in done.stderr
    assert read_tree(project) == tree and ops(project) == before


def test_an_undo_with_nothing_to_undo_reports_its_own_outcome(project: Path):
    start(project)
    done = client("undo", cwd=project, **KILL)  # nothing restored yet: nothing to undo
    plain = local("undo", cwd=project)
    assert plain.returncode != 0
    assert done.returncode == plain.returncode, done.stderr
    assert b"after the command finished: undo: it recorded nothing" in done.stderr


@pytest.mark.slow
def test_random_kills_during_undo_never_apply_it_twice(project: Path):
    """The service is SIGKILLed at a random moment while it runs an undo: whatever the client
    says is true of the store and the tree, and the undo happened at most once."""
    rng = random.Random(7)
    big = {f"d/f{i}.txt": os.urandom(2000) for i in range(300)}
    build_tree(project, big)
    with Store.open(project) as s:
        s.snapshot("many files")
    assert local("restore", "latest~1", "-q", cwd=project).returncode == 0
    outcomes = {"finished": 0, "begun": 0, "nothing": 0, "answered": 0}
    for _ in range(20):
        state = read_tree(project)
        before = ops(project)
        pid = start(project)
        proc = subprocess.Popen(CLIENT + ["undo", "-q"], cwd=project, env=subprocess_env(),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        timer = threading.Timer(rng.uniform(0.0, 0.25), os.kill, (pid, signal.SIGKILL))
        timer.start()
        out, err = proc.communicate(timeout=120)
        timer.cancel()
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
        if b"partly applied" in err:
            outcomes["begun"] += 1
            assert proc.returncode == ServiceStoppedError.exit_code
            assert local("recover", cwd=project).returncode == 0
        elif b"nothing was changed" in err or b"nothing in the tree was changed" in err:
            outcomes["nothing"] += 1
            assert proc.returncode == ServiceStoppedError.exit_code
            assert read_tree(project) == state and ops(project) == before
            continue
        elif b"after the command finished" in err:
            outcomes["finished"] += 1
        else:
            outcomes["answered"] += 1
            assert proc.returncode == 0, err
        assert ops(project) == before + 1, (err, outcomes)  # exactly once
        assert read_tree(project) != state  # it did go back
    print("outcomes of the random kills:", outcomes)
    assert sum(outcomes.values()) == 20


POINTS = ["after-command", "before-exit", "before-checkpoint", "before-safety", "before-begun", "before-done",
          "before-writing", "before-reverted", "before-writes", "mid-restore", "timer", "timer"]
COMMANDS = ["undo", "restore", "revert", "edit", "snapshot"]


def _trial(project: Path, rng: random.Random, n: int) -> tuple[str, int, bytes]:
    """One command through a service killed at a random point; returns (command, exit, stderr)
    after checking what the client said against the tree and the store."""
    command = rng.choice(COMMANDS)
    point = rng.choice(POINTS)
    marker = f"mark{n}".encode()
    if command == "snapshot":
        (project / f"s{n}.txt").write_bytes(os.urandom(64))
    argv = {"undo": ["undo"], "restore": ["restore", "latest~1"], "revert": ["revert", "latest"],
            "edit": ["edit", "b.txt", "--old", "bee", "--new", f"bee\n{marker.decode()}"],
            "snapshot": ["snapshot", "-m", f"s{n}"]}[command]
    tree, before, cps = read_tree(project), ops(project), checkpoints(project)
    pid = start(project)
    env = subprocess_env(**({} if point == "timer" else kill_at(point)))
    proc = subprocess.Popen(CLIENT + argv, cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    timer = threading.Timer(rng.uniform(0.0, 0.3), os.kill, (pid, signal.SIGKILL)) if point == "timer" else None
    if timer:
        timer.start()
    _, err = proc.communicate(timeout=120)
    if timer:
        timer.cancel()
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    code, last = proc.returncode, (err.strip().splitlines() or [b""])[-1]
    lost = last.startswith(b"snapstore: the service stopped") or last.startswith(b"snapstore: error: the service stopped")
    if b"partly applied" in last:
        assert code == STOPPED
        assert local("recover", cwd=project).returncode == 0, "recover finishes what the message says"
    elif b"nothing was changed" in last or b"not changed" in last:
        assert code == STOPPED, last
        assert read_tree(project) == tree, (command, point, last)
        assert ops(project) == before
    # never applied twice
    assert ops(project) <= before + 1, (command, point, last)
    assert (project / "b.txt").read_bytes().count(marker) <= 1, (command, point, last)
    if command == "edit":
        assert ((project / "b.txt").read_bytes().count(marker) == 1) == (code == 0), (point, code, last)
    if command in ("undo", "restore") and code == 0:
        assert ops(project) == before + 1, (command, point, last)
    if command == "snapshot":
        assert checkpoints(project) == cps + (code == 0), (point, code, last)
    if not lost:
        assert code != STOPPED, last
    return command, code, last


@pytest.mark.slow
def test_random_kills_of_every_kind_of_command(project: Path):
    """30 trials: a random command (undo, restore, revert, edit, snapshot) through a service
    SIGKILLed at a random named point or after a random delay.  Whatever the client says is
    true of the tree and the store, nothing is applied twice, and an edit's line is in the file
    exactly when the client said 0."""
    build_tree(project, {f"d/f{i}.txt": os.urandom(2000) for i in range(200)})
    with Store.open(project) as s:
        s.snapshot("many files")
    assert local("restore", "latest~1", "-q", cwd=project).returncode == 0
    rng = random.Random(int(os.environ.get("SNAPSTORE_TRIAL_SEED", "22")))
    seen: dict[str, int] = {}
    for n in range(30):
        (project / "b.txt").write_bytes(b"bee\n")  # each edit has its own marker to find twice
        command, code, last = _trial(project, rng, n)
        kind = "answered" if not last.startswith(b"snapstore: ") else last.split(b":")[1].decode() if b"error" in last else "finished"
        seen[f"{command}/{kind}/{code}"] = seen.get(f"{command}/{kind}/{code}", 0) + 1
    print("outcomes:", sorted(seen.items()))
    assert sum(seen.values()) == 30


def _request(project: Path, argv: list[str]) -> dict[str, object]:
    """A request as the client builds it."""
    from snapstore.service import protocol

    return {"v": protocol.version_tag(), "id": os.urandom(16).hex(), "command": argv[0], "argv": argv,
            "cwd": str(project), "env": {}, "store": str(project / ".snapstore"), "encoding": "utf-8", "errors": "strict"}


def test_a_request_whose_client_gave_up_before_the_acknowledgement_is_never_run(project: Path):
    """The client's wait for the acknowledgement timed out just as it arrived: the client runs
    the command itself, so the service must not (it runs only after the client's "go")."""
    from snapstore.service import protocol

    start(project)
    with protocol.connect(str(project / ".snapstore" / protocol.SOCKET_NAME), 5) as sock:
        protocol.send_frame(sock, b"r", protocol.encode_request(_request(project, ["edit", "b.txt", "--old", "bee", "--new", "bee\nlate"])))
        ack = protocol.recv_frame(sock)
        assert ack is not None and ack[0] == b"a"
    # the service is free again only once it has dealt with that request
    assert client("list", cwd=project).returncode == 0
    assert (project / "b.txt").read_bytes() == b"bee\n"


def test_a_service_that_was_stopped_never_runs_what_its_client_ran_itself(project: Path):
    """A service frozen (SIGSTOP) past the client's second: the client runs the edit in-process;
    when the service wakes up it finds the queued request, and does not run it again."""
    pid = start(project)
    os.kill(pid, signal.SIGSTOP)
    try:
        done = client("edit", "b.txt", "--old", "bee", "--new", "bee\nonce", cwd=project)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert done.returncode == 0, done.stderr
    assert client("list", cwd=project).returncode == 0  # served after the queued request
    assert (project / "b.txt").read_bytes() == b"bee\nonce\n"


def test_a_delete_killed_after_its_write_is_not_called_a_no_op(project: Path):
    """delete records no stage of its own: the stamp on its transaction is what tells the
    client that it changed the store (without it: "nothing was changed", which is false)."""
    count = checkpoints(project)
    start(project)
    done = client("delete", "latest~1", cwd=project, **kill_at("before-exit"))
    assert done.returncode == STOPPED
    assert b"the service stopped in the middle of delete, after it had changed the store" in done.stderr, done.stderr
    assert checkpoints(project) == count - 1


def test_a_delete_killed_before_its_write_changed_nothing(project: Path):
    count = checkpoints(project)
    start(project)
    done = client("delete", "latest~1", cwd=project, **kill_at("before-writes"))
    assert done.returncode == STOPPED
    assert b"before delete took effect; nothing was changed" in done.stderr, done.stderr
    assert checkpoints(project) == count


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the mapping scan reads /proc")
def test_a_checkpoints_mapping_scan_is_made_while_its_client_confirms(project: Path):
    """The service scans the mappings between its acknowledgement and the client's "go" (the
    scan overlaps the client's round trip) and the checkpoint takes that scan, not a second
    one; a request whose client gave up leaves no scan behind for a later checkpoint."""
    import mmap

    from snapstore.service import protocol
    from snapstore.service.server import Service

    service = Service(str(project / ".snapstore"), idle_timeout=60)
    serving = threading.Thread(target=service.serve, daemon=True)
    serving.start()
    sock_path = str(project / ".snapstore" / protocol.SOCKET_NAME)
    try:
        for _ in range(100):
            if os.path.exists(sock_path):
                break
            time.sleep(0.05)
        assert client("snapshot", "-q", "-m", "watching", cwd=project).returncode == 0  # (a walk)
        watcher = service.store.context.watcher
        assert watcher is not None
        with open(project / "b.txt", "r+b") as f, mmap.mmap(f.fileno(), 0) as m:
            m[:3] = b"BEE"  # written through a shared mapping: no event names it
            scans = watcher.mapping_scans
            with protocol.connect(sock_path, 5) as sock:
                protocol.send_frame(sock, b"r", protocol.encode_request(_request(project, ["snapshot", "-q", "-m", "mapped"])))
                ack = protocol.recv_frame(sock)
                assert ack is not None and ack[0] == b"a"
                time.sleep(0.5)
                assert watcher.mapping_scans == scans + 1  # made before the go
                protocol.send_frame(sock, b"g", b"")
                frames = []
                while not frames or frames[-1][0] != b"x":
                    frame = protocol.recv_frame(sock)
                    assert frame is not None
                    frames.append(frame)
                assert frames[-1] == (b"x", b"0"), frames
            assert watcher.mapping_scans == scans + 1  # the checkpoint took it
            with Store.open(project) as store:
                assert store.read_bytes("latest", "b.txt") == b"BEE\n"
            with protocol.connect(sock_path, 5) as sock:  # a client that gives up after the ack
                protocol.send_frame(sock, b"r", protocol.encode_request(_request(project, ["snapshot", "-q", "-m", "never"])))
                ack = protocol.recv_frame(sock)
                assert ack is not None and ack[0] == b"a"
            time.sleep(0.5)
            assert not watcher.scan_begun() and watcher.mapping_scans == scans + 2
    finally:
        service._stop = True
        serving.join(30)
