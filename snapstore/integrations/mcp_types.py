"""The MCP server's vocabulary: parameter types (each with the description a client shows) and
the structured results (TypedDicts the SDK turns into output schemas).

(No ``from __future__ import annotations``: the SDK reads these at run time.)
"""

from typing import Annotated, Any, Literal

from pydantic import Field
from typing_extensions import TypedDict

_REF_TEXT = (
    "A checkpoint: latest, latest~N, #N (the index checkpoint_list shows), a tag, an id prefix, or "
    ":/text (the newest checkpoint whose message contains text); each may end in @TASK."
)
Ref = Annotated[str, Field(description=_REF_TEXT)]
OptRef = Annotated[str | None, Field(description=_REF_TEXT)]
Task = Annotated[str | None, Field(description="The task (an agent's session) the checkpoints belong to.")]
Paths = Annotated[
    list[str] | None, Field(description="Only these files or directories (absolute, or relative to the project).")
]
Path_ = Annotated[str, Field(description="A file of the project (absolute, or relative to the project).")]
DryRun = Annotated[bool, Field(description="Only report what would change; true unless set to false.")]
Actor = Annotated[
    Literal["agent", "user"] | None,
    Field(description='Who made the changes: "agent" or "user" (unset: recorded as "unknown").'),
]
Conflicts = Annotated[
    Literal["refuse", "markers", "ours", "theirs"],
    Field(description="refuse: fail listing every conflict, nothing changed; markers: write diff3 markers; "
          "ours / theirs: take that side."),
]


class CheckpointInfo(TypedDict):
    id: str
    short_id: str
    index: int | None
    time: str
    message: str
    task: str | None
    kind: str
    tags: list[str]
    metadata: dict[str, Any]
    has_conversation: bool


class CreateResult(TypedDict):
    checkpoint: CheckpointInfo
    reused: bool
    warnings: list[str]


class ListResult(TypedDict):
    checkpoints: list[CheckpointInfo]


class ChangeInfo(TypedDict):
    path: str
    status: str
    added: int
    removed: int
    binary: bool


class ShowResult(TypedDict):
    checkpoint: CheckpointInfo
    changes: list[ChangeInfo]
    conversation_messages: int | None


class DiffResult(TypedDict):
    source: str
    target: str
    changes: list[ChangeInfo]
    patch: str | None


class FileContent(TypedDict):
    path: str
    checkpoint: str
    encoding: str
    content: str
    size: int
    hash: str


class FileVersion(TypedDict):
    checkpoint: CheckpointInfo
    status: str
    size: int | None
    added: int
    removed: int


class HistoryResult(TypedDict):
    path: str
    versions: list[FileVersion]


class RestoreResult(TypedDict):
    kind: str
    dry_run: bool
    target: str
    changes: list[ChangeInfo]
    undo_ref: str | None
    operation: int | None
    warnings: list[str]


class RevertConflict(TypedDict):
    path: str
    lines: list[list[int]]
    note: str


class UnknownChangeItem(TypedDict):
    checkpoint: str
    message: str
    paths: list[str]
    why: str
    taken: bool


class RevertResult(TypedDict):
    dry_run: bool
    what: str
    reverted: list[str]
    merged: list[str]
    conflicted: list[RevertConflict]
    untouched: list[str]
    diff: str
    undo_ref: str | None
    operation: int | None
    warnings: list[str]
    unknown: list[UnknownChangeItem]


class EditItem(TypedDict):
    old_text: str
    new_text: str


class EditMatch(TypedDict):
    edit: int
    level: str
    start_line: int
    end_line: int
    similarity: float


class EditResult(TypedDict):
    path: str
    dry_run: bool
    written: bool
    matches: list[EditMatch]
    diff: str
    hash: str
    previous_hash: str
    checkpoint: str | None
