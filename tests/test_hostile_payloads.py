"""Hostile agent payloads (issue 38 classes 8 and 17): whatever arrives on a hook's stdin (huge,
nested 100,000 deep, not UTF-8, not JSON, empty), every agent's hook exits 0 with a reply in
that agent's format; a transcript line that is too deep or too big costs only that line, never
the checkpoint, and the memory a transcript costs is bounded by the caps, not by its shape."""

from __future__ import annotations

import json
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from helpers import subprocess_env

from snapstore.integrations import agents, bounded_json, claude_code, claude_transcript
from snapstore.store import Store

DEEP = b"[" * 100_000 + b"]" * 100_000


def _hook(project: Path, agent: str, stdin: bytes) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "snapstore", "hook", agent, "--no-service"], cwd=project, input=stdin,
        capture_output=True, env=subprocess_env(CLAUDE_PROJECT_DIR=str(project)), timeout=120,
    )


# -- class 17: every hook answers, whatever arrives ------------------------------------------------

HOSTILE = {
    "empty": b"",
    "not-json": b"hello, hook",
    "not-utf8": b"\xff\xfe{\x80",
    "deep": DEEP,
    "deep-inside-an-event": b'{"hook_event_name":"PostToolUse","session_id":"s","tool_name":"Write","tool_input":'
                            + DEEP + b"}",
    "many-values": b"[" + b"0," * (bounded_json.MAX_PAYLOAD_VALUES + 10) + b"0]",
    "a-list": b"[1, 2, 3]",
    "odd-types": json.dumps({
        "hook_event_name": ["PostToolUse"], "session_id": {"a": 1}, "tool_name": 5, "tool_input": "x", "cwd": 7,
        "workspace_roots": "x", "workspaceRoots": 3, "taskId": [], "agent_action_name": {}, "tool_info": [1],
        "toolName": 1, "toolArgs": 2, "hookName": 3, "directory": [], "event": 4, "tool": None,
    }).encode(),
}


def _in_agent_format(agent: str, out: bytes) -> None:
    """The stdout each agent expects (docs/agents.md): a JSON object where the agent parses
    stdout as JSON, and nothing where stdout would reach the model or be read as a decision."""
    text = out.decode()
    if agent in ("copilot", "kiro", "windsurf", "opencode"):
        assert text == "", text
        return
    if agent in ("claude-code", "codex") and text == "":
        return
    doc = json.loads(text)
    assert isinstance(doc, dict)
    if agent == "cline":
        assert doc["cancel"] is False
    if agent in ("claude-code", "codex"):
        assert set(doc) == {"systemMessage"}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
@pytest.mark.parametrize("agent", agents.AGENTS)
def test_every_hook_answers_in_its_agents_format_whatever_arrives(project: Path, agent: str, kind: str):
    done = _hook(project, agent, HOSTILE[kind])
    assert done.returncode == 0, done.stderr[-2000:]
    assert b"Traceback" not in done.stderr, done.stderr[-2000:]
    _in_agent_format(agent, done.stdout)
    if agent == "claude-code" and kind in ("deep", "many-values"):  # said once, in one line
        assert "over snapstore's limits" in json.loads(done.stdout)["systemMessage"]


@pytest.mark.parametrize("agent", ["claude-code", "gemini", "copilot", "cline"])  # one of each reply style
def test_a_payload_over_the_cap_is_not_read_whole(project: Path, agent: str):
    """A stdin without end (here 3x the cap, from /dev/zero) is read up to the cap and answered
    in the agent's format (a 9-agent run of it would pass a GiB through pipes per agent)."""
    done = subprocess.run(
        f"head -c {3 * bounded_json.MAX_PAYLOAD_BYTES} /dev/zero | {sys.executable} -m snapstore hook {agent} --no-service",
        shell=True, cwd=project, capture_output=True, env=subprocess_env(CLAUDE_PROJECT_DIR=str(project)), timeout=120,
    )
    assert done.returncode == 0 and b"Traceback" not in done.stderr, done.stderr[-2000:]
    _in_agent_format(agent, done.stdout)


