"""What client-side encryption of a remote costs: ``python -m benchmarks.remote_crypt [--quick]``.

The same tree pushed to a plain and an encrypted remote on one local SeaweedFS, alternating
(``--rounds`` each), each to a fresh prefix; then a clone of each, an incremental push of one
step, and the bytes each prefix holds.  Every figure is a run through the library
(``Store.push`` / ``clone``); the passphrase comes from ``SNAPSTORE_PASSPHRASE``.  The engine
shares the machine's cores with the client: the figures are the client's costs on loopback.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

from seaweed import BUCKET, SeaweedFS  # noqa: E402

from snapstore.store import Store  # noqa: E402

from .corpora import build_stdlib, tree_stats  # noqa: E402
from .replay import History  # noqa: E402


def _timed(fn: Any) -> tuple[Any, float]:
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def _stored(weed: SeaweedFS, prefix: str) -> tuple[int, int]:
    import obstore

    metas = [m for page in obstore.list(weed.store(prefix)) for m in page]  # type: ignore[arg-type]
    return len(metas), sum(int(m["size"]) for m in metas)


def _tree(work: str, small: bool) -> str:
    tree = os.path.join(work, "tree")
    if small:
        from .corpora import stdlib_dir

        os.makedirs(tree)
        for name in ("json", "email", "asyncio", "unittest"):
            shutil.copytree(os.path.join(stdlib_dir(), name), os.path.join(tree, name), symlinks=True)
    else:
        build_stdlib(tree)
    return tree


def run(work: str, weed: SeaweedFS, rounds: int, small: bool) -> dict[str, Any]:
    os.environ.update(weed.env)
    os.environ.setdefault("SNAPSTORE_PASSPHRASE", "benchmark passphrase")
    tree = _tree(work, small)
    files, size = tree_stats(tree)
    res: dict[str, Any] = {"tree": {"files": files, "bytes": size}, "push": {"plain": [], "encrypted": []}}
    prefixes: dict[str, str] = {}
    with Store.init(tree) as s:
        s.snapshot("initial", task="bench")
        for i in range(rounds):
            for kind in ("plain", "encrypted"):
                name, prefix = f"{kind}{i}", f"crypt-bench-{os.urandom(4).hex()}"
                prefixes[kind] = prefix
                s.remote_add(name, f"s3://{BUCKET}/{prefix}", endpoint=weed.endpoint, encrypt=kind == "encrypted")
                s.remote_doctor(name)  # first contact (config, probe, the key made) kept out of the figures
                p, t = _timed(lambda: s.push(remote=name))  # noqa: B023
                res["push"][kind].append({"seconds": t, "requests": p.requests, "bytes_sent": p.bytes_sent})
        for kind in ("plain", "encrypted"):
            url = f"s3://{BUCKET}/{prefixes[kind]}"
            c, t = _timed(lambda: Store.clone(url, os.path.join(work, "clone-" + kind), endpoint=weed.endpoint,  # noqa: B023
                                              encrypt=kind == "encrypted"))  # noqa: B023
            res[f"clone_{kind}"] = {"seconds": t, "requests": c.requests, "bytes_read": c.refs[0].bytes_read}
        History(tree, seed=1).step()
        s.snapshot("one step", task="bench")
        for kind in ("plain", "encrypted"):
            p, t = _timed(lambda: s.push(remote=f"{kind}{rounds - 1}"))  # noqa: B023
            res[f"incremental_{kind}"] = {"seconds": t, "requests": p.requests, "bytes_sent": p.bytes_sent}
            res[f"stored_{kind}"] = dict(zip(("objects", "bytes"), _stored(weed, prefixes[kind]), strict=True))
    from snapstore.remote import keys

    _, t = _timed(lambda: keys._kek(b"x", b"0" * 16, keys.SCRYPT_N, keys.SCRYPT_R, keys.SCRYPT_P))
    res["scrypt_seconds"] = t
    from snapstore.remote import crypto

    c, pack = crypto.Ciphers(os.urandom(32)), os.urandom(16 << 20)
    sealed, t = _timed(lambda: crypto.seal(c, "packs/x", pack))
    _, t2 = _timed(lambda: crypto.unseal(c, "packs/x", sealed))
    res["seal_mib_s"], res["unseal_mib_s"] = 16 / t, 16 / t2
    return res


def markdown(res: dict[str, Any]) -> str:
    med = {k: statistics.median(r["seconds"] for r in v) for k, v in res["push"].items()}
    rng = {k: (min(r["seconds"] for r in v), max(r["seconds"] for r in v)) for k, v in res["push"].items()}
    rows = [
        f"Tree: {res['tree']['files']} files, {res['tree']['bytes'] / (1 << 20):.1f} MiB; "
        f"{len(res['push']['plain'])} pushes of each kind, alternating, in one run.",
        "",
        "| operation | plain | encrypted | ratio |",
        "| --- | ---: | ---: | ---: |",
        f"| first push, median (min-max) | {med['plain']:.2f} s ({rng['plain'][0]:.2f}-{rng['plain'][1]:.2f}) | "
        f"{med['encrypted']:.2f} s ({rng['encrypted'][0]:.2f}-{rng['encrypted'][1]:.2f}) | "
        f"{med['encrypted'] / med['plain']:.2f}x |",
    ]
    for label, key in (("clone", "clone"), ("incremental push (1 step)", "incremental")):
        a, b = res[f"{key}_plain"], res[f"{key}_encrypted"]
        rows.append(f"| {label} | {a['seconds']:.2f} s, {a['requests']} req | {b['seconds']:.2f} s, "
                    f"{b['requests']} req | {b['seconds'] / a['seconds']:.2f}x |")
    a, b = res["stored_plain"], res["stored_encrypted"]
    rows.append(f"| stored on the engine | {a['bytes']:,} B, {a['objects']} objects | {b['bytes']:,} B, "
                f"{b['objects']} objects | {b['bytes'] / a['bytes']:.4f}x |")
    rows.append(f"| scrypt (once per command, opening the key) | | {res['scrypt_seconds']:.2f} s | |")
    rows.append(f"| sealing / opening a 16 MiB pack (CPU) | | {res['seal_mib_s']:.0f} / {res['unseal_mib_s']:.0f} MiB/s | |")
    return "\n".join(rows) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="a slice of the stdlib")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", help="write the JSON here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="snapstore-crypt-bench-") as work:
        weed = SeaweedFS(os.path.join(work, "weed"))
        weed.start()
        try:
            res = run(work, weed, args.rounds, args.quick)
        finally:
            weed.stop()
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=2)
    print(markdown(res))


if __name__ == "__main__":
    main()
