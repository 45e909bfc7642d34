"""Distributional metrics of a synthetic table against the real one (no model fitting).

* correlation-matrix difference of the post-processing paper (`postprocessing.md` section 5.4,
  metric 1): ``error_corr = ||corr(D_real) - corr(D_syn)||_1``, entrywise over the full matrix,
  after the paper's preprocessing (categoricals label-encoded, everything on [0, 1]);
* DP-auto-GAN's dimension-wise probability (`dp_auto_gan.md` section 6.1): for each binary
  feature (here: each one-hot category of a categorical column), the share of ones in the real
  and the synthetic table, summarised by ``sum_k (p_real,k - p_syn,k)^2``;
* DP-auto-GAN's diversity metrics (section 6.4): per categorical column, the Jensen-Shannon
  divergence and the mu-smoothed KL divergence ``D_KL^mu``;
* 1-way histograms (section 6.3), numeric columns by their public bins.

Only one copy of the DP-auto-GAN metrics should exist in dpql; these live here because the
evaluator needed them first.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from dpql.domain import CategoricalColumn, Domain, EncodedTable, NumericColumn
from dpql.evaluate.encode import encode_frame

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
    a = correlation_matrix(encode_frame(real_df, domain))
    b = correlation_matrix(encode_frame(synthetic_df, domain))
    return float(np.abs(a - b).sum())


# ------------------------------------------------------------------------------------------------
# 1-way distributions


def distribution(t: EncodedTable, column: str) -> np.ndarray:
    """Share of rows in each category / public bin of ``column``."""
    return np.bincount(t.codes[column], minlength=t.domain.card(column)) / t.n


def bin_labels(domain: Domain, column: str) -> tuple[str, ...]:
    """Category names, or ``[lo, hi)`` of each public bin (the last bin is closed)."""
    col = domain[column]
    if isinstance(col, CategoricalColumn):
        return col.values
    e = col.edges
    return tuple(
        f"[{e[i]:.4g}, {e[i + 1]:.4g}{']' if i == col.card - 1 else ')'}" for i in range(col.card)
    )


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
# DP-auto-GAN metrics


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
    feats, a, b = [], [], []
    for col in real.domain.categorical:
        feats += [f"{col.name}={v}" for v in col.values]
        a += distribution(real, col.name).tolist()
        b += distribution(synthetic, col.name).tolist()
    return DimensionWiseProbability(tuple(feats), tuple(a), tuple(b))


def jensen_shannon(p: np.ndarray, q: np.ndarray) -> float:
    """True Jensen-Shannon divergence, natural log, ``0 log 0 = 0`` (not the paper's misprint)."""
    p, q = np.asarray(p, float), np.asarray(q, float)
    m = (p + q) / 2

    def kl(a: np.ndarray) -> float:
        nz = a > 0
        return float(np.sum(a[nz] * np.log(a[nz] / m[nz])))

    return 0.5 * kl(p) + 0.5 * kl(q)


def smoothing_mu(p: np.ndarray, penalize: float = 1.0) -> float:
    """``mu = exp(-penalize / (1 - p1))`` with ``p1`` the real majority share (0 if ``p1 = 1``)."""
    p1 = float(np.max(p))
    return 0.0 if p1 >= 1.0 else float(np.exp(-penalize / (1.0 - p1)))


def kl_mu(p: np.ndarray, q: np.ndarray, penalize: float = 1.0) -> float:
    """DP-auto-GAN's ``D_KL^mu(P||Q) = sum_{x in supp P} (P+mu) log((P+mu)/(Q+mu))``.

    ``P`` is the real distribution, ``Q`` the synthetic one, ``mu`` from :func:`smoothing_mu`.
    Missing minority categories in ``Q`` are penalised by about ``(1 - p1) log(1/mu)``.
    """
    p, q = np.asarray(p, float), np.asarray(q, float)
    mu = smoothing_mu(p, penalize)
    s = p > 0
    with np.errstate(divide="ignore"):  # mu = 0 and q = 0 is a true infinity
        return float(np.sum((p[s] + mu) * np.log((p[s] + mu) / (q[s] + mu))))


@dataclass(frozen=True)
class Diversity:
    """DP-auto-GAN diversity of one categorical column (smaller is more diverse / closer)."""

    column: str
    jsd: float
    kl_mu: float
    mu: float
    synthetic_categories: int


def diversity(
    real: EncodedTable, synthetic: EncodedTable, penalize: float = 1.0
) -> tuple[Diversity, ...]:
    """JSD and ``D_KL^mu`` of every categorical column, in domain order."""
    out = []
    for col in real.domain.categorical:
        p, q = distribution(real, col.name), distribution(synthetic, col.name)
        out.append(
            Diversity(
                col.name,
                jensen_shannon(p, q),
                kl_mu(p, q, penalize),
                smoothing_mu(p, penalize),
                int(np.count_nonzero(q)),
            )
        )
    return tuple(out)
