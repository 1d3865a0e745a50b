"""Checkpoints with their conversation (issue 27 req 4): each timeline row's prompt, a
checkpoint's new messages first and the earlier ones folded, rendering bounded.  (Filled in
by ui.js in a real browser: test_ui_browser_flows.py.)"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="the ui extra is not installed (pip install -e '.[ui]')")
pytest.importorskip("httpx", reason="httpx (for Starlette's TestClient) is not installed")

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from ui_client import logged_in  # noqa: E402

from snapstore.store import Store  # noqa: E402
from snapstore.ui import conversation  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

PORT = 47816
ORIGIN = f"http://127.0.0.1:{PORT}"
TOKEN = "convo-token-0123456789"
EVIL = "<script>alert(1)</script>"

FIRST = [{"role": "user", "content": "add a greeting"}, {"role": "assistant", "content": "Added greet()."}]
SECOND = FIRST + [
    {"role": "user", "content": [{"type": "text", "text": "now make it  polite " + EVIL}]},
    {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_9", "name": "Edit", "input": {"file": "a.py", "new": "x = 2"}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_9", "content": "ok"}]},
    {"role": "assistant", "content": "Done: it says please."},
]


def client_for(store: Store) -> TestClient:
    return logged_in(store, PORT, TOKEN)


@pytest.fixture
def store(tree: Path) -> Iterator[Store]:
    (tree / "a.py").write_text("x = 1\n")
    with Store.init(tree) as s:
        s.snapshot("one", conversation=FIRST)
        (tree / "a.py").write_text("x = 2\n")
        s.snapshot("two", conversation=SECOND)
        (tree / "a.py").write_text("x = 3\n")
        s.snapshot("three, no conversation")
        yield s


def test_each_row_gets_the_prompt_it_belongs_to(store: Store):
    found = client_for(store).get("/timeline.prompts").json()
    one, two = store.resolve("latest~2").id, store.resolve("latest~1").id
    assert found == {one: "add a greeting", two: "now make it polite " + EVIL}  # the tool result is not a prompt
    assert client_for(store).get("/timeline.prompts?q=one").json() == {one: "add a greeting"}


def test_a_checkpoint_shows_its_new_messages_first_and_folds_the_earlier_ones(store: Store):
    html = client_for(store).get(f"/c/{store.resolve('latest~1').id}").text
    new, earlier = html.split("New in this checkpoint")[1].split('<details class="earlier">')
    assert "4 messages, newest first" in new
    assert new.index("Done: it says please.") < new.index("now make it")  # newest first
    assert "2 earlier messages" in earlier and "add a greeting" in earlier
    assert '<p class="prompt"><span class="prompt-mark">prompt</span> now make it polite &lt;script&gt;' in html
    assert EVIL not in html
    assert '<a href="#conversation">Conversation</a> <small>(4 new)</small>' in html


def test_tool_calls_and_results_are_cards_not_json(store: Store):
    """Issue 42 req 4: a tool call shows its name and each argument; its result names the call
    it answers and is labelled a tool's, not the user's."""
    html = client_for(store).get(f"/c/{store.resolve('latest~1').id}").text
    assert '<div class="tool-card tool-use"><span class="tool-name">Edit</span> <small>call</small><dl><dt>file</dt><dd><code>a.py</code></dd>' in html
    assert '<div class="tool-card tool-result"><span class="tool-name">Edit</span> <small>result</small><pre>ok</pre></div>' in html
    assert '<li class="msg role-tool"><span class="role">tool</span>' in html
    assert "tool_result" not in html and "[tool call" not in html


def test_a_rewind_preview_says_what_happens_to_the_conversation(store: Store):
    from urllib.parse import urlencode

    client = client_for(store)
    headers = {"origin": ORIGIN, "content-type": "application/x-www-form-urlencoded"}
    two, one = store.resolve("latest~1").id, store.resolve("latest~2").id
    preview = client.post(f"/c/{one}/restore/preview", content=urlencode({"rewind": "1"}), headers=headers).text
    note = re.search(r'<p class="notice" id="rewind-note">(.*?)</p>', preview).group(1)
    assert "as it was at this checkpoint (JSON, 2 messages), without the 4 messages sent after it" in note
    plain = client.post(f"/c/{two}/restore/preview", content=urlencode({}), headers=headers).text
    assert 'id="rewind-note"' not in plain  # a plain restore leaves the conversation out of it


def test_a_long_conversation_renders_only_its_newest_messages(store: Store, monkeypatch):
    monkeypatch.setattr(conversation, "MAX_SHOWN", 3)
    html = client_for(store).get(f"/c/{store.resolve('latest~1').id}").text
    assert len(re.findall(r'<li class="msg ', html)) == 3
    assert "3 older messages are not shown here" in html


def test_prompts_stop_at_their_time_bound(store: Store, monkeypatch):
    monkeypatch.setattr(conversation, "PROMPT_SECONDS", -1.0)  # spent before the first read
    assert client_for(store).get("/timeline.prompts").json() == {}


def test_rewind_files_and_conversation_restores_then_hands_the_conversation_back(store: Store, tree: Path):
    from urllib.parse import urlencode

    client = client_for(store)
    two = store.resolve("latest~1").id
    page = client.get(f"/c/{two}").text
    assert 'id="rewind-both"' in page and f'href="/c/{two}/conversation.json" download' in page
    headers = {"origin": ORIGIN, "content-type": "application/x-www-form-urlencoded"}
    preview = client.post(f"/c/{two}/restore/preview", content=urlencode({"rewind": "1"}), headers=headers).text
    assert '<input type="hidden" name="rewind" value="1">' in preview
    plan = re.search(r'name="plan" value="([0-9a-f]+)"', preview).group(1)
    done = client.post(f"/c/{two}/restore", content=urlencode({"rewind": "1", "plan": plan, "confirm": "yes"}), headers=headers).text
    assert 'id="rewound"' in done and f'href="/c/{two}/conversation.json"' in done
    assert (tree / "a.py").read_text() == "x = 2\n"  # the files are back too
    assert client.get(f"/c/{two}/conversation.json").json() == SECOND


def labels(html: str) -> list[int]:
    return [int(n) for n in re.findall(r'<td class="ref"><span title="checkpoint number \d+[^"]*">#(\d+)</span>', html)]


def test_search_in_conversations_finds_the_step_where_it_was_said(store: Store):
    client = client_for(store)
    assert labels(client.get("/?said=POLITE").text) == [2]
    assert labels(client.get("/?said=greeting").text) == [1]  # said in the first; only earlier in the second
    assert labels(client.get("/?said=please").text) == [2]  # the assistant's words count too
    assert labels(client.get("/?said=please&path=*.txt").text) == []  # and every filter must hold
    assert "No checkpoint matches." in client.get("/?said=nowhere").text


def test_a_prompt_is_shown_once_per_turn_and_never_on_the_user_s_rows(tree: Path):
    """Issue 42 req 4: not the same prompt on every row of its turn: on the oldest of its rows
    (not the user's), and not at all under a hook's prompt row, which heads the turn."""
    (tree / "a.py").write_text("x = 1\n")
    with Store.init(tree) as s:
        first = [{"role": "user", "content": "tidy a.py"}]
        for i in range(3):
            (tree / "a.py").write_text(f"x = {i + 2}\n")
            s.snapshot(f"after Edit {i}", conversation=first, metadata={"actor": "agent"})
        (tree / "a.py").write_text("x = 9\n")
        s.snapshot("before Edit", conversation=first, metadata={"actor": "user"})
        second = first + [{"role": "user", "content": "now b.py"}]
        s.snapshot("now b.py", conversation=second, metadata={"actor": "user", "event": "UserPromptSubmit"})
        (tree / "b.py").write_text("y = 1\n")
        s.snapshot("after Write b.py", conversation=second, metadata={"actor": "agent"})
        found = client_for(s).get("/timeline.prompts").json()
        assert found == {s.resolve(":/after Edit 0").id: "tidy a.py"}
        page = client_for(s).get("/").text
        assert re.search(r'<tr class="cp turn".*?now b\.py</a> <button type="button" class="small steps" data-fold="\d+" aria-expanded="true">1 step</button>', page)
