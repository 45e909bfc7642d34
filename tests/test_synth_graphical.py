"""``dpql.synth.aim.graphical``: the host-side parts of the aim backend's graphical models agree with
the mbi code they replace (estimates, warm-start expansion, sampling)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    mbi = pytest.importorskip("mbi")

from mbi import Domain, LinearMeasurement
from mbi.estimation import MirrorDescent

from dpql.synth.aim.graphical import (
    IndependentModel,
    balance_rows,
    expand_potentials,
    marginal_l1,
    model_marginal,
    quick_start_mirror_descent,
    sample_rows,
)

DOM = Domain(["a", "b", "c", "d"], [3, 4, 2, 5])


def _measurements(seed: int, cliques) -> list:
    """Marginals of a random table with a dependence a -> b -> c, plus noise."""
    rng = np.random.default_rng(seed)
    n = 2000
    a = rng.integers(0, 3, n)
    b = (a + rng.integers(0, 2, n)) % 4
    c = (b >= 2).astype(int) ^ (rng.random(n) < 0.1)
    d = rng.integers(0, 5, n)
    cols = {"a": a, "b": b, "c": c, "d": d}
    out = []
    for cl in cliques:
        shape = [DOM[x] for x in cl]
        counts = np.zeros(shape)
        np.add.at(counts, tuple(cols[x] for x in cl), 1)
        y = counts.ravel() + rng.normal(0, 5, counts.size)
        out.append(LinearMeasurement(y, cl, stddev=5.0))
    return out


@pytest.mark.slow
def test_quick_start_estimate_equals_mbi_mirror_descent():
    """Same steps from the same start: only the placeholder initial marginals/loss differ,
    and no step reads them."""
    meas = _measurements(0, [("a",), ("b",), ("c",), ("d",), ("a", "b")])
    ref = MirrorDescent().estimate(DOM, meas, known_total=2000.0, iters=100)
    ours = quick_start_mirror_descent().estimate(DOM, meas, known_total=2000.0, iters=100)
    for cl in ref.potentials.cliques:
        np.testing.assert_allclose(
            np.asarray(ours.potentials[cl].values),
            np.asarray(ref.potentials[cl].values),
            rtol=1e-4,
            atol=1e-4,
        )
    # warm start over a larger structure, as in the backend's rounds
    meas2 = meas + _measurements(1, [("b", "c")])
    ref2 = MirrorDescent().estimate(DOM, meas2, known_total=2000.0, iters=100, warm_start=ref)
    ours2 = quick_start_mirror_descent().estimate(
        DOM, meas2, known_total=2000.0, iters=100, warm_start=ours
    )
    for cl in [("a", "b"), ("b", "c"), ("a", "b", "c")]:
        np.testing.assert_allclose(
            model_marginal(ours2, cl), model_marginal(ref2, cl), rtol=1e-3, atol=1e-2
        )


def test_expand_potentials_is_mbi_expand():
    meas = _measurements(2, [("a",), ("b",), ("a", "b"), ("c",)])
    model = MirrorDescent().estimate(DOM, meas, known_total=2000.0, iters=50)
    new = [("a", "b", "c"), ("d",)]
    ours = expand_potentials(model, DOM, new)
    ref = model.potentials.expand(new)
    for cl in new:
        np.testing.assert_allclose(
            np.asarray(ours[cl].values), np.asarray(ref[cl].values), rtol=1e-5, atol=1e-5
        )
    zeros = expand_potentials(None, DOM, new)
    assert all(float(np.abs(np.asarray(zeros[cl].values)).max()) == 0.0 for cl in new)


def test_model_marginal_is_the_models_projection():
    meas = _measurements(3, [("a",), ("b",), ("c",), ("d",), ("a", "b"), ("b", "c")])
    model = MirrorDescent().estimate(DOM, meas, known_total=2000.0, iters=200)
    for cl in [("a", "b"), ("c", "b"), ("a",)]:
        np.testing.assert_allclose(
            model_marginal(model, cl), np.asarray(model.project(cl).datavector()), rtol=1e-3
        )
    # a clique outside the model: a and c are independent given b
    abc = model_marginal(model, ("a", "b", "c")).reshape(3, 4, 2)
    ab, bc = abc.sum(2), abc.sum(0)
    b = abc.sum((0, 2))
    np.testing.assert_allclose(
        abc, ab[:, :, None] * bc[None] / np.maximum(b, 1e-12)[None, :, None], rtol=1e-6, atol=1e-9
    )


@pytest.mark.parametrize("rows", [997, 20000])
def test_sample_rows_keeps_the_models_marginals(rows):
    """Every column's counts are its model counts rounded (|error| < 1 per cell for the first,
    within systematic-sampling error for the others); the 2-way marginals of the model's
    cliques within a multinomial tolerance."""
    meas = _measurements(4, [("a",), ("b",), ("c",), ("d",), ("a", "b"), ("b", "c")])
    model = MirrorDescent().estimate(DOM, meas, known_total=2000.0, iters=300)
    data = sample_rows(model, rows, np.random.default_rng(0))
    assert all(len(v) == rows for v in data.values())
    for cl in [("a", "b"), ("b", "c")]:
        p = model_marginal(model, cl) / float(model.total)
        counts = np.zeros([DOM[x] for x in cl])
        np.add.at(counts, tuple(data[x] for x in cl), 1)
        q = counts.ravel() / rows
        # the sampling error is at most multinomial: sd sqrt(p/rows) per cell, 5 sd bound
        assert np.all(np.abs(q - p) <= 5 * np.sqrt(p / rows) + 2 / rows)
    # a and c are independent given b in the model: not coupled by the sampler
    for x in ["a", "c", "d"]:
        p = model_marginal(model, (x,)) / float(model.total)
        q = np.bincount(data[x], minlength=DOM[x]) / rows
        assert np.all(np.abs(q - p) <= 5 * np.sqrt(p / rows) + 2 / rows)


def test_sample_rows_independent_model_rounds_exactly():
    p = {"a": np.array([0.5, 0.3, 0.2]), "b": np.array([0.9, 0.1])}
    model = IndependentModel(p, 1000)
    data = sample_rows(model, 1000, np.random.default_rng(1))
    np.testing.assert_array_equal(np.bincount(data["a"], minlength=3), [500, 300, 200])
    np.testing.assert_array_equal(np.bincount(data["b"], minlength=2), [900, 100])
    # independent columns in, independent columns out
    table = np.zeros((3, 2))
    np.add.at(table, (data["a"], data["b"]), 1)
    expected = np.outer([500, 300, 200], [0.9, 0.1])
    chi2 = float(((table - expected) ** 2 / expected).sum())
    assert chi2 < 13.8  # chi-square, 2 df, p = 0.001


@pytest.mark.slow
def test_model_marginal_on_a_loopy_model_is_mbis_variable_elimination():
    """A cycle of 3-way cliques (where one einsum over all potentials would fall back to a loop
    over the product of all domains): elimination gives mbi's own out-of-model marginals."""
    from mbi.marginal_oracles import variable_elimination

    dom = Domain(list("abcdefgh"), [4, 3, 5, 2, 3, 4, 2, 3])
    rng = np.random.default_rng(5)
    cliques = [("a", "b", "c"), ("c", "d", "e"), ("e", "f", "a"), ("b", "d", "f"),
               ("g", "h", "a"), ("g", "h", "c")]  # fmt: skip
    meas = [LinearMeasurement(rng.random(dom.size(c)) * 50, c, stddev=1.0) for c in cliques]
    model = MirrorDescent().estimate(dom, meas, known_total=1000.0, iters=50)
    for cl in [("a",), ("b", "e"), ("h", "d", "f"), ("g", "e")]:
        ref = np.asarray(variable_elimination(model.potentials, cl, 1000.0).datavector())
        np.testing.assert_allclose(model_marginal(model, cl), ref, rtol=1e-4, atol=1e-6)


