"""Signed provenance records: Ed25519 (RFC 8032) via the ``cryptography`` package.

A curator makes a key pair once (``dpql keygen --out KEYFILE``): the private key ``KEYFILE``
(PEM, PKCS#8, unencrypted, mode 0600: never publish it) and the public key ``KEYFILE.pub`` (PEM,
SubjectPublicKeyInfo), which is published so that anyone can check records. ``dpql compile
--sign-key KEYFILE`` signs the record just before it is written (:func:`sign_record`), and
``dpql verify RECORD --key KEYFILE.pub`` checks it (:func:`verify_signature`).

What is signed: the canonical JSON of the record without its ``signature`` section
(:func:`canonical_bytes`: sorted keys, no whitespace, ASCII, Python's shortest round-trip
floats). The ``signature`` section holds the algorithm, the sha256 of the signing key's raw
32-byte public key (its fingerprint, to tell which key signed) and the base64 signature. A
signature tells a record the curator issued from one edited afterwards; it says nothing more
about the release than the record does (``dpql verify`` still recomputes the accounting and
re-plans the spec).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from dpql.io import UnreadableFile, read_capped

ALGORITHM = "ed25519"
PUBLIC_SUFFIX = ".pub"
#: A key file is a few hundred bytes; anything much larger is not one.
MAX_KEY_BYTES = 64 * 1024


class SigningError(ValueError):
    """A key file that cannot be used (missing, malformed, not Ed25519, readable by others) or
    cannot be written (already there); the message says which and where."""


def canonical_bytes(record: Mapping[str, Any]) -> bytes:
    """What a signature covers: the record without ``signature`` as canonical JSON."""
    body = {k: v for k, v in record.items() if k != "signature"}
    return json.dumps(
        body, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    ).encode("ascii")


def fingerprint(public_key: Ed25519PublicKey) -> str:
    """sha256 (hex) of the raw 32-byte public key."""
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


def public_key_path(private_key_path: Path) -> Path:
    """Where ``dpql keygen`` puts the public key of ``private_key_path``."""
    return private_key_path.with_name(private_key_path.name + PUBLIC_SUFFIX)


# ---------------------------------------------------------------------------------------------
# Key files


def generate_keypair(private_key_path: Path) -> tuple[Path, Path, str]:
    """Write a new Ed25519 key pair: the private key at ``private_key_path`` (mode 0600) and the
    public key beside it (``.pub``, mode 0644 less the umask). Neither file may exist already:
    a key is never overwritten (its records could no longer be checked). Returns the two paths
    and the public key's fingerprint."""
    public_path = public_key_path(private_key_path)
    for path in (private_key_path, public_path):
        if path.exists() or path.is_symlink():
            raise SigningError(f"{path} already exists; dpql keygen never overwrites a key")
    if not private_key_path.parent.is_dir():
        raise SigningError(f"{private_key_path.parent} is not a folder")
    key = Ed25519PrivateKey.generate()
    private_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    public_pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    _create(private_key_path, private_pem, 0o600)
    try:
        _create(public_path, public_pem, 0o666 & ~_umask())
    except BaseException:
        private_key_path.unlink(missing_ok=True)
        raise
    return private_key_path, public_path, fingerprint(key.public_key())


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _create(path: Path, content: bytes, mode: int) -> None:
    """Write ``content`` to a new file ``path`` with ``mode``, whole or not at all: a temp file
    (mode 0600 from the start) is hard-linked to ``path``, which fails if ``path`` exists."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(content)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        try:
            os.link(tmp, path)
        except FileExistsError:
            message = f"{path} already exists; dpql keygen never overwrites a key"
            raise SigningError(message) from None
    finally:
        os.unlink(tmp)


def _read_key_file(path: Path, what: str) -> bytes:
    try:
        return read_capped(path, MAX_KEY_BYTES)
    except UnreadableFile as exc:
        if str(exc).startswith("larger than"):
            raise SigningError(f"{path} is too large to be a {what}") from None
        raise SigningError(f"cannot read the {what} {path}: {exc}") from None


def load_private_key(path: Path) -> Ed25519PrivateKey:
    """The Ed25519 private key in ``path`` (from ``dpql keygen``). Refused when the file can be
    read by anyone but its owner (it signs records in the curator's name), is not PEM, or holds
    another kind of key. Raises :class:`SigningError`."""
    data = _read_key_file(path, "signing key")
    mode = stat.S_IMODE(path.stat().st_mode)
    if os.name == "posix" and mode & 0o077:
        raise SigningError(
            f"the signing key {path} has mode {mode:04o}: others may read it; run chmod 600 on it "
            "(and make a new key pair if anyone else could have copied it)"
        )
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise SigningError(
            f"{path} is not an unencrypted PEM private key from dpql keygen ({exc})"
        ) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise SigningError(f"{path} is not an Ed25519 key (dpql keygen makes one)")
    return key


def load_public_key(path: Path) -> Ed25519PublicKey:
    """The Ed25519 public key in ``path`` (PEM, as ``dpql keygen`` writes ``KEYFILE.pub``).
    Raises :class:`SigningError`."""
    data = _read_key_file(path, "public key")
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise SigningError(
            f"{path} is not a PEM public key (pass the .pub file dpql keygen wrote) ({exc})"
        ) from None
    if not isinstance(key, Ed25519PublicKey):
        raise SigningError(f"{path} is not an Ed25519 public key")
    return key


# ---------------------------------------------------------------------------------------------
# Records


def sign_record(record: dict[str, Any], private_key_path: Path) -> dict[str, Any]:
    """``record`` with a ``signature`` section by the key in ``private_key_path`` (a signature
    already there is replaced). Raises :class:`SigningError` on an unusable key, ValueError on
    a record that is not JSON (NaN, ...)."""
    key = load_private_key(private_key_path)
    value = key.sign(canonical_bytes(record))
    body = {k: v for k, v in record.items() if k != "signature"}
    return {
        **body,
        "signature": {
            "algorithm": ALGORITHM,
            "public_key_sha256": fingerprint(key.public_key()),
            "value": base64.b64encode(value).decode("ascii"),
        },
    }


def verify_signature(record: Mapping[str, Any], public_key_path: Path) -> str | None:
    """None when ``record`` carries a valid signature by the key in ``public_key_path``, else
    why not: unsigned, another key's fingerprint, a malformed section, or a signature that does
    not match the content (the record was changed after it was signed). Raises
    :class:`SigningError` when the key file cannot be used."""
    key = load_public_key(public_key_path)
    section = record.get("signature")
    if section is None:
        return "the record is unsigned (no signature section)"
    if not isinstance(section, Mapping) or section.get("algorithm") != ALGORITHM:
        return f"the signature section is malformed or not {ALGORITHM}"
    expected = fingerprint(key)
    if section.get("public_key_sha256") != expected:
        return (
            f"the record was signed by the key with fingerprint "
            f"{str(section.get('public_key_sha256'))[:16]}..., not by {public_key_path} "
            f"({expected[:16]}...)"
        )
    try:
        value = base64.b64decode(str(section.get("value")), validate=True)
        body = canonical_bytes(record)
    except (binascii.Error, ValueError, RecursionError) as exc:
        return f"the signature cannot be checked: {exc}"
    try:
        key.verify(value, body)
    except InvalidSignature:
        return (
            "the signature does not match the record's content: the record was changed after "
            "it was signed"
        )
    return None
