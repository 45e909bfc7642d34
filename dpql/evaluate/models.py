"""Model-based utility: train on synthetic / test on real, requirements, dimension-wise prediction.

Inputs are built by :func:`dpql.evaluate.encode.design_matrix` (numerics on their public [0, 1]
scale, categoricals one-hot over the domain), so a model fit on one table applies to another.
A categorical label's classes are its domain codes; for a two-valued label the *positive* class
is the second value of the domain (e.g. ``">50K"`` for ``[<=50K, >50K]``).

scikit-learn is imported lazily (the ``evaluate`` extra).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from dpql.domain import CategoricalColumn, Domain, EncodedTable
from dpql.evaluate._deps import require
from dpql.evaluate.encode import design_matrix, encode_frame
from dpql.evaluate.metrics import correlation_matrix
from dpql.plan.exact import eval_pred
from dpql.plan.ir import (
    CorrRequirement,
    MeanRequirement,
    ModelRequirement,
    Requirement,
    Tolerance,
)

MODELS: tuple[str, ...] = ("logistic", "hgb")

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class Scores:
    """Classification scores on a test set; ``auc`` is NaN when the test labels have one class.

    Binary labels: F1 and AUC of the positive class. More classes: macro F1 (micro for
    dimension-wise prediction, as DP-auto-GAN) and the macro one-vs-rest AUC.
    """

    accuracy: float
    auc: float
    f1: float


def _classifier(model: str, seed: int) -> Any:
    if model == "logistic":
        return require("sklearn.linear_model").LogisticRegression(max_iter=1000)
    if model == "hgb":
        return require("sklearn.ensemble").HistGradientBoostingClassifier(random_state=seed)
    if model == "forest":  # DP-auto-GAN's dimension-wise prediction (`dp_auto_gan.md` 6.2)
        return require("sklearn.ensemble").RandomForestClassifier(
            n_estimators=10, random_state=seed
        )
    raise ValueError(f"unknown model {model!r}; expected one of {MODELS}")


def _proba(model: Any, x: np.ndarray, y: np.ndarray, x_test: np.ndarray, k: int) -> np.ndarray:
    """Class probabilities (n_test, k) over all ``k`` domain classes, unseen classes at 0.

    A training label with a single class leaves nothing to learn: predict that class, as the
    DP-auto-GAN authors do, instead of failing.
    """
    out = np.zeros((x_test.shape[0], k))
    seen = np.unique(y)
    if seen.size == 1:
        out[:, seen[0]] = 1.0
        return out
    model.fit(x, y)
    out[:, model.classes_] = model.predict_proba(x_test)
    return out


def classification_scores(y: np.ndarray, proba: np.ndarray, average: str = "macro") -> Scores:
    """Accuracy, AUC and F1 of ``proba`` (n, k) against integer labels ``y`` in ``0..k-1``."""
    m = require("sklearn.metrics")
    k = proba.shape[1]
    pred = proba.argmax(axis=1)
    if k == 2:
        f1 = m.f1_score(y, pred, pos_label=1, average="binary", zero_division=0)
    else:
        f1 = m.f1_score(y, pred, labels=list(range(k)), average=average, zero_division=0)
    present = np.unique(y)
    if present.size < 2:
        auc = float("nan")
    elif k == 2:
        auc = m.roc_auc_score(y, proba[:, 1])
    else:  # macro one-vs-rest over the classes present in the test set
        auc = float(np.mean([m.roc_auc_score(y == c, proba[:, c]) for c in present]))
    return Scores(float(np.mean(pred == y)), float(auc), float(f1))


def _label_codes(t: EncodedTable, label: str) -> tuple[np.ndarray, int]:
    col = t.domain[label]
    if not isinstance(col, CategoricalColumn):
        raise ValueError(f"label {label!r} must be a categorical column")
    return t.codes[label], col.card


def tstr_encoded(
    train: EncodedTable, test: EncodedTable, label: str, model: str, seed: int = 0
) -> Scores:
    """:func:`tstr_scores` on encoded tables."""
    features = [n for n in train.domain.names if n != label]
    y, k = _label_codes(train, label)
    y_test, _ = _label_codes(test, label)
    proba = _proba(
        _classifier(model, seed),
        design_matrix(train, features),
        y,
        design_matrix(test, features),
        k,
    )
    return classification_scores(y_test, proba)


def tstr_scores(
    train_df: pd.DataFrame,
    test_df: pd.DataFrame,
    label: str,
    model: str,
    domain: Domain,
    seed: int = 0,
) -> Scores:
    """Fit ``model`` (``"logistic"`` or ``"hgb"``) on ``train_df`` to predict the categorical
    ``label`` from every other column, and score it on ``test_df``.

    Train on the synthetic table and test on real data for TSTR; train on real data for the
    reference it is compared with.
    """
    return tstr_encoded(
        encode_frame(train_df, domain), encode_frame(test_df, domain), label, model, seed
    )


# ------------------------------------------------------------------------------------------------
# requirements


@dataclass(frozen=True)
class RequirementCheck:
    """One requirement measured on the real and the synthetic table.

    ``real`` is the statistic on the real table; for a model requirement it is the metric of a
    model trained *and* evaluated on the real table (the empirical risk of the excess-risk
    paper, `excess_risk.md`). ``synthetic`` is the statistic on the synthetic table; for a model,
    the metric on the real table of the model trained on the synthetic table, and
    ``synthetic_in_sample`` that model's metric on the synthetic table. ``error`` is
    ``|real - synthetic|``; ``passed`` is None when there is nothing to check.
    """

    requirement: str
    kind: str
    statistic: str
    real: float
    synthetic: float
    error: float
    tolerance: str
    passed: bool | None
    synthetic_in_sample: float | None = None


_OPS: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "==": operator.eq,
}


def _tolerance_text(t: Tolerance) -> str:
    if t.within is not None:
        return f"within {t.within:g}"
    if t.op is not None and t.bound is not None:
        return f"{t.metric or ''} {t.op} {t.bound:g}".strip()
    return ""


def _model_metrics(
    req: ModelRequirement, fit: EncodedTable, evals: Sequence[EncodedTable]
) -> list[dict[str, float]]:
    """Fit the requirement's model on ``fit``; all its metrics on each table of ``evals``."""
    x = design_matrix(fit, req.features)
    if req.model == "logistic":
        y, k = _label_codes(fit, req.label)
        out = []
        for t in evals:
            clf = _classifier("logistic", 0)
            s = classification_scores(
                _label_codes(t, req.label)[0],
                _proba(clf, x, y, design_matrix(t, req.features), k),
            )
            out.append({"accuracy": s.accuracy, "auc": s.auc, "f1": s.f1})
        return out
    target = (
        (lambda t: t.codes[req.label].astype(float))
        if isinstance(fit.domain[req.label], CategoricalColumn)
        else (lambda t: t.scaled[req.label])  # R^2 is invariant to the affine unscaling
    )
    reg = require("sklearn.linear_model").LinearRegression().fit(x, target(fit))
    r2 = require("sklearn.metrics").r2_score
    return [
        {"r2": float(r2(target(t), reg.predict(design_matrix(t, req.features))))} for t in evals
    ]


