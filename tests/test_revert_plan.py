"""The selective-revert planner and the three-way merge, without a store (laws and cases)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from snapstore.ops.merge import merge
from snapstore.ops.revert.planner import RevertStep, plan
from snapstore.records.manifest import EXEC, FILE, Entry
from snapstore.storage.objects import chunk_id

BLOBS: dict[bytes, bytes] = {}


def entry(path: bytes, data: bytes, mode: int = 0o644) -> Entry:
    BLOBS[chunk_id(data)] = data
    return Entry(path, EXEC if mode & 0o100 else FILE, mode, len(data), 0, chunk_id(data))


def read(e: Entry) -> bytes:
    return BLOBS[e.ref]


def outcome_bytes(outcome) -> bytes | None:
    final = outcome.final
    if final.entry is None:
        return None
    return final.data if final.data is not None else read(final.entry)


@st.composite
def edits(draw):
    """A base text and two sets of line edits that neither overlap nor touch."""
    n = draw(st.integers(min_value=4, max_value=30))
    base = [b"line %d\n" % i for i in range(n)]
    # Give each line an owner: agent, user or nobody, with a free line between any two edits.
    owners = []
    last = None
    for _ in range(n):
        choice = draw(st.sampled_from(["agent", "user", None, None]))
        if choice is not None and last is not None and last != choice:
            choice = None
        if choice is not None and owners and owners[-1] not in (None, choice):
            choice = None
        owners.append(choice)
        last = choice if choice is not None else None
    agent = [b"agent %d\n" % i if o == "agent" else line for i, (line, o) in enumerate(zip(base, owners))]
    both = [b"user %d\n" % i if o == "user" else line for i, (line, o) in enumerate(zip(agent, owners))]
    user_only = [b"user %d\n" % i if o == "user" else line for i, (line, o) in enumerate(zip(base, owners))]
    return b"".join(base), b"".join(agent), b"".join(both), b"".join(user_only)


@given(edits())
def test_reverting_the_agent_keeps_exactly_the_user_s_edits(case):
    base, after_agent, now, expected = case
    step = RevertStep("agent", {b"f": entry(b"f", base)}, {b"f": entry(b"f", after_agent)})
    [out] = plan([step], {b"f": entry(b"f", now)}, read)
    assert out.status in ("reverted", "merged", "untouched")
    assert outcome_bytes(out) == expected


@given(st.lists(st.binary(min_size=1, max_size=5).map(lambda b: b.replace(b"\n", b"") + b"\n"), min_size=3, max_size=12), st.data())
def test_overlapping_edits_are_always_conflicts(lines, data):
    i = data.draw(st.integers(min_value=0, max_value=len(lines) - 1))
    base = b"".join(lines)
    agent = b"".join(lines[:i] + [b"AGENT\n"] + lines[i + 1 :])
    user = b"".join(lines[:i] + [b"USER\n"] + lines[i + 1 :])
    step = RevertStep("agent", {b"f": entry(b"f", base)}, {b"f": entry(b"f", agent)})
    [out] = plan([step], {b"f": entry(b"f", user)}, read)
    assert out.status == "conflict" and out.conflicts
    assert outcome_bytes(out) == user  # nothing changed


def test_markers_and_sides():
    base, theirs, ours = b"a\nb\nc\n", b"a\nB0\nc\n", b"a\nX\nc\n"
    r = merge(base, ours, theirs)
    assert r.conflicts and r.markers and b"<<<<<<<" in r.data and b"X\n" in r.data and b"B0\n" in r.data
    assert merge(base, ours, theirs, prefer="ours").data == ours
    assert merge(base, ours, theirs, prefer="theirs").data == theirs


def test_crlf_and_no_final_newline_survive():
    base = b"one\r\ntwo\r\nthree\r\nfour"
    after = b"one\r\nTWO\r\nthree\r\nfour"
    now = b"one\r\nTWO\r\nthree\r\nFOUR"
    step = RevertStep("agent", {b"f": entry(b"f", base)}, {b"f": entry(b"f", after)})
    [out] = plan([step], {b"f": entry(b"f", now)}, read)
    assert out.status == "merged"
    assert outcome_bytes(out) == b"one\r\ntwo\r\nthree\r\nFOUR"


def test_added_file_is_removed_and_removed_file_comes_back():
    gone = entry(b"old", b"kept\n")
    step = RevertStep("agent", {b"old": gone}, {b"new": entry(b"new", b"fresh\n")})
    outs = {o.path: o for o in plan([step], {b"new": entry(b"new", b"fresh\n")}, read)}
    assert outs[b"new"].final.entry is None and outs[b"new"].status == "reverted"
    assert outcome_bytes(outs[b"old"]) == b"kept\n"


def test_recreated_file_is_not_overwritten_and_edited_addition_conflicts():
    step = RevertStep("agent", {b"x": entry(b"x", b"orig\n")}, {})
    [out] = plan([step], {b"x": entry(b"x", b"user made a new one\n")}, read)
    assert out.status == "conflict"
    step = RevertStep("agent", {}, {b"y": entry(b"y", b"agent wrote\n")})
    [out] = plan([step], {b"y": entry(b"y", b"agent wrote\nuser added\n")}, read)
    assert out.status == "conflict" and outcome_bytes(out) == b"agent wrote\nuser added\n"


def test_binary_changed_since_is_a_conflict_and_untouched_binary_goes_back():
    a, b = entry(b"img", b"\x00\x01old"), entry(b"img", b"\x00\x01new")
    [out] = plan([RevertStep("agent", {b"img": a}, {b"img": b})], {b"img": b}, read)
    assert outcome_bytes(out) == b"\x00\x01old"
    [out] = plan([RevertStep("agent", {b"img": a}, {b"img": b})], {b"img": entry(b"img", b"\x00user")}, read)
    assert out.status == "conflict"


def test_mode_change_reverts_and_user_mode_change_is_kept():
    a, b = entry(b"s", b"x\n", 0o644), entry(b"s", b"x\n", 0o755)
    [out] = plan([RevertStep("agent", {b"s": a}, {b"s": b})], {b"s": b}, read)
    assert out.final.entry is not None and out.final.entry.mode == 0o644
    # The agent edited the content; the user made it executable since: content back, mode kept.
    a, b = entry(b"s", b"x\n", 0o644), entry(b"s", b"y\n", 0o644)
    now = entry(b"s", b"y\n", 0o755)
    [out] = plan([RevertStep("agent", {b"s": a}, {b"s": b})], {b"s": now}, read)
    assert outcome_bytes(out) == b"x\n" and out.final.entry.mode == 0o755


def test_rename_is_followed():
    content = b"def f():\n    return 1\n\n\nx = 2\n"
    step = RevertStep("agent", {b"a.py": entry(b"a.py", content)}, {b"b.py": entry(b"b.py", content)})
    edited = content.replace(b"x = 2", b"x = 3")  # the user edited the renamed file
    outs = {o.path: o for o in plan([step], {b"b.py": entry(b"b.py", edited)}, read)}
    assert outcome_bytes(outs[b"a.py"]) == edited
    assert outs[b"b.py"].final.entry is None


def test_several_steps_compose_newest_first():
    v0, v1, v2 = b"a\nb\nc\nd\ne\n", b"A\nb\nc\nd\ne\n", b"A\nb\nc\nd\nE\n"
    s1 = RevertStep("agent 1", {b"f": entry(b"f", v0)}, {b"f": entry(b"f", v1)})
    s2 = RevertStep("agent 2", {b"f": entry(b"f", v1)}, {b"f": entry(b"f", v2)})
    now = b"A\nb\nUSER\nd\nE\n"
    [out] = plan([s1, s2], {b"f": entry(b"f", now)}, read)
    assert outcome_bytes(out) == b"a\nb\nUSER\nd\ne\n"


def test_empty_files():
    step = RevertStep("agent", {b"e": entry(b"e", b"")}, {b"e": entry(b"e", b"text\n")})
    [out] = plan([step], {b"e": entry(b"e", b"text\n")}, read)
    assert outcome_bytes(out) == b""
