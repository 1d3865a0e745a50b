"""The narrow interface the protocol uses to talk to an object store, and its obstore version.

The only module that imports obstore (lazily: the CLI's start-up never pays for it).  Every
call is one request; :class:`Transport` is what tests wrap to count requests, delay listings or
kill a pusher after k of them.  obstore's errors become :mod:`snapstore.errors`: a missing
object is ``None``, a lost create or compare-and-swap race a ``None``/``False`` answer, an
access refusal or an unreachable engine a :class:`~snapstore.errors.RemoteError` (exit 13) whose
message is one line with no credential in it (obstore's messages carry the URL, never the
signature or the keys; they are cut to their first line all the same).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from snapstore.errors import RemoteError, SnapstoreError, UsageError
from snapstore.remote.interface import MAX_GET, Got, Listed, Transport
from snapstore.remote.names import RemoteURL

__all__ = ["MAX_GET", "Got", "Listed", "Transport", "connect"]

if TYPE_CHECKING:
    from obstore.store import ObjectStore


#: The S3 client's limits: to connect, and per request.  A request that times out is retried
#: while the retry budget lasts (:mod:`snapstore.remote.retry`), then the command fails with a
#: RemoteError (exit 13); the tests shrink them.
CONNECT_TIMEOUT_S = 10
REQUEST_TIMEOUT_S = 120

_MEMORY: dict[str, ObjectStore] = {}
_MEMORY_LOCK = threading.Lock()


def memory_store(name: str) -> ObjectStore:
    """The process-wide in-memory store ``memory://name`` (for tests: obstore's MemoryStore
    enforces create and update modes like S3)."""
    from obstore.store import MemoryStore

    with _MEMORY_LOCK:
        store = _MEMORY.get(name)
        if store is None:
            store = _MEMORY[name] = MemoryStore()
        return store


def connect(
    url: RemoteURL, *, endpoint: str | None = None, region: str | None = None, profile: str | None = None,
    retry_budget: str | None = None,
) -> Transport:
    """A transport for ``url``: endpoint, region and credentials resolved as the AWS CLI does
    (:func:`credentials.resolve`), transient failures retried over the retry budget
    (:mod:`snapstore.remote.retry`; ``retry_budget`` is the store's ``remote.retry-budget``)."""
    try:
        import obstore  # noqa: F401 - only to say clearly when it is missing
    except ImportError:
        raise UsageError("remotes need obstore: pip install 'snapstore[remotes]'") from None
    from snapstore.remote.ranges import RangeFallback
    from snapstore.remote.retry import RetryingTransport, budget

    seconds = budget(retry_budget)
    if url.scheme == "memory":
        return RetryingTransport(ObstoreTransport(memory_store(url.bucket), url.prefix), seconds)
    from obstore.store import S3Store

    from snapstore.remote.credentials import resolve

    settings = resolve(profile, endpoint, region)
    config: dict[str, Any] = dict(settings.keys)
    _PROFILE_SECRETS.extend(str(v) for v in config.values())
    client: dict[str, Any] = {"connect_timeout": f"{CONNECT_TIMEOUT_S}s", "timeout": f"{REQUEST_TIMEOUT_S}s"}
    if settings.endpoint:
        config["endpoint"] = settings.endpoint
        # S3-compatible engines (SeaweedFS, Ceph, MinIO) serve path-style requests.
        config["virtual_hosted_style_request"] = False
        if settings.endpoint.startswith("http://"):
            # Plain HTTP only when the user wrote it; TLS certificates are always verified.
            client["allow_http"] = True
    config["region"] = settings.region
    try:
        store = S3Store(
            url.bucket,
            config=config,  # type: ignore[arg-type]  # (built as a plain dict)
            client_options=client,  # type: ignore[arg-type]
            # Retries are RetryingTransport's (a budget over the whole outage, said on stderr).
            retry_config={"max_retries": 0},
        )
    except Exception as exc:  # obstore raises its own config errors
        raise RemoteError(f"cannot set up the remote {url}: {_first_line(exc)}") from None
    return RetryingTransport(RangeFallback(ObstoreTransport(store, url.prefix)), seconds)


def too_large(key: str, size: int, limit: int) -> SnapstoreError:
    """The error for an object larger than any snapstore writes under its key."""
    from snapstore.errors import CorruptError

    return CorruptError(f"remote object {key} is corrupt (it holds {size} bytes, more than such an object may, {limit})")


def _first_line(exc: BaseException) -> str:
    """What an error says, fit to print: its first line, with an engine's response body cut to
    its status and S3 error code (a body may quote the request: a 403 that reflects the session
    token was printed whole once), and any credential value or token-like run removed."""
    import re

    lines = str(exc).strip().splitlines()
    text = lines[0] if lines else type(exc).__name__
    head, sep, body = str(exc).partition("status code: ")
    if sep:
        code = re.search(r"<Code>([A-Za-z]{1,64})</Code>", body)
        first = head.splitlines()[0] if head.strip() else ""
        text = first + sep + body.split(":", 1)[0].strip()[:40] + (f" ({code.group(1)})" if code else "")
    return _scrub(text)


def _scrub(text: str) -> str:
    """``text`` with every credential value this process could send, and any token-like run
    (40 characters of base64 or hex), removed."""
    import re

    for secret in _secrets():
        text = text.replace(secret, "[redacted]")
    return re.sub(r"[A-Za-z0-9+/=_-]{40,}", "[redacted]", text)


def _secrets() -> list[str]:
    """The credential values this process could send (environment and profile), longest first."""
    import os

    values = [os.environ.get(v, "") for v in ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY_ID")]
    values += _PROFILE_SECRETS
    return sorted((v for v in values if len(v) >= 4), key=len, reverse=True)


#: Credential values read from a profile by :func:`connect` (scrubbed from messages too).
_PROFILE_SECRETS: list[str] = []


class ObstoreTransport(Transport):
    """:class:`Transport` over an obstore store (S3Store, MemoryStore)."""

    def __init__(self, store: ObjectStore, prefix: str = "") -> None:
        self.store = store
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""

    def _error(self, exc: BaseException, what: str, key: str) -> RemoteError:
        from snapstore.remote.s3errors import describe

        if isinstance(exc, MemoryError):
            raise exc  # this machine's limit, not the remote's: never reported as a network error
        error = describe(exc, what, key, _first_line(exc))
        error.message = _scrub(error.message)
        error.args = (error.message,)
        return error

    def _absent(self, exc: BaseException) -> None:
        """A 404: None for a missing object; RemoteError when the bucket itself is missing
        (a clone must not say "nothing has been pushed" of a bucket that is not there)."""
        from snapstore.remote.s3errors import missing_bucket

        error = missing_bucket(exc)
        if error is not None:
            raise error

    def get(self, key: str, limit: int = MAX_GET) -> Got | None:
        import obstore

        try:
            result = obstore.get(self.store, self.prefix + key)
            if result.meta["size"] > min(limit, MAX_GET):
                # Read whole only what snapstore could have written: a hostile or damaged
                # engine must not make a fetch allocate without bound.
                raise too_large(key, int(result.meta["size"]), min(limit, MAX_GET))
            body = bytes(result.bytes())
            if len(body) > min(limit, MAX_GET):  # an engine whose listing and body disagree
                raise too_large(key, len(body), min(limit, MAX_GET))
        except FileNotFoundError as exc:
            self._absent(exc)
            return None
        except SnapstoreError:
            raise
        except Exception as exc:
            raise self._error(exc, "read", key) from None
        mtime = result.meta.get("last_modified")
        return Got(body, result.meta.get("e_tag") or "", int(mtime.timestamp() * 1e9) if mtime else 0)

    def head(self, key: str) -> Listed | None:
        import obstore

        try:
            meta = obstore.head(self.store, self.prefix + key)
        except FileNotFoundError as exc:
            self._absent(exc)
            return None
        except Exception as exc:
            raise self._error(exc, "read", key) from None
        mtime = meta.get("last_modified")
        return Listed(key, int(meta["size"]), int(mtime.timestamp() * 1e9) if mtime else 0)

    def get_range(self, key: str, start: int, end: int) -> bytes | None:
        import obstore

        if not 0 <= start < end or end - start > MAX_GET:
            raise ValueError(f"bad range {start}-{end}")
        try:
            return bytes(obstore.get_range(self.store, self.prefix + key, start=start, end=end))
        except FileNotFoundError as exc:
            self._absent(exc)
            return None
        except Exception as exc:
            raise self._error(exc, "read", key) from None

    def get_suffix(self, key: str, n: int) -> tuple[bytes, int] | None:
        import obstore

        if not 0 < n <= MAX_GET:
            raise ValueError(f"bad suffix length {n}")
        try:
            result = obstore.get(self.store, self.prefix + key, options={"range": {"suffix": n}})
            body = bytes(result.bytes())
        except FileNotFoundError as exc:
            self._absent(exc)
            return None
        except Exception as exc:
            raise self._error(exc, "read", key) from None
        return body, int(result.meta["size"])

    def put_create(self, key: str, data: bytes) -> str | None:
        import obstore
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        try:
            r = obstore.put(self.store, self.prefix + key, data, mode="create", use_multipart=False)
        except (AlreadyExistsError, PreconditionError):
            return None
        except Exception as exc:
            raise self._error(exc, "write", key) from None
        return r.get("e_tag") or ""

    def put_update(self, key: str, data: bytes, etag: str) -> str | None:
        import obstore
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        try:
            r = obstore.put(self.store, self.prefix + key, data, mode={"e_tag": etag}, use_multipart=False)
        except (PreconditionError, AlreadyExistsError, FileNotFoundError):
            return None
        except Exception as exc:
            raise self._error(exc, "update", key) from None
        return r.get("e_tag") or ""

    def list(self, prefix: str, start_after: str | None = None) -> Iterator[Listed]:
        import obstore

        try:
            pages = obstore.list(
                self.store, self.prefix + prefix,
                offset=self.prefix + start_after if start_after is not None else None,
                chunk_size=1000,
            )
            for page in pages:
                for meta in page:
                    path = meta["path"]
                    if not path.startswith(self.prefix):
                        continue
                    mtime = meta["last_modified"]
                    yield Listed(path[len(self.prefix) :], int(meta["size"]), int(mtime.timestamp() * 1e9))
        except Exception as exc:
            raise self._error(exc, "list", prefix or "/") from None

    def delete(self, key: str) -> None:
        import obstore

        try:
            obstore.delete(self.store, self.prefix + key)
        except FileNotFoundError:
            return
        except Exception as exc:
            raise self._error(exc, "delete", key) from None


class CountingTransport(Transport):
    """Counts the requests made through it (every report says how many a command cost; the
    tests fail when a push needs more than its budget).  A listing counts one per page."""

    def __init__(self, inner: Transport) -> None:
        self.inner = inner
        self.counts: dict[str, int] = {}
        self._lock = threading.Lock()

    @property
    def requests(self) -> int:
        """Requests made, retries of transient failures included (they are requests too)."""
        return sum(self.counts.values()) + int(getattr(self.inner, "retries", 0))

    def count(self, kind: str) -> None:
        with self._lock:
            self.counts[kind] = self.counts.get(kind, 0) + 1

    def get(self, key: str, limit: int = MAX_GET) -> Got | None:
        self.count("get")
        return self.inner.get(key, limit)

    def head(self, key: str) -> Listed | None:
        self.count("head")
        return self.inner.head(key)

    def get_range(self, key: str, start: int, end: int) -> bytes | None:
        self.count("get")
        return self.inner.get_range(key, start, end)

    def get_suffix(self, key: str, n: int) -> tuple[bytes, int] | None:
        self.count("get")
        return self.inner.get_suffix(key, n)

    def put_create(self, key: str, data: bytes) -> str | None:
        self.count("put")
        return self.inner.put_create(key, data)

    def put_update(self, key: str, data: bytes, etag: str) -> str | None:
        self.count("put")
        return self.inner.put_update(key, data, etag)

    def list(self, prefix: str, start_after: str | None = None) -> Iterator[Listed]:
        self.count("list")
        for i, entry in enumerate(self.inner.list(prefix, start_after)):
            if i and i % 1000 == 0:
                self.count("list")
            yield entry

    def delete(self, key: str) -> None:
        self.count("delete")
        self.inner.delete(key)
