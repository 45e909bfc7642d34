"""The planner's split of the post-processing budget (spec/language.md sec. 5.3 and 11).

Pure planning code: public spec, public bounds, no data. Three choices:

(a) **Across requirements.** Without manual ``weight`` s, every requirement with measured
    queries gets its *own* Gaussian release (``dpql.plan.requirements.Release``), so a
    correlation's 5 moments do not carry the noise of a logistic regression's 54. A measure
    shared by several requirements is answered in each of their releases and averaged with
    inverse-variance weights (post-processing), exactly as with manual weights, which stay an
    override of this split.
(b) **The acceptance tests** (``accept.test``, one release of the model requirements' counting
    queries) get just the budget that makes each test's predicted sd a small fraction of its
    tolerance: ``sd <= ACCEPT_SD_FRACTION * t`` (``BOUND_TEST_SD`` for a bound).
(c) **The post-processing share** of the release's rho, when the spec does not fix
    ``postprocess.share``: the least that reaches every requirement, capped at
    ``AUTO_SHARE_CAP``.

What each release *needs* (rho-zCDP; every sd is ``Delta / sqrt(2 rho)`` at replace-one L2
sensitivity ``Delta``, so a need is a closed form, with no search):

* a ``corr`` / ``mean`` / ``count`` requirement: the rho at which its predicted test sd (the
  delta method at the uniform-spread public moments, ``requirements.predicted_error``, equal
  noise on its release's measures) is ``t / Z``: ``rho = (Z sd_1 / t)^2`` with ``sd_1`` the sd at
  rho = 1. This is the reachability threshold of W506; the uniform spread is optimistic for
  concentrated columns (compile refines only the *within-release* spread, see
  ``dpql.postprocess.allocation``, never a release's rho).
* a model requirement's moments (no delta-method statistic: they only steer the projection):
  per-measure noise sd ``t / Z`` (``MODEL_BOUND_SD`` for a bound), i.e. every moment, a
  fraction in [0, 1], resolved to the tolerance itself: ``rho = Z^2 Delta^2 / (2 t^2)``.
* the tests: the largest rho any model requirement's test needs (bisection on its predicted sd,
  which also carries the label moments' noise for ``r2``).

Funding: when the whole need fits (always with a chosen share below the cap), every release gets
its need; with a fixed ``share`` larger than the need, the surplus goes to the requirement
releases in proportion to their needs (the tests never get more than they need). When the need
does not fit, releases are funded whole cheapest-first (the tests first: they are the cheapest
and without them a model requirement is never decided) and the ones left share the remainder
in proportion to their needs; those are reported unreachable (W506) with the smallest epsilon
at which this rule funds them: ``eps(rho)`` for ``rho = (needs funded up to and including
it) / share``.

Shares are exact fractions of floats (``Fraction(x)``); each need is raised by a relative
``1e-9`` so that ``split_rho`` (which rounds each part down by a few ulps) still meets it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from fractions import Fraction

from dpql.domain import Domain
from dpql.plan.acceptance import Z, acceptance_queries, predicted_sd, tested_metric
from dpql.plan.ir import ModelRequirement, Requirement, joint_l2_sensitivity
from dpql.plan.requirements import Release, RequirementMeasures, predicted_error

AUTO_SHARE_CAP = Fraction(1, 2)  # at most this share of the release goes to post-processing
ACCEPT_SD_FRACTION = 0.125  # a test's sd at most t / 8 (its 2 sd band a quarter of t)
BOUND_TEST_SD = 0.0025  # a bound's test sd (accuracy >= 0.8: no tolerance to scale by)
MODEL_BOUND_SD = 0.01  # per-moment sd of a model requirement with a bound
NEED_MARGIN = 1.0 + 1e-9  # split_rho rounds each part down by a few ulps


@dataclass(frozen=True)
class PostSplit:
    """The chosen post-processing budget: ``share`` of the release's rho in all, ``test_share``
    of it for ``accept.test`` (both of the *release's* rho), the requirement releases
    (``releases[i].share`` of ``iproj.measure``), and for the report: each requirement's
    needed rho (``needs[r]``, NaN without a release), the tests' (``test_need``), the rho
    actually given (``given[r]``, summed over the requirement's own release) and whether the
    share was chosen by the planner (``chosen``)."""

    share: Fraction
    test_share: Fraction
    releases: tuple[Release, ...]
    needs: tuple[float, ...]
    test_need: float
    given: tuple[float, ...]
    test_given: float
    chosen: bool
    cap: Fraction
    smallest_rho: tuple[float, ...]  # total rho at which each requirement is funded whole
    weighted: bool = False

    def to_json(self) -> dict[str, object]:
        def num(x: float) -> float | None:
            return x if math.isfinite(x) else None

        return {
            "share": float(self.share),
            "chosen": self.chosen,
            "cap": float(self.cap),
            "test_share": float(self.test_share),
            "test_need_rho": num(self.test_need),
            "weighted": self.weighted,
            "requirement_need_rho": [num(x) for x in self.needs],
            "requirement_rho": [num(x) for x in self.given],
        }


def _model_target_sd(req: ModelRequirement) -> float:
    t = req.tolerance.within
    return t / Z if t is not None else MODEL_BOUND_SD


def _test_target_sd(req: ModelRequirement) -> float:
    t = req.tolerance.within
    return ACCEPT_SD_FRACTION * t if t is not None else BOUND_TEST_SD


def requirement_need(
    req: Requirement, measures: RequirementMeasures, cells: Sequence[int], n: int, domain: Domain
) -> float:
    """The rho its own release needs (module docstring); 0 without measured queries, ``inf``
    when no budget reaches it (an undefined prediction)."""
    if not cells:
        return 0.0
    l2 = joint_l2_sensitivity([measures.queries[c] for c in cells], n)
    if isinstance(req, ModelRequirement):
        s = _model_target_sd(req)
        ratio = l2 / s
        return NEED_MARGIN * ratio * ratio / 2  # inf, not OverflowError
    t = req.tolerance.within
    if t is None:
        return 0.0
    sd1 = predicted_error(req, l2 / math.sqrt(2.0), domain)  # its sd at rho = 1
    if not math.isfinite(sd1):
        return math.inf
    ratio = Z * sd1 / t
    return NEED_MARGIN * ratio * ratio  # inf, not OverflowError, for a tiny tolerance


def test_need(
    reqs: Sequence[Requirement], model_sd: Sequence[float], n: int, domain: Domain
) -> float:
    """The rho of the ``accept.test`` release that brings every model requirement's predicted
    test sd to its target (bisection on log rho; ``model_sd[i]`` is the noise sd of model
    requirement i's moments, which an ``r2`` test reuses)."""
    tests = sum(acceptance_queries(r) for r in reqs)
    if not tests:
        return 0.0
    models = [
        (r, s) for r, s in zip(reqs, model_sd, strict=True) if isinstance(r, ModelRequirement)
    ]

    def ok(rho: float) -> bool:
        # the test's own part of each sd (an r2 test also carries its reused label moments'
        # noise, which the model's release pays for)
        s_test = math.sqrt(tests) / n / math.sqrt(2 * rho)
        return all(
            predicted_sd(r, 0.0, s_test, domain) <= _test_target_sd(r)
            for r, _ in models
            if tested_metric(r) in ("accuracy", "f1", "rmse", "r2")
        )

    lo, hi = 1e-14, 1e3
    if ok(lo):
        return lo
    if not ok(hi):
        return math.inf
    a, b = math.log(lo), math.log(hi)
    for _ in range(80):
        mid = (a + b) / 2
        a, b = (a, mid) if ok(math.exp(mid)) else (mid, b)
    return NEED_MARGIN * math.exp(b)


def choose_split(
    reqs: Sequence[Requirement],
    measures: RequirementMeasures,
    *,
    rho: float,
    n: int,
    domain: Domain,
    share: float | None,
) -> PostSplit:
    """The post-processing budget for a release of ``rho`` (module docstring). ``share``: the
    spec's ``postprocess.share`` (fixed), or None for the planner's choice."""
    needs = [
        requirement_need(r, measures, c, n, domain)
        for r, c in zip(reqs, measures.index, strict=True)
    ]
    weighted = all(r.weight is not None for r in reqs) and bool(reqs)
    model_sd = [
        _model_target_sd(r) if isinstance(r, ModelRequirement) else math.inf for r in reqs
    ]
    t_need = test_need(reqs, model_sd, n, domain)
    # items: ("test", need) and one per release
    if weighted:
        rel = list(measures.releases)  # the spec's weights: shares w_r / sum(w)
        rel_need = [0.0] * len(rel)
        for r_i, c in enumerate(measures.index):
            for g, release in enumerate(rel):
                if c and tuple(c) == release.cells:
                    part = float(release.share)  # 0.0 when the weight is negligible
                    rel_need[g] = max(rel_need[g], needs[r_i] / part if part > 0 else math.inf)
                    break
        # one item: the measurement phase, as its largest requirement needs it
        items = [("measure", max(rel_need, default=0.0))]
    else:
        owners = [i for i, c in enumerate(measures.index) if c]
        rel = [Release(tuple(measures.index[i]), Fraction(1)) for i in owners]
        items = [(f"r{i}", needs[i]) for i in owners]
    if t_need > 0:
        items.append(("test", t_need))
    total_need = math.fsum(x for _, x in items)
    cap = AUTO_SHARE_CAP
    if share is not None:
        post_share = Fraction(share).limit_denominator(10**6)
        budget = float(post_share) * rho
    else:
        budget = min(total_need, float(cap) * rho)
        post_share = None  # set from what is given, below
    given = _fund(items, budget, fixed=share is not None)
    # exact shares
    test_given = given.get("test", 0.0)
    meas_given = {k: v for k, v in given.items() if k != "test"}
    if post_share is None:
        total = Fraction(math.fsum(given.values())) / Fraction(rho)
        post_share = min(total, cap) if total > 0 else Fraction(0)
    test_share = Fraction(test_given) / Fraction(rho) if test_given > 0 else Fraction(0)
    if test_share >= post_share and meas_given:
        test_share = post_share / 2  # degenerate rounding guard: never starve the measures
    if weighted:
        releases = tuple(rel)
    else:
        parts = [Fraction(meas_given.get(f"r{i}", 0.0)) for i in owners]
        tot = sum(parts, Fraction(0))
        if tot == 0:  # nothing reachable: equal parts
            parts, tot = [Fraction(1)] * len(parts), Fraction(len(parts))
        releases = tuple(
            Release(r.cells, p / tot) for r, p in zip(rel, parts, strict=True)
        )
    measure_rho = float(post_share - test_share) * rho
    per_req = [math.nan] * len(reqs)
    for release in releases:
        for i, c in enumerate(measures.index):
            if c and tuple(c) == release.cells and math.isnan(per_req[i]):
                per_req[i] = float(release.share) * measure_rho
    smallest = _smallest_rho(items, post_share if share is not None else cap, reqs, measures)
    return PostSplit(
        post_share, test_share, releases, tuple(needs), t_need, tuple(per_req),
        float(test_share) * rho, share is None, cap, smallest, weighted,
    )  # fmt: skip


def _fund(items: list[tuple[str, float]], budget: float, *, fixed: bool) -> dict[str, float]:
    """Whole needs cheapest-first while they fit; the rest share what is left in proportion to
    their needs. With a fixed budget above the needs, the surplus goes to the measurement
    releases in proportion to their needs."""
    out: dict[str, float] = {}
    left = budget
    order = sorted(items, key=lambda kv: kv[1])
    unfunded = []
    for key, need in order:
        if need <= left and math.isfinite(need):
            out[key] = need
            left -= need
        else:
            unfunded.append((key, need))
    if unfunded:
        weights = [min(need, budget) if math.isfinite(need) else budget for _, need in unfunded]
        tot = math.fsum(weights)
        for (key, _), w in zip(unfunded, weights, strict=True):
            out[key] = left * w / tot if tot > 0 else left / len(unfunded)
    elif fixed and left > 0:
        meas = [(k, v) for k, v in out.items() if k != "test"]
        tot = math.fsum(v for _, v in meas)
        if meas and tot > 0:
            for k, v in meas:
                out[k] = v + left * v / tot
        elif meas:
            for k, _ in meas:
                out[k] = left / len(meas)
        else:
            out["test"] = out.get("test", 0.0) + left
    return out


def _smallest_rho(
    items: list[tuple[str, float]],
    share: Fraction,
    reqs: Sequence[Requirement],
    measures: RequirementMeasures,
) -> tuple[float, ...]:
    """The release rho at which each requirement's release (and, for a model requirement, the
    tests) is funded whole by :func:`_fund`: the needs up to and including its own, over the
    post-processing share."""
    order = sorted(items, key=lambda kv: kv[1])
    cum: dict[str, float] = {}
    acc = 0.0
    for key, need in order:
        acc += need
        cum[key] = acc
    out = []
    s = float(share) if share > 0 else math.nan
    for i, r in enumerate(reqs):
        if isinstance(r, ModelRequirement):  # its verdict is its test's
            keys = ["test"] if "test" in cum else []
        else:
            keys = ["measure"] if "measure" in cum else ([f"r{i}"] if f"r{i}" in cum else [])
        c = max((cum[k] for k in keys), default=0.0)
        out.append(c / s if math.isfinite(c) else math.inf)
    return tuple(out)


def with_releases(measures: RequirementMeasures, split: PostSplit) -> RequirementMeasures:
    """``measures`` with the chosen releases."""
    return replace(measures, releases=split.releases)
