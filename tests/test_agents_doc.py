"""docs/agents.md holds a complete agent loop; it must run as written."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "agents.md"


def test_the_agent_loop_in_the_docs_runs(capsys):
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert blocks, "docs/agents.md lost its example"
    exec(compile(blocks[0], str(DOC), "exec"), {"__name__": "agents_doc"})
    out = capsys.readouterr().out
    assert "D app.py" in out
