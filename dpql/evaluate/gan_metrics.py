"""The DP-auto-GAN paper's utility and diversity metrics (numpy / scikit-learn; no JAX).

Curator-side evaluation of a synthetic table against real tables (non-private; never part of a
release). Definitions follow Tantipongpipat et al. 2019, §4 and App. C:

* dimension-wise probability (§4.1): per category indicator, the real vs synthetic share;
* dimension-wise prediction (§4.1-4.2): per column, predict it from the others with a model fit on
  the real training table (A) and one fit on the synthetic table (B), both scored on the real
  test table: random forest (10 trees) + F1 for categorical columns (binary F1 of code 1 for
  two-valued columns, micro-averaged otherwise), Lasso (alpha 1) + R^2 in original units for
  numeric columns. Inputs are the other columns in the GAN's vector encoding (one-hot / binary /
  [0, 1]), as in the authors' code. The paper fits on every training row; a caller may cap the
  rows each model is fit on (``max_train_rows``, a uniform sample without replacement) and fit
  the independent models on several threads (``workers``), which gives the same scores;
* diversity (§4.2, App. E.5): the Jensen-Shannon divergence and the mu-smoothed KL divergence
  ``D_KL^mu(P||Q) = sum_{x in supp P} (P(x)+mu) log((P(x)+mu)/(Q(x)+mu))``, with
  ``mu = exp(-penalize / (1 - max_x P(x)))`` (penalize = 1 in the paper), natural log.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
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
    return _without(encode(table), table, column)


def _without(x: np.ndarray, table: EncodedTable, column: str) -> np.ndarray:
    """``x`` (the vector encoding of ``table``) without ``column``'s block."""
    block = next(b for b in blocks(table.domain) if b.column == column)
    return np.delete(x, np.s_[block.start : block.start + block.width], axis=1)


def sample_rows(table: EncodedTable, max_rows: int | None, seed: int) -> EncodedTable:
    """``table``, or ``max_rows`` of its rows drawn uniformly without replacement (``seed``),
    in their original order, when it has more."""
    if max_rows is None or table.n <= max_rows:
        return table
    rows = np.sort(np.random.default_rng(seed).choice(table.n, size=max_rows, replace=False))
    return table.take(rows)


def _target(table: EncodedTable, column: str) -> np.ndarray:
    c = table.domain[column]
    if isinstance(c, NumericColumn):
        return c.lo + table.scaled[column] * c.span
    return table.codes[column]


def _score(
    column: CategoricalColumn | NumericColumn,
    train: EncodedTable,
    test: EncodedTable,
    seed: int,
    vectors: tuple[np.ndarray, np.ndarray] | None = None,
) -> float:
    """Fit on ``train``, score on ``test``; ``vectors``: their vector encodings, if at hand."""
    x_train, x_test = vectors if vectors is not None else (encode(train), encode(test))
    x, y = _without(x_train, train, column.name), _target(train, column.name)
    x_test, y_test = _without(x_test, test, column.name), _target(test, column.name)
    if isinstance(column, NumericColumn):
        return float(r2_score(y_test, Lasso(alpha=1.0).fit(x, y).predict(x_test)))
    model = RandomForestClassifier(n_estimators=10, random_state=seed, n_jobs=1).fit(x, y)
    predicted = model.predict(x_test)
    if column.card == 2:
        return float(f1_score(y_test, predicted, pos_label=1, zero_division=0.0))
    return float(f1_score(y_test, predicted, average="micro"))


def dimension_wise_prediction(
    real_train: EncodedTable,
    real_test: EncodedTable,
    synthetic: EncodedTable,
    seed: int = 0,
    *,
    max_train_rows: int | None = None,
    workers: int = 1,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[PredictionScore, ...]:
    """Scores of every column predicted from the others (module docstring, paper Fig. 4).

    ``max_train_rows``: fit each model on at most this many rows of its training table, drawn
    uniformly without replacement (:func:`sample_rows` with ``seed``, so two identical tables
    get the same rows and the same scores); None (the paper's protocol) fits on every row. The
    test table is always used whole. ``workers`` > 1 fits the 2 x columns independent models on
    that many threads (the fits release the GIL; each model is single-threaded, so limit BLAS
    and OpenMP to one thread around the call). The scores do not depend on ``workers``.
    ``progress(done, total)`` is called after each fitted model.
    """
    domain = real_train.domain
    train = {
        "real": sample_rows(real_train, max_train_rows, seed),
        "synthetic": sample_rows(synthetic, max_train_rows, seed),
    }
    x_test = encode(real_test)
    vectors = {k: (encode(t), x_test) for k, t in train.items()}
    jobs = [(column, k) for column in domain for k in train]

    def fit(job: tuple[CategoricalColumn | NumericColumn, str]) -> float:
        column, k = job
        return _score(column, train[k], real_test, seed, vectors[k])

    scores: dict[tuple[str, str], float] = {}
    if workers > 1:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            futures = {pool.submit(fit, job): job for job in jobs}
            for done, future in enumerate(as_completed(futures), 1):
                column, k = futures[future]
                scores[column.name, k] = future.result()
                if progress:
                    progress(done, len(jobs))
    else:
        for done, job in enumerate(jobs, 1):
            scores[job[0].name, job[1]] = fit(job)
            if progress:
                progress(done, len(jobs))
    return tuple(
        PredictionScore(
            column.name,
            "numeric" if isinstance(column, NumericColumn) else "categorical",
            scores[column.name, "real"],
            scores[column.name, "synthetic"],
        )
        for column in domain
    )


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
    """``D_KL^mu(P||Q)`` over the support of P (Tantipongpipat et al. 2019, §4.2)."""
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
