"""`snapstore rewind --claude-session ID --to REF` (issue 23 req 7): the files go back through
the undoable restore, and a new session, cut at the checkpoint, is written beside the original
transcript for `claude --resume`: lines up to the checkpoint, every sessionId rewritten, no
unanswered tool call at its end, the original untouched."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from helpers import subprocess_env

from snapstore.integrations import claude_transcript
from snapstore.store import Store

SID = "0b9a7c2e-5d41-4c57-9a51-3f2e8d6c1a10"


class Session:
    """A Claude Code session as it appears on disk: its transcript grows, its hooks run."""

    def __init__(self, tmp: Path):
        self.home = tmp / "home"
        self.tree = tmp / "proj"
        self.tree.mkdir()
        folder = self.home / ".claude" / "projects" / claude_transcript.project_slug(str(self.tree))
        folder.mkdir(parents=True)
        self.transcript = folder / f"{SID}.jsonl"
        self.transcript.write_text("")
        self.last: str | None = None

    def line(self, kind: str, content: Any) -> str:
        uid = str(uuid.uuid4())
        doc = {"type": kind, "uuid": uid, "parentUuid": self.last, "sessionId": SID, "cwd": str(self.tree),
               "timestamp": dt.datetime.now(dt.timezone.utc).isoformat().replace("+00:00", "Z"),
               "message": {"role": kind, "content": content}}
        with self.transcript.open("a") as f:
            f.write(json.dumps(doc) + "\n")
        self.last = uid
        time.sleep(0.01)  # distinct timestamps, as a real session has
        return uid

    def hook(self, name: str, **fields: Any) -> None:
        doc = {"hook_event_name": name, "session_id": SID, "transcript_path": str(self.transcript), "cwd": str(self.tree), **fields}
        env = {k: v for k, v in subprocess_env().items() if not k.startswith("CLAUDE_")}
        done = subprocess.run([sys.executable, "-m", "snapstore", "hook", "claude-code", "--no-service"], input=json.dumps(doc),
                              cwd=self.tree, env={**env, "HOME": str(self.home), "CLAUDE_PROJECT_DIR": str(self.tree)},
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and done.stdout == "", done
        time.sleep(0.01)

    def rewind(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in subprocess_env().items() if not k.startswith("CLAUDE_")}
        return subprocess.run([sys.executable, "-m", "snapstore", "rewind", "--claude-session", SID, *args], cwd=self.tree,
                              env={**env, "HOME": str(self.home)}, capture_output=True, text=True, timeout=60)


def play(s: Session) -> None:
    """Two turns: the first edits a.py, the second runs a command that makes b.txt."""
    (s.tree / "a.py").write_text("x = 1\n")
    s.line("user", "make x 2")
    s.hook("UserPromptSubmit", prompt="make x 2")
    s.line("assistant", [{"type": "tool_use", "id": "toolu_1", "name": "Edit", "input": {"file_path": "a.py"}}])
    s.hook("PreToolUse", tool_name="Edit", tool_use_id="toolu_1", tool_input={"file_path": str(s.tree / "a.py")})
    (s.tree / "a.py").write_text("x = 2\n")
    s.hook("PostToolUse", tool_name="Edit", tool_use_id="toolu_1", tool_input={"file_path": str(s.tree / "a.py")})
    s.line("user", [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}])
    s.line("assistant", [{"type": "text", "text": "done"}])
    s.hook("Stop")
    s.line("user", "now make b")
    s.hook("UserPromptSubmit", prompt="now make b")
    s.line("assistant", [{"type": "tool_use", "id": "toolu_2", "name": "Bash", "input": {"command": "touch b.txt"}}])
    s.hook("PreToolUse", tool_name="Bash", tool_use_id="toolu_2", tool_input={"command": "touch b.txt"})
    (s.tree / "b.txt").write_text("")
    s.hook("PostToolUse", tool_name="Bash", tool_use_id="toolu_2", tool_input={"command": "touch b.txt"})
    s.line("user", [{"type": "tool_result", "tool_use_id": "toolu_2", "content": ""}])
    s.line("assistant", [{"type": "text", "text": "made b"}])
    s.hook("Stop")


def new_session(out: str) -> tuple[str, list[dict[str, Any]]]:
    sid = next(line.split()[-1] for line in out.splitlines() if line.startswith("resume it: claude --resume"))
    path = next(line.split("(")[1].rstrip(")") for line in out.splitlines() if line.startswith("new session"))
    return sid, [json.loads(x) for x in Path(path).read_text().splitlines()]


def test_rewind_to_the_second_prompt_restores_files_and_cuts_the_conversation(tmp_path: Path):
    s = Session(tmp_path)
    play(s)
    original = s.transcript.read_bytes()
    with Store.open(s.tree) as store:
        second = next(c for c in store.checkpoints(task=SID) if c.message == "now make b")
    done = s.rewind("--to", second.short_id)
    assert done.returncode == 0, done.stderr
    sid, lines = new_session(done.stdout)
    assert s.transcript.read_bytes() == original  # the original is untouched
    assert (s.transcript.parent / f"{sid}.jsonl").exists() and sid != SID
    assert not (s.tree / "b.txt").exists() and (s.tree / "a.py").read_text() == "x = 2\n"
    # The conversation stored with that prompt's checkpoint: the first turn and the prompt.
    texts = [json.dumps(line["message"]["content"]) for line in lines]
    assert len(lines) == 5 and "done" in texts[-2] and "now make b" in texts[-1], texts
    assert all(line["sessionId"] == sid for line in lines)
    assert claude_transcript.problems(lines, sid) == []
    # The restore is undoable.
    env = {k: v for k, v in subprocess_env().items() if not k.startswith("CLAUDE_")}
    subprocess.run([sys.executable, "-m", "snapstore", "undo"], cwd=s.tree, env=env, check=True, capture_output=True, timeout=60)
    assert (s.tree / "b.txt").exists()


def test_a_tool_checkpoint_is_cut_by_time_without_an_unanswered_tool_call(tmp_path: Path):
    s = Session(tmp_path)
    play(s)
    with Store.open(s.tree) as store:
        before_bash = next(c for c in store.checkpoints(task=SID) if c.message.startswith("after Edit"))
        assert store.conversation(before_bash.id) is None  # a tool checkpoint stores none
    done = s.rewind("--to", before_bash.short_id, "--no-files")
    assert done.returncode == 0, done.stderr
    assert (s.tree / "b.txt").exists()  # --no-files: the files stay
    sid, lines = new_session(done.stdout)
    # At "after Edit" the files hold the edit: the conversation keeps the Edit's tool_use and
    # its tool_result (written after PostToolUse), so files and conversation agree (issue 37).
    assert [line["message"]["content"] for line in lines][0] == "make x 2"
    assert [b.get("tool_use_id") for b in lines[-1]["message"]["content"]] == ["toolu_1"]
    assert len(lines) == 3 and claude_transcript.problems(lines, sid) == []


class RealSession(Session):
    """Lines shaped as Claude Code 2.1 writes them: an assistant message split into one line per
    content block (same ``message.id``), bookkeeping keys, ``toolUseResult`` beside the result."""

    def real(self, kind: str, message: dict[str, Any], **extra: Any) -> str:
        uid = str(uuid.uuid4())
        doc = {"parentUuid": self.last, "isSidechain": False, "userType": "external", "cwd": str(self.tree),
               "sessionId": SID, "version": "2.1.33", "gitBranch": "main", "type": kind, "message": message,
               "uuid": uid, "timestamp": dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
               **extra}
        with self.transcript.open("a") as f:
            f.write(json.dumps(doc, separators=(",", ":")) + "\n")
        self.last = uid
        time.sleep(0.01)
        return uid

    def assistant(self, block: dict[str, Any]) -> str:
        return self.real("assistant", {"id": "msg_01X", "type": "message", "role": "assistant", "model": "claude-opus-4-5",
                                       "content": [block], "stop_reason": None, "usage": {"input_tokens": 3, "output_tokens": 9}},
                         requestId="req_011")


def test_rewind_to_after_a_tool_keeps_its_result_in_a_real_transcript_shape(tmp_path: Path):
    s = RealSession(tmp_path)
    (s.tree / "a.py").write_text("x = 1\n")
    s.real("user", {"role": "user", "content": "make x 2 and run the tests"})
    s.hook("UserPromptSubmit", prompt="make x 2 and run the tests")
    s.assistant({"type": "text", "text": "I'll edit a.py."})
    edit = {"file_path": str(s.tree / "a.py"), "old_string": "x = 1", "new_string": "x = 2"}
    s.assistant({"type": "tool_use", "id": "toolu_01Edit", "name": "Edit", "input": edit})
    s.hook("PreToolUse", tool_name="Edit", tool_use_id="toolu_01Edit", tool_input=edit)
    (s.tree / "a.py").write_text("x = 2\n")
    s.hook("PostToolUse", tool_name="Edit", tool_use_id="toolu_01Edit", tool_input=edit, tool_response={"filePath": edit["file_path"]})
    s.real("user", {"role": "user", "content": [{"tool_use_id": "toolu_01Edit", "type": "tool_result",
                                                 "content": "The file a.py has been updated."}]},
           toolUseResult={"filePath": edit["file_path"], "oldString": "x = 1", "newString": "x = 2"})
    s.assistant({"type": "tool_use", "id": "toolu_01Bash", "name": "Bash", "input": {"command": "touch ran"}})
    s.hook("PreToolUse", tool_name="Bash", tool_use_id="toolu_01Bash", tool_input={"command": "touch ran"})
    (s.tree / "ran").write_text("")
    s.hook("PostToolUse", tool_name="Bash", tool_use_id="toolu_01Bash", tool_input={"command": "touch ran"})
    s.real("user", {"role": "user", "content": [{"tool_use_id": "toolu_01Bash", "type": "tool_result", "content": ""}]},
           toolUseResult={"stdout": "", "stderr": "", "interrupted": False})
    s.assistant({"type": "text", "text": "Done."})
    s.hook("Stop")
    with Store.open(s.tree) as store:
        after_edit = next(c for c in store.checkpoints(task=SID) if c.message.startswith("after Edit"))
        assert after_edit.metadata["tool_use_id"] == "toolu_01Edit"
    done = s.rewind("--to", after_edit.short_id)
    assert done.returncode == 0, done.stderr
    assert (s.tree / "a.py").read_text() == "x = 2\n" and not (s.tree / "ran").exists()
    sid, lines = new_session(done.stdout)
    blocks = [b for line in lines[1:] for b in line["message"]["content"]]
    assert [b["type"] for b in blocks] == ["text", "tool_use", "tool_result"]
    assert blocks[1]["id"] == blocks[2]["tool_use_id"] == "toolu_01Edit"
    assert "toolUseResult" in lines[-1] and claude_transcript.problems(lines, sid) == []


def test_a_dry_run_writes_nothing_and_bad_input_is_one_line(tmp_path: Path):
    s = Session(tmp_path)
    play(s)
    folder = s.transcript.parent
    done = s.rewind("--to", "#2", "--dry-run")
    assert done.returncode == 0 and "would restore" in done.stdout, done.stderr
    assert sorted(p.name for p in folder.iterdir()) == [f"{SID}.jsonl"] and (s.tree / "b.txt").exists()
    missing = s.rewind("--to", "#2", "--transcript", str(tmp_path / "nope.jsonl"))
    assert missing.returncode != 0 and len(missing.stderr.strip().splitlines()) == 1 and "Traceback" not in missing.stderr
    other = subprocess.run([sys.executable, "-m", "snapstore", "rewind", "--claude-session", "../../etc", "--to", "#1"],
                           cwd=s.tree, env=subprocess_env(HOME=str(s.home)), capture_output=True, text=True, timeout=60)
    assert other.returncode == 2 and "not a Claude Code session id" in other.stderr


def test_rewind_to_after_one_of_two_parallel_calls_keeps_that_call_and_drops_the_other(tmp_path: Path):
    """Two Bash calls asked at once (one line per tool_use), the first answered before the second:
    the cut at "after" the first keeps its call and result, and drops only the other call, whose
    result came later (the parentUuid chain re-linked past the dropped line)."""
    s = RealSession(tmp_path)
    s.real("user", {"role": "user", "content": "make a and b"})
    s.hook("UserPromptSubmit", prompt="make a and b")
    s.assistant({"type": "tool_use", "id": "toolu_A", "name": "Bash", "input": {"command": "touch a"}})
    s.assistant({"type": "tool_use", "id": "toolu_B", "name": "Bash", "input": {"command": "sleep 1; touch b"}})
    s.hook("PreToolUse", tool_name="Bash", tool_use_id="toolu_A", tool_input={"command": "touch a"})
    s.hook("PreToolUse", tool_name="Bash", tool_use_id="toolu_B", tool_input={"command": "sleep 1; touch b"})
    (s.tree / "a").write_text("")
    s.hook("PostToolUse", tool_name="Bash", tool_use_id="toolu_A", tool_input={"command": "touch a"})
    s.real("user", {"role": "user", "content": [{"tool_use_id": "toolu_A", "type": "tool_result", "content": ""}]})
    (s.tree / "b").write_text("")
    s.hook("PostToolUse", tool_name="Bash", tool_use_id="toolu_B", tool_input={"command": "sleep 1; touch b"})
    s.real("user", {"role": "user", "content": [{"tool_use_id": "toolu_B", "type": "tool_result", "content": ""}]})
    s.assistant({"type": "text", "text": "both made"})
    s.hook("Stop")
    with Store.open(s.tree) as store:
        after_a = next(c for c in store.checkpoints(task=SID) if c.metadata.get("tool_use_id") == "toolu_A" and c.message.startswith("after"))
    done = s.rewind("--to", after_a.short_id, "--no-files")
    assert done.returncode == 0, done.stderr
    sid, lines = new_session(done.stdout)
    blocks = [(b["type"], b.get("id") or b.get("tool_use_id")) for line in lines[1:] for b in line["message"]["content"]]
    assert blocks == [("tool_use", "toolu_A"), ("tool_result", "toolu_A")]
    assert claude_transcript.problems(lines, sid) == []
