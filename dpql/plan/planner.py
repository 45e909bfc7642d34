"""The planner: a loaded spec -> a :class:`ReleasePlan`, without reading any data.

Passes (each pure, each collecting its diagnostics before the next runs):

1. parse the DSL strings of the workload and requirements (:mod:`dpql.lang`);
2. resolve them against the public schema into the query IR (:mod:`dpql.plan.resolve`);
3. expand requirements into the measures post-processing needs (:mod:`dpql.plan.requirements`);
4. allocate the budget: (epsilon, delta) -> zCDP rho by the tight conversion, split across the
   phases in exact fractions, calibrate every mechanism (:mod:`dpql.privacy`);
5. configure the synthesizer's schedule (RAP++ rounds or DP-auto-GAN noise multipliers).

Phases of a release (shares of the release's rho; :mod:`dpql.plan.split` chooses them):

* ``synthesizer``: what post-processing leaves (all of it without post-processing);
* ``iproj.measure``: the post-processing measurements, one Gaussian release per requirement
  (or per weighted requirement), each at the rho its DP test needs;
* ``accept.test``: the model requirements' counting queries, at the rho that brings each test's
  sd to a small fraction of its tolerance.

Their sum is ``postprocess.share`` when the spec gives it, else the least that reaches every
requirement's tolerance (at most ``split.AUTO_SHARE_CAP``).

The public seed of the random query families is derived from the spec hash, so the same spec
always yields the same plan; it is not a DP seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from dpql.diagnostics import Diagnostic, DiagnosticError, DiagnosticSink, SourcePos
from dpql.ir.queries import ModelRequirement, Query, Requirement, joint_l2_sensitivity
from dpql.lang.parser import parse_requirements, parse_workload
from dpql.plan.acceptance import (
    Z,
    acceptance_queries,
    bound_can_hold,
    plan_diagnostics,
    predicted_sd,
    tested_metric,
    tolerance_text,
)
from dpql.plan.requirements import (
    RequirementMeasures,
    expand_requirements,
    release_rhos,
    requirement_queries,
)
from dpql.plan.resolve import query_cells, resolve_requirements, resolve_workload
from dpql.plan.resources import ResourceEstimate, estimate, resource_diagnostics
from dpql.plan.split import PostSplit, choose_split, with_releases
from dpql.privacy.accountant import eps_from_rho, rho_from_eps_delta
from dpql.privacy.budget import BudgetLine, BudgetTable, split_rho
from dpql.privacy.mechanisms import gaussian_sigma
from dpql.spec.load import LoadedSpec
from dpql.synth.base import PlanContext, SynthPlan, backend

PLAN_VERSION = 1
REACH_RTOL = 1.0 + 1e-6  # float slack on "Z sd <= t" (a need met by split_rho's rounding)


@dataclass(frozen=True)
class Budget:
    """The release's budget: requested (epsilon, delta) and its zCDP equivalent rho.

    For ``synthesizer: external`` the external table's declared (epsilon, delta) is part of the
    release's total; ``rho`` is what is left for dpql's own mechanisms.
    """

    epsilon: float
    delta: float
    rho: float
    external_epsilon: float = 0.0
    external_delta: float = 0.0


@dataclass(frozen=True)
class RequirementPlan:
    """A requirement's planned DP test (``postprocess.accept``): ``metric`` it is judged on (the
    statistic for corr / mean / count), ``predicted_sd`` of the DP value in the tolerance's
    units, ``reachable`` (``2 sd <= t`` for ``within t``; False for a bound no table meets;
    None when unknown before data), the smallest epsilon reaching a ``within`` tolerance, and
    the plan-time diagnostics (E505 / W506 / W507)."""

    requirement: Requirement
    predicted_sd: float
    tolerance: float | None
    reachable: bool | None
    smallest_epsilon: float | None
    metric: str = ""
    diagnostics: tuple[Diagnostic, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "requirement": self.requirement.text,
            "weight": self.requirement.weight,
            "metric": self.metric,
            "predicted_sd": _finite(self.predicted_sd),
            "tolerance": self.tolerance,
            "tolerance_text": tolerance_text(self.requirement.tolerance),
            "reachable": self.reachable,
            "smallest_epsilon": _finite(self.smallest_epsilon),
            "diagnostics": [_diagnostic_json(d) for d in self.diagnostics],
        }


def _diagnostic_json(d: Diagnostic) -> dict[str, Any]:
    """A plan diagnostic without the spec's file path, so the plan does not depend on where the
    spec is checked out. (Its line and column stay for the reader; the plan's hash in the
    provenance record leaves them out: ``dpql.release.provenance.sha256_json``.)"""
    out = d.to_json()
    out.pop("file", None)
    out.pop("end_col", None)
    return out


@dataclass(frozen=True)
class ReleasePlan:
    """Everything `dpql compile` will do, fixed before any data is read."""

    spec: LoadedSpec
    queries: tuple[Query, ...]
    query_items: tuple[int, ...]
    requirements: tuple[Requirement, ...]
    measures: RequirementMeasures | None
    budget: Budget
    phase_rho: dict[str, float]
    table: BudgetTable
    synth: SynthPlan
    requirement_plans: tuple[RequirementPlan, ...]
    seed: int
    warnings: tuple[Diagnostic, ...] = ()
    # Compile's estimated peak memory and time (dpql.plan.resources); shown by `dpql plan`, not
    # part of to_json, so the plan hash in a record does not depend on the estimate's model.
    resources: ResourceEstimate | None = None
    # the post-processing budget's split (dpql.plan.split); None without post-processing
    split: PostSplit | None = None

    @property
    def method(self) -> str:
        return self.spec.model.synthesizer.method

    def to_json(self) -> dict[str, Any]:
        """Versioned JSON form (``dpql plan --output``); hashed into the provenance record."""
        kinds: dict[str, int] = {}
        for q in self.queries:
            kinds[q.kind] = kinds.get(q.kind, 0) + 1
        return {
            "dpql_plan": PLAN_VERSION,
            "spec_sha256": self.spec.spec_hash,
            "seed": self.seed,
            "rows": self.spec.rows,
            "method": self.method,
            "queries": kinds,
            "budget": {
                "epsilon": self.budget.epsilon,
                "delta": self.budget.delta,
                "rho": self.budget.rho,
                "external_epsilon": self.budget.external_epsilon,
                "phases": self.phase_rho,
            },
            "allocation": self.table.to_json(),
            "requirements": [r.to_json() for r in self.requirement_plans],
            "postprocess_split": None if self.split is None else self.split.to_json(),
        }


def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else x


def public_seed(spec_hash: str) -> int:
    """The public seed of random query families: derived from the spec, so plans reproduce."""
    return int(spec_hash[:8], 16)


def release_budget(spec: LoadedSpec) -> Budget:
    """Requested budget -> (epsilon, delta, rho) with the tight zCDP conversion (CKS 2020)."""
    privacy = spec.model.privacy
    delta = spec.target_delta
    # a table made elsewhere is charged under replace-one (add/remove: group privacy)
    ext_eps, ext_delta = backend(spec.model.synthesizer.method).declared_budget(spec)
    if privacy.rho is not None:
        rho = privacy.rho
        epsilon = eps_from_rho(rho, delta - ext_delta) + ext_eps
    else:
        epsilon = float(privacy.epsilon)
        if ext_eps >= epsilon or ext_delta >= delta:
            raise DiagnosticError([_budget_diag(spec, epsilon, ext_eps)])
        rho = rho_from_eps_delta(epsilon - ext_eps, delta - ext_delta)
    return Budget(epsilon, delta, rho, ext_eps, ext_delta)


def _budget_diag(spec: LoadedSpec, epsilon: float, ext: float) -> Diagnostic:
    b = getattr(spec.model.synthesizer, "budget", None)
    converted = (
        f", its add_remove epsilon {b.epsilon:g} charged as {ext:g} under replace-one"
        if b is not None and b.neighbouring == "add_remove"
        else ""
    )
    return Diagnostic(
        "E150",
        f"the external table's budget (epsilon {ext:g}{converted}) leaves nothing of the release "
        f"budget (epsilon {epsilon:g}) for post-processing",
        SourcePos(str(spec.path)),
        "raise privacy.epsilon above the external table's charged epsilon (and delta likewise)",
    )


def post_split(
    spec: LoadedSpec,
    requirements: tuple[Requirement, ...],
    measures: RequirementMeasures | None,
    budget: Budget,
) -> PostSplit | None:
    """The post-processing budget (:mod:`dpql.plan.split`): None without a ``postprocess``
    step or requirements. ``postprocess.share`` fixes the share when given; a backend that
    spends nothing of dpql's budget (an external table) gives post-processing all of it."""
    post = spec.model.postprocess
    spends = backend(spec.model.synthesizer.method).traits.spends_budget
    if not requirements or measures is None or (post is None and spends):
        return None
    share = (None if post is None or post.share is None else float(post.share)) if spends else 1.0
    return choose_split(
        requirements, measures, rho=budget.rho, n=spec.rows, domain=spec.domain, share=share
    )