def test_measure_counts_values_and_depth_outside_strings():
    assert bounded_json.measure('{"a": "[[[[{{", "b": [1, [2, {"c": "\\"]"}]]}') == (8, 4)
    assert bounded_json.measure("12") == (1, 0)
    with pytest.raises(bounded_json.Unbounded, match="deep"):
        bounded_json.loads(DEEP.decode(), max_chars=1 << 20, max_values=1 << 20)
    assert bounded_json.loads('{"a": [[1]]}', max_chars=100, max_values=10, max_depth=3) == {"a": [[1]]}
    with pytest.raises(bounded_json.Unbounded, match="values"):
        bounded_json.loads("[1, 2, 3]", max_chars=100, max_values=3)


# -- class 8: transcripts --------------------------------------------------------------------------


def _event(name: str, transcript: Path | str, **more: str) -> str:
    return json.dumps({"hook_event_name": name, "session_id": "s1", "transcript_path": str(transcript), **more})


def _line(n: int) -> bytes:
    return json.dumps({"type": "user", "uuid": f"u{n}", "message": {"role": "user", "content": f"m{n}"}}).encode()


def test_a_transcript_line_nested_100000_deep_costs_only_that_line(project: Path):
    transcript = project.parent / "t.jsonl"
    transcript.write_bytes(b"\n".join([_line(1), DEEP, _line(2)]) + b"\n")
    for event in (_event("UserPromptSubmit", transcript, prompt="one"), _event("Stop", transcript),
                  _event("UserPromptSubmit", transcript, prompt="two")):
        (project / "a.txt").write_text(event)  # a change, so that each records
        assert claude_code.run(event, str(project), lambda: Store.open(project), start_service=False) == ""
    with Store.open(project) as store:
        recorded = store.checkpoints(task="s1")
        assert [c.message for c in recorded] == ["two", "end of turn", "one"]
        assert [m["uuid"] for m in store.conversation(recorded[0].id) or []] == ["u1", "u2"]
    log = (project / ".snapstore" / claude_code.LOG_NAME).read_text()
    assert "line 2: nested 100000 deep" in log


def test_a_transcript_path_that_is_a_directory_costs_no_checkpoint(project: Path):
    folder = project.parent / "a-directory.jsonl"
    folder.mkdir()
    (project / "a.txt").write_text("changed\n")
    assert claude_code.run(_event("Stop", folder), str(project), lambda: Store.open(project), start_service=False) == ""
    with Store.open(project) as store:
        assert [c.message for c in store.checkpoints(task="s1")] == ["end of turn"]
    assert "not a regular file" in (project / ".snapstore" / claude_code.LOG_NAME).read_text()


def test_rewind_from_a_transcript_that_is_a_directory_is_one_clear_error(project: Path):
    folder = project.parent / "a-directory.jsonl"
    folder.mkdir()
    with Store.open(project) as store:
        store.snapshot("cp", task="s1")
    done = subprocess.run(
        [sys.executable, "-m", "snapstore", "rewind", "--claude-session", "s1", "--to", "latest", "--transcript", str(folder)],
        cwd=project, capture_output=True, env=subprocess_env(), timeout=60,
    )
    assert done.returncode == 4, done.stderr
    assert done.stderr.decode().count("\n") == 1 and "not a regular file" in done.stderr.decode()


def _read_between_two_lines(tmp_path: Path, line: bytes) -> tuple[list[Any] | None, list[str], int]:
    """``read_transcript`` of a transcript holding ``line`` between two good ones: the messages,
    the warnings, and the peak of memory the read allocated (tracemalloc)."""
    transcript = tmp_path / "t.jsonl"
    transcript.write_bytes(b"\n".join([_line(1), line, _line(2)]) + b"\n")
    warnings: list[str] = []
    tracemalloc.start()
    try:
        messages = claude_transcript.read_transcript(str(transcript), warnings)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return messages, warnings, peak


