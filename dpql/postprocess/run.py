"""The post-processing stage of ``dpql compile``: measure the requirements, place each
requirement's value inside its pass band by the MAP I-projection, resample, and run the DP
acceptance tests. The rule, the policy and the roles: ``docs/postprocess.md``,
:mod:`dpql.postprocess.policy`."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from dpql.answers import NoisyAnswer
from dpql.diagnostics import Diagnostic
from dpql.domain import EncodedTable
from dpql.ir.oracle import MeasurementOracle
from dpql.postprocess.accept import ModelAcceptance, MomentAcceptance, acceptance_report
from dpql.postprocess.allocation import allocation_scales
from dpql.postprocess.centre import keep_planned_l2, recentre
from dpql.postprocess.policy import (
    DEFAULT_POLICY,
    PostprocessPolicy,
    Role,
    decide_roles,
    linearise_at,
    reachable,
    value_at,
)

if TYPE_CHECKING:  # jax stays out of plan-time imports
    from dpql.postprocess.iproj import Boxes, IProjResult


@dataclass(frozen=True, eq=False)
class PostprocessOutcome:
    """The post-processed table, the I-projection summary, the roles and the acceptance."""

    table: EncodedTable
    iproj: IProjResult
    acceptance: tuple[ModelAcceptance | MomentAcceptance, ...]
    workload: dict[str, Any] | None = None
    policy: PostprocessPolicy = DEFAULT_POLICY
    roles: tuple[Role, ...] = ()

    def requirements_json(self) -> list[dict[str, Any]]:
        return [a.to_json() for a in self.acceptance]

    def summary_json(self) -> dict[str, Any]:
        """The provenance record's ``postprocess`` section (DP outputs and public values)."""
        out = {"method": "iproj", **self.iproj.to_json(), **_measure_errors(self.iproj)}
        out["policy"] = self.policy.to_json()
        out["roles"] = [r.to_json() for r in self.roles]
        if self.workload is not None:
            out["workload"] = self.workload
        return out

    def to_json(self) -> dict[str, Any]:
        return {"iproj": self.iproj.to_json(), "requirements": self.requirements_json()}


def _measure_errors(res: IProjResult) -> dict[str, Any]:
    """Each requirement measure's error against its noisy answer, before and after, in noise
    sds (functions of DP outputs and public tables)."""

    def vec(x: np.ndarray) -> list[float | None]:
        return [float(v) if np.isfinite(v) else None for v in x]

    with np.errstate(invalid="ignore", divide="ignore"):
        before = np.abs(res.before - res.noisy) / res.sigma
        after = np.abs(res.after - res.noisy) / res.sigma
    return {"measure_error_sd_before": vec(before), "measure_error_sd_after": vec(after)}


def workload_errors(
    measurements: Sequence[NoisyAnswer], before: EncodedTable, after: EncodedTable
) -> dict[str, Any]:
    """The synthesizer's measured workload answers against the table before and after
    post-processing: mean / max absolute error per cell and mean error in noise sds (the noisy
    answers are DP outputs, the tables public; never the real data)."""
    from dpql.ir.exact import answer_all

    queries = [m.query for m in measurements]
    noisy = [np.ravel(np.asarray(m.value, dtype=np.float64)) for m in measurements]
    sd = np.concatenate([np.full(a.size, m.sd, dtype=np.float64) for a, m in
                         zip(noisy, measurements, strict=True)])  # fmt: skip
    out: dict[str, Any] = {"measured_queries": len(queries), "cells": int(sd.size)}
    for name, t in (("before", before), ("after", after)):
        ans = answer_all(queries, t)
        err = np.concatenate(
            [np.abs(np.ravel(a) - m) for a, m in zip(ans, noisy, strict=True)]
        )
        out[f"mean_abs_error_{name}"] = float(err.mean())
        out[f"max_abs_error_{name}"] = float(err.max())
        with np.errstate(invalid="ignore", divide="ignore"):
            out[f"mean_error_sd_{name}"] = float(np.nanmean(err / sd))
    return out