def phase_shares(spec: LoadedSpec, split: PostSplit | None) -> dict[str, Fraction]:
    """Exact shares of the release's rho per phase (see the module docstring)."""
    spends = backend(spec.model.synthesizer.method).traits.spends_budget
    shares: dict[str, Fraction] = {}
    post_share = split.share if split is not None else Fraction(0)
    if post_share:
        if split is not None and split.test_share > 0:
            shares["accept.test"] = split.test_share
            shares["iproj.measure"] = post_share - split.test_share
        else:
            shares["iproj.measure"] = post_share
    if spends:
        shares["synthesizer"] = 1 - post_share
    return shares


def _sigma_requirements(k: int, n: int, rho: float) -> float:
    """Per-query sigma of one Gaussian release of ``k`` scalar [0, 1] queries at ``rho``."""
    return gaussian_sigma(math.sqrt(k) / n, rho) if k and rho > 0 else math.inf


def _locate_requirement_errors(
    requirements: tuple[Requirement, ...], domain: Any, positions: list[SourcePos | None]
) -> None:
    """Raise the errors of expanding each requirement into its measures (E501: a column it
    cannot average or regress on), each at its requirement's line in the spec."""
    found: list[Diagnostic] = []
    for req, pos in zip(requirements, positions, strict=True):
        try:
            requirement_queries(req, domain)
        except DiagnosticError as e:
            found += [d if d.pos is not None else replace(d, pos=pos) for d in e.diagnostics]
    if found:
        raise DiagnosticError(found)


