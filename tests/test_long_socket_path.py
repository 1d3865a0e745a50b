"""A store whose service socket path is longer than ``sun_path`` (104-108 bytes) is served, by
the Python client and by the native client, with the Linux facilities and without them
(snapstore.platform.unix: /proc/self/fd on Linux; a private symlink, or ``fchdir`` in the C
client, elsewhere)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import subprocess_env

from snapstore.platform import SWITCH
from snapstore.service import daemon, native
from snapstore.store import Store
from snapstore.testing import build_tree


@pytest.fixture(params=["linux", "portable"])
def long_tree(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    if request.param == "portable":
        monkeypatch.setenv(SWITCH, "portable")
    else:
        monkeypatch.delenv(SWITCH, raising=False)
    root = tmp_path / ("deep-" * 12) / "project"
    build_tree(root, {"a.txt": b"alpha\n"})
    with Store.init(root) as s:
        s.snapshot("first")
    store_dir = str(root / ".snapstore")
    assert len(os.fsencode(os.path.join(store_dir, "service.sock"))) > 110
    daemon.start_detached(store_dir, 60)
    yield root
    daemon.stop(store_dir)


def served(root: Path) -> int:
    info = daemon.status(str(root / ".snapstore"))  # (the Python client's connect, long path and all)
    assert info is not None
    return int(info["requests"])


def test_the_python_client_reaches_a_service_with_a_long_socket_path(long_tree: Path):
    before = served(long_tree)
    client = "from snapstore.service.client import run; run()"
    done = subprocess.run([sys.executable, "-c", client, "list"], cwd=long_tree, capture_output=True,
                          text=True, env=subprocess_env(), timeout=120)  # fmt: skip
    assert done.returncode == 0 and "first" in done.stdout, done.stderr
    assert served(long_tree) == before + 1


@pytest.mark.skipif(native.compiler() is None, reason="no C compiler (cc): the native client cannot be built")
def test_the_native_client_reaches_a_service_with_a_long_socket_path(long_tree: Path, tmp_path: Path):
    client = tmp_path / "snapstore"
    native.build(str(client), "/bin/false")  # (a fallback to the Python client would fail)
    before = served(long_tree)
    done = subprocess.run([str(client), "list"], cwd=long_tree, capture_output=True, text=True,
                          env=subprocess_env(), timeout=120)  # fmt: skip
    assert done.returncode == 0 and "first" in done.stdout, done.stderr
    assert served(long_tree) == before + 1
