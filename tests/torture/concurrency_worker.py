"""One of the concurrent processes of test_torture_concurrency: random commands for a while.

    python concurrency_worker.py TREE SECONDS SEED OUT.json

Runs snapstore commands in-process (``cli.main``, stdout/stderr captured) and edits files the
way an agent's tools do (write a temp file, rename it over the target).  Commands include
``gc --compact``.  The worker also keeps one Store open for its whole run (a long-lived agent):
whenever a freshly opened Store sees a newest checkpoint, the long-lived one must see it too
(a stale read across another process's compaction is a failure).  Writes one JSON record per
command to OUT.json: ``[command, exit code, stderr]``.
"""

import io
import json
import os
import random
import subprocess
import sys
import time

import blake3

from snapstore import cli
from snapstore.store import Store

WRITERS = {"snapshot", "restore", "undo"}


def payload(rng: random.Random) -> bytes:
    body = rng.randbytes(rng.randint(0, 20_000))
    return b"SELF " + blake3.blake3(body).hexdigest().encode() + b"\n" + body


def run(argv: list[str]) -> tuple[int, str]:
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
    err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
    real = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        code = cli.main(argv)
    finally:
        sys.stdout, sys.stderr = real
    return code, err.buffer.getvalue().decode("utf-8", "replace")


def edit(rng: random.Random, wid: int) -> None:
    d = f"d{rng.randrange(4)}"
    name = f"f{rng.randrange(12)}.txt"
    path = os.path.join(d, name)
    try:
        if rng.random() < 0.2:
            os.unlink(path)
            return
        os.makedirs(d, exist_ok=True)
        tmp = os.path.join(d, f".{name}.{wid}.tmp-edit")
        with open(tmp, "wb") as f:
            f.write(payload(rng))
        os.rename(tmp, path)
    except OSError:
        pass  # a restore removed or replaced the directory meanwhile: the agent retries later


def main() -> None:
    tree, seconds, seed, out_path = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    os.chdir(tree)
    rng = random.Random(seed)
    deadline = time.monotonic() + seconds
    lock = ["--lock-timeout", "0.3"]
    records = []
    n = 0
    held = Store.open(".")
    while time.monotonic() < deadline:
        n += 1
        r = rng.random()
        if r < 0.05:
            records.append(["held-reader", *check_held(held)])
            continue
        if r < 0.25:
            edit(rng, seed)
            continue
        if r < 0.40:
            argv = lock + ["snapshot", "-q", "-m", f"w{seed}-{n}"]
        elif r < 0.50:
            ref = rng.choice(["latest", "latest~1", "#2", "base"])
            argv = lock + ["restore", ref, "-q"]
            if rng.random() < 0.3:
                argv += ["--", f"d{rng.randrange(4)}"]
        elif r < 0.55:
            argv = lock + ["undo", "-q"]
        elif r < 0.65:
            argv = ["list", "--all"]
        elif r < 0.75:
            argv = ["diff", "-q"] if rng.random() < 0.5 else ["diff", "base", "latest", "--stat"]
        elif r < 0.85:
            argv = ["verify", "-q"]
        elif r < 0.90:
            argv = ["show", "latest", "--json"]
        elif r < 0.95:
            argv = lock + ["gc", "--compact"]
        else:
            argv = ["oplog"]
        code, err = run(argv)
        records.append([argv[2] if argv[0] == "--lock-timeout" else argv[0], code, err])
    held.close()
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(records, f)


_NEWEST = "from snapstore.store import Store; print(Store.open('.').checkpoints(include_safety=True)[0].id)"


def check_held(held: Store) -> tuple[int, str]:
    """The newest checkpoint a fresh Store sees must be visible to the long-lived one.

    The fresh Store is opened in another process: in this one it would share the long-lived
    Store's environment.
    """
    fresh = subprocess.run([sys.executable, "-c", _NEWEST], capture_output=True, timeout=120)
    if fresh.returncode != 0:
        return fresh.returncode, fresh.stderr.decode("utf-8", "replace")
    newest = fresh.stdout.decode().strip()
    seen = {c.id for c in held.checkpoints(include_safety=True)}
    if newest not in seen:
        return 1, f"stale read: the long-lived store does not see checkpoint {newest}\n"
    return 0, ""


if __name__ == "__main__":
    main()