def _column_mean(t: EncodedTable, column: str, mask: np.ndarray) -> float:
    col = t.domain[column]
    if not mask.any():
        return float("nan")
    if isinstance(col, CategoricalColumn):
        return float(t.codes[column][mask].mean())
    return col.unscale(float(t.scaled[column][mask].mean()))


def check_requirement(
    req: Requirement, real: EncodedTable, synthetic: EncodedTable
) -> RequirementCheck:
    """Measure ``req`` on both tables and check its tolerance (see :class:`RequirementCheck`).

    ``corr`` is Pearson's correlation (a categorical column by its codes); ``mean`` is in the
    column's original units; ``count`` is the *fraction* of rows, like the count queries.
    """
    in_sample: float | None = None
    if isinstance(req, ModelRequirement):
        on_real = _model_metrics(req, real, [real])[0]
        syn_on_real, syn_on_syn = _model_metrics(req, synthetic, [real, synthetic])
        stat = req.tolerance.metric or ("accuracy" if req.model == "logistic" else "r2")
        if stat not in on_real:
            raise ValueError(f"{req.text or req.model}: unknown metric {stat!r}")
        kind, a, b, in_sample = req.model, on_real[stat], syn_on_real[stat], syn_on_syn[stat]
    elif isinstance(req, CorrRequirement):
        i, j = real.domain.names.index(req.a), real.domain.names.index(req.b)
        kind = stat = "corr"
        a, b = correlation_matrix(real)[i, j], correlation_matrix(synthetic)[i, j]
    elif isinstance(req, MeanRequirement):
        kind = stat = "mean"
        a = _column_mean(real, req.column, eval_pred(req.given, real))
        b = _column_mean(synthetic, req.column, eval_pred(req.given, synthetic))
    else:
        kind, stat = "count", "fraction"
        a = float(eval_pred(req.predicate, real).mean())
        b = float(eval_pred(req.predicate, synthetic).mean())
    error = abs(a - b)
    tol = req.tolerance
    passed: bool | None = None
    if tol.within is not None:
        passed = bool(error <= tol.within)
    elif tol.op in _OPS and tol.bound is not None:
        passed = bool(_OPS[tol.op](b, tol.bound))
    return RequirementCheck(
        req.text or kind, kind, stat, float(a), float(b), float(error), _tolerance_text(tol),
        passed, None if in_sample is None else float(in_sample),
    )  # fmt: skip


