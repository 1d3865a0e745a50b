"""A service request runs with its client's forwarded variables and directory, ``TZ`` among
them, and the service gets its own back after it (service/server: ``Service._client_context``,
which calls ``tzset`` only when ``TZ`` changes).

Times are read with ``time.localtime(0)`` (the epoch: 00:00 in UTC) under POSIX ``TZ``
strings, which need no time-zone database.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from snapstore.service.server import Service
from snapstore.store import Store
from snapstore.testing import build_tree

#: Five and a half hours east of UTC, and nine: the epoch is 05:30 and 09:00 there.
EAST, FAR_EAST = "XST-5:30", "YST-9"


def _clock() -> tuple[int, int]:
    t = time.localtime(0)
    return t.tm_hour, t.tm_min


@pytest.fixture
def service(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Service]:
    """A service of a real store, whose own ``TZ`` is UTC (restored after the test)."""
    root = tmp_path / "t"
    build_tree(root, {"a.txt": b"a\n"})
    Store.init(root).close()
    monkeypatch.setenv("TZ", "UTC0")
    time.tzset()
    svc = Service(str(root / ".snapstore"), idle_timeout=60)
    try:
        yield svc
    finally:
        svc.store.close()
        monkeypatch.undo()
        time.tzset()


def test_a_request_runs_in_its_client_s_time_zone_and_the_service_gets_its_own_back(service: Service, tmp_path: Path):
    here, columns = os.getcwd(), os.environ.get("COLUMNS")  # (another test may have set it)
    assert _clock() == (0, 0)
    with service._client_context(str(tmp_path), {"TZ": EAST, "COLUMNS": "137", "HOME": "/elsewhere"}):
        assert _clock() == (5, 30)
        assert os.environ["TZ"] == EAST and os.environ["COLUMNS"] == "137"
        assert os.environ.get("HOME") != "/elsewhere"  # (not forwarded)
        assert os.getcwd() == str(tmp_path)
    assert _clock() == (0, 0) and os.environ["TZ"] == "UTC0"
    assert os.environ.get("COLUMNS") == columns
    assert os.getcwd() == here


def test_a_request_in_the_service_s_own_time_zone_and_one_without_any(service: Service, tmp_path: Path):
    with service._client_context(str(tmp_path), {"TZ": "UTC0"}):
        assert _clock() == (0, 0)
    assert _clock() == (0, 0)
    with service._client_context(str(tmp_path), {}):
        assert "TZ" not in os.environ  # (the machine's zone, whatever it is)
    assert _clock() == (0, 0) and os.environ["TZ"] == "UTC0"
    with service._client_context(str(tmp_path), {"TZ": EAST}):
        assert _clock() == (5, 30)
    with service._client_context(str(tmp_path), {"TZ": FAR_EAST}):
        assert _clock() == (9, 0)  # (one client's zone after another's)
    assert _clock() == (0, 0)


def test_a_command_that_changes_the_time_zone_leaves_the_service_s_after_it(service: Service, tmp_path: Path):
    with service._client_context(str(tmp_path), {"TZ": "UTC0"}):
        os.environ["TZ"] = FAR_EAST
        time.tzset()
        assert _clock() == (9, 0)
    assert _clock() == (0, 0) and os.environ["TZ"] == "UTC0"
    with service._client_context(str(tmp_path), {"TZ": EAST}):
        os.environ["SNAPSTORE_SET_BY_THE_COMMAND"] = "1"
    assert "SNAPSTORE_SET_BY_THE_COMMAND" not in os.environ
    assert _clock() == (0, 0)



def test_a_forwarded_value_the_environment_refuses_leaves_the_service_s_own(service: Service, tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("SNAPSTORE_OWN", "service")
    with pytest.raises(ValueError), service._client_context(str(tmp_path), {"SNAPSTORE_X": "a\0b"}):
        pass
    assert os.environ["SNAPSTORE_OWN"] == "service" and "SNAPSTORE_X" not in os.environ