def build_plan(spec: LoadedSpec) -> ReleasePlan:
    """Plan a release (passes 1-5 of the module docstring). Raises DiagnosticError."""
    model = spec.model
    domain = spec.domain
    n = spec.rows
    seed = public_seed(spec.spec_hash)
    workload_src = [w.value for w in spec.workload]
    req_src = [r.value for r in spec.requirements]
    sink = DiagnosticSink()
    nodes = reqs_nodes = None
    try:
        nodes = parse_workload(workload_src, [w.pos for w in spec.workload])
    except DiagnosticError as e:
        sink.extend(e.diagnostics)
    try:
        reqs_nodes = parse_requirements(req_src, [r.pos for r in spec.requirements])
    except DiagnosticError as e:
        sink.extend(e.diagnostics)
    sink.raise_if_errors()
    assert nodes is not None and reqs_nodes is not None
    resolved = None
    requirements: tuple[Requirement, ...] = ()
    try:
        resolved = resolve_workload(nodes, domain, n, seed, [w.pos for w in spec.workload], sink)
    except DiagnosticError:
        pass
    try:
        requirements = resolve_requirements(
            reqs_nodes, domain, [r.pos for r in spec.requirements], sink
        )
    except DiagnosticError:
        pass
    sink.raise_if_errors()
    assert resolved is not None
    _locate_requirement_errors(requirements, domain, [r.pos for r in spec.requirements])
    measures = expand_requirements(requirements, domain) if requirements else None

    budget = _checked_budget(spec)
    split = post_split(spec, requirements, measures, budget)
    if split is not None and measures is not None:
        measures = with_releases(measures, split)
    shares = phase_shares(spec, split)
    phase_rho = split_rho(budget.rho, shares)
    synth = backend(model.synthesizer.method).plan(
        PlanContext(spec, resolved.queries, budget.epsilon, budget.delta, phase_rho)
    )
    lines: list[BudgetLine] = list(synth.lines)
    k = len(measures.queries) if measures else 0
    if "iproj.measure" in phase_rho and measures is not None and k:
        cards = {c.name: c.card for c in domain}
        lines.extend(_measure_lines(measures, phase_rho["iproj.measure"], n, cards))
    n_tests = sum(acceptance_queries(r, domain) for r in requirements)
    if n_tests and "accept.test" in phase_rho:
        rho = phase_rho["accept.test"]
        lines.append(
            BudgetLine(
                "accept.test",
                "gaussian",
                1,
                rho,
                gaussian_sigma(math.sqrt(n_tests) / n, rho),
                n,
                n_tests,
            )
        )
    table = BudgetTable(tuple(lines), budget.rho)
    unit_sigmas = (  # every measure's noise sd at rho = 1; it scales as 1 / sqrt(rho)
        measures.cell_sigmas(n, float(shares["iproj.measure"]))
        if measures is not None and k and shares.get("iproj.measure", 0) > 0
        else None
    )
    req_plans = tuple(
        _requirement_plan(
            spec,
            r,
            unit_sigmas,
            cells,
            n_tests,
            shares,
            budget,
            item.pos,
            split.smallest_rho[i] if split is not None else None,
        )
        for i, (r, cells, item) in enumerate(
            zip(
                requirements,
                measures.index if measures else [()] * len(requirements),
                spec.requirements,
                strict=True,
            )
        )
    )
    req_diags = [d for p in req_plans for d in p.diagnostics]
    if any(d.severity == "error" for d in req_diags):
        raise DiagnosticError([d for d in req_diags if d.severity == "error"])
    share_diags = _share_diagnostics(spec, split)
    resources = _estimate(spec, resolved.queries, synth, k, requirements)
    res_diags = resource_diagnostics(resources, _resource_pos(spec, resources))
    if any(d.severity == "error" for d in res_diags):
        raise DiagnosticError(res_diags)
    return ReleasePlan(
        spec,
        resolved.queries,
        resolved.items,
        requirements,
        measures,
        budget,
        phase_rho,
        table,
        synth,
        req_plans,
        seed,
        tuple(spec.warnings)
        + tuple(d for d in sink.items if d.severity == "warning")
        + tuple(req_diags)
        + share_diags
        + tuple(res_diags),
        resources,
        split,
    )


