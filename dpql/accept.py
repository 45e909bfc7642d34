"""DP acceptance tests of a release's declared requirements (reported in the provenance record).

Model requirements (``logistic(y ~ x...)``, ``linear(y ~ x...)``): the model is fitted on the
final *synthetic* table (sklearn; post-processing), then its metric on the *real* table is
measured through the oracle in ONE Gaussian release of all the release's tests: T scalar
queries with values in [0, 1] (sensitivity 1/n each, replace-one; a label's centred square,
when it is not reused, 1/(4n)), ``sigma = Delta_2 / sqrt(2 rho)`` with ``Delta_2 = sqrt(T)/n``
for T queries of 1/n (phase ``accept``). Per metric (``spec/language.md`` sec. 5):

* ``accuracy`` (logistic ``within`` compares it): ``1{pred = y}`` (a
  :class:`~dpql.plan.ir.ModelAccuracy`); the value is its mean.
* ``f1`` (positive class: the label's second value): ``1{pred = y}`` and
  ``1{pred = y = positive}``; ``F1 = 2 TP / (1 + 2 TP - acc)``, which is ``2 TP / (2 TP + FP +
  FN)`` because ``FP + FN = 1 - acc``.
* ``rmse``: ``(u_y - clip(pred, 0, 1))^2``; ``span * sqrt(mse)`` in the label's units.
* ``r2`` (linear ``within`` compares it): the squared error; ``E u_y`` and the centred
  ``E(u_y - 1/2)^2`` are reused from the I-projection measurements (free);
  ``1 - mse / (E(u_y - 1/2)^2 - (E u_y - 1/2)^2)``.
* ``auc``: not testable (``E505`` at plan time), see below.

AUC is a pairwise statistic (the fraction of (positive, negative) row pairs the model orders
correctly), not the average of a per-row function: replacing one row moves it by up to
``1 / (n min(P(y = 1), P(y = 0)))``, which depends on the private class balance, so it has no
sensitivity computable from the public spec and cannot be measured by a calibrated query.

* ``within t``: the metric a user sees on the synthetic table (trained and evaluated there) is
  within ``t`` of the same model's metric on the real table.
* ``metric OP b``: a bound on the real-table metric.

Moment requirements (corr / mean / count) spend nothing more: they reuse the I-projection's
measurements (post-processing) and compare the noisy real value with the synthetic value after
post-processing; the sd comes from the delta method at the noisy answers.

Verdicts (decision rule, documented for users): with ``[lo, hi]`` the ``z = 2`` sigma interval of
the real quantity, ``pass`` when the requirement holds on the whole interval, ``fail`` when it
fails on the whole interval, ``inconclusive`` otherwise (the threshold lies within ~2 sigma, or
the value is undefined: the record's ``note`` says which).

Where the excess-risk digest (Zhou et al. 2024, ``papers/excess_risk.md`` sec. 11.2-11.3) gives
a bound, it is reported as a *bound* (``excess_risk_bound``), with its assumptions and a
``vacuous`` flag: such end-to-end bounds are usually vacuous at realistic n, and they bound
excess empirical *loss* of an exact ERM, not the accuracy of the sklearn fit.

Plan time (no data; :func:`plan_diagnostics`): ``E505`` a metric that cannot be DP-tested;
``W506`` a tolerance the planned budget cannot decide (``2 sd > t``) or a bound no table can meet;
``W507`` requirements without post-processing measurements (never tested).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from dpql.diagnostics import Diagnostic, DiagnosticError, SourcePos
from dpql.domain import Domain, EncodedTable, NumericColumn
from dpql.plan.exact import answer_all, design_matrix
from dpql.plan.ir import (
    CentredProduct,
    ModelAccuracy,
    ModelRequirement,
    Moment,
    Query,
    Requirement,
    Tolerance,
    joint_l2_sensitivity,
)
from dpql.plan.oracle import MeasurementOracle
from dpql.plan.requirements import (
    VARIANCE_RTOL,
    allocation_scales,
    delta_method_sd,
    predicted_error,
    product_query,
    requirement_queries,
    requirement_value,
    value_sd,
)
from dpql.privacy.mechanisms import gaussian_sigma

if TYPE_CHECKING:  # jax stays out of plan-time imports
    from dpql.synth.iproj import IProjResult

PHASE = "accept"
Z = 2.0
ACCEPT_METRICS: dict[str, tuple[str, ...]] = {
    "logistic": ("accuracy", "f1"),
    "linear": ("rmse", "r2"),
}
WITHIN_METRIC: dict[str, str] = {"logistic": "accuracy", "linear": "r2"}
UNTESTABLE: dict[str, str] = {
    "auc": "AUC is a pairwise statistic over (positive, negative) rows, not an average of a "
    "per-row function: one row moves it by up to 1/(n min(P(y=1), P(y=0))), which depends on "
    "the private class balance, so no public sensitivity calibrates its noise",
}

Verdict = Literal["pass", "fail", "inconclusive"]


def _num(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None  # JSON has no NaN / inf


def _interval_verdict(lo: float, hi: float, holds: Any) -> Verdict:
    """``holds(v)`` is monotone on [lo, hi]: check both ends."""
    a, b = bool(holds(lo)), bool(holds(hi))
    return "pass" if a and b else "fail" if not (a or b) else "inconclusive"


def within_verdict(gap: float, sigma: float, t: float, z: float = Z) -> Verdict:
    """``|observed gap| <= t`` with the gap known to +- z sigma."""
    if not (math.isfinite(gap) and math.isfinite(sigma)):
        return "inconclusive"
    g = abs(gap)
    return _interval_verdict(max(g - z * sigma, 0.0), g + z * sigma, lambda v: v <= t)


def bound_verdict(lo: float, hi: float, op: str, bound: float) -> Verdict:
    """``value OP bound`` for a value known to lie in [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return "inconclusive"
    ops = {">=": np.greater_equal, ">": np.greater, "<=": np.less_equal, "<": np.less}
    return _interval_verdict(lo, hi, lambda v: ops[op](v, bound))


def tolerance_text(t: Tolerance) -> str:
    """The tolerance as written in the DSL (``within 0.02``, ``accuracy >= 0.8``)."""
    if t.within is not None:
        return f"within {t.within:g}"
    return f"{t.metric} {t.op} {t.bound:g}" if t.bound is not None else "-"


# ---------------------------------------------------------------------------------------------
# Plan time (public spec only)


def tested_metric(req: ModelRequirement) -> str:
    """The metric a model requirement's test measures (``within``: accuracy / R^2)."""
    return req.tolerance.metric or WITHIN_METRIC[req.model]


def acceptance_queries(req: Requirement) -> int:
    """Scalar queries a requirement adds to the ``accept`` release (0 for moment requirements;
    f1 needs two; R^2's label moments come from the I-projection measurements)."""
    if not isinstance(req, ModelRequirement):
        return 0
    return 2 if tested_metric(req) == "f1" else 1


# Uniform-prior planning values of each metric's parts (labels uniform, a model no better than
# chance): accuracy 1/2, TP 1/4; u_y ~ U[0, 1] predicted by 1/2: mse = Var = 1/12, E u = 1/2,
# E(u - 1/2)^2 = 1/12 (R^2 = 0).
_PRIOR_PARTS: dict[str, tuple[float, ...]] = {
    "accuracy": (0.5,),
    "f1": (0.5, 0.25),
    "rmse": (1 / 12,),
    "r2": (1 / 12, 0.5, 1 / 12),
}


def metric_value(metric: str, parts: Sequence[float], span: float = 1.0) -> float:
    """A test metric from the answers of its parts (table in the module docstring); NaN where
    undefined (no positive row and no positive prediction; a constant label)."""
    if metric == "accuracy":
        return float(parts[0])
    if metric == "rmse":
        return span * math.sqrt(min(max(float(parts[0]), 0.0), 1.0))
    if metric == "f1":
        acc, tp = parts
        d = 1.0 + 2.0 * tp - acc
        return float(2.0 * tp / d) if d > 0 else math.nan
    if metric == "r2":
        mse, mean, centred_square = parts  # E(u - 1/2)^2 - (E u - 1/2)^2 = Var u
        var = centred_square - (mean - 0.5) ** 2
        # below VARIANCE_RTOL of E(u - 1/2)^2 the "variance" of a constant label is rounding
        return float(1.0 - mse / var) if var > VARIANCE_RTOL * abs(centred_square) else math.nan
    raise ValueError(f"no DP test for metric {metric!r}")


def _label_span(req: ModelRequirement, domain: Domain) -> float:
    col = domain[req.label]
    return col.span if isinstance(col, NumericColumn) else 1.0


def predicted_sd(
    req: Requirement, sigma_measure: float, sigma_test: float, domain: Domain
) -> float:
    """Predicted sd of the DP value a requirement is judged on (its tolerance's units).

    Moment requirements: :func:`dpql.plan.requirements.predicted_error` at the I-projection's
    per-measure ``sigma_measure``. Model requirements: the test metric's sd by the delta method
    at the uniform-prior parts (:data:`_PRIOR_PARTS`), measured parts at ``sigma_test`` (the
    ``accept`` release), reused label moments at ``sigma_measure``. Accuracy: ``sigma_test``.
    NaN for a metric with no DP test.
    """
    if not isinstance(req, ModelRequirement):
        return predicted_error(req, sigma_measure, domain)
    metric = tested_metric(req)
    if metric not in ACCEPT_METRICS[req.model]:
        return math.nan
    parts = _PRIOR_PARTS[metric]
    sigmas = [sigma_test] * acceptance_queries(req)
    sigmas += [sigma_measure] * (len(parts) - len(sigmas))
    span = _label_span(req, domain)
    return delta_method_sd(lambda p: metric_value(metric, p, span), parts, sigmas)


_RANGES: dict[str, tuple[float, float]] = {
    "accuracy": (0.0, 1.0),
    "f1": (0.0, 1.0),
    "r2": (-math.inf, 1.0),
    "rmse": (0.0, math.inf),
}


def bound_can_hold(req: Requirement, domain: Domain) -> bool:
    """False when ``metric OP b`` holds on no table (``accuracy > 1``, ``rmse < 0``, ...)."""
    t = req.tolerance
    if not isinstance(req, ModelRequirement) or t.bound is None or t.metric not in _RANGES:
        return True
    lo, hi = _RANGES[t.metric]
    if t.metric == "rmse":
        hi = _label_span(req, domain)
    b = t.bound
    return {">=": b <= hi, ">": b < hi, "<=": b >= lo, "<": b > lo}.get(t.op or "", True)


def plan_diagnostics(
    req: Requirement,
    *,
    predicted: float | None = None,
    smallest_epsilon: float | None = None,
    measured: bool = True,
    bound_ok: bool = True,
    pos: SourcePos | None = None,
) -> list[Diagnostic]:
    """Plan-time check of one requirement (no data): can its tolerance be DP-tested here?

    ``E505``: a metric with no bounded-sensitivity test (:data:`UNTESTABLE`). ``W506``: at the
    planned budget the test's ``Z sd`` exceeds a ``within`` tolerance (the verdict will most
    likely be inconclusive), or the bound holds on no table (``bound_ok`` False). ``W507``: the
    release has no post-processing measurements, so the requirement is never tested.
    """
    t = req.tolerance
    name = f"requirement '{req.text}'" if req.text else "the requirement"
    if isinstance(req, ModelRequirement) and t.metric is not None:
        if t.metric not in ACCEPT_METRICS[req.model]:
            why = UNTESTABLE.get(t.metric, "it is not an average of a per-row function")
            ok = ", ".join(ACCEPT_METRICS[req.model])
            return [
                Diagnostic(
                    "E505",
                    f"{name}: '{t.metric}' of a {req.model} model cannot be DP-tested: {why}",
                    pos,
                    f"use 'within t' or a bound on: {ok}",
                )
            ]
    if not measured:
        return [
            Diagnostic(
                "W507",
                f"{name} is not tested: the release has no post-processing measurements",
                pos,
                "add `postprocess: {method: iproj, share: 0.2}` to measure and test requirements",
                "warning",
            )
        ]
    if not bound_ok:
        return [
            Diagnostic(
                "W506",
                f"{name}: '{tolerance_text(t)}' holds on no table, so the test always fails",
                pos,
                "check the bound's direction and value",
                "warning",
            )
        ]
    if t.within is not None and predicted is not None and not Z * predicted <= t.within:
        if smallest_epsilon is not None and math.isfinite(smallest_epsilon):
            hint = f"raise privacy.epsilon to at least {smallest_epsilon:.3g}"
        else:
            hint = "no budget up to epsilon 1000 reaches it"
        spread = f"{Z * predicted:.2g}" if math.isfinite(predicted) else "unbounded"
        return [
            Diagnostic(
                "W506",
                f"{name}: the DP measurement's {Z:g} sd ({spread}) exceeds the tolerance "
                f"{t.within:g}, so its verdict will likely be inconclusive",
                pos,
                f"{hint} (or postprocess.share), or loosen the tolerance to {spread}",
                "warning",
            )
        ]
    return []


# ---------------------------------------------------------------------------------------------
# Model requirements


def fit_model(req: ModelRequirement, table: EncodedTable, *, seed: int = 0) -> ModelAccuracy:
    """Fit the requirement's model on a (synthetic) table; design as in ``exact.design_matrix``.

    Logistic: sklearn ``LogisticRegression`` (lbfgs, default L2 penalty), one coefficient row per
    label value; values absent from the table get a -1e9 intercept (never predicted). Linear:
    ``LinearRegression`` on the scaled label.
    """
    from sklearn.linear_model import LinearRegression, LogisticRegression

    X = design_matrix(req.features, table)
    width = X.shape[1]
    if req.model == "linear":
        lin = LinearRegression().fit(X, table.scaled[req.label])
        coef = (tuple(float(c) for c in lin.coef_),)
        return ModelAccuracy("linear", req.features, req.label, coef, (float(lin.intercept_),))
    card = table.domain.card(req.label)
    y = table.codes[req.label]
    classes = np.unique(y)
    W = np.zeros((card, width))
    b = np.full(card, -1e9)
    if classes.size == 1:
        b[classes[0]] = 0.0  # one class in the table: the constant predictor
    else:
        clf = LogisticRegression(max_iter=2000, random_state=seed).fit(X, y)
        rows = clf.coef_ if classes.size > 2 else np.vstack([np.zeros(width), clf.coef_[0]])
        icpt = clf.intercept_ if classes.size > 2 else np.array([0.0, clf.intercept_[0]])
        W[classes], b[classes] = rows, icpt
    return ModelAccuracy(
        "logistic",
        req.features,
        req.label,
        tuple(tuple(float(v) for v in r) for r in W),
        tuple(float(v) for v in b),
    )


def true_positive_query(q: ModelAccuracy) -> ModelAccuracy:
    """Per row ``1{pred = y = positive}`` (positive: label code 1) of a binary logistic model,
    as a :class:`~dpql.plan.ir.ModelAccuracy` (values in {0, 1}: sensitivity 1/n).

    The label's one-hot joins the design; on negative rows it adds ``big`` (more than any score
    gap: ``|score| <= sum |coef| + sum |intercept|`` as design entries lie in [0, 1]) to the
    positive class, so the prediction is positive and never equals y; positive rows keep the
    model's prediction, so they count exactly when it is positive.
    """
    W = np.asarray(q.coef, dtype=np.float64)
    b = np.asarray(q.intercept, dtype=np.float64)
    if W.shape[0] != 2:
        raise ValueError("f1 needs a binary label")
    big = 1.0 + 2.0 * (float(np.abs(W).sum()) + float(np.abs(b).sum()))
    extra = np.array([[0.0, 0.0], [big, 0.0]])  # row: class; column: label code 0, 1
    W2 = np.hstack([W, extra])
    return ModelAccuracy(
        "logistic",
        (*q.features, q.label),
        q.label,
        tuple(tuple(float(v) for v in r) for r in W2),
        q.intercept,
    )


def label_moments(req: ModelRequirement) -> tuple[Moment, CentredProduct]:
    """``E u_y`` and ``E(u_y - 1/2)^2`` of a linear requirement's label (its I-projection
    measures, ``dpql.plan.requirements``)."""
    label = (req.label, None)
    return Moment((req.label,)), CentredProduct(label, label)


@dataclass(frozen=True, eq=False)
class ModelTest:
    """One model requirement's test: the model fitted on the synthetic table and the queries
    behind its metric, in :data:`_PRIOR_PARTS` order: ``measured`` ones go into the ``accept``
    release, ``reused`` ones are read from the I-projection measurements."""

    req: ModelRequirement
    metric: str
    fitted: ModelAccuracy
    measured: tuple[Query, ...]
    reused: tuple[Query, ...]

    @property
    def parts(self) -> tuple[Query, ...]:
        return self.measured + self.reused

    def synthetic_value(self, table: EncodedTable) -> float:
        """The metric on a synthetic table (exact; public)."""
        answers = [float(np.ravel(a)[0]) for a in answer_all(list(self.parts), table)]
        return metric_value(self.metric, answers, _label_span(self.req, table.domain))


def build_test(
    req: ModelRequirement,
    table: EncodedTable,
    *,
    evidence: IProjResult | None = None,
    seed: int = 0,
) -> ModelTest:
    """Fit the model on ``table`` and list the queries of its metric. R^2's label moments are
    reused from ``evidence`` when it measured them, else they join the ``accept`` release."""
    metric = tested_metric(req)
    if metric not in ACCEPT_METRICS[req.model]:
        raise DiagnosticError(plan_diagnostics(req))
    fitted = fit_model(req, table, seed=seed)
    measured: tuple[Query, ...] = (fitted,)
    reused: tuple[Query, ...] = ()
    if metric == "f1":
        measured += (true_positive_query(fitted),)
    if metric == "r2":
        moments = label_moments(req)
        have = evidence is not None and all(m in evidence.queries for m in moments)
        if have:
            reused = moments
        else:
            measured += moments
    return ModelTest(req, metric, fitted, measured, reused)


@dataclass(frozen=True)
class RiskBound:
    """A certified upper bound on excess empirical loss (NOT accuracy), excess_risk.md
    sec. 11.2-11.3; ``vacuous`` when it is no better than the trivial bound."""

    value: float
    a: float
    rho: float
    vacuous: bool
    assumptions: str
    source: str = "Zhou et al. 2024, excess_risk.md sec. 11.2-11.3"

    def to_json(self) -> dict[str, Any]:
        return {"kind": "upper bound", **asdict(self)}


@dataclass(frozen=True)
class ModelAcceptance:
    """A model requirement's DP test. ``real_noisy`` +- ``sigma``: the metric of the model
    fitted on the released table, measured on the real one; ``synthetic_before`` /
    ``synthetic_after``: the metric of the model fitted and evaluated on the table before /
    after post-processing (public)."""

    requirement: str
    kind: str
    metric: str
    real_noisy: float
    sigma: float
    synthetic_before: float
    synthetic_after: float
    tolerance: Tolerance
    verdict: Verdict
    rho: float
    excess_risk_bound: RiskBound | None = None
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        for k in ("real_noisy", "sigma", "synthetic_before", "synthetic_after"):
            out[k] = _num(getattr(self, k))
        out["excess_risk_bound"] = (
            self.excess_risk_bound.to_json() if self.excess_risk_bound is not None else None
        )
        return out


def _margin(q: ModelAccuracy, domain: Domain, cls: int) -> tuple[np.ndarray, float, float]:
    """Coefficients in moment coordinates (reference levels folded into the intercept,
    requirements.py) and ``a = max |theta.z + b|`` over the whole domain."""
    coef = np.asarray(q.coef[cls]) - (np.asarray(q.coef[0]) if q.model == "logistic" else 0.0)
    b = q.intercept[cls] - (q.intercept[0] if q.model == "logistic" else 0.0)
    theta, hi, lo, pos = [], b, b, 0
    for f in q.features:
        col = domain[f]
        k = 1 if isinstance(col, NumericColumn) else col.card
        c = coef[pos : pos + k]
        pos += k
        if k == 1:
            theta.append(c[0])
            hi, lo = hi + max(c[0], 0.0), lo + min(c[0], 0.0)
        else:
            b += c[0]
            theta.extend(c[1:] - c[0])
            hi, lo = hi + c.max(), lo + c.min()
    return np.asarray(theta), b, max(abs(hi), abs(lo))


def _even_quadratic(a: float) -> tuple[float, float]:
    """Minimax ``q0 + q2 z^2`` for h(z) = log(2 cosh(z/2)) on [-a, a]: (q2, sup error).

    In t = z^2, g(t) = h(sqrt t) is concave, so the best line has the chord's slope and half the
    chord gap at the tangent point (Chebyshev equioscillation)."""
    if a <= 0:
        return 0.125, 0.0

    def g(t: float) -> float:  # log(2 cosh(x)) = x + log1p(exp(-2x)), x >= 0: no overflow
        x = math.sqrt(t) / 2
        return x + math.log1p(math.exp(-2 * x))

    q2 = (g(a * a) - g(0.0)) / (a * a)
    lo, hi = 0.0, a * a  # g'(t) = tanh(sqrt t / 2) / (4 sqrt t), decreasing
    for _ in range(100):
        mid = (lo + hi) / 2
        slope = math.tanh(math.sqrt(mid) / 2) / (4 * math.sqrt(mid)) if mid > 0 else 0.125
        lo, hi = (mid, hi) if slope > q2 else (lo, mid)
    return q2, (g(lo) - g(0.0) - q2 * lo) / 2


def excess_risk_bound(
    req: ModelRequirement, q: ModelAccuracy, evidence: IProjResult, beta: float = 0.05
) -> RiskBound | None:
    """Certified bound from the requirement's measured moments (excess_risk.md sec. 11.2-11.3).

    rho = max over the requirement's raw moments ``E f``, ``E fg`` of the deviation
    |noisy - synthetic| + sigma sqrt(2 ln(2K/beta)) (a public fit gap plus a Gaussian tail
    bound, union over the K released measures). The second moments are measured centred
    (``dpql.plan.requirements``); since ``E fg = E f'g' + (E f + E g)/2 - 1/4``, the raw
    deviation is at most the centred one plus half the two first moments'. With
    ``A = ||(theta, b)||_1`` in moment coordinates and ``a`` the largest |margin| on the domain:

    * linear (squared loss, quadratic in the moments, exact): ``2 rho (1 + A)^2``;
    * binary logistic: ``-y s / 2 + h(s)`` with h even; h ~ q0 + q2 s^2 on [-a, a] within eps_h:
      ``3 rho A + 4 eps_h + 2 q2 rho A^2`` (y = 2 1{y = 2nd value} - 1 makes |dE[y z]| <= 3 rho).

    Holds w.p. 1 - beta for exact ERM over models with these A and a; reported as a bound only.
    None for multi-class labels or when a moment of the requirement was not measured.
    """
    domain = evidence.table.domain
    if req.model == "logistic" and domain.card(req.label) != 2:
        return None
    pos = {qq: i for i, qq in enumerate(evidence.queries)}
    idx = [pos.get(qq) for qq in requirement_queries(req, domain)]
    if any(i is None or evidence.noisy.shape[0] != len(evidence.queries) for i in idx):
        return None
    k = len(evidence.queries)
    tail = evidence.sigma * math.sqrt(2 * math.log(2 * k / beta))  # per measure
    dev = np.abs(evidence.noisy - evidence.after) + tail

    def raw_deviation(qq: Query) -> float:
        if not isinstance(qq, CentredProduct):
            return float(dev[pos[qq]])
        firsts = (pos[product_query([f])] for f in (qq.left, qq.right))
        return float(dev[pos[qq]] + 0.5 * sum(dev[i] for i in firsts))

    rho = max(raw_deviation(qq) for qq in requirement_queries(req, domain))
    theta, b, a = _margin(q, domain, 1 if req.model == "logistic" else 0)
    big_a = float(np.abs(theta).sum() + abs(b))
    if req.model == "linear":
        value, trivial = 2 * rho * (1 + big_a) ** 2, (1 + big_a) ** 2
    else:
        q2, eps_h = _even_quadratic(a)
        value, trivial = 3 * rho * big_a + 4 * eps_h + 2 * q2 * rho * big_a**2, a
    return RiskBound(
        value=value,
        a=a,
        rho=rho,
        vacuous=bool(value >= trivial),
        assumptions=(
            f"upper bound on the excess empirical "
            f"{'logistic' if req.model == 'logistic' else 'squared'} loss on the real table of "
            f"an exact ERM over models with ||(theta,b)||_1 <= {big_a:.3g} (margin <= {a:.3g}); "
            f"probability {1 - beta:g}; not the accuracy of the sklearn fit"
        ),
    )


def accept_models(
    reqs: Sequence[ModelRequirement],
    table: EncodedTable,
    oracle: MeasurementOracle,
    rho: float,
    *,
    evidence: IProjResult | None = None,
    before: EncodedTable | None = None,
    z: float = Z,
    seed: int = 0,
) -> list[ModelAcceptance]:
    """Fit every model on the synthetic ``table``, then measure all their tests' queries on the
    real table in ONE Gaussian release at ``rho``-zCDP (T scalar queries of sensitivity 1/n:
    sigma = sqrt(T)/n / sqrt(2 rho)), and decide each tolerance (module docstring). ``before``:
    the table before post-processing, for ``synthetic_before`` (NaN without it)."""
    if not reqs:
        return []
    diags = [d for r in reqs for d in plan_diagnostics(r) if d.severity == "error"]
    if diags:
        raise DiagnosticError(diags)
    table = finite_rows(table, [c for r in reqs for c in (*r.features, r.label)])
    tests = [build_test(r, table, evidence=evidence, seed=seed) for r in reqs]
    queries = [q for t in tests for q in t.measured]
    label = "; ".join(r.text or f"{r.model}({r.label})" for r in reqs)
    real = [float(np.ravel(v)[0]) for v in oracle.measure(queries, rho, phase=PHASE, label=label)]
    sigma = gaussian_sigma(joint_l2_sensitivity(queries, oracle.n), rho)
    out, i = [], 0
    for t in tests:
        measured = real[i : i + len(t.measured)]
        i += len(t.measured)
        reused, reused_sigmas = _reused(t, evidence)
        prior = _before_value(t.req, before, seed) if before is not None else math.nan
        out.append(
            _model_verdict(
                t,
                table,
                measured + reused,
                [sigma] * len(measured) + reused_sigmas,
                rho,
                prior,
                evidence,
                z,
            )
        )
    return out


def finite_rows(table: EncodedTable, columns: Sequence[str]) -> EncodedTable:
    """The rows whose ``columns`` have finite scaled values (a synthesizer may emit NaN;
    post-processing gives such rows weight 0, so a model is never fitted on them)."""
    ok = np.ones(table.n, dtype=bool)
    for c in columns:
        if c in table.scaled:
            ok &= np.isfinite(table.scaled[c])
    if ok.all():
        return table
    return EncodedTable(
        table.domain,
        {k: v[ok] for k, v in table.codes.items()},
        {k: v[ok] for k, v in table.scaled.items()},
    )


def _before_value(req: ModelRequirement, before: EncodedTable, seed: int) -> float:
    """The metric of the model fitted and evaluated on the table before post-processing."""
    table = finite_rows(before, (*req.features, req.label))
    if table.n == 0:
        return math.nan
    return build_test(req, table, seed=seed).synthetic_value(table)


def _reused(t: ModelTest, evidence: IProjResult | None) -> tuple[list[float], list[float]]:
    """The reused post-processing answers of a model test and their noise sds."""
    if not t.reused or evidence is None:
        return [], []
    pos = {q: i for i, q in enumerate(evidence.queries)}
    idx = [pos[q] for q in t.reused]
    return [float(evidence.noisy[i]) for i in idx], [float(evidence.sigma[i]) for i in idx]


def _metric_interval(
    t: ModelTest, parts: Sequence[float], sigmas: Sequence[float], domain: Domain, z: float
) -> tuple[float, float, float, float]:
    """(point, sd, lo, hi) of the test metric from its noisy parts: exact for accuracy and rmse
    (increasing in their one part), delta method for f1 and R^2."""
    span = _label_span(t.req, domain)

    def value(p: Sequence[float]) -> float:
        return metric_value(t.metric, p, span)

    point = value(parts)
    if len(parts) == 1:
        lo, hi = value([parts[0] - z * sigmas[0]]), value([parts[0] + z * sigmas[0]])
        return point, (hi - lo) / (2 * z), lo, hi
    sd = delta_method_sd(value, parts, sigmas) if math.isfinite(point) else math.nan
    return point, sd, point - z * sd, point + z * sd


def _model_verdict(
    t: ModelTest,
    table: EncodedTable,
    parts: Sequence[float],
    sigmas: Sequence[float],
    rho: float,
    before: float,
    evidence: IProjResult | None,
    z: float,
) -> ModelAcceptance:
    syn = t.synthetic_value(table)
    point, sd, lo, hi = _metric_interval(t, parts, sigmas, table.domain, z)
    tol = t.req.tolerance
    note = ""
    if not math.isfinite(point):
        verdict: Verdict = "inconclusive"
        note = f"{t.metric} is undefined on the noisy answers (no positive row / constant label)"
    elif not math.isfinite(syn) and tol.within is not None:
        verdict = "inconclusive"
        note = f"{t.metric} is undefined on the synthetic table (constant label / no positive)"
    elif tol.within is not None:
        within = tol.within
        gap_lo, gap_hi = sorted((abs(syn - lo), abs(syn - hi)))
        if lo <= syn <= hi:
            gap_lo = 0.0
        verdict = _interval_verdict(gap_lo, gap_hi, lambda v: v <= within)
    elif tol.op is not None and tol.bound is not None:
        verdict = bound_verdict(lo, hi, tol.op, tol.bound)
    else:
        verdict = "inconclusive"
    return ModelAcceptance(
        requirement=t.req.text,
        kind=t.req.model,
        metric=t.metric,
        real_noisy=point,
        sigma=sd,
        synthetic_before=before,
        synthetic_after=syn,
        tolerance=tol,
        verdict=verdict,
        rho=rho,
        excess_risk_bound=(
            excess_risk_bound(t.req, t.fitted, evidence) if evidence is not None else None
        ),
        note=note,
    )


# ---------------------------------------------------------------------------------------------
# Moment requirements (no extra budget)


@dataclass(frozen=True)
class MomentAcceptance:
    """A corr / mean / count requirement: the noisy real value (+- ``sigma``, delta method) vs
    the synthetic value before and after post-processing."""

    requirement: str
    kind: str
    real_noisy: float
    sigma: float
    synthetic_before: float
    synthetic_after: float
    tolerance: Tolerance
    verdict: Verdict
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        for k in ("real_noisy", "sigma", "synthetic_before", "synthetic_after"):
            out[k] = _num(getattr(self, k))
        return out


def _value(req: Requirement, values: np.ndarray, queries: tuple[Query, ...], d: Domain) -> float:
    try:
        return requirement_value(req, dict(zip(queries, values.tolist(), strict=True)), d)
    except DiagnosticError:
        return math.nan


def _kind(req: Requirement) -> str:
    return type(req).__name__.removesuffix("Requirement").lower()


def _unmeasured(req: Requirement, note: str) -> MomentAcceptance | ModelAcceptance:
    nan = math.nan
    if isinstance(req, ModelRequirement):
        metric = tested_metric(req)
        return ModelAcceptance(
            req.text, req.model, metric, nan, nan, nan, nan, req.tolerance, "inconclusive", 0.0,
            None, note,
        )  # fmt: skip
    return MomentAcceptance(
        req.text, _kind(req), nan, nan, nan, nan, req.tolerance, "inconclusive", note
    )


def accept_moment(req: Requirement, evidence: IProjResult, *, z: float = Z) -> MomentAcceptance:
    """Noisy real value vs synthetic values before / after post-processing, and the verdict.

    Undefined values (a zero variance, an empty condition) give ``inconclusive`` with a note,
    on either side: the noisy answers or the synthetic table.
    """
    d, qs = evidence.table.domain, evidence.queries
    missing = [qq for qq in requirement_queries(req, d) if qq not in qs]
    if missing or evidence.noisy.shape[0] != len(qs):
        out = _unmeasured(req, "the requirement's moments were not measured")
        assert isinstance(out, MomentAcceptance)
        return out
    real = _value(req, evidence.noisy, qs, d)
    sd = (
        value_sd(
            req,
            dict(zip(qs, evidence.noisy.tolist(), strict=True)),
            dict(zip(qs, evidence.sigma.tolist(), strict=True)),
            d,
        )
        if math.isfinite(real)
        else math.nan
    )
    before = _value(req, evidence.before, qs, d)
    after = _value(req, evidence.after, qs, d)
    t = req.tolerance.within
    verdict: Verdict = "inconclusive" if t is None else within_verdict(after - real, sd, t, z)
    notes = []
    if not math.isfinite(real):
        notes.append("undefined on the noisy answers (zero variance / no row)")
    if not math.isfinite(after):
        notes.append("undefined on the synthetic table after post-processing (a constant "
                     "column / no row matches)")  # fmt: skip
    elif not math.isfinite(before):
        notes.append("undefined on the synthetic table before post-processing")
    return MomentAcceptance(
        req.text, _kind(req), real, sd, before, after, req.tolerance, verdict, "; ".join(notes)
    )


def acceptance_report(
    reqs: Sequence[Requirement],
    table: EncodedTable,
    oracle: MeasurementOracle,
    rho_models: float,
    evidence: IProjResult | None,
    *,
    before: EncodedTable | None = None,
    z: float = Z,
    seed: int = 0,
) -> list[ModelAcceptance | MomentAcceptance]:
    """Every requirement's acceptance, in order. The model requirements share ONE release at
    ``rho_models``; moment requirements reuse ``evidence`` (no budget)."""
    models = [r for r in reqs if isinstance(r, ModelRequirement)]
    fitted = iter(
        accept_models(
            models, table, oracle, rho_models, evidence=evidence, before=before, z=z, seed=seed
        )
        if models and rho_models > 0
        else [_unmeasured(r, "no budget for the acceptance test") for r in models]
    )
    out: list[ModelAcceptance | MomentAcceptance] = []
    for r in reqs:
        if isinstance(r, ModelRequirement):
            out.append(next(fitted))
        elif evidence is not None:
            out.append(accept_moment(r, evidence, z=z))
        else:
            out.append(_unmeasured(r, "no post-processing measurements"))
    return out


@dataclass(frozen=True, eq=False)
class PostprocessOutcome:
    """The post-processed table, the I-projection summary and the acceptance results."""

    table: EncodedTable
    iproj: IProjResult
    acceptance: tuple[ModelAcceptance | MomentAcceptance, ...]

    def requirements_json(self) -> list[dict[str, Any]]:
        return [a.to_json() for a in self.acceptance]

    def summary_json(self) -> dict[str, Any]:
        """The provenance record's ``postprocess`` section (DP outputs and public values)."""
        return {"method": "iproj", **self.iproj.to_json()}

    def to_json(self) -> dict[str, Any]:
        return {"iproj": self.iproj.to_json(), "requirements": self.requirements_json()}


def run_postprocess(
    plan: Any,
    oracle: MeasurementOracle,
    table: EncodedTable,
    seed: int,
    progress: Callable[[str, int, int], None] | None = None,
) -> PostprocessOutcome:
    """The compile step after synthesis: measure the plan's requirement measures (phase
    ``iproj.measure``, noise spread over them by ``requirements.allocation_scales`` at the
    input table's moments), I-project, resample (the external synthesizer's ``rows`` when set, else
    as many rows as the input), then the acceptance tests (phase ``accept``, budget
    ``plan.phase_rho["accept.test"]``). ``plan`` is a :class:`dpql.plan.planner.ReleasePlan`."""
    from dpql.synth.iproj import features, iproject, measure

    def tick(i: int) -> None:
        if progress is not None:
            progress("postprocess", i, 3)

    tick(0)
    measures = plan.measures
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN column: no gradient there
        synthetic = np.nanmean(features(measures.queries, table), axis=0)
    # The synthetic table is public (the generator's DP output, or the external table with its
    # declared budget), so the noise may be spread by its moments.
    scales = allocation_scales(
        measures, plan.requirements, measures.answer_map(synthetic), table.domain
    )
    measurement = measure(
        measures.queries,
        oracle,
        plan.phase_rho["iproj.measure"],
        label="requirements",
        releases=measures.releases,
        scales=scales,
    )
    tick(1)
    spec = getattr(plan, "spec", None)
    rows = getattr(spec.model.synthesizer, "rows", None) if spec is not None else None
    result = iproject(table, measurement, seed=seed, rows=rows)
    tick(2)
    acceptance = acceptance_report(
        plan.requirements, result.table, oracle, plan.phase_rho.get("accept.test", 0.0), result,
        before=table, seed=seed,
    )  # fmt: skip
    tick(3)
    return PostprocessOutcome(result.table, result, tuple(acceptance))


def postprocess_and_accept(
    plan: Any,
    oracle: MeasurementOracle,
    table: EncodedTable,
    seed: int,
    progress: Callable[[str, int, int], None] | None = None,
) -> tuple[EncodedTable, list[dict[str, Any]]]:
    """:func:`run_postprocess` as (table, requirement JSON list). The I-projection summary
    (lambda, projection distance, KKT violation, sampling seed) is in ``run_postprocess(...)
    .summary_json()``, which ``dpql compile`` writes to the record's ``postprocess`` section."""
    out = run_postprocess(plan, oracle, table, seed, progress)
    return out.table, out.requirements_json()
