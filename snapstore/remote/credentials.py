"""AWS credentials for a remote: from the environment or a profile, never stored.

The store keeps a remote's URL, endpoint, region and profile *name* only.  The keys come, in
this order, from ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY`` (and ``AWS_SESSION_TOKEN``),
then the profile (``--profile``, else ``AWS_PROFILE``, else ``default``) of the shared
credentials file (``AWS_SHARED_CREDENTIALS_FILE``, else ``~/.aws/credentials``).  With none,
obstore's own chain (instance metadata, web identity, ...) is left to find them.
"""

from __future__ import annotations

import configparser
import os

from snapstore.errors import UsageError


def s3_credentials(profile: str | None) -> dict[str, str]:
    """The S3Store config entries that carry credentials (empty: leave it to obstore)."""
    env = os.environ
    if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
        return {}  # obstore reads these (and AWS_SESSION_TOKEN) itself
    name = profile or env.get("AWS_PROFILE") or "default"
    path = env.get("AWS_SHARED_CREDENTIALS_FILE") or os.path.expanduser("~/.aws/credentials")
    parser = configparser.RawConfigParser()
    try:
        with open(path, encoding="utf-8") as f:
            parser.read_file(f)
    except FileNotFoundError:
        if profile:
            raise UsageError(f"no AWS credentials file ({path}) for the profile {profile!r}") from None
        return {}
    except (OSError, configparser.Error, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read the AWS credentials file {path}: {exc}") from None
    if not parser.has_section(name):
        if profile:
            raise UsageError(f"no profile {profile!r} in {path}")
        return {}
    section = parser[name]
    key, secret = section.get("aws_access_key_id"), section.get("aws_secret_access_key")
    if not key or not secret:
        raise UsageError(f"the profile {name!r} in {path} has no aws_access_key_id/aws_secret_access_key")
    out = {"access_key_id": key, "secret_access_key": secret}
    token = section.get("aws_session_token")
    if token:
        out["session_token"] = token
    return out
