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
    ``AUTO_SHARE_CAP``, plus room for a pass while the share stays at most
    ``ROOM_SHARE_CAP`` (below).

What each release *needs* (rho-zCDP; every sd is ``Delta / sqrt(2 rho)`` at replace-one L2
sensitivity ``Delta``, so a need is a closed form, with no search):

* a ``corr`` / ``mean`` / ``count`` requirement: the rho at which its predicted test sd (the
  delta method at the public *planning* moments, ``estimates.predicted_error``, equal noise
  on its release's measures) is ``t / Z``: ``rho = (Z sd_1 / t)^2`` with ``sd_1`` the sd at
  rho = 1. ``Z sd <= t`` is the reachability threshold of W506 (the DP test can decide the
  tolerance). Compile's rule (``docs/postprocess.md``) passes a requirement when ``|v -
  v_noisy| + Z sd <= t`` and places each value inside the band ``v_noisy +- band (t - Z sd)``,
  so a release funded at exactly ``Z sd = t`` leaves no room: no table can pass. A decision at
  the tolerance needs room for the table, so the planner also buys ``Z sd <= (1 - PASS_ROOM)
  t``, cheapest increment first, only while the chosen share stays at most
  ``ROOM_SHARE_CAP``; the first room that does not fit whole gets what is left under the cap.
  Room is budget taken from the synthesizer, whose noise sd grows by ``1 / sqrt(1 - share)``:
  ``dpql plan`` names that cost, each requirement's planned sd and the room it leaves
  (``PostSplit.planned_sd``, :func:`synthesizer_sd_growth`). A mean of a numeric column is
  planned as compile measures it, centred at the synthetic conditional mean
  (``dpql.postprocess.centre``), which halves its need. Not with a fixed share (its
  surplus is spread anyway) nor with weights. The planning moments put every numeric
  column at the spread of the symmetric triangular distribution on its public bounds (sd =
  range / sqrt(24); ``estimates.PLANNING_SD``), not the uniform one (range / sqrt(12)): a
  correlation's sd scales as ``1 / (sd_a sd_b)``, so the uniform spread, the widest a bounded
  column plausibly has, under-funded every correlation between concentrated columns (on Adult
  the test sd of corr(age, hours_per_week) was 1.8x the planned one: 0.045 against 0.0245;
  with the triangular spread the plan predicts 0.025 and compile measures 0.023 at the real
  moments). Equal noise is what the plan assumes; compile then spreads each release's noise
  over its measures at the synthetic table's moments (``dpql.postprocess.allocation``, public),
  which only lowers the sds. The spread is a documented reference, not a bound: no spread
  assumption bounds a correlation's sd (a near-constant column makes it unbounded), and a
  worst case over a wide family (say every column with sd >= range / 8) would take several
  times the budget from the synthesizer for every table, which costs the workload (above). The
  record reports the sd actually reached (the delta method at the noisy values).
* a model requirement's moments (no delta-method statistic: they only steer the projection):
  per-measure noise sd ``t / Z`` (``MODEL_BOUND_SD`` for a bound), i.e. every moment, a
  fraction in [0, 1], resolved to the tolerance itself: ``rho = Z^2 Delta^2 / (2 t^2)``.
  A logistic ``within`` requirement (its test compares accuracies) is measured by its *pilot*
  alone (``dpql.plan.requirements.piloted``): compile fits the model on the synthetic table it
  post-processes (public), measures that model's accuracy on the real table at sd
  ``PILOT_SD_FRACTION t`` (:func:`pilot_sd`) and places the table's accuracy in its band
  (``dpql.postprocess.run``): ``rho = (1/n)^2 / (2 s_pilot^2)``. Why: the test's statistic is
  the gap between the model's accuracy on the synthetic table and on the real one, and the
  moments (a degree-2 proxy of the log-loss) do not pin that gap; the pilot's accuracy measures
  it directly.
* the tests: the largest rho any model requirement's test needs (bisection on its predicted sd,
  which also carries the label moments' noise for ``r2``).

Funding: when the whole need fits (always with a chosen share below the cap), every release gets
its need; with a fixed ``share`` larger than the need, the surplus goes to the requirement
releases in proportion to their needs (the tests never get more than they need). When the need
does not fit, releases are funded whole cheapest-first (the tests first: they are the cheapest
and without them a model requirement is never decided) and the ones left share the remainder
in proportion to their needs; those are reported unreachable (W506) with the smallest epsilon
at which this rule funds them: ``eps(rho)`` for ``rho = (needs funded up to and including it)
/ share`` (no pass room is bought then: the share is far above ``ROOM_SHARE_CAP``).

**Not re-split at compile time.** Choosing the split across requirements again after
synthesis, from the synthetic table's moments, would be sound (that table is a DP output, so
the choice is post-processing, and the total stays the plan's), but every ``iproj.measure``
event's rho would then differ from the plan's, which ``dpql verify`` checks event by event;
the equivalent that keeps the events (one joint release of all requirement measures, its noise
spread by ``allocation_scales`` across requirements as well as within them) gains little
here: with the triangular spread the plan's sds are within 10% of the ones compile reaches on
Adult, and compile already spreads the noise within each release. The post-processing share
itself can never be chosen at compile time (the synthesizer has spent the rest by then).

Shares are exact fractions of floats (``Fraction(x)``); each need is raised by a relative
``1e-9`` so that ``split_rho`` (which rounds each part down by a few ulps) still meets it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from fractions import Fraction

from dpql.domain import Domain
from dpql.ir.queries import ModelRequirement, Requirement, joint_l2_sensitivity
from dpql.plan.acceptance import Z, acceptance_queries, predicted_sd, tested_metric
from dpql.plan.estimates import predicted_error
from dpql.plan.requirements import Release, RequirementMeasures, piloted

AUTO_SHARE_CAP = Fraction(1, 2)  # at most this share of the release goes to post-processing
ACCEPT_SD_FRACTION = 0.125  # a test's sd at most t / 8 (its 2 sd band a quarter of t)
BOUND_TEST_SD = 0.0025  # a bound's test sd (accuracy >= 0.8: no tolerance to scale by)
MODEL_BOUND_SD = 0.01  # per-moment sd of a model requirement with a bound
NEED_MARGIN = 1.0 + 1e-9  # split_rho rounds each part down by a few ulps
# The share of a corr / mean / count tolerance bought as room for the table (module docstring):
# a quarter, so compile's band (half the room) is an eighth of the tolerance and the other half
# absorbs the sd's own variation between the plan's moments and the released table's.
PASS_ROOM = 0.25
# Room is bought only while the synthesizer's noise sd grows by at most this factor
# (:func:`synthesizer_sd_growth`): the workload's error follows that sd, and the room is a
# convenience on top of a decision the need already buys.
ROOM_SD_GROWTH = Fraction(21, 20)
ROOM_SHARE_CAP = 1 - 1 / (ROOM_SD_GROWTH * ROOM_SD_GROWTH)
# A logistic `within` requirement's pilot accuracy (module docstring): its noise sd as a fraction
# of the tolerance, the test's own (the pass needs |synthetic - real| + Z sd_test <= t, and the
# projected table lands within about a pilot sd of the pilot's noisy value).
PILOT_SD_FRACTION = ACCEPT_SD_FRACTION


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
    planned_sd: tuple[float, ...] = ()  # each requirement's test sd at its rho (NaN: none)

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
            "requirement_planned_sd": [num(x) for x in self.planned_sd],
        }


