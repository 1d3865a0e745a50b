"""The keys of an encrypted remote: one random master key, wrapped under each user's secret.

As in restic, the bucket holds the master key only wrapped, once per key:

* ``crypt``: msgpack ``{v, cipher, names, segment, check}`` in the clear, written create-only
  by the first push: the remote is encrypted, how, and which master key is its own (``check``
  is derived from the master key; it reveals nothing about it).  One first push wins it, so two
  first pushes at once cannot leave a remote with two master keys.
* ``keys/<16 hex>``: msgpack ``{v, kdf, n, r, p, salt, nonce, wrapped, created}`` in the clear:
  the master key sealed with AES-256-GCM under scrypt(secret, salt), the key object's name bound.

The secret is the passphrase (``SNAPSTORE_PASSPHRASE``, else asked on the terminal) or the
content of a key file (its last line end removed, as restic's ``--password-file``).  Nothing
secret is stored locally: the local settings keep the key file's path and the id of the key
that opened the remote last (tried first: one GET instead of a listing).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import msgpack

from snapstore.errors import CorruptError, EncryptionKeyError, FormatVersionError, SnapstoreError
from snapstore.remote import wire
from snapstore.remote.crypto import SEGMENT, Ciphers
from snapstore.remote.layout import CRYPT_MAGIC
from snapstore.remote.transport import Transport

if TYPE_CHECKING:
    from snapstore.remote.state import RemoteConfig
    from snapstore.remote.transport import CountingTransport

CRYPT_KEY = "crypt"
KEYS = "keys/"
PASSPHRASE_ENV = "SNAPSTORE_PASSPHRASE"
#: scrypt's cost for new keys (~32 MiB, a few tenths of a second); a key object asking for more
#: than the limits below is refused unread (a bucket writer could plant one to exhaust memory).
SCRYPT_N, SCRYPT_R, SCRYPT_P = 1 << 15, 8, 1
MAX_N, MAX_R, MAX_P = 1 << 18, 32, 16
MAX_MEM = 256 << 20
MAX_KEY_OBJECT = 4 << 10
#: Keys tried, at most, when the remembered one does not open the remote.
MAX_KEYS = 64

Secret = Callable[[bool], bytes]


def secret_from(name: str, key_file: str | None) -> Secret:
    """Where the secret of remote ``name`` comes from: ``key_file``, else the environment, else
    the terminal (asked twice when a new key is made); EncryptionKeyError when none."""

    def get(new: bool) -> bytes:
        if key_file is not None:
            return read_key_file(key_file)
        env = os.environ.get(PASSPHRASE_ENV)
        if env:
            return env.encode()
        return _ask(name, new)

    return get


def settings(key_file: str | None) -> dict[str, Any]:
    """The local settings of a remote added with ``--encrypt``: the key file's absolute path
    (read now, so a missing one is said at once) or None for a passphrase."""
    if key_file is not None:
        key_file = os.path.abspath(key_file)
        read_key_file(key_file)
    return {"key_file": key_file, "key_id": None}


def read_key_file(path: str) -> bytes:
    """The secret a key file holds; EncryptionKeyError when it is missing, unreadable or empty."""
    try:
        with open(path, "rb") as f:
            data = f.read(1 << 16)
    except OSError as exc:
        raise EncryptionKeyError(f"cannot read the key file {path}: {exc.strerror or exc}") from None
    data = data[:-2] if data.endswith(b"\r\n") else data[:-1] if data.endswith(b"\n") else data
    if not data:
        raise EncryptionKeyError(f"the key file {path} is empty")
    return data


def _ask(name: str, new: bool) -> bytes:
    import sys

    if not sys.stdin.isatty():
        raise EncryptionKeyError(
            f"the remote {name} is encrypted: set {PASSPHRASE_ENV}, add it with --key-file FILE, or run on a terminal"
        )
    import getpass

    first = getpass.getpass(f"passphrase for remote {name}: ")
    if new and getpass.getpass("the same again: ") != first:
        raise EncryptionKeyError("the two passphrases differ")
    if not first:
        raise EncryptionKeyError("an empty passphrase")
    return first.encode()


# -- key objects ---------------------------------------------------------------------------------


def _kek(secret: bytes, salt: bytes, n: int, r: int, p: int) -> bytes:
    import hashlib

    return hashlib.scrypt(secret, salt=salt, n=n, r=r, p=p, maxmem=MAX_MEM, dklen=32)


def wrap(master: bytes, secret: bytes, key_id: str) -> bytes:
    """A key object: ``master`` sealed under ``secret``."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    salt, nonce = os.urandom(16), os.urandom(12)
    wrapped = AESGCM(_kek(secret, salt, SCRYPT_N, SCRYPT_R, SCRYPT_P)).encrypt(nonce, master, _key_aad(key_id))
    return bytes(msgpack.packb({
        "v": 1, "kdf": "scrypt", "n": SCRYPT_N, "r": SCRYPT_R, "p": SCRYPT_P, "salt": salt, "nonce": nonce,
        "wrapped": wrapped, "created": time.time_ns(),
    }, use_bin_type=True))


