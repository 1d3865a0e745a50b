"""The usual installs get the native client (issue 43 req 3): the sdist carries the C client's
source, the wheel built from that sdist carries it too, and a fresh environment with the wheel
installed builds the native client at the first run of ``snapstore``, which then answers
through the service without the Python client; with no compiler it says so once and the Python
client serves.

The wheel's dependencies come from this checkout's environment (a ``.pth`` line in the fresh
one), so the test needs no index for them; building the sdist and wheel is an isolated build
(as pip, pipx and uv do it), which fetches the build backend once into pip's cache.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

from snapstore.service import native

REPO = Path(__file__).resolve().parent.parent
C_SOURCES = ("snapstore/service/cclient/snapstore.c", "snapstore/service/cclient/frames.h")


def _copy_checkout(to: Path) -> None:
    """The files git tracks (the checkout as a user would have it), or the tree without .venv."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=REPO, capture_output=True)  # fmt: skip
    if listed.returncode != 0:
        shutil.copytree(REPO, to, ignore=shutil.ignore_patterns(".venv", ".git", "build", "*.egg-info"))
        return
    for name in filter(None, listed.stdout.split(b"\0")):
        rel = os.fsdecode(name)
        if (REPO / rel).is_file():
            (to / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, to / rel)


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The sdist and the wheel built from it (``python -m build``: the wheel from the sdist)."""
    where = tmp_path_factory.mktemp("dist")
    src = where / "src"
    _copy_checkout(src)
    out = where / "out"
    done = subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(src)],
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    if done.returncode != 0 and "Could not find a version" in done.stdout + done.stderr:
        pytest.skip("the build backend cannot be fetched (no package index reachable)")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return {"sdist": next(out.glob("*.tar.gz")), "wheel": next(out.glob("*.whl"))}


def fresh_env(where: Path, wheel: Path) -> Path:
    """A new venv with the wheel installed (its dependencies from this environment); its bin."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    python = where / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps", str(wheel)],
                   check=True, capture_output=True)  # fmt: skip
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()  # fmt: skip
    Path(site, "snapstore-test-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return where / "bin"


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SNAPSTORE_", "PYTHON"))}
    env.update(extra)
    return env


def is_script(path: Path) -> bool:
    return path.read_bytes()[:2] == b"#!"


def test_the_sdist_and_the_wheel_carry_the_c_client(dist: dict[str, Path]):
    with tarfile.open(dist["sdist"]) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    assert set(C_SOURCES) <= names
    with zipfile.ZipFile(dist["wheel"]) as whl:
        assert set(C_SOURCES) <= set(whl.namelist())
        entry_points = next(n for n in whl.namelist() if n.endswith("entry_points.txt"))
        scripts = whl.read(entry_points).decode()
    assert "snapstore = snapstore.service.client:run" in scripts
    assert "snapstore-py = snapstore.service.client:run" in scripts


@pytest.mark.skipif(native.compiler() is None, reason="no C compiler (cc): the native client cannot be built")
def test_the_first_run_builds_the_native_client_which_answers_through_the_service(dist: dict[str, Path], tmp_path: Path):
    bin_dir = fresh_env(tmp_path / "venv", dist["wheel"])
    snapstore, python_client = bin_dir / "snapstore", bin_dir / "snapstore-py"
    assert is_script(snapstore)  # as pip wrote it
    tree = tmp_path / "proj"
    tree.mkdir()
    (tree / "a.txt").write_text("alpha\n")
    first = subprocess.run([str(snapstore), "init"], cwd=tree, capture_output=True, text=True, env=clean_env(), timeout=300)
    assert first.returncode == 0 and first.stderr == "", first.stderr  # built silently
    assert not is_script(snapstore) and is_script(python_client)  # the native client took the name
    run = lambda *a: subprocess.run([str(snapstore), *a], cwd=tree, capture_output=True, text=True, env=clean_env(), timeout=120)  # noqa: E731
    assert run("snapshot", "-m", "one").returncode == 0
    assert run("serve", "--detach").returncode == 0
    try:
        # With the Python client gone, only the native client and the service can answer.
        python_client.rename(bin_dir / "away")
        try:
            listed = run("list")
        finally:
            (bin_dir / "away").rename(python_client)
        assert listed.returncode == 0 and "one" in listed.stdout, listed.stderr
    finally:
        run("serve", "--stop")


def test_without_a_compiler_it_says_so_once_and_the_python_client_serves(dist: dict[str, Path], tmp_path: Path):
    bin_dir = fresh_env(tmp_path / "venv", dist["wheel"])
    snapstore = bin_dir / "snapstore"
    tree = tmp_path / "proj"
    tree.mkdir()
    env = clean_env(CC=str(tmp_path / "no-such-cc"))
    first = subprocess.run([str(snapstore), "init"], cwd=tree, capture_output=True, text=True, env=env, timeout=300)
    assert first.returncode == 0
    assert "no C compiler" in first.stderr and "snapstore.service.native --install" in first.stderr
    assert is_script(snapstore)
    again = subprocess.run([str(snapstore), "list"], cwd=tree, capture_output=True, text=True, env=env, timeout=120)
    assert again.returncode == 0 and again.stderr == ""  # said once