def _checked_budget(spec: LoadedSpec) -> Budget:
    """:func:`release_budget`, with a budget the accountant cannot convert (an external
    table's add/remove epsilon whose group-privacy delta overflows, a rho that underflows)
    reported as E151 at ``privacy`` instead of an arithmetic error."""
    problem = ""
    try:
        budget = release_budget(spec)
    except (ValueError, OverflowError, ZeroDivisionError) as e:
        problem = str(e) or type(e).__name__
    else:
        values = (budget.epsilon, budget.delta, budget.rho)
        if all(math.isfinite(v) for v in values) and budget.rho > 0:
            return budget
        problem = f"epsilon {budget.epsilon:g}, delta {budget.delta:g} give rho {budget.rho:g}"
    doc = spec.doc
    raise DiagnosticError(
        [
            Diagnostic(
                "E151",
                f"the privacy budget cannot be converted to zCDP ({problem})",
                doc.key_pos(("privacy",)) if doc.has(("privacy",)) else SourcePos(str(spec.path)),
                "use a budget within the documented ranges (spec/language.md §9), and for an "
                "external table a declared budget well below the release's",
            )
        ]
    ) from None


def _estimate(
    spec: LoadedSpec,
    queries: tuple[Query, ...],
    synth: SynthPlan,
    measures: int,
    requirements: tuple[Requirement, ...],
) -> ResourceEstimate:
    """Compile's peak memory and time (:mod:`dpql.plan.resources`), from public facts."""
    model = spec.model
    rows = getattr(model.synthesizer, "rows", None)
    return estimate(
        domain=spec.domain,
        n=spec.rows,
        engine=model.data.engine,
        output_rows=rows if rows is not None else spec.rows,
        workload=queries,
        synth=synth.cost,
        measures=measures,
        model_requirements=sum(isinstance(r, ModelRequirement) for r in requirements),
    )