def _independent_case(n: int, seed: int = 0):
    """An independent model over six columns, its rounded sample, and its 3-way targets."""
    import itertools

    rng = np.random.default_rng(seed)
    card = dict(zip("uvwxyz", [5, 2, 7, 4, 2, 6], strict=True))
    model = IndependentModel({c: rng.dirichlet(np.ones(k)) for c, k in card.items()}, n)
    data = sample_rows(model, n, np.random.default_rng(seed + 1))
    targets = [(cl, model_marginal(model, cl)) for cl in itertools.combinations(card, 3)]
    return card, data, targets


def test_balance_rows_keeps_one_way_counts_and_lowers_the_marginal_error():
    """Swaps within a column keep its counts exactly; the 3-way marginals come much closer to
    the model's expected counts than the sample's (the sampler rounds only the cliques)."""
    card, data, targets = _independent_case(1000)
    out = balance_rows(data, targets, card, np.random.default_rng(3), sweeps=16)
    for c, k in card.items():
        np.testing.assert_array_equal(np.bincount(out[c], minlength=k),
                                      np.bincount(data[c], minlength=k))  # fmt: skip
    before, after = marginal_l1(data, targets, card), marginal_l1(out, targets, card)
    assert after < 0.7 * before, (before, after)
    # the same generator state gives the same rows (the release's seed decides them)
    again = balance_rows(data, targets, card, np.random.default_rng(3), sweeps=16)
    assert all(np.array_equal(out[c], again[c]) for c in card)


