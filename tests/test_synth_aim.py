"""The graphical-model backend (``method: aim``) and ``method: auto``.

* aim's plan lines are exactly the ledger events of a run on a small generated table;
* its plan is data-free and imports neither mbi nor JAX;
* auto picks by the documented rules (``dpql.synth.auto``) and says why.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import yaml

from dpql.plan.planner import build_plan
from dpql.spec.load import load_spec
from dpql.synth.aim.plan import (
    ABUNDANT_PAIR_L1,
    INIT_SHARE_MAX,
    INIT_SHARE_MIN,
    INIT_SHARE_ONE_MARGINAL,
    ONE_WAY_L1_TARGET,
    PAIR_L1_TARGET,
    default_schedule,
)

ROOT = Path(__file__).resolve().parents[1]


def _spec(tmp_path: Path, synthesizer: str, workload: str = "marginals(2)") -> Path:
    rng = np.random.default_rng(0)
    n = 600
    a = rng.integers(0, 3, n)
    b = (a + rng.integers(0, 2, n)) % 3
    df = pd.DataFrame(
        {
            "a": np.array(["x", "y", "z"])[a],
            "b": np.array(["p", "q", "r"])[b],
            "c": rng.integers(0, 2, n).astype(str),
            "age": rng.integers(18, 80, n),
        }
    )
    data = tmp_path / "t.csv"
    df.to_csv(data, index=False)
    spec = f"""dpql: 1
name: aim-small
data:
  path: {data}
  rows: {n}
schema:
  a: {{type: categorical, values: [x, y, z]}}
  b: {{type: categorical, values: [p, q, r]}}
  c: {{type: categorical, values: ["0", "1"]}}
  age: {{type: numeric, min: 18, max: 80, bins: 4}}
privacy:
  epsilon: 2.0
  delta: 1e-7
workload:
  - {workload}
synthesizer:
{synthesizer}
output:
  path: out/t.csv
  provenance: out/t.provenance.json
