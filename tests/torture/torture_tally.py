"""Trial counts for the torture suite: scaling, recording, the figures table.

``SNAPSTORE_TORTURE=1`` (set by ``make torture`` / ``python -m tests.torture``) runs the full
trial counts; without it every test runs a bounded form inside ``make test``.  When
``SNAPSTORE_TORTURE_RESULTS`` names a file, every test appends its figures to it as JSON lines
(one line per record, O_APPEND: xdist workers may write concurrently); the runner reads them
back into the table.
"""

from __future__ import annotations

import json
import os
from collections import OrderedDict

FULL = os.environ.get("SNAPSTORE_TORTURE") == "1"

#: Categories with no trials yet, and why: the table shows them as pending, not as 0 passed.
PENDING = {"crash: revert": "pending: `snapstore revert` does not exist yet"}

#: Category names, in the order the table lists them, with what each guarantees.
CATEGORIES = OrderedDict(
    [
        ("crash: snapshot", "a snapshot killed (SIGKILL) at any moment leaves a store that "
         "verifies clean, holds every earlier checkpoint byte-exact, and either has the new "
         "checkpoint whole or not at all; the next snapshot records the tree correctly"),
        ("crash: restore", "a restore killed at any moment leaves the tree exactly at its before "
         "or its after state once the next command has run; the store verifies clean"),
        ("crash: undo", "the same for undo"),
        ("crash: revert", "PENDING: `snapstore revert` does not exist yet; when it does, a "
         "revert killed at any moment must leave the tree at its before or after state, as "
         "restore and undo do"),
        ("crash: gc", "gc killed at any moment leaves a store that verifies clean with every "
         "surviving checkpoint byte-exact; the next gc finishes"),
        ("crash: gc --compact", "the same for gc --compact, also killed just before and just "
         "after the rename that publishes the new store generation (CURRENT)"),
        ("crash: maintain", "the maintenance passes a detached process runs (`maintain_all`: "
         "the full pass or small loose packs gathered in steps, each compressed without the "
         "lock and written in its own transaction, then the compaction) killed at any moment "
         "leaves a store that verifies "
         "clean with every checkpoint byte-exact; the next pass and gc finish the job"),
        ("crash: repair", "`verify --repair` killed at any moment (damage the tree holds and "
         "damage it no longer holds, in a store of two checkpoints) leaves a store with no "
         "problem it did not have and the tree untouched; finished, only the damage the tree no "
         "longer holds is left, and every checkpoint the tree could mend restores byte-exact"),
        ("repair: small stores", "random small stores of one or two checkpoints (the stores an "
         "agent makes most: a few files, one chunk each, one pack), one kind of damage each (a "
         "byte of a frame flipped, an entry broken, a chunk's entry or a whole pack deleted), "
         "then `verify --repair` run whole or killed (SIGKILL) at a random moment: nothing "
         "readable before is unreadable after, the tree is untouched, and once a repair finishes "
         "every file the tree still holds reads back (trials: stores; failed: a file lost)"),
        ("concurrency", "4 processes snapshotting, restoring, undoing, compacting (gc "
         "--compact), editing, listing, diffing and verifying one tree and store: no traceback, "
         "no hang, no internal error, no corrupt store, no half-written file; a writer that "
         "cannot get the lock fails with exit 5 and 'locked'; readers are never refused; each "
         "process also holds one long-lived Store across the others' compactions, and it sees "
         "every checkpoint a freshly opened Store sees (no stale read; counted as held-reader)"),
        ("full disk", "a snapshot on a full store file system fails with one line and exit 8, "
         "the store stays valid with every earlier checkpoint intact; a restore onto a full "
         "tree file system is rolled back"),
        ("hostile input", "hostile manifests, corrupt or truncated records, a newer format, odd "
         "names, symlink loops, files changing under the scan, permission denied: each gets a "
         "clear error (documented exit code) or a documented skip; nothing outside the tree is "
         "written and nothing stored is lost. Hook payloads of the nine agents (random bytes, "
         "cut events, nesting 100,000 deep, arrays of millions, odd field types): the hook "
         "never fails and answers in its agent's format, and the store verifies clean"),
        ("remote push/gc", "4 pushers (random edits, some killed at a random request) and a "
         "remote gc loop (grace and push window shrunk to seconds) on one remote: afterwards "
         "remote verify finds nothing wrong and every ref clones byte-exact to what its pusher "
         "checkpointed (trials: pushes; failed: a published checkpoint that cannot be cloned "
         "whole, or a traceback)"),
        ("watch vs walk", "random edits (files and directories created, rewritten, truncated, "
         "renamed, deleted; hard links in the tree, into it from outside and out of it, with "
         "writes through each; writes through live shared mappings; chmod; symlinks) with phases "
         "of watch-limit exhaustion and event-queue overflow: every checkpoint taken through a "
         "watching Store equals the tree on disk byte for byte and a full walk (trials: "
         "checkpoints compared; failed: divergent ones)"),
        ("watch vs walk (portable polling watcher)", "the same random edits with the Linux facilities "
         "masked (SNAPSTORE_PLATFORM=portable: no inotify, no /proc): every checkpoint taken through the "
         "polling event source equals a full walk, and the tree on disk byte for byte except files mapped "
         "shared and writable at that moment (counted as mapped_unseen) (trials: checkpoints compared; "
         "failed: divergent ones)"),
        ("model (stateful)", "random sequences of edit, snapshot, restore, partial restore, undo "
         "and diff agree with an in-memory model (path -> content) after every step"),
    ]
)


def scaled(bounded: int, full: int) -> int:
    """The trial count for this run."""
    return full if FULL else bounded


def record(category: str, trials: int, failed: int, **details) -> None:
    """Add ``trials`` trials (``failed`` of them failed) to ``category`` in the results file."""
    assert category in CATEGORIES, category
    path = os.environ.get("SNAPSTORE_TORTURE_RESULTS")
    if not path:
        return
    line = json.dumps({"category": category, "trials": trials, "failed": failed, "details": details})
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def summarise(path: str) -> OrderedDict:
    """category -> {trials, failed, passed, details{key: summed value}} from a results file."""
    out: OrderedDict = OrderedDict(
        (c, {"trials": 0, "failed": 0, "passed": 0, "details": {}}) for c in CATEGORIES
    )
    try:
        with open(path, encoding="utf-8") as f:
            lines = [json.loads(x) for x in f if x.strip()]
    except FileNotFoundError:
        lines = []
    for rec in lines:
        row = out[rec["category"]]
        row["trials"] += rec["trials"]
        row["failed"] += rec["failed"]
        for k, v in rec.get("details", {}).items():
            if isinstance(v, int | float):
                row["details"][k] = row["details"].get(k, 0) + v
    for row in out.values():
        row["passed"] = row["trials"] - row["failed"]
    return out


def table(summary: OrderedDict) -> str:
    """The figures as a Markdown table."""
    lines = [
        "| category | trials | passed | failed | details |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    for cat, row in summary.items():
        if cat in PENDING and not row["trials"]:
            lines.append(f"| {cat} | - | - | - | {PENDING[cat]} |")
            continue
        details = ", ".join(f"{k} {v}" for k, v in sorted(row["details"].items()))
        lines.append(f"| {cat} | {row['trials']} | {row['passed']} | {row['failed']} | {details} |")
    total = sum(r["trials"] for r in summary.values())
    failed = sum(r["failed"] for r in summary.values())
    lines.append(f"| **total** | **{total}** | **{total - failed}** | **{failed}** | |")
    return "\n".join(lines)