def test_balance_rows_independent_in_independent_out():
    """Balancing towards an independent model's marginals leaves no coupling between columns
    (the failure of a shared rounding shift): every pair's chi-square against
    independence is below its p = 0.001 quantile, and below the unbalanced sample's on average."""
    from scipy.stats import chi2

    card, data, targets = _independent_case(3000, seed=5)
    out = balance_rows(data, targets, card, np.random.default_rng(0), sweeps=16)

    def stat(d, a, b):
        t = np.zeros((card[a], card[b]))
        np.add.at(t, (d[a], d[b]), 1)
        e = np.outer(t.sum(1), t.sum(0)) / t.sum()
        return float(((t - e) ** 2 / np.where(e > 0, e, 1)).sum())

    import itertools

    pairs = list(itertools.combinations(card, 2))
    after = [stat(out, a, b) for a, b in pairs]
    for (a, b), s in zip(pairs, after, strict=True):
        assert s < chi2.ppf(0.999, (card[a] - 1) * (card[b] - 1)), (a, b, s)
    assert np.mean(after) < np.mean([stat(data, a, b) for a, b in pairs])


def test_balance_rows_budget_and_no_op_cases():
    """A proposal budget below one pass still keeps the counts; no sweeps, no targets of two or
    more columns, or a single row return the rows unchanged."""
    card, data, targets = _independent_case(500)
    out = balance_rows(data, targets, card, np.random.default_rng(0), sweeps=4,
                       max_proposals=200)  # fmt: skip
    for c, k in card.items():
        np.testing.assert_array_equal(np.bincount(out[c], minlength=k),
                                      np.bincount(data[c], minlength=k))  # fmt: skip
    assert marginal_l1(out, targets, card) <= marginal_l1(data, targets, card)
    assert balance_rows(data, targets, card, np.random.default_rng(0), sweeps=0) is data
    ones = [(cl[:1], model_marginal(IndependentModel({"u": np.ones(5)}, 500), cl[:1]))
            for cl, _ in targets[:1]]  # fmt: skip
    assert balance_rows(data, ones, card, np.random.default_rng(0), sweeps=4) is data


def test_greedy_order_is_mbis():
    """The bit-mask elimination order is mbi's ``junction_tree.greedy_order`` on random
    scopes, cardinalities and kept cliques (ties included)."""
    import random

    from mbi import Domain, junction_tree

    from dpql.synth.aim.junction import greedy_order

    rng = random.Random(0)
    for _ in range(200):
        d = rng.randint(2, 12)
        names = [f"c{i}" for i in range(d)]
        cards = [rng.randint(2, 9) for _ in names]
        scopes = [tuple(rng.sample(names, rng.randint(1, min(3, d))))
                  for _ in range(rng.randint(1, 15))]  # fmt: skip
        kept = tuple(rng.sample(names, rng.randint(1, min(3, d))))
        elim = [a for a in names if a not in kept]
        ours = greedy_order(dict(zip(names, cards, strict=True)), [*scopes, kept], elim)
        theirs, _ = junction_tree.greedy_order(Domain(names, cards), [*scopes, kept], elim=elim)
        assert ours == theirs


