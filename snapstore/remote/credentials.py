"""AWS settings for a remote, resolved as the AWS CLI and boto3 do; credentials never stored.

The store keeps a remote's URL, endpoint, region and profile *name* only (``remote add``).
Everything else is read at each command, in this order (docs/remote.md, "AWS settings"):

* **profile**: the remote's ``--profile``, else ``AWS_PROFILE``, else ``default``; it is looked
  up in the shared credentials file (``AWS_SHARED_CREDENTIALS_FILE``, else ``~/.aws/credentials``)
  and the config file (``AWS_CONFIG_FILE``, else ``~/.aws/config``: ``[profile NAME]`` or
  ``[default]``);
* **keys**: a profile named by ``--profile`` (boto3: an explicit profile wins over the
  environment), else ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY`` (``AWS_SESSION_TOKEN``),
  else a web-identity or container credential the environment names (obstore reads those),
  else the profile's ``aws_access_key_id``/``aws_secret_access_key`` (credentials file, then
  config file).  With none of these the command stops (UsageError) before any request: obstore
  would otherwise ask the instance-metadata address, a host the user never named;
* **endpoint**: the remote's ``--endpoint``, else ``AWS_ENDPOINT_URL_S3``, else
  ``AWS_ENDPOINT_URL``, else the profile's ``services`` section (its ``s3 = endpoint_url``), else
  the profile's ``endpoint_url`` (none of the environment or profile ones when
  ``AWS_IGNORE_CONFIGURED_ENDPOINT_URLS`` is true), else AWS's;
* **region**: the remote's ``--region``, else ``AWS_REGION``, else ``AWS_DEFAULT_REGION``, else
  the profile's ``region``, else ``us-east-1``.
"""

from __future__ import annotations

import configparser
import os
from typing import NamedTuple

from snapstore.errors import UsageError