def with_pilots(
    measures: Any, requirements: Sequence[Any], table: EncodedTable, seed: int = 0
) -> tuple[Any, tuple[int, ...]]:
    """``measures`` with each pilot fitted: a requirement's plan-time stand-in
    (``requirements.pilot_query``) replaced by the accuracy query of its model fitted on
    ``table`` (public: the synthetic table), a query of the same sensitivity, so every release
    keeps the plan's L2 sensitivity. Also returns the pilots' cells. A table without a usable
    row (every feature or label missing) gets the constant predictor of the label's first value:
    measured as planned, not pulled (not a pilot)."""
    from dataclasses import replace

    from dpql.ir.queries import ModelAccuracy
    from dpql.postprocess.accept import constant_model, finite_rows, fit_model

    queries = list(measures.queries)
    pilots: list[int] = []
    fitted = False
    for req, cells in zip(requirements, measures.index, strict=True):
        for k in cells:
            q = queries[k]
            if not isinstance(q, ModelAccuracy) or q.fitted:
                continue
            usable = finite_rows(table, (*req.features, req.label))
            if usable.n:
                queries[k] = fit_model(req, usable, seed=seed)
                pilots.append(k)
            else:
                queries[k] = constant_model(q, table.domain)
            fitted = True
    if not fitted:
        return measures, ()
    return replace(measures, queries=tuple(queries)), tuple(pilots)


def requirement_boxes(
    roles: Sequence[Role], F: np.ndarray, before: np.ndarray, noisy: np.ndarray
) -> Boxes | None:
    """The projection's box constraints, one per banded requirement (``Role.banded``): its
    value linearised at the table's moments, ``|g . E_w f - (g . before + noisy - before
    value)| <= h``, ``g`` scaled to a largest weight of 1 (the measures' own scale). ``F`` the
    measures per row, ``before`` their means (public), ``noisy`` the measurement (where the
    table's value is undefined, the value is linearised there, centred at ``g . noisy``)."""
    from dpql.postprocess.iproj import Boxes

    cols, centre, width, sd = [], [], [], []
    for r in roles:
        if not r.banded:
            continue
        assert r.gradient is not None
        unit = float(np.max(np.abs(r.gradient)))
        g = np.nan_to_num(r.gradient) / unit
        centre.append(
            float(g @ np.nan_to_num(before)) + (r.noisy - r.before) / unit
            if np.isfinite(r.before) else float(g @ noisy)
        )  # fmt: skip
        cols.append(np.nan_to_num(F @ g))
        width.append(r.half_width / unit)
        sd.append(r.sd / unit)
    if not cols:
        return None
    arrays = (np.column_stack(cols), centre, width, sd)
    return Boxes(*(np.asarray(x, dtype=np.float64) for x in arrays))


def out_of_reach(roles: Sequence[Role], requirements: Sequence[Any], measures: Any,
                 result: IProjResult, policy: PostprocessPolicy) -> list[Diagnostic]:
    """``W511`` for each requirement with no room (``t <= z sd``: left alone), ``W510`` for each
    constrained one whose reweighted value still misses the pass condition ``|v - v_noisy| +
    z sd <= t`` (the ESS floor stopped it short). Public: DP outputs and the table."""
    short, none = [], []
    for r in roles:
        req = requirements[r.index]
        name = f"'{req.text or 'a requirement'}'"
        if r.role == "no_room":
            z_sd = f"{policy.z:g} sd = {policy.z * r.sd:.2g}"
            none.append(f"{name} (noisy value {r.noisy:.4g}, {z_sd} >= tolerance "
                        f"{req.tolerance.within:g})")  # fmt: skip
        if r.role != "constrained":
            continue
        v = value_at(r, req, measures.queries, result.reweighted, result.table.domain)
        if not reachable(r, v, req, policy):
            short.append(f"{name} from {r.before:.4g} to {v:.4g}, the noisy value being "
                         f"{r.noisy:.4g} ({policy.z:g} sd = {policy.z * r.sd:.2g}) and its "
                         f"tolerance {req.tolerance.within:g}")  # fmt: skip
    out = []
    if short:
        out.append(Diagnostic(
            "W510",
            "post-processing could not bring these requirements within reach of a pass (the "
            "effective-sample-size floor stopped it): " + "; ".join(short),
            hint="the synthetic table lacks rows like the real ones these requirements "
            "describe; more budget for the synthesizer, another synthesizer, or a looser "
            "tolerance", severity="warning"))  # fmt: skip
    if none:
        out.append(Diagnostic(
            "W511",
            "the noise leaves no room for a pass (z sd >= the tolerance), so post-processing "
            "leaves these requirements alone: " + "; ".join(none),
            hint="more budget for post-processing (`postprocess.share`), a higher epsilon, or "
            "a looser tolerance", severity="warning"))  # fmt: skip
    return out


