"""The native client of a ``pip``/``pipx``/``uv tool`` install, built at its first run.

A wheel carries the native client's C source (snapstore/service/cclient/), not a binary: a
binary would tie it to one system and one path of the Python client.  The package installs two
console scripts, ``snapstore`` and ``snapstore-py`` (the same Python client); the first time
``snapstore`` itself runs, :func:`ensure_native` compiles the C client (``$CC`` or ``cc``) and
puts it in place of that script (:func:`snapstore.service.native.install`), falling back to
``snapstore-py``; the command then runs as usual.  Every later ``snapstore`` is the native
client.  With no compiler it says so once (a marker file beside the scripts) and the Python
client serves every command.  The check costs a few ``stat`` calls, in the Python client only.

Where the scripts are is found from the running script's real path, so the native client
lands in the environment that pip made (``pipx``/``uv tool`` link their ``~/.local/bin``
entries to it) and leaves with it at uninstall.
"""

from __future__ import annotations

import os
import sys

#: Left beside the scripts once no compiler was found: the message is said once, not per command.
MARKER = ".snapstore-native-unavailable"
#: Set (to anything) to leave the Python script in place.
OPT_OUT = "SNAPSTORE_NO_NATIVE_BUILD"


def ensure_native(script: str | None = None) -> str | None:
    """Build and install the native client when ``script`` (``sys.argv[0]``) is the
    ``snapstore`` console script of an environment that also has ``snapstore-py`` and no
    native client yet; what was done (None when nothing was)."""
    script = script if script is not None else sys.argv[0]
    if os.path.basename(script) != "snapstore" or os.environ.get(OPT_OUT):
        return None
    real = os.path.realpath(script)
    bin_dir = os.path.dirname(real)
    if os.path.basename(real) != "snapstore" or not os.path.exists(os.path.join(bin_dir, "snapstore-py")):
        return None
    if os.path.exists(os.path.join(bin_dir, MARKER)):
        return None  # (and when this runs as that script, it is pip's Python script still)
    if not os.access(bin_dir, os.W_OK):
        return None  # (a system-wide install: whoever installed it can run the install step)
    from snapstore.service import native

    done = native.install(bin_dir)
    if native.is_script(real):  # no compiler, or it failed: say so this once
        try:
            with open(os.path.join(bin_dir, MARKER), "w", encoding="utf-8") as f:
                f.write(done + "\n")
        except OSError:
            pass
        sys.stderr.write(
            f"snapstore: note: {done}.  To build the native client later: "
            f"{sys.executable} -m snapstore.service.native --install {bin_dir}\n"
        )
    return done

