"""The UI's static files: read once, gzipped once, named by their content.

Pages link them as ``/static/NAME?v=HASH``: such an address never changes its content, so the
browser may keep it (``immutable``); any other request for the file is answered with its
``ETag`` and revalidated (``no-cache``: a 304 when unchanged).  A browser that accepts gzip
gets the compressed bytes.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
from dataclasses import dataclass
from importlib import resources


@dataclass(frozen=True)
class Asset:
    """One static file: its bytes, gzipped bytes, type and content hash."""

    data: bytes
    gzipped: bytes
    media_type: str
    version: str

    @property
    def etag(self) -> str:
        return f'"{self.version}"'


def _asset(data: bytes, media_type: str) -> Asset:
    version = hashlib.blake2b(data, digest_size=8).hexdigest()
    return Asset(data, gzip.compress(data, 9, mtime=0), media_type, version)


@functools.cache
def assets() -> dict[str, Asset]:
    """Every static file by name (a fixed set)."""
    from snapstore.ui.palette import token_css

    def read(name: str) -> bytes:
        return resources.files("snapstore.ui").joinpath("static", name).read_bytes()

    return {
        "ui.css": _asset(read("ui.css"), "text/css; charset=utf-8"),
        "ui.js": _asset(read("ui.js"), "text/javascript; charset=utf-8"),
        "since.css": _asset(read("since.css"), "text/css; charset=utf-8"),
        "since.js": _asset(read("since.js"), "text/javascript; charset=utf-8"),
        "pygments.css": _asset(token_css(".hl").encode(), "text/css; charset=utf-8"),  # (highlight.stylesheet)
    }


def href(name: str) -> str:
    """The address a page links ``name`` by (its content's version in the query)."""
    return f"/static/{name}?v={assets()[name].version}"


def headers_for(asset: Asset, *, versioned: bool, gzipped: bool) -> dict[str, str]:
    """The caching headers of a static response."""
    out = {
        "etag": asset.etag,
        "cache-control": "private, max-age=31536000, immutable" if versioned else "private, no-cache",
        "vary": "Accept-Encoding",
    }
    if gzipped:
        out["content-encoding"] = "gzip"
    return out


__all__ = ["Asset", "assets", "headers_for", "href"]
