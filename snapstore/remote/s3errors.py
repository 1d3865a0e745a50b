"""What an S3 engine's refusal means, in one printable line (docs/cli.md, exit 13).

obstore's messages carry the HTTP status, the engine's XML body (``<Code>...</Code>``) and a
debug dump of the client's error chain.  :func:`describe` turns one into a
:class:`~snapstore.errors.RemoteError` that names the S3 error code and says in plain words what
to check (``SignatureDoesNotMatch``: the secret key), or a :class:`TransientError` for what is
worth retrying (a refused or reset connection, a timeout, 5xx, ``SlowDown``): see
:mod:`snapstore.remote.retry`.  Nothing of the request is quoted: no signature, no key, no
token (a body may echo the request; only its code is kept).
"""

from __future__ import annotations

import re

from snapstore.errors import RemoteError

#: S3 error codes, what they mean for the user, and whether waiting may cure them.
CODES: dict[str, str] = {
    "SignatureDoesNotMatch": "the secret key does not match the access key: check AWS_SECRET_ACCESS_KEY "
                             "or the profile's aws_secret_access_key",
    "InvalidAccessKeyId": "the engine does not know this access key: check AWS_ACCESS_KEY_ID or the profile "
                          "(and that the endpoint is the engine the key belongs to)",
    "AccessDenied": "the credentials are valid but not allowed to do this: check the key's permissions "
                    "and the bucket policy",
    "NoSuchBucket": "the bucket does not exist on this engine: check the remote's URL, endpoint and region",
    "ExpiredToken": "the session token has expired: get fresh credentials",
    "InvalidToken": "the session token is not valid: check AWS_SESSION_TOKEN",
    "RequestTimeTooSkewed": "this machine's clock differs from the engine's by more than 15 minutes: "
                            "set the clock right",
    "AuthorizationHeaderMalformed": "the bucket is in another region: set it with --region or AWS_REGION",
    "PermanentRedirect": "the bucket is in another region or behind another endpoint: set --region or the endpoint",
    "InvalidBucketName": "the bucket name is not valid on this engine",
    "AccountProblem": "the account behind these credentials is disabled",
    "SlowDown": "the engine asks to slow down (too many requests)",
    "ServiceUnavailable": "the engine is unavailable",
    "InternalError": "the engine failed internally",
    "RequestTimeout": "the engine timed out waiting for the request",
}
TRANSIENT_CODES = frozenset({"SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout", "Throttling",
                             "ThrottlingException", "RequestLimitExceeded", "TooManyRequests"})
#: Client-side failures (reqwest's kinds in obstore's debug text) that waiting may cure.
_TRANSIENT_KINDS = ("Timeout", "Interrupted", "Request", "Connect")
#: A TLS handshake that failed is a setting to fix, not an outage.
_TLS = re.compile(r"InvalidContentType|InvalidMessage|certificate|Certificate|UnknownIssuer|HandshakeFailure")


class TransientError(RemoteError):
    """A failure worth retrying (the engine unreachable, overloaded or slow); exit 13 once the
    retry budget is spent.  ``reason`` says what happened in a few words."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class RangeNotServed(RemoteError):
    """The engine answered a ranged GET with the whole object (HTTP 200, not 206): see
    :class:`snapstore.remote.ranges.RangeFallback`."""


def s3_code(text: str) -> str | None:
    """The ``<Code>`` of an engine's error body quoted in ``text``."""
    m = re.search(r"<Code>([A-Za-z.]{1,64})</Code>", text)
    return m.group(1) if m else None


def status(text: str) -> int | None:
    """The HTTP status an error message reports."""
    m = re.search(r"status code: (\d{3})", text) or re.search(r"\bstatus: (\d{3})\b", text)
    return int(m.group(1)) if m else None


def _client_kind(text: str) -> str | None:
    m = re.search(r"HttpError \{\s*kind: (\w+)", text)
    return m.group(1) if m else None


def _network_reason(text: str, kind: str | None) -> str | None:
    """A few words for a failure before any answer, or None when there was an answer."""
    if "ConnectionRefused" in text or "Connection refused" in text:
        return "connection refused"
    if "ConnectionReset" in text or "connection reset" in text.lower():
        return "connection reset"
    if kind == "Timeout" or "timed out" in text:
        return "timed out"
    if kind in _TRANSIENT_KINDS or "error sending request" in text:
        return "connection failed"
    return None


def request_of(text: str) -> str:
    """``GET http://host/bucket/key`` from an obstore message (the URL holds no secret)."""
    m = re.search(r"Error performing (?:list request: Error performing )?([A-Z]{3,7}) (\S+)", text)
    return f"{m.group(1)} {m.group(2)}" if m else ""


def describe(exc: BaseException, what: str, key: str, first_line: str) -> RemoteError:
    """The error for ``exc``, raised by obstore when asked to ``what`` ``key``.  ``first_line``
    is the message's printable first line, used when nothing better is found (the caller
    scrubs the result of secrets)."""
    text = str(exc)
    if "NotPartial" in text or "non-partial response" in text:
        return RangeNotServed(f"cannot read {key} by range: the engine answered with the whole object")
    code, st = s3_code(text), status(text)
    request = request_of(text)
    if request:
        first_line = f"{request}: HTTP {st}" if st else request
    if code in TRANSIENT_CODES or (st is not None and (st >= 500 or st in (408, 429))):
        answer = f"{code or st}: {CODES.get(code or '', 'the engine failed')}"
        return TransientError(f"cannot {what} {key} on the remote: {answer} ({first_line})", answer)
    if code is not None:
        return RemoteError(f"the remote refused to {what} {key}: {code}: {CODES.get(code, 'see the engine')} "
                           f"({first_line})")
    if st is not None:
        return RemoteError(f"the remote refused to {what} {key}: HTTP {st} ({first_line})")
    if _TLS.search(text):
        return RemoteError(f"cannot {what} {key}: the TLS handshake with the endpoint failed (an endpoint "
                           f"that speaks plain HTTP must be written http://...; a certificate must be "
                           f"trusted by this machine) ({first_line})")
    reason = _network_reason(text, _client_kind(text))
    if reason is not None:
        return TransientError(f"cannot {what} {key} on the remote: {reason} ({first_line})", reason)
    return RemoteError(f"cannot {what} {key} on the remote: {first_line}")


def missing_bucket(exc: BaseException) -> RemoteError | None:
    """For a 404 (obstore's FileNotFoundError): the error when it is the *bucket* that is
    missing (NoSuchBucket), None for a missing object."""
    text = str(exc)
    if s3_code(text) != "NoSuchBucket":
        return None
    request = request_of(text)
    where = f" ({request}: HTTP 404)" if request else ""
    return RemoteError(f"the remote refused the request: NoSuchBucket: {CODES['NoSuchBucket']}{where}")
