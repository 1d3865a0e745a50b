"""Hostile hook payloads, randomized (issue 38: the hook surface in the hostile-input category).

Each trial feeds one agent's hook entry (``agents.hook``, as ``snapstore hook AGENT`` calls it,
in-process against a real store) a seeded mix of hostile payloads: random bytes, the agent's
own event truncated, a field replaced by nesting thousands deep or by an array of millions of
values, fields of the wrong type, NUL and lone surrogates.  The hook never raises, always
answers in the agent's format, and the store verifies clean afterwards.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from torture_tally import FULL

from benchmarks.hook_latency import EVENTS  # one no-change tool event per agent, as each sends it
from snapstore.integrations import agents
from snapstore.store import Store

CASE = pytest.mark.torture_case("hostile input")
SEEDS = range(40 if FULL else 4)
PAYLOADS = 12

ODD_VALUES: list[Any] = [None, 0, -1, 1e308, True, "", "\x00", "\ud83d", [], {}, [[[]]], {"a": {"b": None}}, "x" * 5000]


def _hostile(rng: random.Random, event: dict[str, Any]) -> str:
    kind = rng.randrange(6)
    text = json.dumps(event)
    if kind == 0:  # bytes, as the hook decodes them
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 400))).decode("utf-8", "surrogateescape")
    if kind == 1:  # cut anywhere
        return text[: rng.randrange(len(text))]
    key = rng.choice(sorted(event))
    if kind == 2:  # a field nested deep (over or under the cap)
        depth = rng.choice([150, 250, 5_000, 100_000])
        return text.replace(json.dumps(key) + ": ", json.dumps(key) + ": " + "[" * depth, 1)[:-1] + "]" * depth + "}"
    if kind == 3:  # a field holding a huge array
        count = rng.choice([1000, 300_000, 2_500_000])
        return text.replace(json.dumps(key) + ": ", json.dumps(key) + ": [" + "0," * count + "0], \"was\": ", 1)
    if kind == 4:  # every field of another type
        return json.dumps({k: rng.choice(ODD_VALUES) for k in event})
    return json.dumps(rng.choice([[], "event", 7, None, [event], {"": event}]))


def _in_format(agent: str, out: str) -> bool:
    if agent in ("copilot", "kiro", "windsurf", "opencode"):
        return out == ""
    if agent in ("claude-code", "codex") and out == "":
        return True
    try:
        doc = json.loads(out)
    except ValueError:
        return False
    return isinstance(doc, dict) and (agent != "cline" or doc.get("cancel") is False)


@CASE
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("agent", agents.AGENTS)
def test_a_hook_answers_every_hostile_payload_in_its_format(tmp_path: Path, agent: str, seed: int, monkeypatch: pytest.MonkeyPatch):
    tree = tmp_path / "proj"
    tree.mkdir()
    (tree / "a.txt").write_text("a\n")
    Store.init(tree).close()
    monkeypatch.setenv("CLAUDE_PROJECT_DIR", str(tree))
    rng = random.Random(f"{agent}-{seed}")
    event = {"session_id": f"s{seed}", "cwd": str(tree), "workspace_roots": [str(tree)], "workspaceRoots": [str(tree)],
             "directory": str(tree), **EVENTS[agent]}
    for _ in range(PAYLOADS):
        raw = _hostile(rng, event)
        out = agents.hook(agent, raw, lambda project: lambda: Store.open(tree), start_service=False)
        assert _in_format(agent, out), (raw[:200], out)
    with Store.open(tree) as store:
        assert store.verify().ok
