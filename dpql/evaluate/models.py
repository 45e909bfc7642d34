"""Model-based utility: train on synthetic / test on real, and the requirement checks.

Inputs are built by :func:`dpql.ir.exact.design_matrix` (numerics on their public [0, 1]
scale, categoricals one-hot over *all* domain values), so a model fit on one table applies to
another; gradient boosting instead splits natively on category codes. A categorical label's
classes are its domain codes; for a two-valued label the *positive* class is the second value
of the domain (e.g. ``">50K"`` for ``[<=50K, >50K]``), as in `spec/language.md` section 5.

scikit-learn is imported lazily (:mod:`dpql.evaluate.deps`).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import pandas as pd

from dpql.domain import CategoricalColumn, Domain, EncodedTable
from dpql.evaluate.deps import require
from dpql.evaluate.encode import encode_table
from dpql.ir.exact import answer_all, design_matrix
from dpql.ir.queries import (
    CorrRequirement,
    MeanRequirement,
    ModelRequirement,
    Requirement,
    Tolerance,
)
from dpql.plan.estimates import requirement_value
from dpql.plan.requirements import requirement_queries

MODELS: tuple[str, ...] = ("logistic", "hgb")


@dataclass(frozen=True)
class Scores:
    """Classification scores on a test set; ``auc`` is NaN when the test labels have one class.

    Binary labels: F1 and AUC of the positive class. More classes: macro F1 and the macro
    one-vs-rest AUC over the classes present in the test set.
    """

    accuracy: float
    auc: float
    f1: float


def _classifier(model: str, seed: int, categorical: Sequence[bool]) -> Any:
    """An unfitted classifier; ``categorical`` flags the input columns holding category codes."""
    if model == "logistic":
        return require("sklearn.linear_model").LogisticRegression(max_iter=1000)
    if model == "hgb":
        return require("sklearn.ensemble").HistGradientBoostingClassifier(
            categorical_features=list(categorical), random_state=seed
        )
    raise ValueError(f"unknown model {model!r}; expected one of {MODELS}")


def _fit_proba(
    model: Any, x: np.ndarray, y: np.ndarray, k: int
) -> Callable[[np.ndarray], np.ndarray]:
    """Fit ``model``; return inputs -> class probabilities (n, k) over all ``k`` domain classes
    (classes unseen in training get 0).

    A training label with a single class leaves nothing to learn: predict that class, as the
    DP-auto-GAN authors do, instead of failing; with no class at all, every class alike.
    """
    seen = np.unique(y)
    if seen.size > 1:
        model.fit(x, y)

    def proba(x_test: np.ndarray) -> np.ndarray:
        out = np.zeros((x_test.shape[0], k))
        if seen.size == 1:
            out[:, seen[0]] = 1.0
        elif seen.size == 0:  # no row with the label present: no class is favoured
            out[:] = 1.0 / k
        else:
            out[:, model.classes_] = model.predict_proba(x_test)
        return out

    return proba


def classification_scores(y: np.ndarray, proba: np.ndarray) -> Scores:
    """Accuracy, AUC and F1 of ``proba`` (n, k) against integer labels ``y`` in ``0..k-1``."""
    m = require("sklearn.metrics")
    k = proba.shape[1]
    pred = proba.argmax(axis=1)
    if k == 2:
        f1 = m.f1_score(y, pred, pos_label=1, average="binary", zero_division=0)
    else:
        f1 = m.f1_score(y, pred, labels=list(range(k)), average="macro", zero_division=0)
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


def _label_present(t: EncodedTable, label: str) -> EncodedTable:
    """The rows of ``t`` whose ``label`` is present: an empty label cell (``missing: keep``)
    is no class to predict, as the logistic requirement fits over the rows where it is."""
    null = t.domain[label].null_code
    return t if null is None else t.take(np.flatnonzero(t.codes[label] != null))


def tstr_encoded(
    train: EncodedTable, test: EncodedTable, label: str, model: str, seed: int = 0
) -> Scores:
    """:func:`tstr_scores` on encoded tables, over the rows where ``label`` is present."""
    train, test = _label_present(train, label), _label_present(test, label)
    features = [n for n in train.domain.names if n != label]
    y, k = _label_codes(train, label)
    y_test, _ = _label_codes(test, label)
    k -= int(train.domain[label].nullable)  # its values are the classes, not its null code
    if model == "hgb":
        # native categorical splits on the codes, what the model is built for (Adult: 14
        # inputs instead of ~100 one-hot columns)
        categorical = [isinstance(train.domain[n], CategoricalColumn) for n in features]

        def inputs(t: EncodedTable) -> np.ndarray:
            return np.column_stack([t.codes[n] if c else t.scaled[n] for n, c in
                                    zip(features, categorical, strict=True)])  # fmt: skip
    else:
        categorical, inputs = [], partial(design_matrix, features)
    proba = _fit_proba(_classifier(model, seed, categorical), inputs(train), y, k)
    return classification_scores(y_test, proba(inputs(test)))


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
        encode_table(train_df, domain), encode_table(test_df, domain), label, model, seed
    )


# ------------------------------------------------------------------------------------------------
# requirements


@dataclass(frozen=True)
class RequirementCheck:
    """One requirement measured on the real and the synthetic table.

    ``real`` is the statistic on the real table, ``synthetic`` on the synthetic table. A model
    requirement is the test ``dpql compile`` runs (``dpql.postprocess.accept``, spec/language.md
    §5.2): ONE model, fitted on the synthetic table; ``real`` is its metric on the real table,
    ``synthetic`` its metric on the synthetic table, ``within t`` compares the two and a bound
    ``metric OP b`` applies to ``real``. ``train_on_real`` is, for reference only, the metric
    of a model trained *and* evaluated on the real table (not part of the test). ``error`` is
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
    train_on_real: float | None = None


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
    """Fit the requirement's model on ``fit``; all its metrics on each table of ``evals``; both
    over the rows where the model's columns are present, as ``dpql compile`` tests it."""
    from dpql.postprocess.accept import finite_rows

    columns = (*req.features, req.label)
    fit, evals = finite_rows(fit, columns), [finite_rows(t, columns) for t in evals]
    x = design_matrix(req.features, fit)
    if req.model == "logistic":
        y, k = _label_codes(fit, req.label)
        k -= int(fit.domain[req.label].nullable)  # its values are the classes, not its null code
        proba = _fit_proba(_classifier("logistic", 0, []), x, y, k)
        out = []
        for t in evals:
            s = classification_scores(t.codes[req.label], proba(design_matrix(req.features, t)))
            out.append({"accuracy": s.accuracy, "auc": s.auc, "f1": s.f1})
        return out
    # linear: the label is numeric; fit on its [0, 1] scale (R^2 does not depend on units)
    reg = require("sklearn.linear_model").LinearRegression().fit(x, fit.scaled[req.label])
    span = fit.domain[req.label].span  # type: ignore[union-attr]
    out = []
    for t in evals:
        y, y_hat = t.scaled[req.label], reg.predict(design_matrix(req.features, t))
        r2 = float(require("sklearn.metrics").r2_score(y, y_hat))
        out.append({"r2": r2, "rmse": float(np.sqrt(np.mean((y - y_hat) ** 2)) * span)})
    return out


