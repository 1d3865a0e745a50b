"""Selective revert from the UI (issue 27 req 3): a checkpoint's changes or a task's (by
actor) taken back with a preview and a confirmation, later changes kept, conflicts never
settled silently, a stale plan re-previewed, Undo after."""

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

from ui_client import logged_in, post_form  # noqa: E402

from snapstore.store import Store  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

PORT = 47817
ORIGIN = f"http://127.0.0.1:{PORT}"
TOKEN = "revert-token-0123456789"
A1 = "".join(f"line {i}\n" for i in range(20))


def client_for(store: Store) -> TestClient:
    return logged_in(store, PORT, TOKEN)


def post(client: TestClient, path: str, data: dict | None = None):
    return post_form(client, PORT, path, data)


def plan_of(html: str) -> str:
    found = re.search(r'name="plan" value="([0-9a-f]+)"', html)
    assert found, "no confirmation form"
    return found.group(1)


@pytest.fixture
def store(tree: Path) -> Iterator[Store]:
    (tree / "a.py").write_text(A1)
    (tree / "b.txt").write_text("b\n")
    with Store.init(tree) as s:
        s.snapshot("start", task="t")
        (tree / "a.py").write_text(A1.replace("line 2\n", "line two\n"))
        s.snapshot("agent edits a.py", task="t", metadata={"actor": "agent"})
        (tree / "b.txt").write_text("b by the user\n")
        s.snapshot("user edits b.txt", task="t", metadata={"actor": "user"})
        (tree / "a.py").write_text(A1.replace("line 2\n", "line two\n").replace("line 15\n", "line fifteen\n"))
        s.snapshot("agent edits a.py again", task="t", metadata={"actor": "agent"})
        yield s


def test_take_back_one_checkpoint_keeping_later_changes_then_undo(store: Store, tree: Path):
    client = client_for(store)
    cid = store.resolve("latest~2").id
    page = client.get(f"/c/{cid}").text
    assert f'action="/c/{cid}/revert/preview"' in page and 'id="revert-task"' in page
    preview = post(client, f"/c/{cid}/revert/preview").text
    assert "Dry run: nothing has changed yet." in preview and "1 path would be merged with the changes made since" in preview
    # the diff tree -> after the revert, rendered like a checkpoint's (rows by kind, line numbers)
    dels = [re.sub(r"<[^>]+>", "", r) for r in re.findall(r'<tr class="del">(.*?)</tr>', preview, re.S)]
    adds = [re.sub(r"<[^>]+>", "", r) for r in re.findall(r'<tr class="add">(.*?)</tr>', preview, re.S)]
    assert any("line two" in r for r in dels) and any(re.search(r"line 2\b", r) for r in adds), (dels, adds)
    assert tree.joinpath("a.py").read_text().startswith("line 0\nline 1\nline two\n")  # nothing yet
    done = post(client, f"/c/{cid}/revert/confirm", {"plan": plan_of(preview), "confirm": "yes"})
    assert done.status_code == 200 and 'id="result"' in done.text and 'id="undo"' in done.text
    a = tree.joinpath("a.py").read_text()
    assert "line 2\n" in a and "line fifteen\n" in a  # taken back, the later edit kept
    assert tree.joinpath("b.txt").read_text() == "b by the user\n"
    store.undo()
    assert "line two\n" in tree.joinpath("a.py").read_text()


def test_take_back_a_tasks_agent_changes_only(store: Store, tree: Path):
    client = client_for(store)
    header = re.search(r'<tr class="grp">.*?</tr>', client.get("/").text, re.S).group(0)
    assert '<input type="hidden" name="task" value="t"><input type="hidden" name="actor" value="agent">' in header  # on the task's header row
    preview = post(client, "/revert/preview", {"task": "t", "actor": "agent"}).text
    done = post(client, "/revert/confirm", {"task": "t", "actor": "agent", "plan": plan_of(preview), "confirm": "yes"})
    assert done.status_code == 200
    assert tree.joinpath("a.py").read_text() == A1  # both agent edits gone
    assert tree.joinpath("b.txt").read_text() == "b by the user\n"  # the user's kept


def test_a_conflict_is_settled_per_file_in_the_page(store: Store, tree: Path):
    """Issue 42 req 1: a conflict is listed first with its own choice (keep mine preselected),
    never a command-line sentence; confirming applies the choice; nothing changes before."""
    tree.joinpath("a.py").write_text(A1.replace("line 2\n", "line 2, edited by hand\n"))
    client = client_for(store)
    cid = store.resolve("latest~2").id
    preview = post(client, f"/c/{cid}/revert/preview")
    assert preview.status_code == 200 and "--conflicts" not in preview.text and 'id="confirm"' in preview.text
    token = "c.a.py"
    assert f'name="{token}" value="ours" checked' in preview.text and f'name="{token}" value="theirs"' in preview.text
    assert preview.text.index("conflict: you choose") < preview.text.index("Every path") + 400  # first in the list
    assert "line 2, edited by hand" in tree.joinpath("a.py").read_text()  # nothing yet
    done = post(client, f"/c/{cid}/revert/confirm", {"plan": plan_of(preview.text), "confirm": "yes", token: "theirs"})
    assert done.status_code == 200 and 'id="result"' in done.text
    assert tree.joinpath("a.py").read_text() == A1  # theirs: line 2 as before the change
    store.undo()
    assert "line 2, edited by hand" in tree.joinpath("a.py").read_text()
    done = post(client, f"/c/{cid}/revert/confirm", {"plan": plan_of(preview.text), "confirm": "yes", token: "ours"})
    assert "line 2, edited by hand" in tree.joinpath("a.py").read_text()  # keep mine


