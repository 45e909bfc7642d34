"""A pandas DataFrame as the private table (``dpql.compile(spec, data=df)``).

Part of the privacy boundary: the frame is encoded by the same codec as a file
(:func:`dpql.data.codec.encode_frame`, the spec's missing-value and ``other`` rules) and held by the
in-memory engine, so every statistic of it leaves only through the measurement oracle. It is
never written to disk. Its cells are taken as they are typed (as Parquet's are): numbers for
numeric columns, text or integer codes for categorical ones.

The curator fingerprint. A file's is the keyed HMAC of its bytes' SHA-256; a frame has no
bytes, so :func:`frame_sha256` hashes its content instead: the column names and dtypes, then
``pandas.util.hash_pandas_object`` of its rows (index left out). Two frames with the same
columns, types and cells in the same order get the same fingerprint, whichever file they came
from; a frame and the file it was read from do not. The curator file says which it is.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

import pandas as pd

from dpql.data.codec import CuratorLog, EncodingResult, MissingPolicy, encode_frame
from dpql.data.load import error
from dpql.domain import Domain

FRAME_SOURCE = "pandas.DataFrame (in memory)"
FRAME_FINGERPRINT = (
    "SHA-256 of the DataFrame's column names and dtypes and of "
    "pandas.util.hash_pandas_object(frame, index=False)"
)


def frame_sha256(df: pd.DataFrame) -> str:
    """Hex SHA-256 of a frame's content (module doc). CURATOR-ONLY, like a file's hash."""
    digest = hashlib.sha256()
    for name, dtype in df.dtypes.items():
        digest.update(f"{name!s}\x1f{dtype!s}\x1e".encode())
    digest.update(pd.util.hash_pandas_object(df, index=False).to_numpy().tobytes())
    return digest.hexdigest()


def encode_dataframe(
    df: pd.DataFrame,
    domain: Domain,
    missing: Mapping[str, MissingPolicy] | None = None,
    other: Mapping[str, str] | None = None,
) -> EncodingResult:
    """Encode ``df`` as the private table; the curator log carries :func:`frame_sha256`.
    Total over cells, as for a file (:mod:`dpql.data.codec`): raises ``DiagnosticError`` only for a
    frame of no rows (E403) or the frame's schema and the rules (E404, E406, E408)."""
    if len(df) == 0:
        raise error("E403", "the DataFrame has no rows", FRAME_SOURCE)
    result = encode_frame(df.reset_index(drop=True), domain, missing, other, source=FRAME_SOURCE)
    log: CuratorLog = result.curator_log
    return EncodingResult(
        result.table,
        CuratorLog(
            log.source, log.rows_read, log.rows_kept, log.missing, log.undeclared,
            log.clipped_low, log.clipped_high, log.ignored_columns, frame_sha256(df),
        ),
    )  # fmt: skip