# A chosen post-processing share above this draws W509: the synthesizer's noise sd grows by
# 1 / sqrt(1 - share), and its workload fidelity falls with it: on the benchmark suite
# (``benchmarks/iproj``) the 3-way fidelity lost against the same RAP compile without
# requirements grows with the share, from within the noise at small shares to large at a half.
LARGE_POST_SHARE = 0.25


def _share_diagnostics(spec: LoadedSpec, split: PostSplit | None) -> tuple[Diagnostic, ...]:
    """``W509`` where the planner chose to give post-processing more than
    ``LARGE_POST_SHARE`` of a budget the synthesizer shares (a fixed ``postprocess.share`` is
    the user's own choice, and an external table spends nothing of dpql's budget)."""
    spends = backend(spec.model.synthesizer.method).traits.spends_budget
    share = float(split.share) if split is not None and split.chosen and spends else 0.0
    if share <= LARGE_POST_SHARE:
        return ()
    doc = spec.doc
    path: tuple[str | int, ...] = (
        ("postprocess",) if doc.has(("postprocess",)) else ("requirements",)
    )
    return (
        Diagnostic(
            "W509",
            f"post-processing takes {share:.0%} of the budget so that every requirement's DP test "
            f"can decide its tolerance; the synthesizer keeps {1 - share:.0%}, so its noise sd "
            f"grows {1 / math.sqrt(1 - share):.2f}x and the workload's fidelity falls with it",
            doc.key_pos(path),
            "loosen the requirements' tolerances or raise privacy.epsilon (`dpql plan` gives "
            "each requirement's smallest epsilon), or fix postprocess.share to cap it (tests "
            "may then be inconclusive)",
            "warning",
        ),
    )


def _resource_pos(spec: LoadedSpec, est: ResourceEstimate) -> SourcePos:
    """Where to point a resource diagnostic: the spec value behind the largest term."""
    top = max(est.parts, key=est.parts.__getitem__) if est.parts else ""
    paths: list[tuple[str | int, ...]] = {
        "relaxed table": [("synthesizer", "options", "relaxed_rows"), ("synthesizer",)],
        "output rows": [("synthesizer", "rows"), ("synthesizer",)],
        "post-processing": [("synthesizer", "rows"), ("requirements",)],
        "data table": [("data", "rows")],
        "reading data": [("data", "rows")],
        "gan per-example gradients": [("synthesizer", "options"), ("synthesizer",)],
        "gan networks": [("synthesizer", "options"), ("synthesizer",)],
        "gan encoded data": [("data", "rows")],
    }.get(top, [("workload",)])
    doc = spec.doc
    for path in paths:
        if doc.has(path):
            return doc.value_pos(path) if len(path) > 1 else doc.key_pos(path)
    return SourcePos(str(spec.path), 1, 1)


def _measure_lines(
    measures: RequirementMeasures, rho: float, n: int, cards: dict[str, int]
) -> list[BudgetLine]:
    """The post-processing releases (``iproj.measure``), one line each, with the rho
    ``dpql.postprocess.iproj.measure`` will spend on them (``release_rhos``) and the sigma of equal
    noise at its queries' L2 sensitivity."""
    lines = []
    for rel, r in zip(measures.releases, release_rhos(measures.releases, rho), strict=True):
        l2 = joint_l2_sensitivity([measures.queries[c] for c in rel.cells], n)
        sigma = gaussian_sigma(l2, r) if rel.cells and r > 0 else math.inf
        count = sum(query_cells(measures.queries[c], cards) for c in rel.cells)
        lines.append(BudgetLine("iproj.measure", "gaussian", 1, r, sigma, n, count))
    return lines


