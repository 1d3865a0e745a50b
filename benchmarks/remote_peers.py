"""snapstore against restic on the same SeaweedFS, row by row (issue 41, req 8).

Both tools run as the CLI a user runs (snapstore: ``python -m snapstore``; restic 0.14 from
Debian), each in a bucket of its own on one ``weed server``, so requests and bytes come from the
engine's own Prometheus metrics per bucket (``SeaweedFS_s3_request_seconds_count``,
``..._bucket_traffic_{received,sent}_bytes_total``), the same counter for both.  restic encrypts
(AES-256-CTR + Poly1305) and snapstore does not: its bytes and CPU include that.

Rows: first push, incremental pushes (the seeded edit history of benchmarks.replay, median per
step), bytes stored, one file read from a fresh machine (``cat --remote`` / ``restic dump`` with
an empty cache), and a clone (``clone`` / ``restore`` with an empty cache, byte-exact checked).
"""

from __future__ import annotations

import filecmp
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request
from typing import Any

from .replay import History

PASSWORD = "bench-password"


def metrics(port: int) -> dict[str, dict[str, float]]:
    """Per bucket: requests, bytes received (by the engine) and sent."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out: dict[str, dict[str, float]] = {}
    for line in text.splitlines():
        m = re.match(r'SeaweedFS_s3_(request_seconds_count|bucket_traffic_received_bytes_total|'
                     r'bucket_traffic_sent_bytes_total)\{bucket="([^"]*)"[^}]*\} (\S+)', line)
        if m:
            field = {"request_seconds_count": "requests", "bucket_traffic_received_bytes_total": "up",
                     "bucket_traffic_sent_bytes_total": "down"}[m.group(1)]
            b = out.setdefault(m.group(2), {"requests": 0.0, "up": 0.0, "down": 0.0})
            b[field] += float(m.group(3))
    return out


class Meter:
    """Runs a command and measures it: wall time, and what the engine saw for one bucket."""

    def __init__(self, port: int) -> None:
        self.port = port

    def run(self, bucket: str, argv: list[str], cwd: str, env: dict[str, str]) -> dict[str, Any]:
        before = metrics(self.port).get(bucket, {})
        t = time.perf_counter()
        r = subprocess.run(argv, cwd=cwd, env=env, capture_output=True)
        took = time.perf_counter() - t
        if r.returncode != 0:
            raise RuntimeError(f"{argv[:4]} failed ({r.returncode}): {r.stderr.decode(errors='replace')[-500:]}")
        after = metrics(self.port).get(bucket, {})
        delta = {k: int(after.get(k, 0) - before.get(k, 0)) for k in ("requests", "up", "down")}
        return {"seconds": took, **delta, "stdout": r.stdout}


def _bucket(weed: Any, bucket: str) -> Any:
    from obstore.store import S3Store

    return S3Store(bucket, endpoint=weed.endpoint, region="us-east-1", access_key_id=weed.env["AWS_ACCESS_KEY_ID"],
                   secret_access_key=weed.env["AWS_SECRET_ACCESS_KEY"], virtual_hosted_style_request=False,
                   client_options={"allow_http": True})


def _make_bucket(weed: Any, bucket: str) -> None:
    """SeaweedFS makes a bucket when an admin key first writes into it (obstore has no
    CreateBucket): a key written and removed."""
    import obstore

    obstore.put(_bucket(weed, bucket), "made", b"")
    obstore.delete(_bucket(weed, bucket), "made")


def _stored(weed: Any, bucket: str) -> int:
    import obstore

    return sum(int(m["size"]) for page in obstore.list(_bucket(weed, bucket)) for m in page)


def _pick_file(tree: str) -> str:
    """A mid-sized source file (the trial read a 65 KB one)."""
    best = ""
    for dirpath, _, files in sorted(os.walk(tree)):
        for name in sorted(files):
            p = os.path.join(dirpath, name)
            if name.endswith(".py") and not os.path.islink(p) and 30_000 < os.path.getsize(p) < 80_000:
                return os.path.relpath(p, tree)
            best = best or (os.path.relpath(p, tree) if name.endswith(".py") else "")
    return best


def run(work: str, weed: Any, tree: str, steps: int) -> dict[str, Any]:
    """Every row for both tools on ``tree`` (a copy is edited by the history)."""
    meter = Meter(weed.metrics_port)
    env = dict(os.environ, **weed.env, RESTIC_PASSWORD=PASSWORD)
    # -P: the tree is the stdlib's (json, email, ...) and cwd would shadow the stdlib once the
    # edit history has made one of its files unimportable
    snap = [sys.executable, "-P", "-m", "snapstore"]
    src = os.path.join(work, "peer-tree")
    shutil.copytree(tree, src, symlinks=True)
    sb, rb = f"snap-{os.urandom(3).hex()}", f"restic-{os.urandom(3).hex()}"
    surl, rurl = f"s3://{sb}/p", f"s3:{weed.endpoint}/{rb}"
    from .corpora import tree_stats

    files, size = tree_stats(src)
    res: dict[str, Any] = {"file": _pick_file(src), "tree": {"files": files, "bytes": size}}
    _make_bucket(weed, sb)
    _WEEDS[sb] = weed
    subprocess.run([*snap, "init", "-q"], cwd=src, env=env, check=True)
    subprocess.run([*snap, "remote", "add", "origin", surl, "--endpoint", weed.endpoint], cwd=src, env=env, check=True)
    subprocess.run(["restic", "-r", rurl, "init", "-q"], cwd=src, env=env, check=True, capture_output=True)
    subprocess.run([*snap, "snapshot", "-q", "-m", "first"], cwd=src, env=env, check=True)
    res["first_push"] = {
        "snapstore": meter.run(sb, [*snap, "push", "-q"], src, env),
        "restic": meter.run(rb, ["restic", "-r", rurl, "backup", "-q", "--cache-dir", os.path.join(work, "rc-w"), "."],
                            src, env),
    }
    hist = History(src, seed=3)
    incr: dict[str, list[dict[str, Any]]] = {"snapstore": [], "restic": []}
    for i in range(steps):
        hist.step()
        subprocess.run([*snap, "snapshot", "-q", "-m", f"step {i}"], cwd=src, env=env, check=True)
        incr["snapstore"].append(meter.run(sb, [*snap, "push", "-q"], src, env))
        incr["restic"].append(meter.run(rb, ["restic", "-r", rurl, "backup", "-q", "--cache-dir",
                                             os.path.join(work, "rc-w"), "."], src, env))
    res["incremental"] = {tool: {k: statistics.median(r[k] for r in runs) for k in ("seconds", "requests", "up")}
                          for tool, runs in incr.items()}
    res["stored"] = {"snapstore": _stored(weed, sb), "restic": _stored(weed, rb)}
    res["read"] = _read_one(work, meter, snap, env, sb, surl, rb, rurl, weed.endpoint, src, res["file"])
    res["clone"] = _clone(work, meter, snap, env, sb, surl, rb, rurl, weed.endpoint, src)
    for row in ("first_push", "read", "clone"):
        for tool in ("snapstore", "restic"):
            res[row][tool].pop("stdout", None)
    return res


def _read_one(work: str, meter: Meter, snap: list[str], env: dict[str, str], sb: str, surl: str, rb: str,
              rurl: str, endpoint: str, src: str, rel: str) -> dict[str, Any]:
    fresh = os.path.join(work, "fresh-read")
    os.makedirs(fresh)
    subprocess.run([*snap, "init", "-q"], cwd=fresh, env=env, check=True)
    subprocess.run([*snap, "remote", "add", "origin", surl, "--endpoint", endpoint], cwd=fresh, env=env, check=True)
    s = meter.run(sb, [*snap, "cat", "--remote", "origin", "latest", rel], fresh, env)
    listing = subprocess.run(["restic", "-r", rurl, "ls", "latest", "--cache-dir", os.path.join(work, "rc-ls")],
                             env=env, capture_output=True, check=True).stdout.decode().splitlines()
    path = next(line for line in listing if line.endswith("/" + rel))
    r = meter.run(rb, ["restic", "-r", rurl, "dump", "--cache-dir", os.path.join(work, "rc-read"), "latest", path],
                  fresh, env)
    with open(os.path.join(src, rel), "rb") as f:
        want = f.read()
    assert s["stdout"] == want and r["stdout"] == want, "a read-through returned other bytes"
    return {"snapstore": s, "restic": r, "file_bytes": len(want), "frame_bytes": _frames_of_file(src, rel, (_WEEDS[sb], sb))}


#: The engine of each snapstore bucket (the read row looks at what the push stored).
_WEEDS: dict[str, Any] = {}


def _frames_of_file(src: str, rel: str, where: tuple[Any, str]) -> int:
    """Stored bytes of the frames on the remote that hold the file's chunks (what a read of
    it must fetch at least, frames being the unit read)."""
    import obstore

    from snapstore.remote import layout
    from snapstore.storage import objects
    from snapstore.store import Store

    with Store.open(src) as s:
        sid = next(e.ref for e in s.entries("latest") if e.path == rel.encode())
        with s.backend.read() as view:
            chunks = set(objects.leaf_ids(view.get, sid))
    store = _bucket(*where)
    total = 0
    for page in obstore.list(store, "p/"):
        for meta in page:
            key = meta["path"][len("p/"):]
            body = bytes(obstore.get(store, meta["path"]).bytes())
            if key.startswith("packs/"):
                frames = layout.parse_pack(key, body, None).frames
            elif key.startswith("log/"):
                inline = layout.parse_bundle(key, body).inline
                frames = inline.frames if inline is not None else []
            else:
                continue
            total += sum(f.length for f in frames if chunks & {cid for cid, _, _ in f.members})
            chunks -= {cid for f in frames for cid, _, _ in f.members}
    return total


def _clone(work: str, meter: Meter, snap: list[str], env: dict[str, str], sb: str, surl: str, rb: str,
           rurl: str, endpoint: str, src: str) -> dict[str, Any]:
    target = os.path.join(work, "clone-s")
    s = meter.run(sb, [*snap, "clone", "-q", surl, target, "--endpoint", endpoint], work, env)
    rtarget = os.path.join(work, "clone-r")
    r = meter.run(rb, ["restic", "-r", rurl, "restore", "latest", "-q", "--target", rtarget, "--cache-dir",
                       os.path.join(work, "rc-clone")], work, env)
    for out in (target, rtarget):
        root = out
        if out == rtarget:  # restic restores under the absolute path it backed up
            root = os.path.join(rtarget, src.lstrip("/"))
            root = root if os.path.isdir(root) else rtarget
        cmp = filecmp.dircmp(src, root, ignore=[".snapstore"])
        assert not (cmp.left_only or cmp.diff_files), (out, cmp.left_only[:5], cmp.diff_files[:5])
    return {"snapstore": s, "restic": r}


def markdown(res: dict[str, Any], steps: int) -> str:
    def cells(row: dict[str, Any], key: str, fmt: Any) -> str:
        a, b = row["snapstore"][key], row["restic"][key]
        return f"{fmt(a)} | {fmt(b)} | {a / b:.2f}" if b else f"{fmt(a)} | {fmt(b)} | -"

    def sec(x: float) -> str:
        return f"{x:.2f} s"

    def kb(x: float) -> str:
        return f"{x / 1000:,.1f} KB"

    def n(x: float) -> str:
        return f"{x:g}"

    fp, inc, rd, cl = res["first_push"], res["incremental"], res["read"], res["clone"]
    st = res["stored"]
    rows = [
        ("first push: time", cells(fp, "seconds", sec)), ("first push: requests", cells(fp, "requests", n)),
        ("first push: bytes sent", cells(fp, "up", kb)),
        (f"incremental push (median of {steps}): time", cells(inc, "seconds", sec)),
        ("incremental push: requests", cells(inc, "requests", n)), ("incremental push: bytes sent", cells(inc, "up", kb)),
        ("bytes stored after all pushes", f"{kb(st['snapstore'])} | {kb(st['restic'])} | {st['snapstore'] / st['restic']:.2f}"),
        (f"one file ({rd['file_bytes']:,} B) from a fresh machine: time", cells(rd, "seconds", sec)),
        ("... requests", cells(rd, "requests", n)), ("... bytes read", cells(rd, "down", kb)),
        ("... of which the file's frames (snapstore: the unit read)", f"{kb(rd.get('frame_bytes', 0))} | | "),
        ("clone / restore on a fresh machine: time", cells(cl, "seconds", sec)),
        ("... requests", cells(cl, "requests", n)), ("... bytes read", cells(cl, "down", kb)),
    ]
    tree = res.get("tree", {})
    out = [f"Tree: {tree.get('files')} files, {tree.get('bytes', 0) / 1e6:.1f} MB.", "",
           "| row | snapstore | restic | ÷ restic |", "| --- | ---: | ---: | ---: |"]
    out += [f"| {name} | {c} |" for name, c in rows]
    return "\n".join(out) + "\n"
