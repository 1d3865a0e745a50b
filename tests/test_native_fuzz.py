"""Fuzzing the protocol on both sides (issue 24 req 1).

The native client's relay of service frames and its marshal writer, built with
AddressSanitizer and UndefinedBehaviorSanitizer and driven by seeded random and damaged frame
streams (snapstore/service/cclient/fuzz_frames.c; `make fuzz` runs the same target under
libFuzzer when clang is there); the marshal writer checked against Python's own decoding of
every byte string hypothesis finds; and the service fed random requests and frames, which it
must refuse and outlive."""

from __future__ import annotations

import marshal
import os
import socket
import struct
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from snapstore.service import daemon, native, protocol
from snapstore.store import Store

HERE = Path(native.SOURCE_DIR)
SANITIZERS = ("-g", "-O1", "-fsanitize=address,undefined", "-fno-sanitize-recover=all")


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cc = native.compiler()
    if cc is None:
        pytest.skip("no C compiler (cc): the native client's fuzz harness cannot be built")
    out = tmp_path_factory.mktemp("fuzz") / "fuzz_frames"
    built = subprocess.run(
        [cc, *SANITIZERS, "-DFUZZ_STANDALONE", '-DSNAPSTORE_VERSION_TAG="t"', '-DSNAPSTORE_PYTHON_CLIENT="/bin/false"',
         "-o", str(out), str(HERE / "fuzz_frames.c")], capture_output=True, text=True,
    )
    if built.returncode != 0 and "sanitize" in built.stderr:
        pytest.skip(f"the compiler has no sanitizers: {built.stderr.strip()[:200]}")
    assert built.returncode == 0, built.stderr
    return out


@pytest.mark.parametrize("seed", [1, 20261126])
def test_the_relay_survives_random_and_damaged_frames_under_sanitizers(harness: Path, seed: int):
    done = subprocess.run([str(harness), "4000", str(seed)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "ASAN_OPTIONS": "detect_leaks=1", "UBSAN_OPTIONS": "print_stacktrace=1"})
    assert done.returncode == 0, done.stderr[-3000:]


TRICKY = [b"", b"plain", "caf\u00e9 \u2603 \U0001f600".encode(), b"\xff\xfe", b"\xed\xa0\x80", b"\xed\xb2\x80",
          b"\xc0\xaf", b"\xe0\x80\xaf", b"\xf4\x90\x80\x80", b"\xf0\x9f\x98", b"a\x00b", b"\x80" * 3]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.binary(max_size=64), max_size=40))
def test_the_marshal_writer_gives_what_python_reads(harness: Path, found: list[bytes]):
    cases = TRICKY + found
    records = b"".join(struct.pack("<I", len(c)) + c for c in cases)
    done = subprocess.run([str(harness), "--marshal"], input=records, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    out, off = done.stdout, 0
    for case in cases:
        (n,) = struct.unpack_from("<I", out, off)
        written = out[off + 4: off + 4 + n]
        off += 4 + n
        # What the Python client would have sent: the str its surrogateescape decoding makes.
        assert marshal.loads(written) == case.decode("utf-8", "surrogateescape"), case
    assert off == len(out)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.binary(max_size=200), st.builds(marshal.dumps, st.dictionaries(
    st.sampled_from(["v", "id", "argv", "cwd", "env", "store", "op", "x"]),
    st.one_of(st.text(max_size=8), st.integers(), st.lists(st.one_of(st.text(max_size=4), st.integers()), max_size=3),
              st.dictionaries(st.text(max_size=3), st.one_of(st.text(max_size=3), st.none()), max_size=2)),
    max_size=6))))
def test_decode_request_refuses_with_value_error_only(data: bytes):
    try:
        request = protocol.decode_request(data)
    except ValueError:
        return
    assert isinstance(request, dict)
    argv, env = request.get("argv", []), request.get("env", {})
    assert isinstance(argv, list) and all(isinstance(a, str) for a in argv)
    assert isinstance(env, dict) and all(isinstance(v, str) for v in env.values())


def test_the_service_outlives_garbage(tmp_path: Path):
    import random

    root = tmp_path / "proj"
    root.mkdir()
    (root / "a.txt").write_text("a\n")
    Store.init(root).close()
    store_dir = str(root / ".snapstore")
    daemon.start_detached(store_dir, 60)
    rng = random.Random(7)
    sock_path = os.path.join(store_dir, protocol.SOCKET_NAME)
    try:
        payloads = [
            b"", b"\x00", b"r", b"r\x00\x00\x00\x05u\x05\x00\x00", b"r\xff\xff\xff\xff",
            b"r" + struct.pack(">I", 3) + b"{u\x01",
            b"r" + struct.pack(">I", 12) + marshal.dumps({"v": protocol.version_tag(), "argv": 5})[:12],
        ]
        tag = protocol.version_tag()
        for request in ({"v": tag, "argv": 5, "cwd": "/"}, {"v": tag, "argv": ["list"], "env": {"A": 1}, "cwd": "/"},
                        {"v": tag, "argv": ["list"], "store": store_dir}, {"v": tag, "op": ["status"]}, [1, 2], "x"):
            data = marshal.dumps(request)
            payloads.append(b"r" + struct.pack(">I", len(data)) + data)
        payloads += [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 80))) for _ in range(40)]
        for payload in payloads:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(5)
                s.connect(sock_path)
                s.sendall(payload)
                s.shutdown(socket.SHUT_WR)
                try:
                    while s.recv(4096):
                        pass
                except OSError:
                    pass
            assert daemon.status(store_dir) is not None, payload  # still serving
        with Store.open(root) as store:
            assert store.checkpoints() == []  # and nothing ran
    finally:
        daemon.stop(store_dir)