def _model_target_sd(req: ModelRequirement) -> float:
    """The planned noise sd of a model requirement's measures: its pilot's when it has one
    (:func:`pilot_sd`), else ``t / Z`` per moment (``MODEL_BOUND_SD`` for a bound)."""
    s = pilot_sd(req)
    if s is not None:
        return s
    t = req.tolerance.within
    return t / Z if t is not None else MODEL_BOUND_SD


def _test_target_sd(req: ModelRequirement) -> float:
    t = req.tolerance.within
    return ACCEPT_SD_FRACTION * t if t is not None else BOUND_TEST_SD


def pilot_sd(req: Requirement) -> float | None:
    """The planned noise sd of a requirement's pilot accuracy (module docstring): a logistic
    requirement whose test compares accuracies within ``t`` (``requirements.piloted``) gets
    ``PILOT_SD_FRACTION * t``; None for every other requirement (no pilot)."""
    if not piloted(req):
        return None
    assert isinstance(req, ModelRequirement) and req.tolerance.within is not None
    return PILOT_SD_FRACTION * req.tolerance.within


def requirement_need(
    req: Requirement,
    measures: RequirementMeasures,
    cells: Sequence[int],
    n: int,
    domain: Domain,
    room: float = 0.0,
) -> float:
    """The rho its own release needs (module docstring): a corr / mean / count requirement's
    ``Z sd <= (1 - room) t``; 0 without measured queries, ``inf`` when no budget reaches it
    (an undefined prediction)."""
    if not cells:
        return 0.0
    l2 = joint_l2_sensitivity([measures.queries[c] for c in cells], n)
    if isinstance(req, ModelRequirement):
        ratio = l2 / _model_target_sd(req)  # a pilot's l2 is 1/n
        return NEED_MARGIN * ratio * ratio / 2  # inf, not OverflowError
    t = req.tolerance.within
    if t is None:
        return 0.0
    sd1 = predicted_error(req, l2 / math.sqrt(2.0), domain)  # its sd at rho = 1
    if not math.isfinite(sd1):
        return math.inf
    ratio = Z * sd1 / ((1 - room) * t)
    return NEED_MARGIN * ratio * ratio  # inf, not OverflowError, for a tiny tolerance


