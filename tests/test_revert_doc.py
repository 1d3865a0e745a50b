"""docs/agents.md's selective-revert example runs as written (after the loop it continues)."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "agents.md"


def test_the_revert_example_in_the_docs_runs(capsys):
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    revert = [b for b in blocks if "store.revert(" in b]
    assert revert, "docs/agents.md lost its revert example"
    namespace = {"__name__": "agents_doc"}
    exec(compile(blocks[0], str(DOC), "exec"), namespace)
    exec(compile(revert[0], str(DOC), "exec"), namespace)
    assert "['notes.txt'] ['scratch.txt']" in capsys.readouterr().out