def test_junction_cells_is_mbis_model_size():
    """The bit-mask junction-tree size is mbi's ``hypothetical_model_size`` (in cells) on random
    cliques and cardinalities, trees (no fill) and forests included, and its maximal cliques
    cover every clique."""
    import random

    from mbi import Domain, junction_tree

    from dpql.synth.aim.junction import junction_cells

    rng = random.Random(0)
    for trial in range(300):
        d = rng.randint(1, 12)
        names = [f"c{i}" for i in range(d)]
        cards = [rng.randint(2, 9) for _ in names]
        if trial % 3 == 0 and d > 1:  # a random tree over all columns
            order = rng.sample(names, d)
            cliques = [(order[i], order[rng.randrange(i)]) for i in range(1, d)]
        else:
            cliques = [tuple(rng.sample(names, rng.randint(1, min(3, d))))
                       for _ in range(rng.randint(1, 12))]  # fmt: skip
        cells, top = junction_cells(dict(zip(names, cards, strict=True)), cliques)
        mb = junction_tree.hypothetical_model_size(Domain(names, cards), cliques)
        assert cells * 8 / 2**20 == pytest.approx(mb, rel=1e-12)
        for cl in cliques:
            mask = sum(1 << names.index(c) for c in cl)
            assert any(mask & t == mask for t in top)


def _x64_mirror_descent(meas, iters, warm=None):
    import jax

    with jax.enable_x64(True):
        model = MirrorDescent().estimate(DOM, meas, known_total=2000.0, iters=iters,
                                         warm_start=warm)  # fmt: skip
        return [np.asarray(model_marginal(model, m.clique)) for m in meas], model


@pytest.mark.parametrize(
    "cliques",
    [
        [("a",), ("b",), ("c",), ("d",), ("a", "b")],
        [("a",), ("d",), ("b", "a"), ("c", "b"), ("a", "c"), ("d", "c", "b")],  # loopy, 3-way
    ],
)
def test_host_estimate_is_mbis_mirror_descent(cliques):
    """The host fit runs mbi's steps (Armijo mirror descent, HUGIN marginals, the same
    parameterisation): against mbi in float64 from the same start, and warm-started from an
    earlier fit, the marginals agree; the fit also lowers the loss from its start."""
    from dpql.synth.aim.hostfit import HostProgram, host_estimate, steps

    meas = _measurements(3, cliques)
    ref, ref_model = _x64_mirror_descent(meas, 120)
    program = HostProgram(DOM, meas)
    assert steps(120) == 150
    ours = host_estimate(program, 2000.0, 120)
    for m, r in zip(meas, ref, strict=True):
        np.testing.assert_allclose(model_marginal(ours, m.clique), r, rtol=1e-6, atol=1e-6)
    assert [tuple(c) for c in ours.cliques] == [tuple(c) for c in ref_model.cliques]
    start = program.loss_and_grad(program.marginals(program.zeros(), 2000.0))[0]
    assert program.loss_and_grad(program.marginals(program.to_host(ours.potentials), 2000.0))[0] < start
    # warm start: more measurements, from the first fit (mbi's expand, then the same steps)
    more = meas + _measurements(4, [("b", "d")])
    ref2, _ = _x64_mirror_descent(more, 60, warm=ref_model)
    ours2 = host_estimate(HostProgram(DOM, more), 2000.0, 60, warm=ours)
    for m, r in zip(more, ref2, strict=True):
        np.testing.assert_allclose(model_marginal(ours2, m.clique), r, rtol=1e-5, atol=1e-4)


