"""Driving Debian's headless Chromium through Playwright, for the UI's browser tests.

``unavailable()`` says why the browser cannot run here (or None); ``launch()`` starts a
persistent context with a fresh profile that stays off the network.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-quic",
]


def unavailable() -> str | None:
    """Why the browser tests cannot run here, or None."""
    if not os.access(CHROMIUM, os.X_OK):
        return f"no {CHROMIUM} (Debian's chromium package; 'make test' installs it when run as root)"
    for module in ("playwright.sync_api", "starlette", "uvicorn"):
        try:
            __import__(module)
        except ImportError:
            return f"{module.split('.')[0]} is not installed (pip install -e '.[dev,ui]')"
    return None


@contextmanager
def browser_page(tmp_path: Path, locale: str = "en-US") -> Iterator[Any]:
    """A page of a fresh persistent context (see :func:`launch`), closed afterwards."""
    playwright, context = launch(tmp_path, locale)
    try:
        yield context.pages[0] if context.pages else context.new_page()
    finally:
        context.close()
        playwright.stop()


def launch(tmp_path: Path, locale: str = "en-US") -> Any:
    """``(playwright, context)``: a persistent context with a fresh profile under ``tmp_path``."""
    from playwright.sync_api import sync_playwright

    playwright = sync_playwright().start()
    profile = tmp_path / f"profile-{locale}"
    context = playwright.chromium.launch_persistent_context(
        str(profile),
        executable_path=CHROMIUM,
        headless=True,
        args=FLAGS,
        locale=locale,
        timezone_id="UTC",
        viewport={"width": 1280, "height": 800},
    )
    context.set_default_timeout(20_000)
    return playwright, context