def _requirement_plan(
    spec: LoadedSpec,
    req: Requirement,
    unit_sigmas: Any,
    cells: tuple[int, ...],
    n_tests: int,
    shares: dict[str, Fraction],
    budget: Budget,
    pos: SourcePos | None = None,
    smallest_rho: float | None = None,
) -> RequirementPlan:
    """A requirement's row of the plan: the predicted sd of the DP value it is judged on at the
    planned budget (``acceptance.predicted_sd``: the I-projection releases, at the largest noise
    sd among the requirement's ``cells`` -- exact for one joint release, conservative when a
    shared measure is averaged over weighted releases -- and the acceptance release of
    ``n_tests`` queries), reachability, the smallest epsilon that reaches a ``within``
    tolerance, and the plan-time diagnostics (``accept.plan_diagnostics``).

    Every noise sd is ``Delta / sqrt(2 rho_part)`` and the predicted sd is the delta method's
    norm of them, so the sd at a release rho is its value at rho = 1 over ``sqrt(rho)``:
    computed once (``unit_sigmas`` are the measures' sds at rho = 1, shared by all
    requirements), which keeps planning linear in the number of requirements.
    """
    n = spec.rows
    domain = spec.domain
    measure = float(shares.get("iproj.measure", 0))
    test = float(shares.get("accept.test", 0))
    s_measure = (
        float(unit_sigmas[list(cells)].max()) if unit_sigmas is not None and cells else math.inf
    )
    s_test = _sigma_requirements(n_tests, n, test)
    sd_unit = predicted_sd(req, s_measure, s_test, domain) if measure > 0 else math.inf

    def sd_at(rho: float) -> float:
        return sd_unit / math.sqrt(rho) if rho > 0 else math.inf

    metric = tested_metric(req) if isinstance(req, ModelRequirement) else type(req).__name__
    metric = metric.removesuffix("Requirement").lower()
    measured = measure > 0
    sd = sd_at(budget.rho) if measured else math.inf
    tol = req.tolerance.within
    smallest: float | None = None
    reachable: bool | None = None
    bound_ok = bound_can_hold(req, domain)
    if measured and tol is not None:
        reachable = bool(Z * sd <= tol * REACH_RTOL)
        smallest = (
            _epsilon_for_rho(smallest_rho, budget)
            if smallest_rho is not None
            else _smallest_epsilon(sd_unit, tol, budget)
        )
    elif not bound_ok:
        reachable = False
    diags = plan_diagnostics(
        req,
        predicted=sd,
        smallest_epsilon=smallest,
        measured=measured,
        bound_ok=bound_ok,
        pos=pos,
    )
    return RequirementPlan(req, sd, tol, reachable, smallest, metric, tuple(diags))


def _epsilon_for_rho(rho: float, budget: Budget, hi: float = 1e3) -> float:
    """The release epsilon whose rho (of dpql's own budget) is ``rho``: ``eps_from_rho`` at the
    delta left by an external table, plus its epsilon; at least the external epsilon plus 1e-4,
    ``inf`` above ``hi``."""
    lo = budget.external_epsilon + 1e-4
    if not (math.isfinite(rho) and 0 < rho <= hi):  # rho-zCDP costs epsilon >= rho
        return lo if rho == 0 else math.inf
    eps = budget.external_epsilon + eps_from_rho(rho, budget.delta - budget.external_delta)
    return math.inf if eps > hi else max(eps, lo)


def _smallest_epsilon(sd_unit: float, tolerance: float, budget: Budget, hi: float = 1e3) -> float:
    """Smallest release epsilon with ``Z * sd <= tolerance`` (``estimates.smallest_epsilon_for``
    without the bisection): the sd at rho is ``sd_unit / sqrt(rho)``, so the tolerance needs
    ``rho >= (Z sd_unit / tolerance)^2`` of dpql's own budget, which costs
    ``eps_from_rho(rho, delta left)`` on top of an external table's epsilon. At least the
    external epsilon plus 1e-4; ``inf`` above ``hi``."""
    lo = budget.external_epsilon + 1e-4
    if sd_unit == 0:
        return lo
    ratio = Z * sd_unit / tolerance
    need = ratio * ratio  # inf, not OverflowError, when it overflows
    if not (math.isfinite(need) and 0 < need <= hi):  # rho-zCDP costs epsilon >= rho
        return math.inf
    eps = budget.external_epsilon + eps_from_rho(need, budget.delta - budget.external_delta)
    return math.inf if eps > hi else max(eps, lo)
