"""Distributional metrics of a synthetic table against the real one (no model fitting here).

* correlation-matrix difference of the post-processing paper (Wang et al. 2023, §4, the
  utility measure of its experiments):
  ``error_corr = ||corr(D_real) - corr(D_syn)||_1``, entrywise over the full matrix, after the
  paper's preprocessing (categoricals label-encoded, everything on [0, 1]);
* 1-way histograms (Tantipongpipat et al. 2019, §4.2), numeric columns by public bins;
* DP-auto-GAN's dimension-wise probability and diversity (§4.1, §4.2), computed by the
  one copy of those metrics, :mod:`dpql.evaluate.gan_metrics`, and labelled here for the report.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from dpql.domain import CategoricalColumn, Domain, EncodedTable, NumericColumn
from dpql.evaluate.deps import gan_metrics
from dpql.evaluate.encode import encode_table

# ------------------------------------------------------------------------------------------------
# correlation matrix


def correlation_columns(domain: Domain) -> tuple[str, ...]:
    """The columns a Pearson correlation means something for: numeric columns and two-valued
    categorical ones (an indicator of the second value). A nominal column's codes have no
    order, so their "correlation" would depend on how the categories happen to be listed."""
    return tuple(
        c.name
        for c in domain
        if isinstance(c, NumericColumn) or (c.card == 2 and not c.nullable)
    )


def correlation_matrix(t: EncodedTable, columns: Sequence[str] | None = None) -> np.ndarray:
    """Pearson correlations of ``columns`` (default: all, in domain order): numerics on
    [0, 1], categoricals by their codes (see :func:`correlation_columns` for where that means
    something).

    A constant column has zero correlation with every other column (and 1 with itself) instead
    of NaN (a correlation with a constant is 0/0), so the L1 difference stays finite.
    """
    names = t.domain.names if columns is None else tuple(columns)
    x = np.column_stack(
        [
            t.scaled[c] if isinstance(t.domain[c], NumericColumn) else t.codes[c].astype(float)
            for c in names
        ]
    )
    x = x - x.mean(axis=0)
    sd = np.sqrt((x**2).mean(axis=0))
    z = np.divide(x, sd, out=np.zeros_like(x), where=sd > 0)
    corr = (z.T @ z) / t.n
    np.fill_diagonal(corr, 1.0)
    return np.clip(corr, -1.0, 1.0)


def correlation_l1(real_df: pd.DataFrame, synthetic_df: pd.DataFrame, domain: Domain) -> float:
    """``||corr(real) - corr(synthetic)||_1`` over the full matrix (both triangles) of the
    :func:`correlation_columns`."""
    cols = correlation_columns(domain)
    a = correlation_matrix(encode_table(real_df, domain), cols)
    b = correlation_matrix(encode_table(synthetic_df, domain), cols)
    return float(np.abs(a - b).sum())


# ------------------------------------------------------------------------------------------------
# 1-way distributions


def distribution(t: EncodedTable, column: str) -> np.ndarray:
    """Share of rows in each category / public bin of ``column``."""
    return np.bincount(t.codes[column], minlength=t.domain.card(column)) / t.n


def readable(x: float) -> str:
    """A number for people: whole numbers in full with thousands separators (15,980, not
    1.598e+04), others to 4 significant digits, with separators from 10,000 up."""
    if not math.isfinite(x):
        return str(x)
    if float(x).is_integer() and abs(x) < 1e15:
        return f"{int(x):,}"
    if abs(x) >= 1e4:
        return f"{x:,.1f}"
    return f"{x:.4g}"


def bin_labels(domain: Domain, column: str) -> tuple[str, ...]:
    """Category names, or ``[lo, hi)`` of each public bin (the last bin is closed)."""
    col = domain[column]
    null = ("(missing)",) if col.nullable else ()
    if isinstance(col, CategoricalColumn):
        return (*col.values, *null)
    e = col.edges
    return tuple(
        f"[{readable(e[i])}, {readable(e[i + 1])}{']' if i == col.bins - 1 else ')'}"
        for i in range(col.bins)
    ) + null


@dataclass(frozen=True)
class Histogram:
    """The 1-way distribution of one column in both tables."""

    column: str
    labels: tuple[str, ...]
    real: tuple[float, ...]
    synthetic: tuple[float, ...]


def histograms(real: EncodedTable, synthetic: EncodedTable) -> tuple[Histogram, ...]:
    """1-way histograms of every column of the domain, in domain order."""
    return tuple(
        Histogram(
            n,
            bin_labels(real.domain, n),
            tuple(distribution(real, n).tolist()),
            tuple(distribution(synthetic, n).tolist()),
        )
        for n in real.domain.names
    )


# ------------------------------------------------------------------------------------------------
# DP-auto-GAN metrics, labelled


@dataclass(frozen=True)
class DimensionWiseProbability:
    """Per binary feature ``column=value``: share of ones in the real and the synthetic table."""

    features: tuple[str, ...]
    real: tuple[float, ...]
    synthetic: tuple[float, ...]

    @property
    def sse(self) -> float:
        """``sum_k (p_real,k - p_syn,k)^2`` (the scalar summary of the authors' MIMIC code)."""
        return float(np.sum((np.asarray(self.real) - np.asarray(self.synthetic)) ** 2))


def dimension_wise_probability(
    real: EncodedTable, synthetic: EncodedTable
) -> DimensionWiseProbability:
    """Dimension-wise probability over the one-hot features of all categorical columns, a
    nullable column's null category included (``column=(missing)``), one name per share."""
    p, q = gan_metrics().dimension_wise_probability(real, synthetic)
    names = tuple(
        f"{c.name}={v}" for c in real.domain.categorical for v in bin_labels(real.domain, c.name)
    )
    return DimensionWiseProbability(names, tuple(p.tolist()), tuple(q.tolist()))


@dataclass(frozen=True)
class Diversity:
    """DP-auto-GAN diversity of one categorical column (smaller: closer to the real one).

    ``synthetic_categories`` counts the categories the synthetic table uses; 1 marks a column
    collapsed to a single category (the paper's brown points).
    """

    column: str
    jsd: float
    kl_mu: float
    mu: float
    synthetic_categories: int


def diversity(real: EncodedTable, synthetic: EncodedTable) -> tuple[Diversity, ...]:
    """JSD and ``D_KL^mu`` (penalize = 1, as the paper) of every categorical column."""
    g = gan_metrics()
    scores = g.diversity(real, synthetic)
    return tuple(
        Diversity(
            c.name,
            *scores[c.name],
            g.smoothing_mu(distribution(real, c.name)),
            int(np.count_nonzero(distribution(synthetic, c.name))),
        )
        for c in real.domain.categorical
    )