#: Environment variables with which obstore finds credentials by itself.
_DELEGATED = (
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
)
_NONE = (
    "no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or name a profile of "
    "~/.aws/credentials or ~/.aws/config (AWS_PROFILE or --profile)"
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


class Settings(NamedTuple):
    """What a connection uses: S3Store config entries carrying credentials (empty: obstore
    reads them from the environment), the endpoint (None: AWS's), the region, and where each
    came from (for ``remote doctor`` and the tests)."""

    keys: dict[str, str]
    endpoint: str | None
    region: str
    sources: dict[str, str]


class _Files:
    """The shared credentials and config files, each read at most once."""

    def __init__(self) -> None:
        env = os.environ
        self.paths = {
            "credentials": env.get("AWS_SHARED_CREDENTIALS_FILE") or os.path.expanduser("~/.aws/credentials"),
            "config": env.get("AWS_CONFIG_FILE") or os.path.expanduser("~/.aws/config"),
        }
        self._parsed: dict[str, configparser.RawConfigParser | None] = {}

    def parser(self, which: str) -> configparser.RawConfigParser | None:
        """The parsed file, None when there is none; UsageError when it cannot be read."""
        if which not in self._parsed:
            self._parsed[which] = _parse(self.paths[which], f"AWS {which} file")
        return self._parsed[which]

    def section(self, which: str, name: str) -> dict[str, str] | None:
        """Profile ``name`` of the file (``[profile NAME]`` or ``[NAME]`` in the config file)."""
        parser = self.parser(which)
        if parser is None:
            return None
        names = [f"profile {name}", name] if which == "config" else [name]
        for section in names:
            if parser.has_section(section):
                return dict(parser[section])
        return None

    def services(self, name: str) -> dict[str, str] | None:
        """The ``[services NAME]`` section of the config file."""
        parser = self.parser("config")
        section = f"services {name}"
        return dict(parser[section]) if parser is not None and parser.has_section(section) else None


def _parse(path: str, what: str) -> configparser.RawConfigParser | None:
    parser = configparser.RawConfigParser()
    try:
        parser.read_string(_read_file(path), path)
    except FileNotFoundError:
        return None
    except configparser.Error as exc:
        # Never the parser's message: it quotes the offending line, which may hold a key.
        line = getattr(exc, "lineno", None)
        where = f" (line {line})" if line else ""
        raise UsageError(f"cannot read the {what} {path}: it is not an INI file{where}") from None
    except UnicodeDecodeError:
        raise UsageError(f"cannot read the {what} {path}: it is not UTF-8 text") from None
    except OSError as exc:
        raise UsageError(f"cannot read the {what} {path}: {exc.strerror or exc}") from None
    return parser


def _nested(value: str | None, key: str) -> str | None:
    """``key`` of a nested block (``s3 =\n  endpoint_url = ...``), as the AWS config has them."""
    for line in (value or "").splitlines():
        k, sep, v = line.partition("=")
        if sep and k.strip() == key:
            return v.strip()
    return None


def _profile_keys(files: _Files, name: str) -> tuple[dict[str, str], str] | None:
    """The profile's keys and the file they came from (credentials file first)."""
    for which in ("credentials", "config"):
        section = files.section(which, name)
        if section is None:
            continue
        key, secret = section.get("aws_access_key_id"), section.get("aws_secret_access_key")
        if not key and not secret:
            continue
        if not key or not secret:
            raise UsageError(
                f"the profile {name!r} in {files.paths[which]} has no aws_access_key_id/aws_secret_access_key"
            )
        out = {"access_key_id": key, "secret_access_key": secret}
        if section.get("aws_session_token"):
            out["session_token"] = section["aws_session_token"]
        return out, files.paths[which]
    return None


def _keys(files: _Files, profile: str | None, name: str) -> tuple[dict[str, str], str]:
    env = os.environ
    if profile:  # named for this remote: it wins over the environment, as boto3's explicit profile
        found = _profile_keys(files, profile)
        if found is None:
            unsupported = _unsupported(files, profile)
            if unsupported:
                raise UsageError(unsupported)
            if files.parser("credentials") is None and files.parser("config") is None:
                raise UsageError(f"no AWS credentials file ({files.paths['credentials']}) for the profile {profile!r}")
            raise UsageError(f"no profile {profile!r} with keys in {files.paths['credentials']} or {files.paths['config']}")
        return found[0], f"profile {profile} ({found[1]})"
    if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
        return {}, "AWS_ACCESS_KEY_ID"  # obstore reads these (and AWS_SESSION_TOKEN) itself
    if any(env.get(v) for v in _DELEGATED):
        token_file = env.get("AWS_WEB_IDENTITY_TOKEN_FILE")
        if token_file:
            _check_regular(token_file, "AWS_WEB_IDENTITY_TOKEN_FILE")  # obstore reads it itself
        return {}, "web identity or container"
    found = _profile_keys(files, name)
    if found is None:
        raise UsageError(_unsupported(files, name) or (
            f"no profile {name!r} (AWS_PROFILE) with keys in {files.paths['credentials']} or {files.paths['config']}"
            if env.get("AWS_PROFILE") else _NONE))
    return found[0], f"profile {name} ({found[1]})"


def _unsupported(files: _Files, name: str) -> str | None:
    """The message for a profile that gets its keys in a way snapstore does not support."""
    section = files.section("config", name) or {}
    kinds = [k for k in ("credential_process", "sso_session", "sso_start_url", "role_arn") if section.get(k)]
    if not kinds:
        return None
    return (f"the profile {name!r} gets its keys by {kinds[0]}, which snapstore does not support: export keys "
            "(for example `eval \"$(aws configure export-credentials --format env)\"`) or use a profile with "
            "aws_access_key_id and aws_secret_access_key")


def _endpoint(files: _Files, endpoint: str | None, name: str) -> tuple[str | None, str]:
    env = os.environ
    if endpoint:
        return endpoint, "the remote's --endpoint"
    if env.get("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "").strip().lower() == "true":
        return None, "AWS"
    for var in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"):
        if env.get(var):
            return _checked(env[var], var), var
    section = files.section("config", name) or {}
    services = files.services(section.get("services", "")) if section.get("services") else None
    found = _nested((services or {}).get("s3"), "endpoint_url")
    if found:
        return _checked(found, f"the services section of profile {name}"), f"profile {name} services"
    if section.get("endpoint_url"):
        return _checked(section["endpoint_url"], f"endpoint_url of profile {name}"), f"profile {name}"
    return None, "AWS"


def _checked(url: str, what: str) -> str:
    """An endpoint read from the environment or a file: an http(s) URL without credentials."""
    url = url.strip()
    if not url.startswith(("https://", "http://")):
        raise UsageError(f"{what} must be an http(s) URL")
    if "@" in url.split("//", 1)[1].split("/", 1)[0]:
        raise UsageError(f"{what}: credentials never go in an endpoint URL")
    return url


def _region(files: _Files, region: str | None, name: str) -> tuple[str, str]:
    env = os.environ
    if region:
        return region, "the remote's --region"
    for var in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        if env.get(var):
            return env[var].strip(), var
    found = (files.section("config", name) or {}).get("region")
    if found:
        return found.strip(), f"profile {name}"
    return "us-east-1", "default"


def resolve(profile: str | None, endpoint: str | None = None, region: str | None = None) -> Settings:
    """The settings of a connection for a remote stored with ``profile``, ``endpoint`` and
    ``region`` (each None when not given to ``remote add``): see the module's docstring."""
    files = _Files()
    name = profile or os.environ.get("AWS_PROFILE") or "default"
    keys, keys_from = _keys(files, profile, name)
    url, url_from = _endpoint(files, endpoint, name)
    where, region_from = _region(files, region, name)
    return Settings(keys, url, where, {"keys": keys_from, "endpoint": url_from, "region": region_from})

