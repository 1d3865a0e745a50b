"""Delta frames through zstd's one-shot dictionary call (storage/patchfrom.py): standard frames
that the reader decodes with the base as before, no dictionary object built per delta, and the
compressor API where the one-shot call is not available."""

from __future__ import annotations

import threading

import zstandard

from snapstore.storage import packs, patchfrom
from tests.test_packs import text


def _read(frame: bytes, base: bytes) -> bytes:
    d = zstandard.ZstdCompressionDict(base, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
    out: bytes = zstandard.ZstdDecompressor(dict_data=d).decompress(frame)
    return out


def _edits() -> list[tuple[bytes, bytes]]:
    base = text(30_000, 3)
    return [
        (base, base[:12_000] + b"an inserted line\n" + base[12_000:]),
        (base, base[:5_000] + base[9_000:]),
        (base, text(2_000, 4) + base),
        (text(700, 5), text(700, 5) + b"x" * 100),
    ]


def test_a_delta_is_a_standard_frame_read_back_with_its_base():
    assert patchfrom.loaded()
    for base, new in _edits():
        frame = patchfrom.compress(new, base, 3)
        assert _read(frame, base) == new
        assert zstandard.get_frame_parameters(frame).content_size == len(new)
        assert not zstandard.get_frame_parameters(frame).has_checksum
        assert len(frame) < len(new) // 4 or len(new) < 1_000
        # (a memoryview, as the readers hand chunks cut from a file)
        assert _read(patchfrom.compress(memoryview(new), base, 3), base) == new


def test_no_dictionary_object_is_built_per_delta(monkeypatch):
    """The base goes straight into a context the thread keeps: zstandard's dictionary object
    (a digested dictionary, every position of the base hashed) is not built."""
    built = []
    real = zstandard.ZstdCompressionDict
    monkeypatch.setattr(zstandard, "ZstdCompressionDict", lambda *a, **k: (built.append(1), real(*a, **k))[1])
    base, new = _edits()[0]
    frame = packs.delta_frame(b"c" * 32, new, b"b" * 32, base, 1, 3)
    assert frame is not None and built == []
    monkeypatch.undo()
    assert _read(frame.data, base) == new


def test_the_compressor_api_serves_where_the_one_shot_call_does_not_load(monkeypatch):
    monkeypatch.setattr(patchfrom, "_api", [False])
    assert not patchfrom.loaded()
    for base, new in _edits():
        assert _read(patchfrom.compress(new, base, 3), base) == new


def test_threads_keep_their_own_context():
    """Deltas made side by side (the snapshot's delta threads) each use their own context."""
    pairs = _edits() * 8
    out: list[bytes | None] = [None] * len(pairs)

    def work(k: int) -> None:
        for i in range(k, len(pairs), 4):
            out[i] = patchfrom.compress(pairs[i][1], pairs[i][0], 3)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(_read(f, b) == n for f, (b, n) in zip(out, pairs) if f is not None)
    assert None not in out


def test_the_context_a_thread_keeps_is_bounded_by_the_largest_chunk():
    """A thread keeps one context whatever it compressed; its size follows the largest base
    and chunk (at most chunker.MAX_SIZE each), within level 3's tables: under 2 MiB."""
    from snapstore.storage import chunker

    sizes = []

    def work() -> None:
        for size in (4_000, chunker.MAX_SIZE, 20_000):
            base = text(size, 11)
            new = base[: size // 2] + b"an edit\n" + base[size // 2 :]
            assert _read(patchfrom.compress(new, base, 3), base) == new
            sizes.append(patchfrom.context_bytes())

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert 0 < sizes[0] <= sizes[1] == sizes[2] < 2 << 20


def test_a_delta_is_decoded_with_its_base_and_damage_is_an_error(monkeypatch):
    """Decoding goes the same one-shot way (no dictionary object per decode); a damaged frame,
    a wrong base or a frame larger than its size say so (ValueError: the reader's CorruptError)."""
    import pytest

    built = []
    real = zstandard.ZstdCompressionDict
    for base, new in _edits():
        frame = patchfrom.compress(new, base, 3)
        monkeypatch.setattr(zstandard, "ZstdCompressionDict", lambda *a, **k: (built.append(1), real(*a, **k))[1])
        assert patchfrom.decompress(frame, base, len(new)) == new
        monkeypatch.undo()
        with pytest.raises(ValueError):
            patchfrom.decompress(frame, base, len(new) - 1)
        damaged = frame[:-3] + bytes(b ^ 0xFF for b in frame[-3:])
        try:
            assert patchfrom.decompress(damaged, base, len(new)) != new
        except ValueError:
            pass
    assert built == []
    base, new = _edits()[0]
    frame = patchfrom.compress(new, base, 3)
    try:
        assert patchfrom.decompress(frame, text(30_000, 99), len(new)) != new
    except ValueError:
        pass
    monkeypatch.setattr(patchfrom, "_api", [False])
    assert patchfrom.decompress(frame, base, len(new)) == new
    with pytest.raises(ValueError):
        patchfrom.decompress(frame, base, len(new) - 1)


def test_the_reader_decodes_a_delta_frame_without_a_dictionary_object(monkeypatch):
    from snapstore.errors import CorruptError
    from snapstore.storage import entries

    base, new = _edits()[0]
    frame = patchfrom.compress(new, base, 3)
    built = []
    real = zstandard.ZstdCompressionDict
    monkeypatch.setattr(zstandard, "ZstdCompressionDict", lambda *a, **k: (built.append(1), real(*a, **k))[1])
    assert entries.inflate(b"c" * 32, frame, len(new), base) == new
    assert built == []
    import pytest

    with pytest.raises(CorruptError):
        entries.inflate(b"c" * 32, frame[:-3] + bytes(b ^ 0xFF for b in frame[-3:]), len(new), base)


def test_a_base_that_starts_like_a_zstd_dictionary_is_still_plain_content(tmp_path):
    """zstd's one-shot calls read a base that starts with the dictionary magic as a formatted
    dictionary; any file can start so (a trained ``*.dict`` file does, and so may a stray
    one).  Its deltas are still raw-content frames: read back here and by the public API, and
    a checkpoint of an edit to such a file reads back whole."""
    from snapstore.store import Store

    magic = b"\x37\xa4\x30\xec"
    base = magic + text(11_000, seed=5)
    new = base[:5000] + b"an edit" + base[5000:]
    frame = patchfrom.compress(new, base, 3)
    assert zstandard.get_frame_parameters(frame).dict_id == 0
    assert patchfrom.decompress(frame, base, len(new)) == new
    d = zstandard.ZstdCompressionDict(base, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
    assert zstandard.ZstdDecompressor(dict_data=d).decompress(frame) == new
    tree = tmp_path / "t"
    tree.mkdir()
    (tree / "model.dict").write_bytes(base)
    with Store.init(tree) as store:
        store.snapshot("one")
        (tree / "model.dict").write_bytes(new)
        store.snapshot("two")
        report = store.verify()
        assert report.ok, report.problems
        assert store.read_bytes("latest", "model.dict") == new
