"""The native thin client (``snapstore/service/cclient/``): build it with the system C compiler
and make it the ``snapstore`` on the PATH.

``python -m snapstore.service.native --install BIN_DIR`` (run by ``make setup``): when a C
compiler is there (``$CC``, else ``cc``), compiles the client with this installation's protocol
version tag and the path of the Python client it falls back to, moves pip's ``snapstore``
console script to ``snapstore-py`` and puts the native client in its place.  Why the swap rather
than a second name (Mercurial's ``chg``): agents' hooks, the MCP configurations and people all
run ``snapstore``; a client nobody calls saves nothing.  Without a compiler nothing changes
(the Python client serves every command, a few milliseconds slower) and it says so once.  A pip
reinstall writes the Python script back: the next ``make setup`` swaps again.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

SOURCE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cclient")
#: Portable C11 with no GNU extensions (docs/platforms.md).
FLAGS = ("-O2", "-Wall", "-Wextra", "-Wpedantic", "-std=c11")


def flags() -> tuple[str, ...]:
    """:data:`FLAGS`, and the portable branches on Linux too under ``SNAPSTORE_PLATFORM=portable``."""
    from snapstore import platform

    return FLAGS + (("-DSNAPSTORE_PORTABLE",) if platform.masked() else ())


def compiler() -> str | None:
    """The C compiler to use, or None when there is none."""
    name = os.environ.get("CC") or "cc"
    return shutil.which(name)


def build(out: str, python_client: str, cc: str | None = None, tag: str | None = None) -> None:
    """Compile the client to ``out`` (atomically), falling back to ``python_client``; ``tag``
    (tests) stands for this installation's protocol version tag.  Linked statically when the
    system's C library can be (every command starts it, and a static binary starts without
    the dynamic loader), else dynamically.

    Raises OSError (no compiler) or subprocess.CalledProcessError (it failed: its output says why).
    """
    from snapstore.service.protocol import version_tag

    cc = cc or compiler()
    if cc is None:
        raise OSError("no C compiler (set CC, or install cc)")
    with tempfile.TemporaryDirectory(prefix="snapstore-native.") as tmp:
        config = os.path.join(tmp, "config.h")
        with open(config, "w", encoding="utf-8") as f:
            # JSON strings are valid C string literals for these (the tag and a path).
            f.write(f"#define SNAPSTORE_VERSION_TAG {json.dumps(tag or version_tag(), ensure_ascii=False)}\n")
            f.write(f"#define SNAPSTORE_PYTHON_CLIENT {json.dumps(os.path.abspath(python_client), ensure_ascii=False)}\n")
        binary = os.path.join(tmp, "snapstore")
        argv = [cc, *flags(), "-include", config, "-o", binary, os.path.join(SOURCE_DIR, "snapstore.c")]
        try:  # linked statically where the C library allows: no dynamic loader at each start
            subprocess.run([*argv, "-static"], check=True, capture_output=True, text=True)
        except subprocess.CalledProcessError:  # (no static libc: glibc-static not installed, macOS)
            subprocess.run(argv, check=True, capture_output=True, text=True)
        staged = out + ".new"
        shutil.copyfile(binary, staged)
        os.chmod(staged, 0o755)
        os.replace(staged, out)


def is_script(path: str) -> bool:
    """Whether ``path`` is a script (``#!``): pip's console script, not the native client."""
    try:
        with open(path, "rb") as f:
            return f.read(2) == b"#!"
    except OSError:
        return False


def install(bin_dir: str) -> str:
    """Make the native client ``BIN_DIR/snapstore`` (see the module's docstring); what was done."""
    script, python_client = os.path.join(bin_dir, "snapstore"), os.path.join(bin_dir, "snapstore-py")
    if is_script(script):
        os.replace(script, python_client)  # pip's console script, kept as the fallback
    if not os.path.exists(python_client):
        return f"no Python client at {python_client}: the native client is not installed"
    try:
        build(script, python_client)
    except OSError as exc:
        shutil.copyfile(python_client, script + ".new")
        os.chmod(script + ".new", 0o755)
        os.replace(script + ".new", script)
        return f"{exc}: snapstore runs through its Python client (every command works, a few ms slower each)"
    except subprocess.CalledProcessError as exc:
        shutil.copyfile(python_client, script + ".new")
        os.chmod(script + ".new", 0o755)
        os.replace(script + ".new", script)
        return f"the native client did not compile ({exc.stderr.strip()[:500]}): snapstore runs through its Python client"
    return f"native client installed as {script} (it falls back to {python_client})"


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] != "--install":
        sys.stderr.write("usage: python -m snapstore.service.native --install BIN_DIR\n")
        return 2
    print(install(argv[1]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
