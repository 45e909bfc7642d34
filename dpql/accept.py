"""DP acceptance tests of a release's declared requirements (reported in the provenance record).

Model requirements (``logistic(y ~ x...)``, ``linear(y ~ x...)``): the model is fitted on the
final *synthetic* table (sklearn; post-processing), then its metric on the *real* table is
measured with ONE Gaussian counting query of sensitivity 1/n through the oracle
(:class:`~dpql.plan.ir.ModelAccuracy`: per-row correctness, or squared error on the [0, 1] scale).

* ``within t``: the metric a user sees on the synthetic table (trained and evaluated there) is
  within ``t`` of the same model's metric on the real table. Logistic: accuracy. Linear: RMSE in
  the label's original units (a monotone function of the measured mean squared error).
* ``accuracy >= a`` / ``rmse <= r``: a bound on the real-table metric.

Moment requirements (corr / mean / count) spend nothing more: they reuse the I-projection's
measurements (post-processing) and compare the noisy real value with the synthetic value after
post-processing; the sd comes from the delta method at the noisy answers.

Verdicts (decision rule, documented for users): with ``[lo, hi]`` the ``z = 2`` sigma interval of
the real quantity, ``pass`` when the requirement holds on the whole interval, ``fail`` when it
fails on the whole interval, ``inconclusive`` otherwise (the threshold lies within ~2 sigma).

Where the excess-risk digest (Zhou et al. 2024, ``papers/excess_risk.md`` sec. 11.2-11.3) gives
a bound, it is reported as a *bound*, with its assumptions and a ``vacuous`` flag: such
end-to-end bounds are usually vacuous at realistic n, and they bound excess empirical *loss*
of an exact ERM, not the accuracy of the sklearn fit.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np

from dpql.diagnostics import Diagnostic, DiagnosticError
from dpql.domain import Domain, EncodedTable, NumericColumn
from dpql.plan.exact import answer, design_matrix
from dpql.plan.ir import (
    ModelAccuracy,
    ModelRequirement,
    Query,
    Requirement,
    Tolerance,
)
from dpql.plan.oracle import MeasurementOracle
from dpql.plan.requirements import requirement_queries, requirement_value, value_sd
from dpql.synth.iproj import IProjResult

PHASE = "accept"
Z = 2.0
ACCEPT_METRICS: dict[str, tuple[str, ...]] = {"logistic": ("accuracy",), "linear": ("rmse",)}

Verdict = Literal["pass", "fail", "inconclusive"]


def _num(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None  # JSON has no NaN / inf


def _interval_verdict(lo: float, hi: float, holds: Any) -> Verdict:
    """``holds(v)`` is monotone on [lo, hi]: check both ends."""
    a, b = bool(holds(lo)), bool(holds(hi))
    return "pass" if a and b else "fail" if not (a or b) else "inconclusive"


def within_verdict(gap: float, sigma: float, t: float, z: float = Z) -> Verdict:
    """``|observed gap| <= t`` with the gap known to +- z sigma."""
    if not math.isfinite(gap):
        return "inconclusive"
    g = abs(gap)
    return _interval_verdict(max(g - z * sigma, 0.0), g + z * sigma, lambda v: v <= t)


def bound_verdict(lo: float, hi: float, op: str, bound: float) -> Verdict:
    """``value OP bound`` for a value known to lie in [lo, hi]."""
    ops = {">=": np.greater_equal, ">": np.greater, "<=": np.less_equal, "<": np.less}
    return _interval_verdict(lo, hi, lambda v: ops[op](v, bound))


def plan_diagnostics(req: Requirement) -> list[Diagnostic]:
    """Plan-time check (no data): can the requirement's tolerance be DP-tested here?"""
    t = req.tolerance
    if isinstance(req, ModelRequirement) and t.metric is not None:
        if t.metric not in ACCEPT_METRICS[req.model]:
            ok = ", ".join(ACCEPT_METRICS[req.model])
            return [
                Diagnostic(
                    "E505",
                    f"'{t.metric}' of a {req.model} model cannot be measured by one counting "
                    "query, so it cannot be DP-tested",
                    hint=f"use 'within t' or a bound on: {ok}",
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


@dataclass(frozen=True)
class RiskBound:
    """A certified bound on excess empirical loss (NOT accuracy), excess_risk.md sec. 11.2-11.3."""

    value: float
    a: float
    rho: float
    vacuous: bool
    assumptions: str


@dataclass(frozen=True)
class ModelAcceptance:
    requirement: str
    model: str
    metric: str
    synthetic: float
    real: float
    sigma: float
    rho: float
    tolerance: Tolerance
    verdict: Verdict
    bound: RiskBound | None = None

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["real"], out["synthetic"] = _num(self.real), _num(self.synthetic)
        out["kind"] = "model"
        return out


def _metric_interval(
    q: ModelAccuracy, value: float, sigma: float, domain: Domain, z: float
) -> tuple[float, float, float]:
    """(point, lo, hi) of the user-facing metric from the measured per-row mean."""
    lo, hi = value - z * sigma, value + z * sigma
    if q.model == "logistic":
        return value, lo, hi
    span = domain[q.label].span  # type: ignore[union-attr]

    def rmse(m: float) -> float:
        return span * math.sqrt(min(max(m, 0.0), 1.0))

    return rmse(value), rmse(lo), rmse(hi)


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

    def g(t: float) -> float:
        return math.log(2 * math.cosh(math.sqrt(t) / 2))

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

    rho = max over the requirement's moments of |noisy - synthetic| + sigma sqrt(2 ln(2K/beta))
    (a public fit gap plus a Gaussian tail bound, union over the K released measures). With
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
    tail = evidence.sigma * math.sqrt(2 * math.log(2 * k / beta))
    rho = float(np.max(np.abs(evidence.noisy[idx] - evidence.after[idx]))) + tail
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
            f"excess empirical {'logistic' if req.model == 'logistic' else 'squared'} loss on "
            f"the real table of an exact ERM over models with ||(theta,b)||_1 <= {big_a:.3g} "
            f"(margin <= {a:.3g}); probability {1 - beta:g}; not the accuracy of the sklearn fit"
        ),
    )