def exact_requirement_value(req: Requirement, table: EncodedTable) -> float:
    """A corr / mean / count requirement's value on ``table`` by compile's own definition
    (``dpql.plan.estimates.requirement_value`` on the exact answers of its measures): over
    the rows where its columns are present, a mean in the column's units, a count a fraction."""
    queries = requirement_queries(req, table.domain)
    answers = {
        q: float(np.ravel(a)[0]) for q, a in zip(queries, answer_all(queries, table), strict=True)
    }
    return requirement_value(req, answers, table.domain)


def check_requirement(
    req: Requirement, real: EncodedTable, synthetic: EncodedTable
) -> RequirementCheck:
    """Measure ``req`` on both tables and check its tolerance (see :class:`RequirementCheck`).

    A corr / mean / count is :func:`exact_requirement_value` on each table (Pearson's
    correlation and the mean over the rows where the columns are present, the count a
    fraction of the rows), so it agrees with what ``dpql compile`` reports.
    """
    reference: float | None = None
    bound_on = "synthetic"
    if isinstance(req, ModelRequirement):
        # compile's test: the model fitted on the synthetic table, scored on both tables
        on_real = _model_metrics(req, real, [real])[0]
        syn_on_real, syn_on_syn = _model_metrics(req, synthetic, [real, synthetic])
        stat = req.tolerance.metric or ("accuracy" if req.model == "logistic" else "r2")
        if stat not in on_real:
            raise ValueError(f"{req.text or req.model}: unknown metric {stat!r}")
        kind, a, b, reference = req.model, syn_on_real[stat], syn_on_syn[stat], on_real[stat]
        bound_on = "real"
    else:
        kind = stat = (
            "corr" if isinstance(req, CorrRequirement)
            else "mean" if isinstance(req, MeanRequirement) else "count"
        )  # fmt: skip
        a, b = exact_requirement_value(req, real), exact_requirement_value(req, synthetic)
    error = abs(a - b)
    tol = req.tolerance
    passed: bool | None = None
    if tol.within is not None:
        passed = bool(error <= tol.within)
    elif tol.op in _OPS and tol.bound is not None:
        passed = bool(_OPS[tol.op](a if bound_on == "real" else b, tol.bound))
    return RequirementCheck(
        req.text or kind, kind, stat, float(a), float(b), float(error), _tolerance_text(tol),
        passed, None if reference is None else float(reference),
    )  # fmt: skip
