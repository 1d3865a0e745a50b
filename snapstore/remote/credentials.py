"""AWS credentials for a remote: from the environment or a profile, never stored.

The store keeps a remote's URL, endpoint, region and profile *name* only.  The keys come, in
this order, from ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY`` (and ``AWS_SESSION_TOKEN``),
then a web-identity or container credential the environment names (obstore reads those),
then the profile (``--profile``, else ``AWS_PROFILE``, else ``default``) of the shared
credentials file (``AWS_SHARED_CREDENTIALS_FILE``, else ``~/.aws/credentials``).  With none of
these the command stops (UsageError) before any request: obstore would otherwise ask the
instance-metadata address, a silent network call to a host the user never named.
"""

from __future__ import annotations

import configparser
import os

from snapstore.errors import UsageError

#: Environment variables with which obstore finds credentials by itself.
_DELEGATED = (
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
)
_NONE = (
    "no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or name a profile of "
    "~/.aws/credentials (AWS_PROFILE or --profile)"
)


#: The largest credentials file read (a real one is a few hundred bytes per profile).
MAX_FILE = 1 << 20


def _read_file(path: str) -> str:
    """The text of the credentials file: a regular file only (a FIFO would block the open or
    the read, a device never end), opened without blocking, read to at most MAX_FILE bytes."""
    import stat

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(0, "it is not a regular file")
        if st.st_size > MAX_FILE:
            raise OSError(0, f"it is larger than {MAX_FILE} bytes")
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, 64 << 10)
            if not chunk:
                break
            total += len(chunk)
            if total > MAX_FILE:
                raise OSError(0, f"it is larger than {MAX_FILE} bytes")
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8")


def _check_regular(path: str, what: str) -> None:
    """UsageError unless ``path`` is a regular file of at most MAX_FILE bytes."""
    import stat

    try:
        st = os.stat(path)
    except OSError as exc:
        raise UsageError(f"cannot read {what} ({path}): {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_FILE:
        raise UsageError(f"cannot read {what} ({path}): it is not a regular file of at most {MAX_FILE} bytes")


def s3_credentials(profile: str | None) -> dict[str, str]:
    """The S3Store config entries that carry credentials (empty: leave it to obstore)."""
    env = os.environ
    if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
        return {}  # obstore reads these (and AWS_SESSION_TOKEN) itself
    if any(env.get(v) for v in _DELEGATED):
        token_file = env.get("AWS_WEB_IDENTITY_TOKEN_FILE")
        if token_file:
            _check_regular(token_file, "AWS_WEB_IDENTITY_TOKEN_FILE")  # obstore reads it itself
        return {}
    name = profile or env.get("AWS_PROFILE") or "default"
    path = env.get("AWS_SHARED_CREDENTIALS_FILE") or os.path.expanduser("~/.aws/credentials")
    parser = configparser.RawConfigParser()
    try:
        parser.read_string(_read_file(path), path)
    except FileNotFoundError:
        if profile:
            raise UsageError(f"no AWS credentials file ({path}) for the profile {profile!r}") from None
        raise UsageError(_NONE) from None
    except configparser.Error as exc:
        # Never the parser's message: it quotes the offending line, which may hold a key.
        line = getattr(exc, "lineno", None)
        where = f" (line {line})" if line else ""
        raise UsageError(f"cannot read the AWS credentials file {path}: it is not an INI file{where}") from None
    except UnicodeDecodeError:
        raise UsageError(f"cannot read the AWS credentials file {path}: it is not UTF-8 text") from None
    except OSError as exc:
        raise UsageError(f"cannot read the AWS credentials file {path}: {exc.strerror or exc}") from None
    if not parser.has_section(name):
        if profile:
            raise UsageError(f"no profile {profile!r} in {path}")
        raise UsageError(_NONE)
    section = parser[name]
    key, secret = section.get("aws_access_key_id"), section.get("aws_secret_access_key")
    if not key or not secret:
        raise UsageError(f"the profile {name!r} in {path} has no aws_access_key_id/aws_secret_access_key")
    out = {"access_key_id": key, "secret_access_key": secret}
    token = section.get("aws_session_token")
    if token:
        out["session_token"] = token
    return out