def test_fits_run_on_the_host_only_below_the_work_bound():
    from dpql.synth.aim import hostfit

    program = hostfit.HostProgram(DOM, _measurements(0, [("a", "b"), ("c", "d")]))
    assert program.cells == 3 * 4 + 2 * 5
    assert hostfit.fits_on_host(program, 1000)
    limit = hostfit.HOST_FIT_MAX_WORK // program.cells
    assert hostfit.fits_on_host(program, limit - hostfit.BLOCK)
    assert not hostfit.fits_on_host(program, limit + hostfit.BLOCK)


def test_host_sums_and_spreads_are_numpys():
    """The host fit's matrix-product sums and broadcasts (``hostfit._Sum``, ``_Spread``) equal
    numpy's ``sum`` and broadcasting on random shapes and axis subsets (size-1 axes, all or
    no axes summed included)."""
    from dpql.synth.aim.hostfit import _Spread, _Sum

    rng = np.random.default_rng(0)
    for _ in range(300):
        shape = [int(n) for n in rng.choice([1, 2, 3, 5, 9, 16], size=rng.integers(1, 6))]
        keep = [bool(k) for k in rng.random(len(shape)) < 0.5]
        axes = tuple(i for i, k in enumerate(keep) if not k)
        x = rng.random(shape)
        np.testing.assert_allclose(_Sum(shape, keep, x.dtype)(x), x.sum(axis=axes), rtol=1e-12)
        sub = rng.random([n for n, k in zip(shape, keep, strict=True) if k])
        spread = _Spread(shape, keep, x.dtype)
        bshape = [n if k else 1 for n, k in zip(shape, keep, strict=True)]
        want = x * sub.reshape(bshape)
        got = (x.reshape(spread.shape) * spread(sub)).reshape(shape)
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_host_marginals_equal_log_space_passing():
    """The host's HUGIN passing on scaled tables (sums and broadcasts as matrix products, tables
    rewritten in place) gives the marginals of the same passing in log space, twice running
    (the tables are reused), and where potentials hundreds of nats apart leave a clique
    without mass it falls back to log space."""
    from dpql.synth.aim.hostfit import HostProgram

    cliques = [("a",), ("d",), ("b", "a"), ("c", "b"), ("a", "c"), ("d", "c", "b")]
    program = HostProgram(DOM, _measurements(5, cliques))
    rng = np.random.default_rng(0)
    theta = [rng.normal(0, 3, t.shape) for t in program.zeros()]
    ref = program.log_marginals(theta, 2000.0)
    for _ in range(2):
        for ours, want in zip(program.marginals(theta, 2000.0), ref, strict=True):
            np.testing.assert_allclose(ours, want, rtol=1e-9, atol=1e-9)
    # two cells 2000 nats above the rest, in cliques whose overlap they do not share
    far = [t.copy() for t in theta]
    far[0][0] += 2000.0
    far[1][-1, -1] += 2000.0
    want = program.log_marginals(far, 2000.0)
    calls = []
    log_space = program.log_marginals
    program.log_marginals = lambda *args: calls.append(args) or log_space(*args)
    for ours, w in zip(program.marginals(far, 2000.0), want, strict=True):
        np.testing.assert_allclose(ours, w, rtol=1e-9, atol=1e-9)
    assert len(calls) == 1


def test_junction_cells_each_is_junction_cells_per_candidate():
    """The batched size filter (shared graphs, candidates inside the base graph) gives each
    candidate's own :func:`junction_cells`."""
    import itertools
    import random

    from dpql.synth.aim.junction import junction_cells, junction_cells_each

    rng = random.Random(1)
    for _ in range(40):
        d = rng.randint(2, 10)
        card = {f"c{i}": rng.randint(2, 9) for i in range(d)}
        names = list(card)
        base = [tuple(rng.sample(names, rng.randint(1, 2))) for _ in range(rng.randint(0, 8))]
        extra = [*itertools.combinations(names, 2), *itertools.combinations(names, 3)]
        got = junction_cells_each(card, base, extra)
        assert got == [junction_cells(card, [*base, cl])[0] for cl in extra]