def _key_aad(key_id: str) -> bytes:
    return b"snapstore key v1\0" + key_id.encode()


def parse_key(key_id: str, body: bytes) -> dict[str, Any]:
    """A key object's fields, checked (bounded scrypt cost); CorruptError when damaged."""
    try:
        if len(body) > MAX_KEY_OBJECT:
            raise ValueError("too large")
        d = wire.unpack(body)
        n, r, p = d["n"], d["r"], d["p"]
        if d["v"] != 1 or d["kdf"] != "scrypt" or not all(type(x) is int and x > 0 for x in (n, r, p)):
            raise ValueError("unknown version or kdf")
        if n > MAX_N or n & (n - 1) or r > MAX_R or p > MAX_P or 128 * n * r > MAX_MEM:
            raise ValueError("scrypt cost out of bounds")
        if not all(isinstance(d[k], bytes) for k in ("salt", "nonce", "wrapped")) or len(d["nonce"]) != 12:
            raise ValueError("bad fields")
        return dict(d)
    except (KeyError, ValueError, TypeError, msgpack.UnpackException) as exc:
        raise CorruptError(f"remote object {KEYS}{key_id} is corrupt (damaged key: {exc})") from None


def unwrap(key_id: str, body: bytes, secret: bytes) -> bytes | None:
    """The master key the key object holds, or None when ``secret`` does not open it."""
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    d = parse_key(key_id, body)
    try:
        master = AESGCM(_kek(secret, d["salt"], d["n"], d["r"], d["p"])).decrypt(d["nonce"], d["wrapped"], _key_aad(key_id))
    except InvalidTag:
        return None
    return master if len(master) == 32 else None


def encode_crypt(ciphers: Ciphers) -> bytes:
    return bytes(msgpack.packb(
        {"v": 1, "cipher": "aes-256-gcm", "names": "aes-siv", "segment": SEGMENT, "check": ciphers.check},
        use_bin_type=True,
    ))


def parse_crypt(body: bytes) -> bytes:
    """The check value of the remote's master key; FormatVersionError for another scheme."""
    try:
        d = wire.unpack(body[:MAX_KEY_OBJECT])
        fields = (d["v"], d["cipher"], d["names"], d["segment"])
        check = d["check"]
        if not isinstance(check, bytes):
            raise ValueError("bad check")
    except (KeyError, ValueError, TypeError, msgpack.UnpackException) as exc:
        raise CorruptError(f"remote object {CRYPT_KEY} is corrupt ({exc})") from None
    if fields != (1, "aes-256-gcm", "aes-siv", SEGMENT):
        raise FormatVersionError(f"the remote is encrypted with a scheme this snapstore does not know ({fields!r:.80})")
    return bytes(check)


# -- opening a remote --------------------------------------------------------------------------------


class Opened:
    """What opening an encrypted remote found: its master key and ciphers (None: nothing is
    there yet) and the id of the key that opened it."""

    def __init__(self, master: bytes | None, key_id: str | None) -> None:
        self.master = master
        self.ciphers = Ciphers(master) if master is not None else None
        self.key_id = key_id


def open_remote(t: Transport, name: str, secret: Secret, *, hint: str | None, create: bool) -> Opened:
    """Open the encrypted remote behind ``t``: the remembered key ``hint`` first (one GET),
    else every key in ``keys/``.  With ``create``, a remote with nothing on it gets a new
    master key and a first key made from the secret."""
    if hint is not None:
        got = t.get(KEYS + hint, MAX_KEY_OBJECT)
        if got is not None:
            master = unwrap(hint, got.body, secret(False))
            if master is not None:
                return Opened(master, hint)
    for _attempt in range(2):
        crypt = t.get(CRYPT_KEY, MAX_KEY_OBJECT)
        if crypt is not None:
            return _open_with_keys(t, name, parse_crypt(crypt.body), secret(False))
        config = t.get("config", 1 << 16)
        if config is not None and config.body.startswith(CRYPT_MAGIC):
            raise CorruptError(f"remote object {CRYPT_KEY} is missing: the remote {name} is encrypted but says nothing of its keys")
        if config is not None:
            raise EncryptionKeyError(f"the remote {name} is not encrypted: remove it and add it again without --encrypt")
        if not create:
            return Opened(None, None)
        made = _create(t, secret(True))
        if made is not None:
            return made
    raise EncryptionKeyError(f"the remote {name}'s encryption record changed while it was being made; try again")


def _open_with_keys(t: Transport, name: str, check: bytes, secret: bytes) -> Opened:
    tried = 0
    for entry in t.list(KEYS):
        key_id = entry.key[len(KEYS) :]
        if tried >= MAX_KEYS:
            break
        got = t.get(entry.key, MAX_KEY_OBJECT)
        if got is None:
            continue
        tried += 1
        try:
            master = unwrap(key_id, got.body, secret)
        except SnapstoreError:
            continue  # a damaged or planted key object: the others may open the remote
        if master is not None and Ciphers(master).check == check:
            return Opened(master, key_id)
    raise EncryptionKeyError(
        f"no key of the remote {name} opens with this passphrase or key file ({tried} tried)"
    )


