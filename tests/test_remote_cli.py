"""The remote commands end to end (in-process CLI), and what they cost at start-up."""

from __future__ import annotations

import json
import subprocess
import sys

from helpers import subprocess_env
from remote_helpers import make_store, sample_tree

from snapstore.testing import assert_trees_equal, read_tree


def test_version_and_help_never_import_obstore():
    code = (
        "import sys\n"
        "from snapstore.service.client import _main\n"
        "_main(['--version'])\n"
        "from snapstore.cli import main\n"
        "main(['--help']); main(['remote', '--help']); main(['push', '--help'])\n"
        "print('obstore' in sys.modules, 'snapstore.remote.transport' in sys.modules)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, env=subprocess_env(), timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode().strip().splitlines()[-1] == "False False"


def test_push_clone_pull_through_the_cli(remote, tmp_path, run_cli):
    with make_store(tmp_path / "a", sample_tree("a")) as a:
        a.snapshot("first", task="feature")
    cwd = tmp_path / "a"
    assert run_cli("remote", "add", "origin", remote.url, *remote.cli_args(), cwd=cwd).code == 0
    r = run_cli("push", "--task", "feature", "--json", cwd=cwd)
    assert r.code == 0, r.err
    pushed = json.loads(r.text)
    assert pushed["ref"] == "feature" and pushed["ref_outcome"] == "moved"
    r = run_cli("remote", "ls", "--json", cwd=cwd)
    assert [row["ref"] for row in json.loads(r.text)] == ["feature"]
    r = run_cli("clone", remote.url, str(tmp_path / "b"), *remote.cli_args())
    assert r.code == 0, r.err
    assert_trees_equal(read_tree(cwd), read_tree(tmp_path / "b"))
    # A change pushed from the clone (a fast-forward) is pulled back into the first tree.
    (tmp_path / "b" / "README.md").write_bytes(b"edited on the other machine\n")
    assert run_cli("snapshot", "-m", "from b", "--task", "feature", cwd=tmp_path / "b").code == 0
    r = run_cli("push", "--task", "feature", cwd=tmp_path / "b")
    assert r.code == 0 and "ref feature: moved" in r.text, r.text + r.err
    r = run_cli("pull", "feature", cwd=cwd)
    assert r.code == 0, r.err
    assert (cwd / "README.md").read_bytes() == b"edited on the other machine\n"
    assert run_cli("remote", "verify", cwd=cwd).code == 0


def test_a_diverged_push_exits_9_and_force_moves_the_ref(remote, tmp_path, run_cli):
    for name in ("a", "b"):
        with make_store(tmp_path / name, sample_tree(name)) as s:
            s.snapshot(name)
        assert run_cli("remote", "add", "origin", remote.url, *remote.cli_args(), cwd=tmp_path / name).code == 0
    assert run_cli("push", cwd=tmp_path / "a").code == 0
    r = run_cli("push", cwd=tmp_path / "b")
    assert r.code == 9 and "not moved" in r.err
    assert run_cli("push", "--force", cwd=tmp_path / "b").code == 0


def test_remote_list_and_remove(tmp_path, run_cli):
    with make_store(tmp_path / "a", {"a.txt": b"a"}) as a:
        a.snapshot("first")
    cwd = tmp_path / "a"
    assert run_cli("remote", "add", "origin", "s3://bucket/team", "--endpoint", "https://s3.example", cwd=cwd).code == 0
    assert run_cli("remote", "add", "origin", "s3://other", cwd=cwd).code == 2
    assert run_cli("remote", "add", "bad", "ftp://x", cwd=cwd).code == 2
    assert run_cli("remote", "add", "creds", "s3://KEY:SECRET@bucket", cwd=cwd).code == 2
    listed = json.loads(run_cli("remote", "list", "--json", cwd=cwd).text)
    assert [(r["name"], r["url"], r["endpoint"]) for r in listed] == [("origin", "s3://bucket/team", "https://s3.example")]
    assert run_cli("remote", "remove", "origin", cwd=cwd).code == 0
    assert json.loads(run_cli("remote", "list", "--json", cwd=cwd).text) == []
    assert run_cli("push", cwd=cwd).code == 2  # no remote named origin


def test_reading_commands_read_a_remote_through_its_cache(remote, tmp_path, run_cli):
    with make_store(tmp_path / "a", sample_tree("a")) as a:
        first = a.snapshot("first", task="t")
        (tmp_path / "a" / "README.md").write_bytes(b"second version\n")
        second = a.snapshot("second", task="t")
        remote.add_to(a)
        a.push(task="t")
    with make_store(tmp_path / "b", {"mine.txt": b"mine\n"}) as b:
        b.snapshot("local")
    cwd = tmp_path / "b"
    assert run_cli("remote", "add", "origin", remote.url, *remote.cli_args(), cwd=cwd).code == 0
    listed = json.loads(run_cli("list", "--remote", "origin", "--json", cwd=cwd).text)["checkpoints"]
    assert [c["id"] for c in listed] == [second.id, first.id]
    r = run_cli("cat", "--remote", "origin", first.id, "README.md", cwd=cwd)
    assert r.code == 0 and r.out == sample_tree("a")["README.md"]
    r = run_cli("show", "--remote", "origin", second.id, "--json", cwd=cwd)
    assert r.code == 0 and json.loads(r.text)["id"] == second.id
    r = run_cli("log", "--remote", "origin", "README.md", "--json", cwd=cwd)
    assert r.code == 0 and len(json.loads(r.text)["versions"]) == 2
    r = run_cli("diff", "--remote", "origin", first.id, second.id, "--json", cwd=cwd)
    assert r.code == 1 and [c["path"] for c in json.loads(r.text)["changes"]] == ["README.md"]
    assert run_cli("diff", "--remote", "origin", cwd=cwd).code == 2
    # The store itself is untouched: its own list still has only its own checkpoint.
    own = json.loads(run_cli("list", "--json", cwd=cwd).text)["checkpoints"]
    assert [c["message"] for c in own] == ["local"]
    assert (cwd / ".snapstore" / "remote-cache").is_dir()
    assert run_cli("remote", "remove", "origin", cwd=cwd).code == 0
    assert list((cwd / ".snapstore" / "remote-cache").iterdir()) == []


def test_remote_commands_never_go_through_the_service(tmp_path, monkeypatch):
    from snapstore.service.client import _target

    with make_store(tmp_path / "a", {"a.txt": b"a"}) as a:
        a.snapshot("first")
    monkeypatch.chdir(tmp_path / "a")
    assert _target(["list"]) is not None  # (a plain read may go to a running service)
    for argv in (["list", "--remote", "origin"], ["cat", "--remote=origin", "latest", "a.txt"],
                 ["push"], ["fetch"], ["pull"], ["remote", "ls"], ["clone", "s3://b/p", "x"]):
        assert _target(argv) is None, argv
