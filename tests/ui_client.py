"""A logged-in Starlette TestClient on the UI app, and a form post with the right Origin: what
the HTTP-level UI tests share (each test module keeps its own port and token, and its own
importorskip of starlette/httpx before importing this)."""

from __future__ import annotations

import warnings
from typing import Any
from urllib.parse import urlencode

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from snapstore.store import Store
from snapstore.ui.app import create_app


def origin(port: int) -> str:
    return f"http://127.0.0.1:{port}"


def logged_in(store: Store, port: int, token: str, **app_args: Any) -> TestClient:
    """A client of ``store``'s UI that has used its login link."""
    client = TestClient(create_app(store, token=token, host="127.0.0.1", port=port, **app_args), base_url=origin(port))
    assert client.get(f"/?token={token}").status_code == 200
    return client


def post_form(client: TestClient, port: int, path: str, data: dict[str, Any] | None = None) -> Any:
    """POST ``data`` as a form from the UI's own origin (no redirect followed)."""
    headers = {"origin": origin(port), "content-type": "application/x-www-form-urlencoded"}
    return client.post(path, content=urlencode(data or {}), headers=headers, follow_redirects=False)