def _create(t: Transport, secret: bytes) -> Opened | None:
    """A new master key and a first key for a remote with nothing on it; None when another
    client made the remote's encryption record first (its own key is then removed)."""
    master = os.urandom(32)
    ciphers = Ciphers(master)
    key_id = os.urandom(8).hex()
    if t.put_create(KEYS + key_id, wrap(master, secret, key_id)) is None:
        return None
    if t.put_create(CRYPT_KEY, encode_crypt(ciphers)) is None:
        t.delete(KEYS + key_id)
        return None
    return Opened(master, key_id)


def encrypted(t: CountingTransport, cfg: RemoteConfig, *, writing: bool) -> tuple[CountingTransport, RemoteConfig]:
    """``t`` wrapped for the encrypted remote ``cfg`` (its requests so far still counted), and
    ``cfg`` with the id of the key that opened it; ``t`` as it is for a remote not encrypted."""
    from snapstore.remote.crypto import EncryptedTransport
    from snapstore.remote.transport import CountingTransport

    if cfg.crypt is None:
        return t, cfg
    key_file = cfg.crypt.get("key_file")
    hint = cfg.crypt.get("key_id")
    opened = open_remote(t, cfg.name, secret_from(cfg.name, key_file), hint=hint, create=writing)
    if opened.ciphers is None:  # nothing there yet: reads find nothing, the first push makes the key
        return t, cfg
    sealed = CountingTransport(EncryptedTransport(t.inner, opened.ciphers))
    sealed.counts = dict(t.counts)
    if opened.key_id != hint:
        cfg = cfg._replace(crypt={**cfg.crypt, "key_id": opened.key_id})
    return sealed, cfg


# -- remote key add / list / remove (restic's `key` command) ------------------------------------------

NEW_PASSPHRASE_ENV = "SNAPSTORE_NEW_PASSPHRASE"


class KeyInfo(NamedTuple):
    """A key of an encrypted remote: its id, when it was made, and whether it is the one this
    command opened the remote with."""

    id: str
    created: int
    current: bool

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "created_ns": self.created, "current": self.current}


def _manage(cfg: RemoteConfig) -> tuple[Transport, Opened]:
    from snapstore.errors import UsageError
    from snapstore.remote import transport

    if cfg.crypt is None:
        raise UsageError(f"the remote {cfg.name} is not encrypted: it has no keys")
    t = transport.connect(cfg.parsed, endpoint=cfg.endpoint, region=cfg.region, profile=cfg.profile)
    opened = open_remote(t, cfg.name, secret_from(cfg.name, cfg.crypt.get("key_file")), hint=cfg.crypt.get("key_id"),
                         create=False)
    if opened.master is None:
        raise UsageError(f"nothing has been pushed to the remote {cfg.name} yet: the first push makes its first key")
    return t, opened


def list_keys(cfg: RemoteConfig) -> list[KeyInfo]:
    """The keys of the encrypted remote ``cfg`` (opening it with this user's key first)."""
    t, opened = _manage(cfg)
    out = []
    for entry in t.list(KEYS):
        key_id = entry.key[len(KEYS) :]
        got = t.get(entry.key, MAX_KEY_OBJECT)
        try:
            created = int(parse_key(key_id, got.body)["created"]) if got is not None else 0
        except (SnapstoreError, TypeError, ValueError):
            created = 0
        out.append(KeyInfo(key_id, created, key_id == opened.key_id))
    return out


def add_key(cfg: RemoteConfig, key_file: str | None) -> str:
    """A new key for the encrypted remote ``cfg``: its master key wrapped under the secret of
    ``key_file``, else ``SNAPSTORE_NEW_PASSPHRASE``, else asked twice on the terminal."""
    t, opened = _manage(cfg)
    if key_file is not None:
        secret = read_key_file(os.path.abspath(key_file))
    elif os.environ.get(NEW_PASSPHRASE_ENV):
        secret = os.environ[NEW_PASSPHRASE_ENV].encode()
    else:
        secret = _ask(cfg.name, True)
    assert opened.master is not None
    key_id = os.urandom(8).hex()
    if t.put_create(KEYS + key_id, wrap(opened.master, secret, key_id)) is None:
        raise EncryptionKeyError(f"a key {key_id} exists already on the remote {cfg.name}; try again")
    return key_id


def remove_key(cfg: RemoteConfig, key_id: str) -> None:
    """Remove key ``key_id`` of the encrypted remote ``cfg``: never the one this command opened
    it with (use another key to remove that one), so the remote always keeps a key."""
    from snapstore.errors import UsageError

    t, opened = _manage(cfg)
    if key_id == opened.key_id:
        raise UsageError(f"key {key_id} is the one this command opened the remote with: remove it with another key")
    if not key_id or "/" in key_id or t.head(KEYS + key_id) is None:
        raise UsageError(f"the remote {cfg.name} has no key {key_id!r} (see 'snapstore remote key list')")
    t.delete(KEYS + key_id)