# ------------------------------------------------------------------------------------------------
# DP-auto-GAN dimension-wise prediction


@dataclass(frozen=True)
class DimensionWisePrediction:
    """Predict ``column`` from all others (`dp_auto_gan.md` section 6.2).

    ``real``: score on the test set of a model trained on real data; ``synthetic``: of the same
    model class trained on the synthetic table. ``metric`` is ``f1`` (categorical: random
    forest of 10 trees, binary F1 or micro F1, as the paper) or ``r2`` (numeric: ridge
    regression where the paper uses Lasso; see ``_dimension_score``).
    ``collapsed`` marks a categorical column with a single category in the synthetic table
    (the paper's brown points).
    """

    column: str
    metric: str
    real: float
    synthetic: float
    collapsed: bool


def _dimension_score(column: str, fit: EncodedTable, test: EncodedTable, seed: int) -> float:
    others = [n for n in fit.domain.names if n != column]
    x, x_test = design_matrix(fit, others), design_matrix(test, others)
    col = fit.domain[column]
    if isinstance(col, CategoricalColumn):
        proba = _proba(_classifier("forest", seed), x, fit.codes[column], x_test, col.card)
        return classification_scores(test.codes[column], proba, average="micro").f1
    # Ridge, not the authors' Lasso(alpha=1) on raw units: that zeroes every coefficient of a
    # target with a small range (education_num gets R^2 = 0 although education determines it).
    # Ridge predictions are linear in the target, so R^2 does not depend on its units.
    ridge = require("sklearn.linear_model").Ridge(alpha=1.0).fit(x, fit.scaled[column])
    return float(require("sklearn.metrics").r2_score(test.scaled[column], ridge.predict(x_test)))


def dimension_wise_prediction(
    real_train: EncodedTable,
    synthetic: EncodedTable,
    test: EncodedTable,
    seed: int = 0,
    progress: Progress | None = None,
) -> tuple[DimensionWisePrediction, ...]:
    """Dimension-wise prediction of every column, in domain order."""
    out = []
    names = real_train.domain.names
    for i, n in enumerate(names):
        categorical = isinstance(real_train.domain[n], CategoricalColumn)
        out.append(
            DimensionWisePrediction(
                n,
                "f1" if categorical else "r2",
                _dimension_score(n, real_train, test, seed),
                _dimension_score(n, synthetic, test, seed),
                categorical and np.unique(synthetic.codes[n]).size == 1,
            )
        )
        if progress:
            progress("dimension-wise prediction", i + 1, len(names))
    return tuple(out)
