"""Images in diffs: which bytes are an image a browser may be given, and under what type.

The type comes from the bytes' signature, never from the file name: a ``.png`` holding HTML is
not an image and is never served as one.  The endpoint that serves them (``/c/ID/image``) sends
the type found here, ``nosniff``, and a Content-Security-Policy that lets the response run and
load nothing (``default-src 'none'; sandbox``), so even a hostile file opened on its own is
inert.
"""

from __future__ import annotations

#: Images larger than this are not shown (the download still works).
MAX_IMAGE = 8 << 20

_SIGNATURES = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


def image_type(data: bytes) -> str | None:
    """``image/png``, ``image/jpeg``, ``image/gif`` or ``image/webp`` when ``data`` starts as
    one, else None."""
    for magic, kind in _SIGNATURES:
        if data.startswith(magic):
            return kind
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


#: The headers of an image response (with its Content-Type).
HEADERS = {
    "content-security-policy": "default-src 'none'; sandbox",
    "x-content-type-options": "nosniff",
    "cache-control": "private, max-age=86400",
}

__all__ = ["HEADERS", "MAX_IMAGE", "image_type"]
