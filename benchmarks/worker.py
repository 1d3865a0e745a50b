"""In-process library calls, run in a child process so peak RSS is per scenario.

``python -m benchmarks.worker snap|snapwatch|pygit2 TREE STORE`` (``snapwatch``: ``Store.open(...,
watch=True)``) reads one JSON request per line on stdin
and answers one JSON line on stdout: ``{"op": "checkpoint"|"restore"|"diff"|"status"|"rss"|
"caps"|"quit", ...}``.  Only the library call itself is inside the timer; the store or repository
is opened once, as an agent keeps it open.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time


class NotBuilt(Exception):
    pass


class SnapLib:
    def __init__(self, tree: str, store: str, watch: bool = False):
        from snapstore.store import Store

        self.Store = Store
        if watch:  # the inotify watcher: snapshots re-examine only what changed
            self.store = Store.open(tree, store=store, watch=True)
        else:
            self.store = Store.open(tree, store=store)

    def caps(self) -> dict:
        return {
            "restore": hasattr(self.Store, "restore"),
            "diff": hasattr(self.Store, "diff"),
            "status": hasattr(self.Store, "status") or hasattr(self.Store, "diff"),
        }

    def checkpoint(self, msg: str) -> dict:
        t0 = time.perf_counter()
        cp = self.store.snapshot(msg)
        t = time.perf_counter() - t0
        return {"t": t, "id": cp.id, "new_bytes": cp.stats.get("new_bytes")}

    def restore(self, ref: str) -> dict:
        if not hasattr(self.Store, "restore"):
            raise NotBuilt("Store.restore")
        t0 = time.perf_counter()
        self.store.restore(ref)
        return {"t": time.perf_counter() - t0}

    def diff(self, a: str, b: str) -> dict:
        if not hasattr(self.Store, "diff"):
            raise NotBuilt("Store.diff")
        t0 = time.perf_counter()
        res = self.store.diff(a, b)
        n = len(list(res)) if res is not None and not isinstance(res, (int, bool)) else 0
        return {"t": time.perf_counter() - t0, "n": n}

    def status(self) -> dict:
        t0 = time.perf_counter()
        if hasattr(self.Store, "status"):
            res = self.store.status()
        elif hasattr(self.Store, "diff"):
            res = self.store.diff("latest")  # one ref: against the working tree
        else:
            raise NotBuilt("Store.status / Store.diff")
        n = len(list(res)) if res is not None and not isinstance(res, (int, bool)) else 0
        return {"t": time.perf_counter() - t0, "n": n}


class Pygit2Lib:
    def __init__(self, tree: str, gitdir: str):
        import pygit2

        self.pygit2 = pygit2
        self.repo = pygit2.Repository(gitdir)
        self.sig = pygit2.Signature("bench", "bench@example.invalid")

    def caps(self) -> dict:
        return {"restore": True, "diff": True, "status": True}

    def checkpoint(self, msg: str) -> dict:
        repo = self.repo
        t0 = time.perf_counter()
        index = repo.index
        index.add_all()
        index.write()
        tree = index.write_tree()
        parents = [] if repo.head_is_unborn else [repo.head.target]
        oid = repo.create_commit("HEAD", self.sig, self.sig, msg, tree, parents)
        return {"t": time.perf_counter() - t0, "id": str(oid)}

    def restore(self, ref: str) -> dict:
        from pygit2.enums import FileStatus, ResetMode

        repo = self.repo
        t0 = time.perf_counter()
        repo.reset(repo.get(ref).id, ResetMode.HARD)
        # git clean -fd: remove untracked files (ignored ones stay, as with git clean -fd)
        for path, flags in repo.status().items():
            if flags & FileStatus.WT_NEW:
                full = os.path.join(repo.workdir, path)
                if os.path.isdir(full) and not os.path.islink(full):
                    import shutil

                    shutil.rmtree(full)
                else:
                    os.unlink(full)
        return {"t": time.perf_counter() - t0}

    def diff(self, a: str, b: str) -> dict:
        # Store.diff(a, b) returns the changed paths (no line counts), so the counterpart is the
        # tree-to-tree delta list, which libgit2 builds without reading blob contents.
        t0 = time.perf_counter()
        d = self.repo.diff(a, b)
        n = sum(1 for _ in d.deltas)
        return {"t": time.perf_counter() - t0, "n": n}

    def status(self) -> dict:
        t0 = time.perf_counter()
        st = self.repo.status()
        return {"t": time.perf_counter() - t0, "n": len(st)}


def main() -> None:
    kind, tree, store = sys.argv[1:4]
    lib: SnapLib | Pygit2Lib
    if kind in ("snap", "snapwatch"):
        lib = SnapLib(tree, store, watch=kind == "snapwatch")
    else:
        lib = Pygit2Lib(tree, store)
    out = sys.stdout
    for line in sys.stdin:
        req = json.loads(line)
        op = req["op"]
        try:
            if op == "quit":
                break
            if op == "rss":
                res = {"rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}
            elif op == "caps":
                res = lib.caps()
            elif op == "checkpoint":
                res = lib.checkpoint(req.get("msg", ""))
            elif op == "restore":
                res = lib.restore(req["ref"])
            elif op == "diff":
                res = lib.diff(req["a"], req["b"])
            elif op == "status":
                res = lib.status()
            else:
                res = {"error": f"unknown op {op}"}
        except NotBuilt as exc:
            res = {"na": f"not built ({exc})"}
        except Exception as exc:  # reported to the parent, which records it
            res = {"error": f"{type(exc).__name__}: {exc}"}
        out.write(json.dumps(res) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
