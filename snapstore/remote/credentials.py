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


def s3_credentials(profile: str | None) -> dict[str, str]:
    """The S3Store config entries that carry credentials (empty: leave it to obstore)."""
    env = os.environ
    if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
        return {}  # obstore reads these (and AWS_SESSION_TOKEN) itself
    if any(env.get(v) for v in _DELEGATED):
        return {}
    name = profile or env.get("AWS_PROFILE") or "default"
    path = env.get("AWS_SHARED_CREDENTIALS_FILE") or os.path.expanduser("~/.aws/credentials")
    parser = configparser.RawConfigParser()
    try:
        with open(path, encoding="utf-8") as f:
            parser.read_file(f)
    except FileNotFoundError:
        if profile:
            raise UsageError(f"no AWS credentials file ({path}) for the profile {profile!r}") from None
        raise UsageError(_NONE) from None
    except (OSError, configparser.Error, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read the AWS credentials file {path}: {exc}") from None
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
