"""Compile-time centres of the corr / mean measures (``dpql.postprocess.centre``), each
requirement's role (``dpql.postprocess.policy.decide_roles``) and the band it is placed in."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest
from test_iproj_support import DOMAIN, ExactOracle, make_table, planned

from dpql.answers import NoisyAnswer
from dpql.domain import EncodedTable
from dpql.ir.exact import answer_all, per_row
from dpql.ir.queries import (
    CENTRE_GRID,
    CatIn,
    CentredProduct,
    CorrRequirement,
    Marginal,
    MeanRequirement,
    Moment,
    Tolerance,
    TruePred,
    joint_l2_sensitivity,
    on_centre_grid,
)
from dpql.plan.estimates import numeric_gradient, requirement_value
from dpql.plan.requirements import expand_requirements, parts_and_fn
from dpql.postprocess import run
from dpql.postprocess.centre import centred_requirement, keep_planned_l2, recentre

N = 4000
CORR = CorrRequirement("age", "hours", Tolerance(within=0.1), text="corr")
MEAN = MeanRequirement("hours", CatIn("sex", frozenset({0})), Tolerance(within=2.0), text="mean")


def _skewed(n: int, seed: int) -> EncodedTable:
    """``make_table`` with age squeezed toward its lower bound (mean ~0.25 of its range), as on
    Adult: a column mean far from the midpoint the plan centres at."""
    t = make_table(n, seed=seed)
    age = t.scaled["age"] ** 2
    col = DOMAIN["age"]
    codes = {**t.codes, "age": col.bin_of(col.lo + age * col.span)}
    return EncodedTable(t.domain, codes, {**t.scaled, "age": age})


def test_a_centred_product_has_the_sensitivity_of_its_range() -> None:
    """Per-record values over a fine grid of [0, 1]^2 (and the indicator's {0, 1}) span exactly
    the width the query declares; 0 (a record outside the kept rows) is inside the range."""
    for c, d in [(0.5, 0.5), (0.25, 0.75), (0.0, 1.0), (on_centre_grid(0.296), 0.5)]:
        u = np.union1d(np.linspace(0.0, 1.0, 257), [c, d])
        q = CentredProduct(("a", None), ("b", None), (c, d))
        v = np.multiply.outer(u - c, u - d)
        assert q.sensitivity(1).l2 == pytest.approx(v.max() - v.min(), abs=1e-12)
        assert v.min() <= 0.0 <= v.max()
        sq = CentredProduct(("a", None), ("a", None), (c, c))
        w = (u - c) ** 2
        assert sq.sensitivity(1).l2 == pytest.approx(w.max() - w.min(), abs=1e-12)
        ind = CentredProduct(("a", None), ("s", 1), (c, 0.5))
        z = np.multiply.outer(u - c, np.array([0.0, 1.0]) - 0.5)
        assert ind.sensitivity(1).l2 == pytest.approx(z.max() - z.min(), abs=1e-12)
    # the plan's midpoints: 1/(2n) for a product, 1/(4n) for a square (unchanged)
    assert CentredProduct(("a", None), ("b", None)).sensitivity(10).l2 == pytest.approx(0.05)
    assert CentredProduct(("a", None), ("a", None)).sensitivity(10).l2 == pytest.approx(0.025)


def test_centres_are_public_grid_points_and_stay_with_their_factor() -> None:
    q = CentredProduct(("b", None), ("a", None), (0.25, 0.75))
    assert q.left == ("a", None) and q.centres == (0.75, 0.25)  # sorted with its factor
    for bad in (
        lambda: CentredProduct(("a", None), ("b", None), (0.3, 0.5)),  # off the grid
        lambda: CentredProduct(("a", None), ("b", None), (1.25, 0.5)),  # outside [0, 1]
        lambda: CentredProduct(("a", None), ("s", 1), (0.5, 0.25)),  # an indicator's centre
        lambda: CentredProduct(("a", None), ("a", None), (0.25, 0.5)),  # a square, two centres
        lambda: Moment(("a", "b"), TruePred(), centre=0.25),  # a centred cross moment
    ):
        with pytest.raises(ValueError):
            bad()
    assert on_centre_grid(0.2961) == round(0.2961 / CENTRE_GRID) * CENTRE_GRID
    assert on_centre_grid(-0.1) == 0.0 and on_centre_grid(1.7) == 1.0


def test_centred_values_round_inside_their_range_on_the_real_grid() -> None:
    """Engines sum per-record values rounded to REAL_GRID (2^-20); with centres on the 2^-10
    grid every range endpoint is a grid point, so a rounded value never leaves the range the
    sensitivity is computed from."""
    t = make_table(2000, seed=9)
    c = on_centre_grid(0.3)
    q = CentredProduct(("age", None), ("hours", None), (c, on_centre_grid(0.45)))
    width = q.sensitivity(1).l2
    v = np.round(per_row(q, t)[:, 0] * 2**20) / 2**20
    corners = [(x - c) * (y - on_centre_grid(0.45)) for x, y in itertools.product((0, 1), (0, 1))]
    assert min(corners) <= v.min() and v.max() <= max(corners)
    assert max(corners) - min(corners) == width
    assert all(x * 2**20 == round(x * 2**20) for x in corners)


def test_the_value_is_the_same_and_the_first_moments_drop_out() -> None:
    """Centred at the table's means, a corr (a mean) has the same value from exact answers, and
    its derivative in the first moments (the count) is ~0: their noise no longer enters."""
    t = _skewed(20_000, seed=3)
    for req, first in ((CORR, [0, 1]), (MEAN, [1])):
        centred = centred_requirement(req, t)
        values = []
        for r in (req, centred):
            m = expand_requirements([r], DOMAIN)
            values.append(requirement_value(
                r, m.answer_map(np.concatenate(answer_all(m.queries, t))), DOMAIN))  # fmt: skip
        assert values[0] == pytest.approx(values[1], rel=1e-9, abs=1e-12)
        parts, fn, _ = parts_and_fn(centred, DOMAIN)
        g = numeric_gradient(fn, np.concatenate(answer_all(parts, t)))
        plain_parts, plain_fn, _ = parts_and_fn(req, DOMAIN)
        g0 = numeric_gradient(plain_fn, np.concatenate(answer_all(plain_parts, t)))
        assert np.abs(g[first]).max() < 0.02 * np.abs(g).max()  # ~0 (grid rounding of c)
        assert np.abs(g0[first]).max() > 0.1 * np.abs(g0).max()  # not so at the midpoints


@pytest.mark.parametrize("split", [True, False])
def test_recentring_keeps_the_plans_releases_and_sensitivities(split: bool) -> None:
    """One release per requirement (the planner's split) or one joint release: the same
    releases in the same order with the same shares, every centred query in its owner's
    release, and ``keep_planned_l2`` brings each release (any public spread) to the plan's L2
    sensitivity, the one ``dpql verify`` checks."""
    reqs = (CORR, MEAN)
    before = planned(reqs, 0.5, N).measures if split else expand_requirements(reqs, DOMAIN)
    new_reqs, m = recentre(reqs, before, _skewed(N, seed=4))
    assert [r.share for r in m.releases] == [r.share for r in before.releases]
    assert sum((r.share for r in m.releases), Fraction(0)) == 1
    assert all(any(k in r.cells for r in m.releases) for k in range(len(m.queries)))
    corr = new_reqs[0]
    assert corr.centres is not None and corr.centres[0] < 0.4  # age's mean, off the midpoint
    for r, cells in zip(new_reqs, m.index, strict=True):
        assert any(set(cells) <= set(rel.cells) for rel in m.releases), r
    rng = np.random.default_rng(0)
    scales = [rng.uniform(0.2, 2.0, len(r.cells)) for r in m.releases]
    kept = keep_planned_l2(before, m, scales, N)
    for old, new, c in zip(before.releases, m.releases, kept, strict=True):
        want = joint_l2_sensitivity([before.queries[k] for k in old.cells], N)
        got = joint_l2_sensitivity([m.queries[k] for k in new.cells], N, c.tolist())
        assert got == pytest.approx(want, rel=1e-12)


def _workload(table: EncodedTable, sd: float, seed: int = 5) -> list[NoisyAnswer]:
    """What a synthesizer measured and fitted: the table's own 1-way and 2-way answers (so the
    single moments of age and hours are held) plus noise of sd ``sd``."""
    rng = np.random.default_rng(seed)
    qs = [Marginal(("age",)), Marginal(("hours",)), Marginal(("age", "sex")),
          Marginal(("hours", "sex"))]  # fmt: skip
    return [NoisyAnswer(q, a + rng.normal(0, sd, a.shape), sd)
            for q, a in zip(qs, answer_all(qs, table), strict=True)]  # fmt: skip


@pytest.mark.parametrize("band", [0.5, 0.25])
def test_each_value_outside_its_band_lands_inside_it(band: float) -> None:
    """With the synthesizer's precise workload answers holding the table's marginals, each corr /
    mean whose value lies outside its band ``noisy +- band (t - 2 sd)`` is constrained, and its
    value on the released table lands inside the band (up to the linearisation and the
    resampling, a small fraction of the band), so its verdict passes; a narrower band (a
    policy passed explicitly) lands it nearer the noisy value."""
    from dpql.postprocess.policy import PostprocessPolicy

    n = 20_000
    real, syn = _skewed(n, seed=1), _skewed(n, seed=2)  # one population, two samples
    reqs = (CORR, MEAN)
    plan = planned(reqs, 0.002, n, share=0.5)
    policy = PostprocessPolicy(band=band)
    constrained = 0
    for draw in range(3):
        out = run.run_postprocess(plan, ExactOracle(real, seed=60 + draw), syn, seed=draw,
                                  workload=_workload(syn, 0.001), policy=policy)  # fmt: skip
        for role, a in zip(out.roles, out.acceptance, strict=True):
            assert role.role in ("inside", "constrained")
            assert role.half_width == pytest.approx(band * (a.tolerance.within - 2 * role.sd))
            if role.role == "constrained":
                constrained += 1
                assert abs(a.synthetic_after - a.real_noisy) <= 1.1 * role.half_width
                assert a.verdict == "pass"
    assert constrained >= 2  # the two samples differ by more than the band in some draws


def test_each_requirement_has_one_role() -> None:
    """``decide_roles``: a value within its band is ``inside``, one outside it ``constrained``,
    and where the noise leaves no room for a pass (``2 sd >= t``) ``no_room``, whatever the
    distance."""
    from dpql.postprocess.policy import DEFAULT_POLICY, decide_roles

    t = _skewed(20_000, seed=6)
    reqs = tuple(centred_requirement(r, t) for r in (CORR, MEAN))
    m = expand_requirements(reqs, DOMAIN)
    exact = np.concatenate(answer_all(m.queries, t))
    sigma = np.full(exact.size, 1e-4)

    def roles(noisy: np.ndarray, sd: np.ndarray) -> list[str]:
        got = decide_roles(reqs, m.index, m.queries, noisy, sd, exact, DOMAIN, DEFAULT_POLICY)
        return [r.role for r in got]

    assert roles(exact, sigma) == ["inside", "inside"]
    # the corr's cross moment well outside its band (t = 0.1): constrained; the mean not
    shifted = exact.copy()
    k = m.queries.index(next(q for q in m.queries
                             if isinstance(q, CentredProduct) and not q.square))  # fmt: skip
    shifted[k] += 0.02
    assert roles(shifted, sigma) == ["constrained", "inside"]
    # noise beyond a pass for both: no room, however far
    assert roles(shifted, np.full(exact.size, 0.05)) == ["no_room", "no_room"]


def test_a_table_that_already_passes_is_left_alone() -> None:
    """A corr already inside its band on a table with no workload answers to guard it (an
    external one): the real rows with their numeric values redrawn uniformly within their bins,
    as a generator of binned marginals decodes them, so every raw moment sits many noise sds
    from its measure while the bins are the real ones. Nothing is constrained, so the table is
    released as it came (every row once) and the verdict passes."""
    n = 20_000
    real = make_table(n, seed=1)
    rng = np.random.default_rng(3)
    scaled = dict(real.scaled)
    for c in ("age", "hours"):
        col = DOMAIN[c]
        edges, k = np.asarray(col.edges, dtype=np.float64), real.codes[c]
        x = edges[k] + rng.random(n) * (edges[k + 1] - edges[k])
        scaled[c] = (np.clip(x, col.lo, col.hi) - col.lo) / col.span
    syn = EncodedTable(DOMAIN, dict(real.codes), scaled)
    plan = planned((CORR,), 0.02, n, share=0.5)
    out = run.run_postprocess(plan, ExactOracle(real, seed=7), syn, seed=0, workload=None)
    assert [r.role for r in out.roles] == ["inside"]
    assert out.acceptance[0].verdict == "pass"
    assert out.iproj.method == "none" and out.iproj.ess == n
    assert all(np.array_equal(out.table.scaled[c], syn.scaled[c]) for c in syn.scaled)
