"""The detached maintenance pass: the passes a snapshot finds due, run by a process of their own.

The full pass (:func:`snapstore.ops.maintenance.plan_full`) rewrites a small store at level 19:
seconds of CPU.  The resident service runs it when idle; a snapshot taken in-process (the
library, or the CLI without a service) cannot wait that long, and its own loose-pack pass keeps
to ``maintenance.budget-ms``.  So, like ``git gc --auto`` with ``gc.autoDetach``, when the check
after a snapshot finds a pass due (the full pass, or ``maintenance.loose-packs`` small loose
packs), the snapshot starts ``python -m snapstore --store DIR -C TREE maintain --background`` in
a session of its own and returns.  That process runs the passes until none is due
(:meth:`snapstore.store.Store.maintain_all`), holding the writer lock only for each step's
write, compacts the file if they left it mostly free, and exits; the parent never waits for it.

One at a time: the process takes ``<store>/maintenance.lock`` (a flock, dropped by the kernel
if it dies) and leaves at once when another holds it.  A kill at any moment is safe: ``make
torture``'s maintenance trials SIGKILL ``maintain_all`` at random moments.

Config ``maintenance.detach`` (default true) and the environment variable
:data:`ENV` (``0`` or ``1``; it wins over the config: the test suite and benchmarks that need a
settled store set ``0``) choose it; when off, the snapshot runs the loose-pack pass itself
(within its budget) and leaves the full pass to the service or to gc.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

#: Overrides ``maintenance.detach``: ``0`` never detaches, ``1`` always may.
ENV = "SNAPSTORE_MAINTENANCE_DETACH"
#: The flock that keeps detached passes (and ``snapstore maintain``) one at a time.
LOCK_NAME = "maintenance.lock"


def enabled(config_value: str) -> bool:
    """Whether a snapshot may start the detached pass (``config_value``: ``maintenance.detach``)."""
    forced = os.environ.get(ENV)
    if forced is not None and forced.strip() != "":
        return forced.strip().lower() not in ("0", "false", "no", "off")
    return config_value == "true"


def spawn(store_dir: str, root: str) -> int | None:
    """Start the detached pass on ``store_dir`` (of the tree ``root``); its pid, or None when it
    could not start (the snapshot goes on: the next check tries again)."""
    import sysconfig

    if not sys.executable:  # (an embedded interpreter may not know its own)
        return None
    package_parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ)
    installed = {os.path.realpath(sysconfig.get_path(k)) for k in ("purelib", "platlib")}
    if os.path.realpath(package_parent) not in installed:
        # The same snapstore as this process (a checkout on sys.path); an installed one is
        # found as it is (putting site-packages first would let it shadow the stdlib).
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH", "")) if p)
    command = [sys.executable, "-m", "snapstore", "--store", store_dir, "-C", root]
    command += ["maintain", "--background"]
    try:
        proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=store_dir,
            env=env,
            start_new_session=True,  # a Ctrl-C meant for the agent does not stop it mid-step
            close_fds=True,
        )
    except OSError:
        return None
    # Reaped by a daemon thread, so a long-lived agent process does not collect zombies.
    threading.Thread(target=proc.wait, name="snapstore-maintain-reaper", daemon=True).start()
    return proc.pid


def yield_cpu() -> None:
    """The detached process's first step: the lowest CPU priority, so the checkpoints it shares
    the cores with go first (it compresses at level 19 for seconds)."""
    try:
        os.nice(19)
    except OSError:
        pass
