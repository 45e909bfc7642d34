"""DP acceptance tests of a release's declared requirements (reported in the provenance record).

Model requirements (``logistic(y ~ x...)``, ``linear(y ~ x...)``): the model is fitted on the
final *synthetic* table (sklearn; post-processing), then its metric on the *real* table is
measured through the oracle in ONE Gaussian release of all the release's tests: T scalar
queries with values in [0, 1] (sensitivity 1/n each, replace-one; a label's centred square,
when it is not reused, 1/(4n)), ``sigma = Delta_2 / sqrt(2 rho)`` with ``Delta_2 = sqrt(T)/n``
for T queries of 1/n (phase ``accept``). Per metric (``spec/language.md`` sec. 5):

* ``accuracy`` (logistic ``within`` compares it): ``1{pred = y}`` (a
  :class:`~dpql.ir.queries.ModelAccuracy`); the value is its mean.
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
  within ``t`` of the same model's metric on the real table. For a logistic ``within``
  (accuracy), post-processing has already placed the table's accuracy of a *pilot* model,
  fitted on the table before post-processing (``dpql.postprocess.run.with_pilots``), inside its
  band around the pilot's noisy real accuracy (``docs/postprocess.md``); the test's model,
  refitted on the released table, is close to the pilot, not equal, so this test measures its
  own model.
* ``metric OP b``: a bound on the real-table metric.

Moment requirements (corr / mean / count) spend nothing more: they reuse the I-projection's
measurements (post-processing) and compare the noisy real value with the synthetic value after
post-processing; the sd comes from the delta method at the noisy answers or at the reweighted
table's moments (the projection's estimate from every DP measurement, the synthesizer's
workload answers included), whichever gives the larger (:func:`verdict_sd`,
``docs/postprocess.md`` "What the sd promises"): a reweighted table can stay far from the real
moments where the projection stops short, and the noisy answers carry their noise (each
denominator's kept small by ``dpql.postprocess.allocation``).

Verdicts (decision rule, documented for users): with ``[lo, hi]`` the ``z = 2`` sigma interval of
the real quantity, ``pass`` when the requirement holds on the whole interval, ``fail`` when it
fails on the whole interval, ``inconclusive`` otherwise (the threshold lies within ~2 sigma, or
the value is undefined: the record's ``note`` says which).

Where an excess-risk bound applies (the argument of Zhou et al. 2024, sec. 3.1, Theorems 3.1-3.2,
specialised in :mod:`dpql.postprocess.risk`), it is reported as a *bound*
(``excess_risk_bound``), with its assumptions and a
``vacuous`` flag: such end-to-end bounds are usually vacuous at realistic n, and they bound
excess empirical *loss* of an exact ERM, not the accuracy of the sklearn fit.

The plan-time side (metrics, predicted sds, diagnostics) is :mod:`dpql.plan.acceptance`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from dpql.diagnostics import DiagnosticError
from dpql.domain import Domain, EncodedTable, NumericColumn
from dpql.ir.exact import answer_all, design_matrix
from dpql.ir.oracle import MeasurementOracle
from dpql.ir.queries import (
    CentredProduct,
    Count,
    ModelAccuracy,
    ModelRequirement,
    Moment,
    Query,
    Requirement,
    Tolerance,
    joint_l2_sensitivity,
)
from dpql.plan.acceptance import (
    ACCEPT_METRICS,
    PHASE,
    Verdict,
    Z,
    label_span,
    metric_value,
    plan_diagnostics,
    tested_metric,
)
from dpql.plan.estimates import delta_method_sd, requirement_value, value_sd
from dpql.plan.requirements import normaliser, present_of, requirement_queries
from dpql.postprocess.risk import RiskBound, excess_risk_bound
from dpql.privacy.mechanisms import gaussian_sigma

if TYPE_CHECKING:  # jax stays out of plan-time imports
    from dpql.postprocess.iproj import IProjResult

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


def fit_model(req: ModelRequirement, table: EncodedTable, *, seed: int = 0) -> ModelAccuracy:
    """Fit the requirement's model on a (synthetic) table; design as in ``exact.design_matrix``.

    Logistic: sklearn ``LogisticRegression`` (lbfgs, default L2 penalty), one coefficient row per
    label value; values absent from the table get a -1e9 intercept (never predicted). Linear:
    ``LinearRegression`` on the scaled label.
    """
    from sklearn.linear_model import LinearRegression, LogisticRegression

    given = present_of(req, table.domain)
    X = design_matrix(req.features, table)
    width = X.shape[1]
    if req.model == "linear":
        lin = LinearRegression().fit(X, table.scaled[req.label])
        coef = (tuple(float(c) for c in lin.coef_),)
        intercept = (float(lin.intercept_),)
        return ModelAccuracy("linear", req.features, req.label, coef, intercept, given)
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
        given,
    )


def constant_model(q: ModelAccuracy, domain: Domain) -> ModelAccuracy:
    """A pilot stand-in ``q`` fitted to the constant predictor of the label's first value: zero
    coefficients (design width as ``exact.design_matrix``), the other values never predicted."""
    width = sum(1 if isinstance(domain[f], NumericColumn) else domain.card(f) for f in q.features)
    zeros = tuple(0.0 for _ in range(width))
    card = domain.card(q.label)
    intercept = tuple(0.0 if c == 0 else -1e9 for c in range(card))
    return replace(q, coef=(zeros,) * card, intercept=intercept)


def true_positive_query(q: ModelAccuracy) -> ModelAccuracy:
    """Per row ``1{pred = y = positive}`` (positive: label code 1) of a binary logistic model,
    as a :class:`~dpql.ir.queries.ModelAccuracy` (values in {0, 1}: sensitivity 1/n).

    The label's one-hot joins the design; on negative rows it adds ``big`` (more than any score
    gap: ``|score| <= sum |coef| + sum |intercept|`` as design entries lie in [0, 1]) to the
    positive class, so the prediction is positive and never equals y; positive rows keep the
    model's prediction, so they count exactly when it is positive. A two-valued label under
    ``missing: keep`` has a third code, its null code: the model never predicts it (no row it is
    fitted on has it), and its rows are outside the model's ``given``, so it adds nothing.
    """
    W = np.asarray(q.coef, dtype=np.float64)
    b = np.asarray(q.intercept, dtype=np.float64)
    k = W.shape[0]
    if k not in (2, 3):  # two values, and the null code under missing: keep
        raise ValueError("f1 needs a binary label")
    big = 1.0 + 2.0 * (float(np.abs(W).sum()) + float(np.abs(b).sum()))
    extra = np.zeros((k, k))  # row: class; column: label code
    extra[1, 0] = big
    W2 = np.hstack([W, extra])
    return ModelAccuracy(
        "logistic",
        (*q.features, q.label),
        q.label,
        tuple(tuple(float(v) for v in r) for r in W2),
        q.intercept,
        q.given,
    )


def label_moments(req: ModelRequirement, domain: Domain) -> tuple[Query, ...]:
    """``E u_y`` and ``E(u_y - 1/2)^2`` of a linear requirement's label (its I-projection
    measures, ``dpql.plan.requirements``), on the rows where the model's columns are present,
    with their count when a column is nullable."""
    label = (req.label, None)
    q = present_of(req, domain)
    out: tuple[Query, ...] = (Moment((req.label,), q), CentredProduct(label, label, given=q))
    count = normaliser(req, domain)
    return out if count is None else (*out, count)


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
        return self.metric_of(answers, table.domain)

    def metric_of(self, parts: Sequence[float], domain: Domain) -> float:
        """The metric from its parts' answers: averages over the rows where the model's
        columns are present (each part divided by their count, the last part, when
        :attr:`parts` ends with it), NaN where that count is not positive."""
        span = label_span(self.req, domain)
        if not (self.parts and isinstance(self.parts[-1], Count)):
            return metric_value(self.metric, parts, span)
        count = float(parts[-1])
        if not count > 0:
            return math.nan
        return metric_value(self.metric, [float(p) / count for p in parts[:-1]], span)


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
    count = present_count(req, table.domain)
    if metric == "r2":
        moments = label_moments(req, table.domain)
        have = evidence is not None and all(m in evidence.queries for m in moments)
        if have:
            reused = moments
        else:
            measured += moments
    elif count is not None:  # an r2 test's count is among its label moments
        measured += (count,)
    return ModelTest(req, metric, fitted, measured, reused)


def present_count(req: ModelRequirement, domain: Domain) -> Count | None:
    """The count of the rows a model is defined on (``dpql.plan.requirements.normaliser``):
    its metric's parts are averages over those rows (ratios to it); None for all n rows."""
    return normaliser(req, domain)


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
    # each model on the rows where its own columns are present (not the other models')
    tables = [finite_rows(table, (*r.features, r.label)) for r in reqs]
    tests = [
        build_test(r, t, evidence=evidence, seed=seed) for r, t in zip(reqs, tables, strict=True)
    ]
    queries = [q for t in tests for q in t.measured]
    label = "; ".join(r.text or f"{r.model}({r.label})" for r in reqs)
    real = [float(np.ravel(v)[0]) for v in oracle.measure(queries, rho, phase=PHASE, label=label)]
    sigma = gaussian_sigma(joint_l2_sensitivity(queries, oracle.n), rho)
    sigma *= getattr(oracle, "sd_scale", 1.0)  # answers renormalised (dpql.population)
    out, i = [], 0
    for t, table in zip(tests, tables, strict=True):
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
    post-processing gives such rows weight 0, so a model is never fitted on them) and are
    present (not ``missing: keep`` cells): the rows a model is defined on."""
    ok = np.ones(table.n, dtype=bool)
    for c in columns:
        if c in table.scaled:
            ok &= np.isfinite(table.scaled[c])
        if table.domain[c].nullable:  # a missing: keep cell has no value to fit on
            ok &= table.codes[c] != table.domain[c].null_code
    if ok.all():
        return table
    return table.take(ok)


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
    def value(p: Sequence[float]) -> float:
        return t.metric_of(p, domain)

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


def verdict_sd(req: Requirement, evidence: IProjResult, sigmas: Mapping[Query, float]) -> float:
    """The delta-method sd of a moment requirement's noisy value, at the larger of its two
    estimates of the real moments: the noisy answers the value is computed from (unbiased; each
    denominator's noise is small against it, ``dpql.postprocess.allocation``), and the
    reweighted table's (the projection's estimate from every DP measurement, less noisy but
    drawn toward the synthetic table where the effective-sample-size floor stops the
    projection). Either alone can understate the error's sd: the noisy one by its noise, the
    reweighted one by a table far from the real one. NaN where neither is defined."""
    d, qs = evidence.table.domain, evidence.queries
    sds = [
        value_sd(req, dict(zip(qs, at.tolist(), strict=True)), sigmas, d)
        for at in (evidence.noisy, evidence.reweighted)
    ]
    finite = [s for s in sds if math.isfinite(s)]
    return max(finite) if finite else math.nan


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
    sigmas = dict(zip(qs, evidence.sigma.tolist(), strict=True))
    sd = math.nan
    if math.isfinite(real):
        sd = verdict_sd(req, evidence, sigmas)
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
