"""Plan-time side of the requirements' DP acceptance tests: the metrics, their predicted sd at
a planned budget, reachability and the plan's diagnostics. Pure and data-free; the tests
themselves run in :mod:`dpql.postprocess.accept`, whose docstring states them.

Plan time (no data; :func:`plan_diagnostics`): ``E505`` a metric that cannot be DP-tested;
``W506`` a tolerance the planned budget cannot decide (``2 sd > t``) or a bound no table can meet;
``W507`` requirements without post-processing measurements (never tested).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from dpql.diagnostics import Diagnostic, SourcePos
from dpql.domain import Domain, NumericColumn
from dpql.ir.queries import (
    CorrRequirement,
    ModelRequirement,
    Requirement,
    Tolerance,
)
from dpql.plan.estimates import delta_method_sd, predicted_error
from dpql.plan.requirements import VARIANCE_RTOL, normaliser

if TYPE_CHECKING:  # jax stays out of plan-time imports
    pass

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


def acceptance_queries(req: Requirement, domain: Domain) -> int:
    """Scalar queries a requirement adds to the ``accept`` release (0 for moment requirements;
    f1 needs two; R^2's label moments come from the I-projection measurements; one more, the
    count of the rows where the model's columns are present, when one is nullable and the
    metric is not R^2, whose label moments carry that count; or of the kept rows under
    ``missing: drop``: ``dpql.plan.requirements.normaliser``)."""
    if not isinstance(req, ModelRequirement):
        return 0
    metric = tested_metric(req)
    count = metric != "r2" and normaliser(req, domain) is not None
    return (2 if metric == "f1" else 1) + int(count)


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


def label_span(req: ModelRequirement, domain: Domain) -> float:
    col = domain[req.label]
    return col.span if isinstance(col, NumericColumn) else 1.0


def predicted_sd(
    req: Requirement, sigma_measure: float, sigma_test: float, domain: Domain
) -> float:
    """Predicted sd of the DP value a requirement is judged on (its tolerance's units).

    Moment requirements: :func:`dpql.plan.estimates.predicted_error` at the I-projection's
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
    tests = 2 if metric == "f1" else 1  # the count of present rows, if any, is ~1 at plan time
    sigmas = [sigma_test] * tests
    sigmas += [sigma_measure] * (len(parts) - len(sigmas))
    span = label_span(req, domain)
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
        hi = label_span(req, domain)
    b = t.bound
    return {">=": b <= hi, ">": b < hi, "<=": b >= lo, "<": b > lo}.get(t.op or "", True)


def _value_width(req: Requirement) -> float | None:
    """Width of the range a ``within`` requirement's value lies in, when it is bounded:
    a correlation in [-1, 1]; accuracy and f1 in [0, 1]."""
    if isinstance(req, CorrRequirement):
        return 2.0
    if isinstance(req, ModelRequirement) and tested_metric(req) in ("accuracy", "f1"):
        return 1.0
    return None


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
                f"{name} is not tested: the spec turns post-processing off",
                pos,
                "remove `postprocess: null` (requirements get `postprocess: {method: iproj}`)",
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
        width = _value_width(req)
        loosen = f"or loosen the tolerance to {spread}"
        if width is not None and not Z * predicted < width:
            # a tolerance as wide as the statistic's range accepts any table: never offer it
            loosen = (
                f"no tolerance can be met at this budget: the statistic lies in a range of "
                f"width {width:g}, so a tolerance of {spread} would accept any table"
            )
        return [
            Diagnostic(
                "W506",
                f"{name}: the DP measurement's {Z:g} sd ({spread}) exceeds the tolerance "
                f"{t.within:g}, so its verdict will likely be inconclusive",
                pos,
                f"{hint} (or postprocess.share); {loosen}",
                "warning",
            )
        ]
    return []


# ---------------------------------------------------------------------------------------------
# Model requirements