def accept_models(
    reqs: Sequence[ModelRequirement],
    table: EncodedTable,
    oracle: MeasurementOracle,
    rho: float,
    *,
    evidence: IProjResult | None = None,
    z: float = Z,
    seed: int = 0,
) -> list[ModelAcceptance]:
    """Fit every model on the synthetic ``table``, then measure all their metrics on the real
    table in ONE Gaussian release at ``rho``-zCDP (T counting queries of sensitivity 1/n: sigma =
    sqrt(T)/n / sqrt(2 rho)), and decide each tolerance (module docstring)."""
    if not reqs:
        return []
    diags = [d for r in reqs for d in plan_diagnostics(r)]
    if diags:
        raise DiagnosticError(diags)
    qs = [fit_model(r, table, seed=seed) for r in reqs]
    label = "; ".join(r.text or f"{r.model}({r.label})" for r in reqs)
    real = oracle.measure(qs, rho, phase=PHASE, label=label)
    sigma = (math.sqrt(len(qs)) / oracle.n) / math.sqrt(2 * rho)
    return [
        _model_verdict(r, q, table, float(np.ravel(v)[0]), sigma, rho, evidence, z)
        for r, q, v in zip(reqs, qs, real, strict=True)
    ]


def _model_verdict(
    req: ModelRequirement,
    q: ModelAccuracy,
    table: EncodedTable,
    measured: float,
    sigma: float,
    rho: float,
    evidence: IProjResult | None,
    z: float,
) -> ModelAcceptance:
    domain = table.domain
    syn, _, _ = _metric_interval(q, float(answer(q, table)[0]), 0.0, domain, z)
    point, lo, hi = _metric_interval(q, measured, sigma, domain, z)
    t = req.tolerance
    if t.within is not None:
        within = t.within
        gap_lo, gap_hi = sorted((abs(syn - lo), abs(syn - hi)))
        if lo <= syn <= hi:
            gap_lo = 0.0
        verdict = _interval_verdict(gap_lo, gap_hi, lambda v: v <= within)
    elif t.op is not None and t.bound is not None:
        verdict = bound_verdict(lo, hi, t.op, t.bound)
    else:
        verdict = "inconclusive"
    return ModelAcceptance(
        requirement=req.text,
        model=req.model,
        metric="accuracy" if req.model == "logistic" else "rmse",
        synthetic=syn,
        real=point,
        sigma=sigma if req.model == "logistic" else (hi - lo) / (2 * z),
        rho=rho,
        tolerance=t,
        verdict=verdict,
        bound=excess_risk_bound(req, q, evidence) if evidence is not None else None,
    )


