"""The curator-only file of a release: facts about the private table that must not be published.

``dpql compile`` writes, beside nothing it publishes, a JSON file for the data custodian (the
*curator*) with the true row count, the rows kept, missing / undeclared / clipped counts per
column, the number of distinct queries answered, the compile's stage timings (they scale with the
file's real size, so they are not in the public record either) and a **keyed** fingerprint of the
private data file.

Where it goes (``output.curator`` in the spec, relative to the spec's folder): by default
``curator/<table stem>.CURATOR-ONLY.json`` next to the spec, i.e. outside the folder of the
published table and provenance record and named so that nobody publishes it by mistake. The
folder is created with mode 0700 and the file is written atomically with mode 0600.

The fingerprint. A plain SHA-256 of the private file would be a confirmation oracle: anyone who
guesses the dataset could check the guess against it. The file holds instead
``data_hmac_sha256 = HMAC-SHA256(key, SHA-256(file bytes))`` (the raw 32-byte digest as the
message), which only the holder of the key can recompute (:func:`file_hmac`). The key:

* ``DPQL_CURATOR_KEY`` in the environment (hex, at least 32 bytes), if set; nothing is written;
* else the key file ``dpql-curator.key`` in the curator file's folder: 32 random bytes
  (``secrets``), hex, created on first use with mode 0600 and reused by later compiles (so the
  fingerprints of two releases of the same file agree). A key file that others can read is
  refused.

Problems with the key or the curator path are ``E612`` diagnostics.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpql.diagnostics import Diagnostic, DiagnosticError, SourcePos
from dpql.io import CURATOR_MODE, write_json

if TYPE_CHECKING:
    from dpql.spec.load import LoadedSpec

CURATOR_KEY_ENV = "DPQL_CURATOR_KEY"
KEY_FILE_NAME = "dpql-curator.key"
DEFAULT_FOLDER = "curator"
SUFFIX = ".CURATOR-ONLY.json"
KEY_BYTES = 32
HMAC_DESCRIPTION = "HMAC-SHA256(key, SHA-256(data file bytes)); key from {source}"


def default_curator_path(spec: LoadedSpec) -> Path:
    """``curator/<table stem>.CURATOR-ONLY.json`` in the spec's folder."""
    stem = Path(spec.model.output.path).name.split(".")[0] or "release"
    return spec.resolve(f"{DEFAULT_FOLDER}/{stem}{SUFFIX}")


def curator_path(spec: LoadedSpec) -> Path:
    """Where the release's curator file goes: ``output.curator`` or the default; E612 if it is
    one of the published outputs."""
    given = spec.model.output.curator
    path = spec.resolve(given) if given else default_curator_path(spec)
    published = {spec.resolve(spec.model.output.path), spec.resolve(spec.model.output.provenance)}
    if path in published:
        raise _error(
            spec.path,
            f"output.curator ({given}) is the path of a published output",
            "give the curator file its own path, away from the published table and record",
        )
    return path


def _error(where: Path | str, message: str, hint: str) -> DiagnosticError:
    return DiagnosticError([Diagnostic("E612", message, SourcePos(str(where)), hint)])


def _parse_key(text: str, where: str) -> bytes:
    try:
        key = bytes.fromhex(text.strip())
    except ValueError:
        key = b""
    if len(key) < KEY_BYTES:
        raise _error(
            where,
            f"the curator key from {where} is not at least {KEY_BYTES} bytes of hex",
            f"use e.g. python3 -c 'import secrets; print(secrets.token_hex({KEY_BYTES}))'",
        )
    return key


def curator_key(folder: Path) -> tuple[bytes, str]:
    """The HMAC key and where it came from: ``$DPQL_CURATOR_KEY``, else the key file in
    ``folder`` (created with mode 0600 on first use)."""
    env = os.environ.get(CURATOR_KEY_ENV)
    if env:
        return _parse_key(env, f"${CURATOR_KEY_ENV}"), f"${CURATOR_KEY_ENV}"
    path = folder / KEY_FILE_NAME
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode) or info.st_mode & 0o077:
            raise _error(
                path,
                f"the curator key file {path} is not a regular file of mode 0600",
                f"chmod 600 {path} (and keep it away from anything published)",
            ) from None
        return _parse_key(path.read_text(encoding="ascii"), str(path)), str(path)
    with os.fdopen(fd, "w", encoding="ascii") as out:
        key = secrets.token_bytes(KEY_BYTES)
        out.write(key.hex() + "\n")
    return key, str(path)


def data_hmac(key: bytes, sha256_hex: str) -> str:
    """``HMAC-SHA256(key, digest)`` of a file's hex SHA-256 ``digest``, as hex."""
    return hmac.new(key, bytes.fromhex(sha256_hex), hashlib.sha256).hexdigest()


def file_hmac(path: Path, key: bytes) -> str:
    """The keyed fingerprint of a file as the curator file records it (for the curator to check
    that a file is the one a release was made from)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return data_hmac(key, digest.hexdigest())


def curator_record(
    summary: Mapping[str, Any], timings: Mapping[str, float], key: bytes, key_source: str
) -> dict[str, Any]:
    """The curator file's content: the measurer's curator summary with its raw ``sha256``
    replaced by the keyed ``data_hmac_sha256``, plus the stage timings in seconds."""
    out = {k: v for k, v in summary.items() if k != "sha256"}
    raw = summary.get("sha256")
    out["data_hmac_sha256"] = data_hmac(key, raw) if raw else None
    out["data_hmac"] = HMAC_DESCRIPTION.format(source=key_source)
    if "fingerprint_of" in summary:  # a DataFrame's content hash, not a file's bytes
        out["data_hmac"] = out["data_hmac"].replace(
            "SHA-256(data file bytes)", str(summary["fingerprint_of"])
        )
    out["timings_s"] = {k: round(v, 3) for k, v in timings.items()}
    return out


def write_curator_json(obj: Any, path: Path) -> None:
    """Write ``obj`` to ``path`` atomically with mode 0600 (folder created with mode 0700)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    write_json(obj, path, CURATOR_MODE)