def test_need(
    reqs: Sequence[Requirement], model_sd: Sequence[float], n: int, domain: Domain
) -> float:
    """The rho of the ``accept.test`` release that brings every model requirement's predicted
    test sd to its target (bisection on log rho; ``model_sd[i]`` is the noise sd of model
    requirement i's moments, which an ``r2`` test reuses)."""
    tests = sum(acceptance_queries(r, domain) for r in reqs)
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
    if share is None and not weighted:
        items = _with_room(items, reqs, measures, n, domain, float(ROOM_SHARE_CAP) * rho)
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
    sds = tuple(
        _planned_sd(r, measures, c, n, domain, g)
        for r, c, g in zip(reqs, measures.index, per_req, strict=True)
    )
    return PostSplit(
        post_share, test_share, releases, tuple(needs), t_need, tuple(per_req),
        float(test_share) * rho, share is None, cap, smallest, weighted, sds,
    )  # fmt: skip


def _planned_sd(
    req: Requirement,
    measures: RequirementMeasures,
    cells: Sequence[int],
    n: int,
    domain: Domain,
    rho: float,
) -> float:
    """The requirement's predicted test sd at the rho its release gets (NaN without one): a
    pilot's accuracy sd, or a corr / mean / count's delta-method sd at the planning moments."""
    if not cells or not (rho > 0) or req.tolerance.within is None:
        return math.nan
    l2 = joint_l2_sensitivity([measures.queries[c] for c in cells], n)
    if isinstance(req, ModelRequirement):
        return l2 / math.sqrt(2 * rho) if piloted(req) else math.nan
    return predicted_error(req, l2 / math.sqrt(2 * rho), domain)


def synthesizer_sd_growth(share: float) -> float:
    """What post-processing's ``share`` of a budget the synthesizer shares costs it: its noise
    sd grows by ``1 / sqrt(1 - share)`` (Gaussian noise at rho scales as ``1 / sqrt(rho)``)."""
    return 1.0 / math.sqrt(1.0 - share) if share < 1 else math.inf


def _with_room(
    items: list[tuple[str, float]],
    reqs: Sequence[Requirement],
    measures: RequirementMeasures,
    n: int,
    domain: Domain,
    limit: float,
) -> list[tuple[str, float]]:
    """``items`` with the pass room (``PASS_ROOM``) bought for the corr / mean / count
    releases, cheapest increment first, while the needs sum to at most ``limit``."""
    need = dict(items)
    spare = limit - math.fsum(need.values())
    extra = []
    for key in need:
        if not key.startswith("r"):
            continue
        i = int(key[1:])
        if isinstance(reqs[i], ModelRequirement) or reqs[i].tolerance.within is None:
            continue
        more = requirement_need(reqs[i], measures, measures.index[i], n, domain, PASS_ROOM)
        extra.append((more - need[key], key))
    for inc, key in sorted(extra):
        if not (math.isfinite(inc) and inc > 0 and spare > 0):
            continue
        # the whole room where it fits, else what is left under the limit (part of the room)
        part = min(inc, spare)
        need[key] += part
        spare -= part
    return [(key, need[key]) for key, _ in items]


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