# ---------------------------------------------------------------------------------------------
# Moment requirements (no extra budget)


@dataclass(frozen=True)
class MomentAcceptance:
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


def _unmeasured(req: Requirement, note: str) -> MomentAcceptance:
    nan = math.nan
    return MomentAcceptance(
        req.text, _kind(req), nan, nan, nan, nan, req.tolerance, "inconclusive", note
    )


def accept_moment(req: Requirement, evidence: IProjResult, *, z: float = Z) -> MomentAcceptance:
    """Noisy real value vs synthetic values before / after post-processing, and the verdict."""
    d, qs = evidence.table.domain, evidence.queries
    missing = [qq for qq in requirement_queries(req, d) if qq not in qs]
    if missing or evidence.noisy.shape[0] != len(qs):
        return _unmeasured(req, "the requirement's moments were not measured")
    real = _value(req, evidence.noisy, qs, d)
    sd = (
        value_sd(req, dict(zip(qs, evidence.noisy.tolist(), strict=True)), evidence.sigma, d)
        if math.isfinite(real)
        else math.nan
    )
    after = _value(req, evidence.after, qs, d)
    t = req.tolerance.within
    verdict: Verdict = "inconclusive" if t is None else within_verdict(after - real, sd, t, z)
    note = "" if math.isfinite(real) else "undefined on the noisy answers (zero variance / no row)"
    return MomentAcceptance(
        req.text,
        _kind(req),
        real,
        sd,
        _value(req, evidence.before, qs, d),
        after,
        req.tolerance,
        verdict,
        note,
    )


def acceptance_report(
    reqs: Sequence[Requirement],
    table: EncodedTable,
    oracle: MeasurementOracle,
    rho_models: float,
    evidence: IProjResult | None,
    *,
    z: float = Z,
    seed: int = 0,
) -> list[ModelAcceptance | MomentAcceptance]:
    """Every requirement's acceptance, in order. The model requirements share ONE release at
    ``rho_models``; moment requirements reuse ``evidence`` (no budget)."""
    models = [r for r in reqs if isinstance(r, ModelRequirement)]
    fitted = iter(
        accept_models(models, table, oracle, rho_models, evidence=evidence, z=z, seed=seed)
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
    ``iproj.measure``), I-project, resample, then the acceptance tests (phase ``accept``, budget
    ``plan.phase_rho["accept.test"]``). ``plan`` is a :class:`dpql.plan.planner.ReleasePlan`."""
    from dpql.synth.iproj import iproject, measure

    def tick(i: int) -> None:
        if progress is not None:
            progress("postprocess", i, 3)

    tick(0)
    measurement = measure(
        plan.measures.queries, oracle, plan.phase_rho["iproj.measure"], label="requirements"
    )
    tick(1)
    result = iproject(table, measurement, seed=seed)
    tick(2)
    acceptance = acceptance_report(
        plan.requirements, result.table, oracle, plan.phase_rho.get("accept.test", 0.0), result,
        seed=seed,
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
    .to_json()["iproj"]``."""
    out = run_postprocess(plan, oracle, table, seed, progress)
    return out.table, out.requirements_json()
