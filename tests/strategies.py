"""Hypothesis strategies for trees (imported as ``strategies``)."""

from __future__ import annotations

from hypothesis import strategies as st

from snapstore.storage import chunker
from snapstore.testing import EmptyDir, Exec, Symlink, random_bytes

#: Pieces of names: odd characters, spaces, newlines, backslashes, bytes that are not UTF-8.
_NAME_ATOMS = [
    b"a", b"B", b"z", b"0", b"7", b"-", b"_", b".", b" ", b"\n", b"\t", b"\\", b"\xff",
    b"\x80", b"\xc3\xa9", b"\xe2\x98\x83", b"\xed\xa0\x80", b"~", b"'", b'"', b"*", b"?",
    b"#", b"!", b"[", b"$", b":", b"\x01", b"\x7f",
]  # fmt: skip

#: Names the scanner or the ignore rules treat specially are not "odd", they are other tests.
_RESERVED = {b".", b"..", b".git", b".snapstore", b".gitignore", b".snapignore"}

names = (
    st.lists(st.sampled_from(_NAME_ATOMS), min_size=1, max_size=8)
    .map(b"".join)
    .filter(lambda n: n not in _RESERVED)
)

#: Sizes around the chunker's limits (8 KiB / 32 KiB / 128 KiB).
SIZES = [
    0, 1, 100, chunker.MIN_SIZE - 1, chunker.MIN_SIZE, chunker.MIN_SIZE + 1, chunker.AVG_SIZE,
    chunker.MAX_SIZE - 1, chunker.MAX_SIZE, chunker.MAX_SIZE + 1, 3 * chunker.MAX_SIZE + 5,
]  # fmt: skip

contents = st.one_of(
    st.binary(max_size=300),
    st.builds(random_bytes, st.sampled_from(SIZES), st.integers(0, 1 << 20)),
    st.builds(lambda n, b: bytes([b]) * n, st.sampled_from(SIZES), st.integers(0, 255)),
)

link_targets = st.lists(
    st.one_of(names, st.sampled_from([b"..", b"."])), min_size=1, max_size=3
).map(b"/".join) | st.just(b"/etc/passwd")

leaves = st.one_of(
    contents,
    contents.map(Exec),
    link_targets.map(Symlink),
    st.just(EmptyDir),
)

_nested = st.recursive(
    st.dictionaries(names, leaves, max_size=4),
    lambda children: st.dictionaries(names, st.one_of(leaves, children), max_size=4),
    max_leaves=10,
)


def _flatten(node: dict, prefix: bytes, out: dict) -> dict:
    for name, value in node.items():
        path = prefix + name
        if isinstance(value, dict):
            if value:
                _flatten(value, path + b"/", out)
            else:
                out[path] = EmptyDir
        else:
            out[path] = value
    return out


#: Tree specs (path -> node) for snapstore.testing.build_tree.
trees = _nested.map(lambda d: _flatten(d, b"", {}))
