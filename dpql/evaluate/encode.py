"""Encoding of decoded tables (original units) for the evaluator, plus model design matrices.

``encode_frame`` is a minimal local encoder: it follows the public encoding of :mod:`dpql.domain`
(categorical value -> index in ``values``; numeric value clipped to ``[lo, hi]``, scaled to [0, 1]
and binned by the public ``edges``). It rejects what the domain cannot encode (missing columns,
unknown categories, missing numbers) rather than guessing, because an evaluation of a silently
repaired table would be misleading.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from dpql.domain import CategoricalColumn, Domain, EncodedTable


def encode_frame(df: pd.DataFrame, domain: Domain) -> EncodedTable:
    """Encode ``df`` (one column per domain column, original units) in the domain's encoding.

    Raises ``ValueError`` naming the column for a missing column, a category outside the domain
    or a missing/non-numeric value in a numeric column.
    """
    missing = [n for n in domain.names if n not in df.columns]
    if missing:
        raise ValueError(f"table lacks column(s) {missing} of the release domain")
    codes: dict[str, np.ndarray] = {}
    scaled: dict[str, np.ndarray] = {}
    for col in domain:
        raw = df[col.name]
        if isinstance(col, CategoricalColumn):
            text = raw.astype(str).to_numpy()
            c = pd.Categorical(text, categories=list(col.values)).codes
            if (c < 0).any():
                bad = sorted(set(text[c < 0]))[:5]
                raise ValueError(f"column {col.name!r}: values {bad} are not in the domain")
            codes[col.name] = c.astype(np.int32)
        else:
            x = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=np.float64)
            if np.isnan(x).any():
                raise ValueError(f"column {col.name!r}: missing or non-numeric values")
            x = np.clip(x, col.lo, col.hi)
            scaled[col.name] = (x - col.lo) / col.span
            codes[col.name] = col.bin_of(x)
    return EncodedTable(domain, codes, scaled)


def design_matrix(t: EncodedTable, columns: Sequence[str]) -> np.ndarray:
    """Model inputs: numeric columns on their [0, 1] scale, categoricals one-hot over the domain.

    One-hot over the *domain's* categories (not the observed ones) keeps the columns of a
    matrix built from the synthetic table aligned with one built from the real table.
    """
    blocks = [
        np.eye(t.domain.card(n))[t.codes[n]]
        if isinstance(t.domain[n], CategoricalColumn)
        else t.scaled[n][:, None]
        for n in columns
    ]
    return np.hstack(blocks) if blocks else np.zeros((t.n, 0))


def take_rows(t: EncodedTable, rows: np.ndarray) -> EncodedTable:
    """The rows ``rows`` (indices) of ``t`` as a new table."""
    return EncodedTable(
        t.domain,
        {k: v[rows] for k, v in t.codes.items()},
        {k: v[rows] for k, v in t.scaled.items()},
    )
