"""The DP-auto-GAN paper's utility and diversity metrics (numpy / scikit-learn; no JAX).

Curator-side evaluation of a synthetic table against real tables (non-private; never part of a
release). Definitions follow Tantipongpipat et al. 2019, §4 and App. C (digest `dp_auto_gan.md`
§6):

* dimension-wise probability (§6.1): per category indicator, the real vs synthetic share;
* dimension-wise prediction (§6.2): per column, predict it from the others with a model fit on
  the real training table (A) and one fit on the synthetic table (B), both scored on the real
  test table: random forest (10 trees) + F1 for categorical columns (binary F1 of code 1 for
  two-valued columns, micro-averaged otherwise), Lasso (alpha 1) + R^2 in original units for
  numeric columns. Inputs are the other columns in the GAN's vector encoding (one-hot / binary /
  [0, 1]), as in the authors' code;
* diversity (§6.4): the Jensen-Shannon divergence and the mu-smoothed KL divergence
  ``D_KL^mu(P||Q) = sum_{x in supp P} (P(x)+mu) log((P(x)+mu)/(Q(x)+mu))``, with
  ``mu = exp(-penalize / (1 - max_x P(x)))`` (penalize = 1 in the paper), natural log.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import Lasso
from sklearn.metrics import f1_score, r2_score

from dpql.domain import CategoricalColumn, EncodedTable, NumericColumn
from dpql.synth.gan.encoding import blocks, encode


def category_shares(table: EncodedTable, column: str) -> np.ndarray:
    """Share of each category of a categorical column (the column's 1-way marginal)."""
    card = table.domain.card(column)
    return np.bincount(table.codes[column], minlength=card) / max(table.n, 1)


def dimension_wise_probability(
    real: EncodedTable, synthetic: EncodedTable
) -> tuple[np.ndarray, np.ndarray]:
    """(real share, synthetic share) of every category indicator of every categorical column."""
    columns = [c.name for c in real.domain.categorical]
    p = np.concatenate([category_shares(real, c) for c in columns])
    q = np.concatenate([category_shares(synthetic, c) for c in columns])
    return p, q


@dataclass(frozen=True)
class PredictionScore:
    """Dimension-wise prediction of one column: score of model A (real) and B (synthetic)."""

    column: str
    kind: str  # "categorical" (F1) or "numeric" (R^2)
    real: float
    synthetic: float


def inputs_without(table: EncodedTable, column: str) -> np.ndarray:
    """The vector encoding of every column but ``column`` (a model's input features)."""
    x = encode(table)
    block = next(b for b in blocks(table.domain) if b.column == column)
    return np.delete(x, np.s_[block.start : block.start + block.width], axis=1)


def _target(table: EncodedTable, column: str) -> np.ndarray:
    c = table.domain[column]
    if isinstance(c, NumericColumn):
        return c.lo + table.scaled[column] * c.span
    return table.codes[column]


def _score(
    column: CategoricalColumn | NumericColumn, train: EncodedTable, test: EncodedTable, seed: int
) -> float:
    x, y = inputs_without(train, column.name), _target(train, column.name)
    x_test, y_test = inputs_without(test, column.name), _target(test, column.name)
    if isinstance(column, NumericColumn):
        return float(r2_score(y_test, Lasso(alpha=1.0).fit(x, y).predict(x_test)))
    model = RandomForestClassifier(n_estimators=10, random_state=seed, n_jobs=1).fit(x, y)
    predicted = model.predict(x_test)
    if column.card == 2:
        return float(f1_score(y_test, predicted, pos_label=1, zero_division=0.0))
    return float(f1_score(y_test, predicted, average="micro"))


def dimension_wise_prediction(
    real_train: EncodedTable, real_test: EncodedTable, synthetic: EncodedTable, seed: int = 0
) -> tuple[PredictionScore, ...]:
    """Scores of every column predicted from the others (module docstring, paper Fig. 4)."""
    out = []
    for column in real_train.domain:
        kind = "numeric" if isinstance(column, NumericColumn) else "categorical"
        real = _score(column, real_train, real_test, seed)
        synthetic_score = _score(column, synthetic, real_test, seed)
        out.append(PredictionScore(column.name, kind, real, synthetic_score))
    return tuple(out)


def mean_distance_to_diagonal(
    scores: tuple[PredictionScore, ...], clip_to_unit: bool = False
) -> float:
    """Mean Euclidean distance of the points (real, synthetic) to the line y = x,
    ``mean |synthetic - real| / sqrt(2)``. ``clip_to_unit`` clips scores to the plotted range
    [0, 1] first (negative R^2 is "not meaningful", paper §4.2)."""

    def clip(v: float) -> float:
        return min(max(v, 0.0), 1.0) if clip_to_unit else v

    return float(np.mean([abs(clip(s.synthetic) - clip(s.real)) for s in scores]) / math.sqrt(2))


def jensen_shannon(p: np.ndarray, q: np.ndarray) -> float:
    """True JS divergence (natural log, 0 log 0 = 0); the paper's printed formula is a typo."""
    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    m = (p + q) / 2

    def kl(a: np.ndarray) -> float:
        nz = a > 0
        return float(np.sum(a[nz] * np.log(a[nz] / m[nz])))

    return 0.5 * kl(p) + 0.5 * kl(q)


def smoothing_mu(p: np.ndarray, penalize: float = 1.0) -> float:
    """``mu = exp(-penalize / (1 - p1))``, p1 the majority share of the real distribution."""
    p1 = float(np.max(p))
    return 0.0 if p1 >= 1.0 else math.exp(-penalize / (1.0 - p1))


def smoothed_kl(p: np.ndarray, q: np.ndarray, mu: float | None = None) -> float:
    """``D_KL^mu(P||Q)`` over the support of P (paper §4.3, Eq. in digest §6.4)."""
    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    mu = smoothing_mu(p) if mu is None else mu
    s = p > 0
    return float(np.sum((p[s] + mu) * np.log((p[s] + mu) / (q[s] + mu))))


def diversity(real: EncodedTable, synthetic: EncodedTable) -> dict[str, tuple[float, float]]:
    """``{column: (JSD, D_KL^mu)}`` for every categorical column (paper Tables 2, 6, 7)."""
    out = {}
    for c in real.domain.categorical:
        p, q = category_shares(real, c.name), category_shares(synthetic, c.name)
        out[c.name] = (jensen_shannon(p, q), smoothed_kl(p, q))
    return out
