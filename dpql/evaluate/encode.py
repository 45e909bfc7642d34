"""Encoding of decoded tables (original units) for the evaluator.

The evaluator encodes with the release pipeline's own codec (:func:`dpql.data.codec.encode_frame`),
so a table is read exactly as ``dpql compile`` reads it (whitespace, missing-value rules,
``other`` catch-alls, clipping to the public bounds).
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from dpql.data.codec import MissingPolicy, encode_frame
from dpql.domain import Domain, EncodedTable


def encode_table(
    df: pd.DataFrame,
    domain: Domain,
    missing: Mapping[str, MissingPolicy] | None = None,
    other: Mapping[str, str] | None = None,
    source: str = "<table>",
) -> EncodedTable:
    """``df`` in the public encoding of ``domain``; raises the codec's ``DiagnosticError``."""
    return encode_frame(df, domain, missing, other, source=source).table