def test_a_stale_plan_is_previewed_again_and_a_bad_actor_refused(store: Store, tree: Path):
    client = client_for(store)
    cid = store.resolve("latest~2").id
    r = post(client, f"/c/{cid}/revert/confirm", {"plan": "0" * 32, "confirm": "yes"})
    assert "changed since the preview" in r.text and "line two\n" in tree.joinpath("a.py").read_text()
    assert post(client, f"/c/{cid}/revert/confirm", {"plan": "0" * 32}).status_code == 400
    assert post(client, "/revert/preview", {"task": "t", "actor": "robot"}).status_code == 400


def test_unknown_changes_are_listed_and_taken_only_from_a_second_preview(store: Store, tree: Path):
    """Issue 37: a task's changes by the agent leave the ones labelled unknown alone (listed);
    taking them too needs its own preview and confirmation."""
    tree.joinpath("bg.log").write_text("written while a background command ran\n")
    store.snapshot("end of turn", task="t", metadata={"actor": "unknown", "attributed": "background calls may still run"})
    client = client_for(store)
    preview = post(client, "/revert/preview", {"task": "t", "actor": "agent"}).text
    assert "Left alone:" in preview and "bg.log" in preview and 'id="include-unknown"' in preview
    done = post(client, "/revert/confirm", {"task": "t", "actor": "agent", "plan": plan_of(preview), "confirm": "yes"})
    assert done.status_code == 200 and tree.joinpath("bg.log").exists() and tree.joinpath("a.py").read_text() == A1
    store.undo()
    both = post(client, "/revert/preview", {"task": "t", "actor": "agent", "include_unknown": "1"}).text
    assert "Taken back too:" in both and 'name="include_unknown" value="1"' in both
    # The first plan (without the unknown change) no longer confirms this one.
    stale = post(client, "/revert/confirm", {"task": "t", "actor": "agent", "include_unknown": "1", "plan": plan_of(preview), "confirm": "yes"})
    assert "changed since the preview" in stale.text and tree.joinpath("bg.log").exists()
    done = post(client, "/revert/confirm", {"task": "t", "actor": "agent", "include_unknown": "1", "plan": plan_of(both), "confirm": "yes"})
    assert done.status_code == 200 and not tree.joinpath("bg.log").exists()
    assert tree.joinpath("b.txt").read_text() == "b by the user\n"


def range_of(html: str) -> str:
    found = re.search(r'name="range" value="([0-9a-f]+\.\.[0-9a-f]+)"', html)
    assert found, "no range form"
    return found.group(1)


def test_a_range_shows_one_actor_s_changes_combined_then_takes_them_back(store: Store, tree: Path):
    """Issue 42 req 1 over HTTP: the last hour's agent changes, combined, then previewed and
    confirmed with the same safety as every revert (same-origin POST, plan digest, Undo)."""
    client = client_for(store)
    page = client.get("/range?since=1h&actor=agent").text
    assert "The agent&#x27;s changes in the last hour" in page and "2 of 4 checkpoints" in page
    assert "b.txt" not in page.split("Changed files")[1].split("<details><summary>The")[0]  # the user's file: not the agent's
    text = re.sub(r"<[^>]+>", "", page)
    assert "fifteen" in text and "two" in text  # both agent edits, combined into one diff of a.py
    span = range_of(page)
    form = {"range": span, "actor": "agent"}
    # The same safety as any change: a POST from elsewhere is refused, nothing changes.
    foreign = client.post("/revert/confirm", data={**form, "plan": "0" * 32, "confirm": "yes"}, headers={"origin": "http://evil.example"})
    assert foreign.status_code == 403
    preview = post(client, "/revert/preview", form).text
    assert "Dry run: nothing has changed yet." in preview
    stale = post(client, "/revert/confirm", {**form, "plan": "0" * 32, "confirm": "yes"}).text
    assert "changed since the preview" in stale and "line two" in tree.joinpath("a.py").read_text()
    done = post(client, "/revert/confirm", {**form, "plan": plan_of(preview), "confirm": "yes"})
    assert done.status_code == 200 and 'id="undo"' in done.text
    assert tree.joinpath("a.py").read_text() == A1 and tree.joinpath("b.txt").read_text() == "b by the user\n"
    # Two ticked rows, "since here", and bad requests.
    ids = [store.resolve(r).id for r in ("latest~3", "latest~1")]  # (counted back from the revert's own record)
    assert "#2 to #4" in client.get("/range?" + "&".join(f"pick={i}" for i in ids) + "&actor=agent").text
    assert client.get(f"/range?start={ids[1]}&actor=user").status_code == 200
    assert client.get("/range?since=forever").status_code == 400
    assert client.get(f"/range?pick={ids[0]}").status_code == 400