"""
    path = tmp_path / "t.release.yaml"
    path.write_text(spec)
    return path


AIM_SMALL = """  method: aim
  rows: 600
  options: {rounds: 2, per_round: 2, iters: 20, final_iters: 20}"""


@pytest.mark.slow
def test_aim_plan_lines_are_the_ledger_events_of_a_run(tmp_path):
    from dpql.pipeline import compile_release

    path = _spec(tmp_path, AIM_SMALL)
    plan = build_plan(load_spec(path))
    lines = [ln for ln in plan.table.lines if ln.phase.startswith("aim.")]
    # the spanning forest of the 4 columns' pairs: 3 one-at-a-time selections and one release;
    # then per round: 2 one-at-a-time selections, then one release of both picks
    assert [(ln.phase, ln.mechanism) for ln in lines] == [("aim.init", "gaussian")] + [
        ("aim.tree", m) for m in ["gumbel_top_k"] * 3 + ["gaussian"]
    ] + [
        (f"aim.round[{i}]", m) for i in range(2) for m in ["gumbel_top_k"] * 2 + ["gaussian"]
    ]
    assert sum(ln.rho_per_release for ln in lines) <= plan.budget.rho * (1 + 1e-12)
    res = compile_release(path, seed=0)
    events = [e for e in res.record["privacy"]["events"] if e["phase"].startswith("aim.")]
    assert len(events) == len(lines)
    for e, ln in zip(events, lines, strict=True):
        assert e["phase"] == ln.phase
        assert e["mechanism"] == ln.mechanism
        assert math.isclose(e["rho"], ln.rho_per_release, rel_tol=1e-9)
    synth = pd.read_csv(res.table_path)
    assert len(synth) == 600 and set(synth.columns) == {"a", "b", "c", "age"}
    assert synth["age"].between(18, 80).all()
    synthesizer = res.record["synthesizer"]
    assert len(synthesizer["selected"]) == 3 + 4  # the forest's 3 edges, 2 rounds x 2 marginals
    forest = synthesizer["spanning_forest"]
    assert forest == synthesizer["selected"][:3] and synthesizer["picks_per_round"] == [3, 2, 2]
    assert {c for pair in forest for c in pair} == {"a", "b", "c", "age"}  # a tree: all covered
    # the data has no empty cell, but a column's noisy null share passes 2 sd with probability
    # 0.023 (the release's DP noise is not seeded): every other column is fitted without its
    # null cell and has no empty cell in the table; that no column is has probability 0.023^4
    closed = synthesizer["fitted_without_null_cell"]
    assert closed and set(closed) <= {"a", "b", "c", "age"} and closed == sorted(closed)
    assert not synth[closed].isna().any().any()
    assert synthesizer["fits"] == ["host", "host"]  # the forest's model is closed-form
    from dpql.cli import main

    assert main(["verify", str(res.record_path), "--synthetic", str(res.table_path)]) == 0


@pytest.mark.slow
def test_fits_above_the_host_bound_run_mbis_compiled_program(tmp_path, monkeypatch):
    from dpql.pipeline import compile_release
    from dpql.synth.aim import hostfit

    monkeypatch.setattr(hostfit, "HOST_FIT_MAX_WORK", 0)
    res = compile_release(_spec(tmp_path, AIM_SMALL), seed=0)
    assert res.record["synthesizer"]["fits"] == ["xla", "xla"]
    assert len(pd.read_csv(res.table_path)) == 600


@pytest.mark.slow
def test_auto_release_verifies(tmp_path):
    from dpql.cli import main
    from dpql.pipeline import compile_release

    res = compile_release(_spec(tmp_path, "  method: auto\n  rows: 600"), seed=0)
    assert res.record["synthesizer"]["method"] == "auto"
    assert res.record["synthesizer"]["chosen"] == "aim"
    assert main(["verify", str(res.record_path), "--synthetic", str(res.table_path)]) == 0


@pytest.mark.slow
def test_aim_and_auto_plans_import_neither_mbi_nor_jax(tmp_path):
    for synth in (AIM_SMALL, "  method: auto\n  rows: 600"):
        path = _spec(tmp_path, synth)
        code = (
            "import sys\n"
            "from dpql.plan.planner import build_plan\n"
            "from dpql.spec.load import load_spec\n"
            f"build_plan(load_spec({str(path)!r}))\n"
            "bad = [m for m in sys.modules if m.split('.')[0] in ('jax', 'mbi', 'optax')]\n"
            "assert not bad, bad\n"
        )
        subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_default_schedule_rule():
    """The public rule (dpql.synth.aim.plan.default_schedule) on the suite's shapes."""
    # a large table with a generous budget: 1-way noise is cheap, 15 marginals in 4 rounds
    big = default_schedule([15] * 15, [225] * 105, 32_561, 0.0149, 0.1)
    assert big.init_share == INIT_SHARE_MIN and big.one_way_l1 <= ONE_WAY_L1_TARGET
    assert (big.rounds, big.per_round) == (4, 4) and big.pair_l1 <= PAIR_L1_TARGET
    # 1,000 rows at epsilon 1: more on the 1-way release, and only as many marginals as the
    # noise leaves informative (the median pair's expected noise L1 within the target)
    bn1k = [5, 2, 10, 6, 2, 5, 10, 10, 4, 2, 8]  # the suite's 1,000-row table's cardinalities
    small = default_schedule(bn1k, [a * b for a, b in itertools.combinations(bn1k, 2)], 1000,
                             0.0244, 0.1)  # fmt: skip
    assert INIT_SHARE_MIN < small.init_share <= INIT_SHARE_MAX
    assert small.rounds * small.per_round < 11 and small.pair_l1 <= PAIR_L1_TARGET
    # where even one marginal is that noisy, one is still measured, and the 1-way release
    # gets the larger share
    tiny = default_schedule([50] * 4, [2500] * 6, 100, 0.001, 0.1)
    assert (tiny.rounds, tiny.per_round) == (1, 1) and tiny.init_share == INIT_SHARE_ONE_MARGINAL
    # abundant signal (the median pair's noise tiny even split 16 ways): 16 marginals
    # whatever the number of columns
    rich = default_schedule([5] * 8, [25] * 28, 1_000_000, 0.1, 0.1)
    assert rich.rounds * rich.per_round == 16 and rich.pair_l1 <= ABUNDANT_PAIR_L1
    # never more marginals than candidates; a spec's init_share is kept
    few = default_schedule([3, 3], [9], 10_000, 1.0, 0.1, init_share=0.5)
    assert (few.rounds, few.per_round, few.init_share) == (1, 1, 0.5)