# At most this many re-linearisations (Gauss-Newton) of the boxed values at the reweighted
# table, where the first linearisation left a value out of reach of a pass.
RELINEARISE = 3


def run_postprocess(
    plan: Any,
    oracle: MeasurementOracle,
    table: EncodedTable,
    seed: int,
    progress: Callable[[str, int, int], None] | None = None,
    workload: Sequence[NoisyAnswer] = (),
    policy: PostprocessPolicy = DEFAULT_POLICY,
) -> PostprocessOutcome:
    """The compile step after synthesis (``plan`` a :class:`dpql.plan.planner.ReleasePlan`):
    measure the plan's requirement measures, each logistic pilot fitted first (phase
    ``iproj.measure``, each release at its planned rho and sensitivity, its noise spread by
    ``allocation.allocation_scales``), decide each requirement's role
    (:func:`~dpql.postprocess.policy.decide_roles`), and when one is ``constrained`` reweight
    by the MAP I-projection under ``policy`` (the synthesizer's measured ``workload`` answers
    and the requirement measures penalised at 1 / sigma^2, one box per banded requirement);
    resample (the synthesizer's ``rows`` when set), then the acceptance tests (phase
    ``accept``, budget ``plan.phase_rho["accept.test"]``)."""
    from dpql.postprocess.iproj import features, iproject, measure, sparse_workload

    def tick(i: int) -> None:
        if progress is not None:
            progress("postprocess", i, 3)

    tick(0)
    spec = getattr(plan, "spec", None)
    # the corr / mean measures centred at the synthetic table's means (dpql.postprocess.centre)
    requirements, measures = recentre(plan.requirements, plan.measures, table)
    measures, _ = with_pilots(measures, requirements, table, seed)
    F = features(measures.queries, table)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN column: no gradient there
        synthetic = np.nanmean(F, axis=0)
    # The synthetic table is public, so the noise may be spread by its moments; each release
    # keeps the plan's L2 sensitivity whatever its centres, and its sd at equal noise is public
    # (its rho, the public n, the sensitivities; renormalised answers carry sd_scale times it).
    rho_measure = plan.phase_rho["iproj.measure"]
    sd_scale = getattr(oracle, "sd_scale", 1.0)
    sigmas = [s * sd_scale for s in measures.release_sigmas(oracle.n, rho_measure)]
    scales = allocation_scales(
        measures, requirements, measures.answer_map(synthetic), table.domain, sigmas
    )
    scales = keep_planned_l2(plan.measures, measures, scales, oracle.n)
    measurement = measure(
        measures.queries, oracle, rho_measure, label="requirements",
        releases=measures.releases, scales=scales,
    )  # fmt: skip
    tick(1)
    roles = decide_roles(
        requirements, measures.index, measures.queries, measurement.noisy, measurement.sigma,
        synthetic, table.domain, policy,
    )  # fmt: skip
    moves = any(r.role == "constrained" for r in roles)
    prior = policy.prior_strength(table.n, [m.sd for m in workload or ()])
    rows = getattr(spec.model.synthesizer, "rows", None) if spec is not None else None
    penalty = sparse_workload(workload, table, prior) if workload else None
    at, linear = synthetic, roles
    for _ in range(1 + RELINEARISE):
        boxes = requirement_boxes(linear, F, at, measurement.noisy) if moves else None
        result = iproject(
            table, measurement, seed=seed, rows=rows, prior_rows=prior,
            ess_floor=policy.ess_floor, workload=penalty, boxes=boxes, move=moves,
        )  # fmt: skip
        at = result.reweighted
        if not moves or all(
            reachable(r, value_at(r, requirements[r.index], measures.queries, at,
                                  table.domain), requirements[r.index], policy)
            for r in roles if r.banded
        ):  # fmt: skip
            break
        linear = linearise_at(roles, requirements, measures.queries, at, table.domain)
    found = out_of_reach(roles, requirements, measures, result, policy)
    if found:
        result = replace(result, diagnostics=(*result.diagnostics, *found))
    tick(2)
    acceptance = acceptance_report(
        requirements, result.table, oracle, plan.phase_rho.get("accept.test", 0.0), result,
        before=table, z=policy.z, seed=seed,
    )  # fmt: skip
    tick(3)
    report = workload_errors(workload, table, result.table) if workload else None
    if report is not None:
        report["penalty_cells"] = result.penalty_cells
    return PostprocessOutcome(
        result.table, result, tuple(acceptance), report, policy, roles
    )
