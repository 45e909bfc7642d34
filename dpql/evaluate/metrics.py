"""Distributional metrics of a synthetic table against the real one (no model fitting here).

* correlation-matrix difference of the post-processing paper (`postprocessing.md` section 5.4,
  metric 1): ``error_corr = ||corr(D_real) - corr(D_syn)||_1``, entrywise over the full matrix,
  after the paper's preprocessing (categoricals label-encoded, everything on [0, 1]);
* 1-way histograms (DP-auto-GAN, `dp_auto_gan.md` section 6.3), numeric columns by public bins;
* DP-auto-GAN's dimension-wise probability and diversity (sections 6.1, 6.4), computed by the
  one copy of those metrics, :mod:`dpql.evaluate.gan_metrics`, and labelled here for the report.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from dpql.domain import CategoricalColumn, Domain, EncodedTable, NumericColumn
from dpql.evaluate._deps import gan_metrics
from dpql.evaluate.encode import encode_table

# ------------------------------------------------------------------------------------------------
# correlation matrix


def correlation_matrix(t: EncodedTable) -> np.ndarray:
    """Pearson correlations of all columns: numerics on [0, 1], categoricals by their codes.

    A constant column has zero correlation with every other column (and 1 with itself) instead
    of NaN (`postprocessing.md` pitfall 12), so the L1 difference stays finite.
    """
    x = np.column_stack(
        [
            t.scaled[c.name] if isinstance(c, NumericColumn) else t.codes[c.name].astype(float)
            for c in t.domain
        ]
    )
    x = x - x.mean(axis=0)
    sd = np.sqrt((x**2).mean(axis=0))
    z = np.divide(x, sd, out=np.zeros_like(x), where=sd > 0)
    corr = (z.T @ z) / t.n
    np.fill_diagonal(corr, 1.0)
    return np.clip(corr, -1.0, 1.0)


def correlation_l1(real_df: pd.DataFrame, synthetic_df: pd.DataFrame, domain: Domain) -> float:
    """``||corr(real) - corr(synthetic)||_1`` over the full matrix (both triangles)."""
    a = correlation_matrix(encode_table(real_df, domain))
    b = correlation_matrix(encode_table(synthetic_df, domain))
    return float(np.abs(a - b).sum())


# ------------------------------------------------------------------------------------------------
# 1-way distributions


def distribution(t: EncodedTable, column: str) -> np.ndarray:
    """Share of rows in each category / public bin of ``column``."""
    return np.bincount(t.codes[column], minlength=t.domain.card(column)) / t.n


def bin_labels(domain: Domain, column: str) -> tuple[str, ...]:
    """Category names, or ``[lo, hi)`` of each public bin (the last bin is closed)."""
    col = domain[column]
    null = ("(missing)",) if col.nullable else ()
    if isinstance(col, CategoricalColumn):
        return (*col.values, *null)
    e = col.edges
    return tuple(
        f"[{e[i]:.4g}, {e[i + 1]:.4g}{']' if i == col.bins - 1 else ')'}" for i in range(col.bins)
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
    """Dimension-wise probability over the one-hot features of all categorical columns."""
    p, q = gan_metrics().dimension_wise_probability(real, synthetic)
    names = tuple(f"{c.name}={v}" for c in real.domain.categorical for v in c.values)
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