def test_auto_picks_aim_for_marginals_and_rap_for_thresholds(tmp_path, capsys):
    from dpql.cli import main

    path = _spec(tmp_path, "  method: auto\n  rows: 600")
    plan = build_plan(load_spec(path))
    assert plan.method == "auto" and plan.synth.options["chosen"] == "aim"
    assert plan.table.lines[0].phase == "aim.init"
    assert main(["plan", str(path), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["auto"]["chosen"] == "aim" and "marginal" in out["auto"]["reason"]
    share = plan.synth.options["init_share"]
    assert f"{share:.0%} of the budget on the 1-way marginals" in out["auto"]["reason"]

    path = _spec(tmp_path, "  method: auto\n  rows: 600", workload="range(age) by a")
    plan = build_plan(load_spec(path))
    assert plan.synth.options["chosen"] == "rap"
    assert "threshold" in plan.synth.options["reason"]
    assert any(ln.phase.startswith("rap.") for ln in plan.table.lines)


@pytest.mark.parametrize("bad", ["{rounds: 0}", "{select_share: 1.5}", "{nope: 1}"])
def test_aim_options_are_checked(tmp_path, bad):
    from dpql.diagnostics import DiagnosticError

    path = _spec(tmp_path, f"  method: aim\n  rows: 600\n  options: {bad}")
    with pytest.raises(DiagnosticError):
        load_spec(path)


def test_picks_in_one_round_share_no_column_pair():
    from dpql.synth.aim.plan import overlaps, select_parts

    assert overlaps(("a", "b", "c"), ("b", "c", "d")) and overlaps(("a", "b"), ("a", "b", "c"))
    assert not overlaps(("a", "b", "c"), ("c", "d", "e")) and not overlaps(("a", "b"), ("b", "c"))
    parts = select_parts(0.3, 7)
    assert len(parts) == 7 and sum(parts) <= 0.3 and max(parts) - min(parts) < 1e-12


def test_no_method_means_auto(tmp_path):
    path = _spec(tmp_path, "  rows: 600")
    plan = build_plan(load_spec(path))
    assert plan.method == "auto" and plan.synth.options["chosen"] == "aim"
    assert load_spec(path).model.synthesizer.method == "auto"


def test_pool_rare_shrinks_noise_not_signal():
    """Empirical-Bayes pooling of rare 1-way cells: where the rare cells' spread is the noise's,
    it pools them (and cuts their squared error); where their true counts differ by more than
    the noise, it pools less; common cells, or fewer than three rare ones, are left alone."""
    from dpql.synth.aim.program import pool_rare

    rng = np.random.default_rng(0)
    sigma = 0.01
    truth = np.r_[0.5, 0.42, np.full(8, 0.01)]  # 8 rare cells at 1 sigma (threshold 3 sigma)
    raw_err, pooled_err = 0.0, 0.0
    for _ in range(400):
        y = truth + rng.normal(0, sigma, truth.size)
        out = pool_rare(y, sigma)
        np.testing.assert_array_equal(out[:2], y[:2])
        raw_err += float(((y[2:] - truth[2:]) ** 2).sum())
        pooled_err += float(((out[2:] - truth[2:]) ** 2).sum())
    # raw: 8 sigma^2 per draw; pooled: about sigma^2 (the mean's) plus the shrinkage's slack
    assert pooled_err < 0.4 * raw_err
    # a spread well beyond the noise is shrunk less than one at the noise's level
    same = np.r_[0.7, 0.10, 0.12, 0.08, 0.11]  # sd 0.017 against noise 0.06
    wide = np.r_[0.4, 0.0, 0.1, 0.2, 0.3]  # sd 0.13 against noise 0.11
    assert np.ptp(pool_rare(same, 0.06)[1:]) == pytest.approx(0.0)
    out = pool_rare(wide, 0.11)
    assert out[1:].mean() == pytest.approx(wide[1:].mean())
    # shrink factor tau^2 / (sigma^2 + tau^2) = 0.0046 / 0.0167 = 0.27
    assert np.ptp(out[1:]) == pytest.approx(0.274 * np.ptp(wide[1:]), rel=0.01)
    two = np.r_[0.6, 0.0, 0.01, 0.39]
    np.testing.assert_array_equal(pool_rare(two, 0.02), two)  # two rare cells: unchanged


def test_model_size_cap_from_the_machine(tmp_path, monkeypatch):
    """Unset ``max_model_size`` is 10 MB per core within [20, 80] MB and at most 1/32 of the
    memory limit; the plan (and so the record's options) carries the cap in use; a spec's own
    value wins."""
    from dpql.plan.resources import MEMORY_LIMIT_ENV
    from dpql.synth.aim import plan as aim

    gib = 2**30
    assert aim.machine_model_cap(cpus=1, memory_bytes=8 * gib) == 20.0
    assert aim.machine_model_cap(cpus=2, memory_bytes=8 * gib) == 20.0
    assert aim.machine_model_cap(cpus=4, memory_bytes=8 * gib) == 40.0
    assert aim.machine_model_cap(cpus=64, memory_bytes=8 * gib) == 80.0
    assert aim.machine_model_cap(cpus=64, memory_bytes=gib // 2) == 16.0
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(6)), raising=False)
    monkeypatch.setenv(MEMORY_LIMIT_ENV, str(8 * gib))
    # few steps: the fits' work allows more than the machine's cap
    few = "  method: aim\n  rows: 600\n  options: {iters: 5, final_iters: 10}"
    plan = build_plan(load_spec(_spec(tmp_path, few)))
    assert plan.synth.options["max_model_size"] == 60.0
    assert plan.synth.config[1].max_model_size == 60.0  # what the run filters with
    fixed = _spec(tmp_path, "  method: aim\n  rows: 600\n  options: {max_model_size: 5}")
    assert build_plan(load_spec(fixed)).synth.options["max_model_size"] == 5.0


def test_balancer_targets_are_the_workload_marginals():
    """The row balancer's targets are the candidates inside no other: the workload's own
    marginals, not their sub-marginals."""
    from dpql.ir.queries import Marginal
    from dpql.synth.aim.plan import candidates, maximal

    cols = ("a", "b", "c", "d", "e")
    cands = candidates([Marginal(("a", "b", "c")), Marginal(("c", "d")), Marginal(("b", "c"))],
                       cols)  # fmt: skip
    assert set(maximal(cands, cols)) == {("a", "b", "c"), ("c", "d")}
    pairs = candidates([], cols)  # no marginal in the workload: every pair
    assert maximal(pairs, cols) == list(pairs)


class _FirstOrRandomOracle:
    """A stand-in for the measurement oracle's selection: a seeded pick from the offered pool
    (any pick must keep the forest a forest), recording what each call offered."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.pools: list[list[tuple[str, ...]]] = []

    def select(self, queries, answers, k, rho, **_):
        self.pools.append([q.columns for q in queries])
        return [int(self.rng.integers(len(queries)))]


def _plan(columns, queries, rho, n, cards, **options):
    from dpql.spec.models import AimOptions
    from dpql.synth.aim.plan import plan_aim

    return plan_aim(columns, queries, rho, n, AimOptions.from_mapping(options), cards)


@pytest.mark.parametrize("seed", range(5))
def test_every_column_is_in_a_measured_pair_when_the_budget_allows(seed):
    from dpql.ir.queries import Marginal
    from dpql.synth.aim.graphical import IndependentModel
    from dpql.synth.aim.program import FitDomain, _pick_forest

    cols = tuple("abcdefghij")
    cards = [3, 4, 2, 5, 3, 6, 2, 4, 3, 2]
    s = _plan(cols, [Marginal(cols[:3]), Marginal(cols[2:])], 0.5, 50_000, cards)
    assert s.tree == len(cols) - 1 and s.picks(0) == s.tree and s.phase(0) == "aim.tree"
    rng = np.random.default_rng(seed)
    model = IndependentModel({c: rng.random(k) + 0.1 for c, k in zip(cols, cards, strict=True)},
                             50_000)  # fmt: skip
    oracle = _FirstOrRandomOracle(seed)
    fit = FitDomain(SimpleNamespace(card=dict(zip(cols, cards, strict=True)).get), cols, ())
    forest = _pick_forest(oracle, s, model, s.rounds[0][0], s.round_sigma(0), fit)
    assert len(forest) == len(set(forest)) == len(cols) - 1
    assert {c for pair in forest for c in pair} == set(cols)  # every column measured in a pair
    # a spanning tree: every pick joined two components (no cycle), so it is connected
    from dpql.synth.aim.plan import spanning_picks

    assert spanning_picks(cols, forest) == len(cols) - 1
    assert all(len(pool) >= 1 for pool in oracle.pools) and len(oracle.pools) == s.tree


def test_the_forest_is_planned_from_public_facts_and_only_where_affordable():
    from dpql.ir.queries import Marginal
    from dpql.synth.aim.plan import budget_lines, spanning_picks

    cols = ("a", "b", "c", "d", "e")
    # the workload's pairs join {a, b, c} and {d, e}: a forest of 3 edges, 2 components
    assert spanning_picks(cols, [("a", "b"), ("b", "c"), ("a", "c"), ("d", "e")]) == 3
    s = _plan(cols, [Marginal(("a", "b", "c")), Marginal(("d", "e"))], 1.0, 100_000, [4] * 5)
    assert s.tree == 3 and set(s.tree_pairs) == {("a", "b"), ("a", "c"), ("b", "c"), ("d", "e")}
    lines = budget_lines(s)
    tree_lines = [ln for ln in lines if ln.phase == "aim.tree"]
    assert [ln.mechanism for ln in tree_lines] == ["gumbel_top_k"] * 3 + ["gaussian"]
    assert sum(ln.rho_per_release for ln in lines) <= 1.0 * (1 + 1e-12)
    # a budget that affords fewer pairs than the forest needs: no forest (the AIM schedule)
    poor = _plan(cols, [Marginal(cols)], 1e-6, 1_000, [4] * 5)
    assert poor.tree == 0 and all(ln.phase != "aim.tree" for ln in budget_lines(poor))
    # and the option turns it off
    assert _plan(cols, [Marginal(cols)], 1.0, 100_000, [4] * 5, tree=False).tree == 0


def test_the_forest_takes_at_most_half_of_the_marginals_the_budget_affords():
    from dpql.ir.queries import Marginal
    from dpql.synth.aim.plan import FOREST_SHARE_MAX, default_schedule

    cols, cards = ("a", "b", "c", "d", "e"), [4] * 5
    seen = set()
    for rho in np.geomspace(1e-5, 1e-2, 60):
        s = _plan(cols, [Marginal(cols)], float(rho), 10_000, cards)
        affordable = default_schedule(
            cards, [16] * 10, 10_000, float(rho), 0.1, None, 26
        ).affordable
        forest = affordable >= (len(cols) - 1) / FOREST_SHARE_MAX
        assert (s.tree == len(cols) - 1) == forest, (rho, affordable, s.tree)
        seen.add((forest, affordable >= len(cols) - 1))
    # the grid covers no pair, pairs for the forest alone, and pairs for it and as many besides
    assert seen == {(False, False), (False, True), (True, True)}


def test_the_forest_runs_where_its_edges_noise_is_small_against_n_whatever_the_cells():
    """Pairs of many declared cells crowd the forest out by the budget's count of affordable
    marginals; where each edge's noise sd is still at most 1/FOREST_SNR_MIN of n (most of
    those cells are rare and merged), the forest runs anyway, with the adaptive picks the
    budget affords beside it (an edge costing ``tree_weight`` of a marginal)."""
    from dpql.ir.queries import Marginal
    from dpql.synth.aim.plan import FOREST_SHARE_MAX, FOREST_SNR_MIN, default_schedule

    cols, n = ("a", "b", "c", "d", "e"), 100_000
    seen = set()
    for cards in ([4] * 5, [40] * 5):
        for rho in np.geomspace(1e-5, 1e-2, 40):
            s = _plan(cols, [Marginal(cols)], float(rho), n, cards)
            d = default_schedule(cards, [cards[0] ** 2] * 10, n, float(rho), 0.1, None, 26)
            crowded = len(cols) - 1 > FOREST_SHARE_MAX * d.affordable
            if s.tree:
                snr = n * math.sqrt(s.rounds[0][1] / s.tree)
                assert not crowded or snr >= FOREST_SNR_MIN, (cards, rho)
                m = max(1, min(d.rounds * d.per_round, math.floor(d.affordable - 0.5 * s.tree)))
                r = max(1, min(m, 3))  # the forest's round takes the first of at most 4
                assert len(s.rounds) == 1 + r
                assert {s.picks(i) for i in range(1, len(s.rounds))} == {max(1, round(m / r))}
            seen.add((cards[0], crowded, bool(s.tree)))
    # small pairs: the affordable count decides; large ones: a crowded forest runs where its
    # edges' noise is small, and not where it is large
    assert (4, True, True) not in seen and (4, False, True) in seen
    assert {(40, True, False), (40, True, True)} <= seen


def test_the_forest_offers_pairs_that_merged_cells_make_quiet():
    """A pair the plan leaves out of the forest's pairs (its declared cells would swamp it in
    noise) is offered to the forest where merged rare cells leave it few enough cells."""
    from dpql.ir.queries import Marginal
    from dpql.synth.aim.graphical import IndependentModel
    from dpql.synth.aim.program import FitDomain, _pick_forest

    cols, cards = ("a", "b", "c"), [50, 50, 2]
    s = _plan(cols, [Marginal(cols)], 1e-4, 50_000, cards, rounds=1, per_round=1, init_share=0.2)
    assert s.tree == 2 and ("a", "b") not in s.tree_pairs  # 2,500 declared cells
    card = dict(zip(cols, cards, strict=True)).get
    rare = {"a": np.arange(2, 50), "b": np.arange(2, 50)}  # two kept cells and one merged
    model = IndependentModel({c: np.ones(k) for c, k in zip(cols, cards, strict=True)}, 50_000)
    offered = []
    for merged in (None, rare):
        oracle = _FirstOrRandomOracle(0)
        fit = FitDomain(SimpleNamespace(card=card), cols, (), merged)
        _pick_forest(oracle, s, model, s.rounds[0][0], s.round_sigma(0), fit)
        offered.append(("a", "b") in oracle.pools[0])
    assert offered == [False, True]


def test_the_forests_closed_form_model_reproduces_consistent_pair_marginals():
    from mbi import Domain

    from dpql.synth.aim.graphical import model_marginal, tree_model

    rng = np.random.default_rng(3)
    cards = {"a": 3, "b": 4, "c": 2, "d": 5, "e": 3}
    dom = Domain(list(cards), list(cards.values()))
    # a chain a - b - c and a separate edge d - e, drawn as a Bayesian network
    pa = rng.dirichlet(np.ones(3))
    b_a, c_b = rng.dirichlet(np.ones(4), 3), rng.dirichlet(np.ones(2), 4)
    pd_, e_d = rng.dirichlet(np.ones(5)), rng.dirichlet(np.ones(3), 5)
    ab = pa[:, None] * b_a
    bc = ab.sum(0)[:, None] * c_b
    de = pd_[:, None] * e_d
    one = {"a": pa, "b": ab.sum(0), "c": bc.sum(0), "d": pd_, "e": de.sum(0)}
    # pairs in either column order, as measured
    pairs = {("a", "b"): ab.ravel(), ("c", "b"): bc.T.ravel(), ("d", "e"): de.ravel()}
    model = tree_model(dom, one, pairs, 1000)
    assert sorted(model.cliques) == sorted(pairs)
    for cl, y in pairs.items():
        np.testing.assert_allclose(model_marginal(model, cl), 1000 * y, rtol=1e-5)  # float32
    # the components are independent in the model
    np.testing.assert_allclose(model_marginal(model, ("a", "e")),
                               1000 * np.outer(pa, one["e"]).ravel(), rtol=1e-5)  # fmt: skip


def test_a_split_of_phases_aim_does_not_have_is_refused(tmp_path):
    """aim has no ``privacy.split`` phases: a split is a located E108, not a crash."""
    from dpql.diagnostics import DiagnosticError

    path = _spec(tmp_path, "  method: aim\n  rows: 600")
    path.write_text(
        path.read_text().replace("  delta: 1e-7\n", "  delta: 1e-7\n  split: {selection: 1.0}\n")
    )
    with pytest.raises(DiagnosticError) as err:
        build_plan(load_spec(path))
    assert [d.code for d in err.value.diagnostics] == ["E108"]


def test_the_schedule_prices_measurements_by_value_cells(tmp_path):
    """Under ``missing: keep`` every column has a null cell; the schedule prices a measurement
    by its value cells, so a spec gets the same AIM schedule whether its columns may be empty
    (keep) or not (drop)."""
    import dpql

    src = Path(__file__).parent.parent / "examples" / "adult" / "adult.release.yaml"
    base = yaml.safe_load(src.read_text())
    base["data"]["path"] = str(src.parent / base["data"]["path"])
    base["workload"] = ["marginals(3)"]
    base.pop("requirements", None)
    base.pop("postprocess", None)
    base["synthesizer"] = {"method": "aim", "rows": 32561}
    base["privacy"]["epsilon"] = 0.3
    plans = {}
    for missing in ("keep", "drop"):
        spec = dict(base, missing=missing)
        path = tmp_path / f"{missing}.release.yaml"
        path.write_text(yaml.safe_dump(spec))
        o = dpql.build_plan(path).synth.options
        plans[missing] = {k: o[k] for k in ("tree_edges", "rounds", "per_round", "init_share")}
    assert plans["keep"] == plans["drop"]


def test_the_fit_domain_drops_the_null_cells_of_columns_shown_complete():
    """A ``keep`` column whose noisy null share is indistinguishable from zero is fitted without
    its null cell (the last code): answers are restricted to the value cells and model
    marginals are expanded back with zero null cells."""
    from dpql.synth.aim.program import FitDomain

    cards = {"a": 3, "b": 4, "c": 2}  # each with its null cell (the last code)
    fit = FitDomain(SimpleNamespace(card=cards.get), ("a", "b", "c"), ("a", "c"))
    assert fit.card == {"a": 2, "b": 4, "c": 1}
    assert fit.cells(("a", "b")) == 8 and fit.cells(("b",)) == 4
    y = np.arange(12.0)
    assert np.array_equal(fit.restrict(("a", "b"), y), np.arange(8.0))  # a's null row dropped
    assert np.array_equal(fit.restrict(("b", "a"), y), y.reshape(4, 3)[:, :2].ravel())
    b = y[:4]  # a column not shown complete keeps its cells
    assert np.array_equal(fit.restrict(("b",), b), b) and fit.as_measured(("b",), b) is b
    back = fit.as_measured(("b", "a"), fit.restrict(("b", "a"), y)).reshape(4, 3)
    assert np.array_equal(back[:, :2], y.reshape(4, 3)[:, :2]) and not back[:, 2].any()
    assert fit.merge_map(("a", "b")) is None  # measured over the release's cells


def test_rare_cells_are_merged_for_the_fit_and_spread_back_by_the_one_way_answers():
    """Two or more rare cells of a column become one fit cell: a pair over it is measured
    over the merged cells (the oracle's ``merge``), a left-out null cell maps nowhere, and a
    sampled row in the merged cell gets one of its values in proportion to the weights."""
    from dpql.data.measure import merge_cells
    from dpql.diagnostics import InternalError
    from dpql.ir.queries import Marginal
    from dpql.synth.aim.program import FitDomain

    cards = {"a": 5, "b": 3, "c": 4}  # c: a keep column shown complete (null code 3)
    fit = FitDomain(SimpleNamespace(card=cards.get), ("a", "b", "c"), ("c",),
                    {"a": np.array([1, 3, 4]), "b": np.array([2]), "c": np.array([0, 3])})
    assert fit.card == {"a": 3, "b": 3, "c": 3}  # a: 0, 2, {1,3,4}; b: one rare cell, unmerged
    assert fit.merged == {"a"} and np.array_equal(fit.maps["a"], [0, 2, 1, 2, 2])
    assert np.array_equal(fit.maps["c"], [0, 1, 2, -1])  # the null cell out, nothing merged
    assert fit.merge_map(("b", "c")) is None
    index = fit.merge_map(("a", "c"))
    assert index.shape == (20,) and sorted(set(index.tolist())) == [-1, *range(9)]
    sums = np.arange(20)
    merged = merge_cells(sums, index, Marginal(("a", "c")))
    cube = sums.reshape(5, 4)[:, :3]  # c's null cell left out
    assert np.array_equal(merged.reshape(3, 3), [cube[0], cube[2], cube[[1, 3, 4]].sum(0)])
    assert np.array_equal(fit.restrict(("a", "c"), sums.astype(float)), merged)
    assert fit.fitted(("a", "c"), merged) is not None and fit.as_measured(("a", "c"), merged) is merged
    rng = np.random.default_rng(0)
    codes = np.array([0, 1, 2] * 2000)
    back = fit.to_release("a", codes, np.array([9.0, 1.0, 9.0, 3.0, -2.0]), rng)
    assert np.array_equal(back[codes == 0], np.zeros(2000)) and (back[codes == 1] == 2).all()
    shares = np.bincount(back[codes == 2], minlength=5) / 2000
    assert shares[4] == 0 and shares[0] == shares[2] == 0
    assert shares[1] == pytest.approx(0.25, abs=0.04) and shares[3] == pytest.approx(0.75, abs=0.04)
    with pytest.raises(InternalError):
        merge_cells(sums, np.array([0, 2] * 10), Marginal(("a", "c")))  # not onto


def test_the_default_model_cap_bounds_the_fits_work(tmp_path, monkeypatch):
    """Unset ``max_model_size`` is also at most the cap whose fits do at most
    ``FIT_WORK_PER_CORE`` cell-steps per core: steps times the share of the budget spent
    (round ``i``'s cap) summed over the fits, the forest's closed form not among them. Fewer
    steps or more cores allow a larger model; the spec's own value wins."""
    from dpql.plan.resources import MEMORY_LIMIT_ENV
    from dpql.synth.aim import plan as aim

    monkeypatch.setenv(MEMORY_LIMIT_ENV, str(8 * 2**30))
    caps = {}
    for cpus in (2, 4):
        monkeypatch.setattr(os, "sched_getaffinity", lambda _pid, c=cpus: set(range(c)),
                            raising=False)  # fmt: skip
        plan = build_plan(load_spec(_spec(tmp_path, "  method: aim\n  rows: 600")))
        s, options = plan.synth.config
        fits = s.fits(options.iters, options.final_iters)
        # the forest's round is closed form; the last fit takes final_iters
        assert len(fits) == len(s.rounds) - bool(s.tree) and fits[-1] == (1000, 1.0)
        assert [share for _, share in fits] == sorted(share for _, share in fits)
        work = sum(steps * share for steps, share in fits) * options.max_model_size * 2**20 / 8
        assert work <= aim.FIT_WORK_PER_CORE * cpus
        assert work > 0.99 * aim.FIT_WORK_PER_CORE * cpus  # the work cap binds here
        caps[cpus] = options.max_model_size
        assert "model size at most" in build_plan(
            load_spec(_spec(tmp_path, "  method: auto\n  rows: 600"))
        ).synth.options["reason"]
    assert caps[4] == pytest.approx(2 * caps[2], rel=0.01) and caps[2] < aim.MODEL_CAP_MIN
    fewer = _spec(tmp_path, "  method: aim\n  rows: 600\n  options: {final_iters: 200}")
    assert build_plan(load_spec(fewer)).synth.options["max_model_size"] > caps[4]


class _LargestOracle:
    """A stand-in selection that always takes the offered candidate with the most cells."""

    def __init__(self, cells) -> None:
        self.cells = cells

    def select(self, queries, answers, k, rho, **_):
        return [max(range(len(queries)), key=lambda i: self.cells(queries[i].columns))]


def test_a_rounds_picks_together_keep_the_model_within_the_cap():
    """The model-size filter holds for a round's picks together, not only one by one: two
    disjoint 3-way marginals each fit the cap beside the 1-way model, but not both."""
    from mbi import Domain

    from dpql.ir.queries import Marginal
    from dpql.synth.aim.graphical import IndependentModel
    from dpql.synth.aim.junction import junction_cells
    from dpql.synth.aim.program import FitDomain, _pick_round

    cols = tuple("abcdef")
    card = dict.fromkeys(cols, 10)
    s = _plan(cols, [Marginal(cols[:3]), Marginal(cols[3:])], 10.0, 10**6, [10] * 6,
              rounds=1, per_round=2, tree=False)  # fmt: skip
    model = IndependentModel({c: np.ones(10) for c in cols}, s.n)
    mdom = Domain(list(cols), [10] * 6)
    fit = FitDomain(SimpleNamespace(card=card.get), cols, ())
    limit = 1500 * 8 / 2**20  # one 3-way clique (1,030 cells with the others) fits, two do not
    picks = _pick_round(_LargestOracle(fit.cells), s, 0, model, s.rounds[0][0], 1e-5, limit,
                        mdom, fit)  # fmt: skip
    assert len(picks) == 2 and len(picks[0]) == 3  # the largest first, alone within the cap
    assert junction_cells(card, [*model.cliques, picks[0]])[0] <= 1500
    assert junction_cells(card, [*model.cliques, *picks])[0] <= 1500
    assert len(picks[1]) == 2 and not set(picks[1]) & set(picks[0])  # the largest that fits


def test_rare_cells_together_stay_indistinguishable_from_empty():
    """Cells merge from the smallest noisy answer up while each is below 3 sigma and the sum
    of the first k below 3 sqrt(k) sigma (the merged cell's own noise): many small cells do
    not add up to a merged cell that holds a real share of the rows."""
    from dpql.synth.aim.program import rare_cells

    y = np.array([0.5, -0.2, 0.1, 2.9, 10.0])
    assert rare_cells(y, 1.0).tolist() == [1, 2, 0, 3]
    assert rare_cells(np.array([2.5, 2.5, 2.5, 2.5, 20.0]), 1.0).tolist() == [0]
    assert rare_cells(np.array([5.0, 9.0]), 1.0).size == 0
    assert rare_cells(np.zeros(6), 1.0).tolist() == list(range(6))
