"""S3 error codes in plain words, and the AWS conventions (docs/remote.md, "AWS settings").

Against a real SeaweedFS with authentication on (tests/seaweed.py: an admin identity and a
read-only one).  ``HOME`` points at a temporary directory holding ``.aws/credentials`` and
``.aws/config``, as a user's would; the AWS variables of the session are cleared first.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import assert_one_line_error
from remote_helpers import make_store, seaweed  # noqa: F401 - the fixture
from seaweed import ACCESS_KEY, BUCKET, READER_KEY, READER_SECRET, SECRET_KEY

from snapstore.errors import RemoteError, UsageError
from snapstore.remote import credentials
from snapstore.remote import transport as tr
from snapstore.remote.names import parse_url
from snapstore.store import Store

_AWS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_REGION",
        "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_SHARED_CREDENTIALS_FILE",
        "AWS_CONFIG_FILE", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "AWS_ENDPOINT")


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """An empty HOME with ``.aws/``, and no AWS variable set."""
    for var in _AWS:
        monkeypatch.delenv(var, raising=False)
    h = tmp_path / "home"
    (h / ".aws").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(h))
    return h


def _keys(key: str = ACCESS_KEY, secret: str = SECRET_KEY) -> str:
    return f"aws_access_key_id = {key}\naws_secret_access_key = {secret}\n"


def _project(tmp_path: Path, name: str = "a") -> Path:
    with make_store(tmp_path / name, {"a.txt": b"hello\n", "src/m.py": b"x = 1\n" * 50}) as s:
        s.snapshot("one")
    return tmp_path / name


def _url() -> str:
    return f"s3://{BUCKET}/aws-{os.urandom(4).hex()}"


# -- error codes --------------------------------------------------------------------------------


@pytest.mark.parametrize(("key", "secret", "code", "words"), [
    (ACCESS_KEY, "wrong-secret-0123456789", "SignatureDoesNotMatch", "secret key does not match"),
    ("nobody", SECRET_KEY, "InvalidAccessKeyId", "does not know this access key"),
    (READER_KEY, READER_SECRET, "AccessDenied", "not allowed"),
])
def test_a_refusal_names_its_s3_code_in_one_line(seaweed, home, tmp_path, run_cli, monkeypatch, key, secret, code, words):  # noqa: F811
    cwd = _project(tmp_path)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    assert run_cli("remote", "add", "origin", _url(), "--endpoint", seaweed.endpoint, cwd=cwd).code == 0
    r = run_cli("push", cwd=cwd)
    assert r.code == RemoteError.exit_code
    assert_one_line_error(r.err)
    assert code in r.err and words in r.err, r.err
    assert secret not in r.err and "<?xml" not in r.err


def test_a_missing_bucket_is_named_not_taken_for_an_empty_remote(seaweed, home, tmp_path, run_cli, monkeypatch):  # noqa: F811
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    r = run_cli("clone", "s3://no-such-bucket-x/team", str(tmp_path / "c"), "--endpoint", seaweed.endpoint)
    assert r.code == RemoteError.exit_code
    assert_one_line_error(r.err)
    assert "NoSuchBucket" in r.err and "bucket does not exist" in r.err
    assert "nothing has been pushed" not in r.err
    assert not (tmp_path / "c").exists()
    cwd = _project(tmp_path)
    run_cli("remote", "add", "origin", "s3://no-such-bucket-x/team", "--endpoint", seaweed.endpoint, cwd=cwd)
    r = run_cli("remote", "ls", cwd=cwd)
    assert r.code == RemoteError.exit_code and "NoSuchBucket" in r.err


def test_an_empty_prefix_of_a_real_bucket_is_still_nothing_pushed(seaweed, home, tmp_path, run_cli, monkeypatch):  # noqa: F811
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    r = run_cli("clone", _url(), str(tmp_path / "c"), "--endpoint", seaweed.endpoint)
    assert r.code == 4 and "nothing has been pushed" in r.err


# -- AWS conventions ----------------------------------------------------------------------------


def _push_and_clone(tmp_path: Path, run_cli, url: str, *remote_args: str) -> None:
    cwd = _project(tmp_path)
    assert run_cli("remote", "add", "origin", url, *remote_args, cwd=cwd).code == 0
    r = run_cli("push", cwd=cwd)
    assert r.code == 0, r.err
    r = run_cli("clone", url, str(tmp_path / "c"), *remote_args)
    assert r.code == 0, r.err
    assert (tmp_path / "c" / "a.txt").read_bytes() == b"hello\n"


def test_aws_endpoint_url_with_plain_http(seaweed, home, tmp_path, run_cli, monkeypatch):  # noqa: F811
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.setenv("AWS_ENDPOINT_URL", seaweed.endpoint)
    _push_and_clone(tmp_path, run_cli, _url())


def test_aws_endpoint_url_s3_wins_over_aws_endpoint_url(seaweed, home, tmp_path, run_cli, monkeypatch):  # noqa: F811
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", seaweed.endpoint)
    _push_and_clone(tmp_path, run_cli, _url())


def test_a_profile_in_the_config_file_gives_keys_endpoint_and_region(seaweed, home, tmp_path, run_cli, monkeypatch):  # noqa: F811
    (home / ".aws" / "config").write_text(
        f"[profile team]\nregion = eu-west-3\nendpoint_url = {seaweed.endpoint}\n{_keys()}"
    )
    monkeypatch.setenv("AWS_PROFILE", "team")
    _push_and_clone(tmp_path, run_cli, _url())
    got = credentials.resolve(None)
    assert got.endpoint == seaweed.endpoint and got.region == "eu-west-3"
    assert got.sources["keys"].startswith("profile team") and got.sources["keys"].endswith("config)")


def test_the_services_section_gives_the_s3_endpoint(seaweed, home, tmp_path, run_cli, monkeypatch):  # noqa: F811
    (home / ".aws" / "config").write_text(
        f"[default]\nservices = local\nendpoint_url = http://127.0.0.1:9\n{_keys()}"
        f"[services local]\ns3 =\n  endpoint_url = {seaweed.endpoint}\n"
    )
    _push_and_clone(tmp_path, run_cli, _url())


def test_the_credentials_file_wins_over_the_config_file(seaweed, home, tmp_path, run_cli, monkeypatch):  # noqa: F811
    (home / ".aws" / "credentials").write_text(f"[default]\n{_keys()}")
    (home / ".aws" / "config").write_text(f"[default]\n{_keys(secret='wrong-0123456789')}")
    _push_and_clone(tmp_path, run_cli, _url(), "--endpoint", seaweed.endpoint)


def test_the_remotes_profile_wins_over_the_environment_keys(seaweed, home, tmp_path, run_cli, monkeypatch):  # noqa: F811
    (home / ".aws" / "credentials").write_text(f"[team]\n{_keys()}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-0123456789")
    _push_and_clone(tmp_path, run_cli, _url(), "--endpoint", seaweed.endpoint, "--profile", "team")


def test_the_environment_keys_win_over_aws_profile(seaweed, home, tmp_path, run_cli, monkeypatch):  # noqa: F811
    (home / ".aws" / "credentials").write_text(f"[team]\n{_keys(secret='wrong-0123456789')}")
    monkeypatch.setenv("AWS_PROFILE", "team")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    _push_and_clone(tmp_path, run_cli, _url(), "--endpoint", seaweed.endpoint)


def test_region_precedence(home, monkeypatch):
    (home / ".aws" / "config").write_text(f"[default]\nregion = ap-south-1\n{_keys()}")
    assert credentials.resolve(None).region == "ap-south-1"
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-central-1")
    assert credentials.resolve(None).region == "eu-central-1"
    monkeypatch.setenv("AWS_REGION", "eu-west-3")
    assert credentials.resolve(None).region == "eu-west-3"
    assert credentials.resolve(None, region="us-west-2").region == "us-west-2"
    # ...and the connection signs for it (the S3 client is set with the region resolved)
    t = tr.connect(parse_url("s3://b/p"), endpoint="http://127.0.0.1:9")
    assert t.inner.inner.store.config["region"] == "eu-west-3"  # type: ignore[attr-defined]
    (home / ".aws" / "config").write_text(f"[default]\n{_keys()}")
    for var in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(var)
    assert credentials.resolve(None).region == "us-east-1"


def test_an_endpoint_from_the_environment_is_checked_like_one_given(home, monkeypatch):
    (home / ".aws" / "credentials").write_text(f"[default]\n{_keys()}")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "127.0.0.1:9000")
    with pytest.raises(UsageError, match="AWS_ENDPOINT_URL must be an http"):
        credentials.resolve(None)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://user:pw@127.0.0.1:9000")
    with pytest.raises(UsageError, match="credentials never go"):
        credentials.resolve(None)
    monkeypatch.setenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "true")
    assert credentials.resolve(None).endpoint is None


def test_no_keys_anywhere_is_a_usage_error(home, tmp_path):
    (home / ".aws" / "config").write_text("[default]\nregion = eu-west-3\n")
    with pytest.raises(UsageError, match="no AWS credentials"):
        credentials.resolve(None)
    with pytest.raises(UsageError, match="no profile 'team'"):
        credentials.resolve("team")


def test_the_store_keeps_no_key_read_from_the_config_file(seaweed, home, tmp_path, run_cli):  # noqa: F811
    (home / ".aws" / "config").write_text(f"[default]\n{_keys()}")
    cwd = _project(tmp_path)
    assert run_cli("remote", "add", "origin", _url(), "--endpoint", seaweed.endpoint, cwd=cwd).code == 0
    assert run_cli("push", cwd=cwd).code == 0
    data = b"".join(p.read_bytes() for p in (cwd / ".snapstore").rglob("*.mdb"))
    assert SECRET_KEY.encode() not in data
    with Store.open(cwd):
        pass


def test_a_profile_that_gets_keys_another_way_is_named(home, monkeypatch):
    (home / ".aws" / "config").write_text("[profile sso]\nsso_session = corp\nregion = eu-west-3\n"
                                         "[profile proc]\ncredential_process = /bin/get-keys\n")
    monkeypatch.setenv("AWS_PROFILE", "sso")
    with pytest.raises(UsageError, match="sso_session, which snapstore does not support"):
        credentials.resolve(None)
    with pytest.raises(UsageError, match="credential_process, which snapstore does not support"):
        credentials.resolve("proc")
    monkeypatch.setenv("AWS_PROFILE", "nobody")
    with pytest.raises(UsageError, match="no profile 'nobody' \\(AWS_PROFILE\\)"):
        credentials.resolve(None)


def test_profile_default_may_be_written_as_the_config_file_writes_others(home):
    (home / ".aws" / "config").write_text(f"[profile default]\nregion = eu-north-1\n{_keys()}")
    got = credentials.resolve(None)
    assert got.region == "eu-north-1" and got.keys["access_key_id"] == ACCESS_KEY