def test_a_line_over_the_value_cap_is_skipped_and_memory_stays_bounded(tmp_path: Path):
    """A 6 MiB line of empty lists (2 million values) would cost ~150 MiB of Python objects;
    skipped, the read costs a few times the line's bytes."""
    bomb = b"[" + b"[]," * (2 << 20) + b"[]]"
    messages, warnings, peak = _read_between_two_lines(tmp_path, bomb)
    assert [m["uuid"] for m in messages or []] == ["u1", "u2"]
    assert "values" in warnings[0]
    assert peak < 5 * len(bomb), f"peak {peak >> 20} MiB for a {len(bomb) >> 20} MiB line"


def test_a_line_over_the_byte_cap_is_skipped_without_being_held(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(claude_transcript, "MAX_LINE_BYTES", 1 << 20)
    messages, warnings, peak = _read_between_two_lines(tmp_path, b'["' + b"x" * (8 << 20) + b'"]')
    assert [m["uuid"] for m in messages or []] == ["u1", "u2"]
    assert "longer than 1 MiB" in warnings[0]
    assert peak < 4 << 20, f"peak {peak >> 20} MiB"


def test_the_lines_read_stop_at_the_file_value_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(claude_transcript, "MAX_TRANSCRIPT_VALUES", 30)
    transcript = tmp_path / "t.jsonl"
    transcript.write_bytes(b"\n".join(_line(n) for n in range(10)) + b"\n")
    warnings: list[str] = []
    messages = claude_transcript.read_transcript(str(transcript), warnings)
    assert [m["uuid"] for m in messages or []] == ["u0", "u1", "u2", "u3", "u4"]  # 6 values a line
    assert "stored up to line 5" in warnings[0]


_MAX_RSS = """
import resource, subprocess, sys
with open(sys.argv[1], "rb") as f:
    subprocess.run(sys.argv[2:], stdin=f, stdout=subprocess.DEVNULL, check=True)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def test_the_stop_hook_over_a_16_mib_array_line_stays_small(project: Path):
    """The probe's case: one 16 MiB JSON array line cost the Stop hook 1.26 GiB.  Measured as the
    hook process's own max RSS (machine-independent): a few times the line, not ~80x it."""
    for name, bomb in (("long", b"[" + b"0.5," * (4 << 20) + b"0]"), ("many", b"[" + b"[]," * (5 << 20) + b"[]]")):
        _stop_hook_rss(project, name, bomb)


def _stop_hook_rss(project: Path, name: str, bomb: bytes) -> None:
    transcript = project.parent / f"{name}.jsonl"
    transcript.write_bytes(b"\n".join([_line(1), bomb, _line(2)]) + b"\n")
    event = project.parent / "event.json"
    event.write_text(_event("Stop", transcript))
    (project / "a.txt").write_text(name)
    done = subprocess.run(
        [sys.executable, "-c", _MAX_RSS, str(event), sys.executable, "-m", "snapstore", "hook", "claude-code", "--no-service"],
        cwd=project, capture_output=True, env=subprocess_env(CLAUDE_PROJECT_DIR=str(project)), timeout=120, check=True,
    )
    rss_mib = int(done.stdout) >> 10
    print(f"Stop hook over a {len(bomb) >> 20} MiB line ({name}): max RSS {rss_mib} MiB")
    assert rss_mib < 150, f"the Stop hook took {rss_mib} MiB over a {len(bomb) >> 20} MiB line"
    with Store.open(project) as store:
        stop = store.checkpoints(task="s1")[0]
        assert stop.message == "end of turn"
        assert [m["uuid"] for m in store.conversation(stop.id) or []] == ["u1", "u2"]
