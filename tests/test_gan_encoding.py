"""The GAN's public-bin encoding and its DP 1-way marginal phase."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from dpql.domain import CategoricalColumn, Domain, EncodedTable, NumericColumn, numeric_edges
from dpql.privacy.accountant import epsilon_from_events
from dpql.privacy.ledger import PrivacyEvent
from dpql.release.events import event_phase
from dpql.spec.load import load_spec
from dpql.synth.base import PlanContext
from dpql.synth.gan import BACKEND, GanOptions, encoding
from dpql.synth.gan.plan import marginal_queries
from dpql.synth.gan.program import resample_to_marginals

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "adult-gan" / "adult-gan.release.yaml"


def adult_domain() -> Domain:
    return load_spec(EXAMPLE).domain


def random_table(domain: Domain, n: int, seed: int) -> EncodedTable:
    """Rows spread over every public bin (and bounds) of every column."""
    rng = np.random.default_rng(seed)
    codes, scaled = {}, {}
    for c in domain:
        if isinstance(c, NumericColumn):
            edges = np.asarray(c.edges, dtype=np.float64)
            k = rng.integers(0, c.bins, n)
            low, high = np.maximum(edges[k], c.lo), np.minimum(edges[k + 1], c.hi)
            v = low + rng.uniform(0, 1, n) * (high - low)
            v = np.clip(np.floor(v) if c.integer else v, c.lo, c.hi)
            v[:2] = c.lo, c.hi
            codes[c.name] = c.bin_of(v)
            scaled[c.name] = (v - c.lo) / c.span
        else:
            codes[c.name] = rng.integers(0, c.card, n).astype(np.int32)
    return EncodedTable(domain, codes, scaled)


def test_public_bin_encoding_round_trips_on_the_examples_bins():
    domain = adult_domain()
    t = random_table(domain, 400, 0)
    x = encoding.encode(t, "bins")
    assert x.shape == (400, encoding.width(domain, "bins")) and x.min() >= 0 and x.max() <= 1
    widths = {b.column: (b.kind, b.width) for b in encoding.blocks(domain, "bins")}
    assert widths["education_num"] == ("levels", 16)  # 16 integer values: one-hot over them
    assert widths["capital_gain"] == ("binned", domain["capital_gain"].bins + 1)
    assert widths["fnlwgt"] == ("binned", 17)
    back = encoding.decode(domain, x, "bins")
    for c in domain:
        np.testing.assert_array_equal(back.codes[c.name], t.codes[c.name], err_msg=c.name)
        if isinstance(c, NumericColumn):
            v, w = (c.lo + s[c.name] * c.span for s in (back.scaled, t.scaled))
            np.testing.assert_allclose(v, w, rtol=0, atol=1e-6 * c.span + (0.5 if c.integer else 0))


@pytest.mark.parametrize("seed", [0, 1])
def test_decoded_values_stay_in_their_bins_and_bounds(seed):
    domain = adult_domain()
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 1, (2000, encoding.width(domain, "bins")))
    x[:100] = rng.choice([0.0, 1.0], x[:100].shape)  # offsets exactly at 0 and 1
    t = encoding.decode(domain, x, "bins")
    for b in encoding.blocks(domain, "bins"):
        c = domain[b.column]
        codes = t.codes[c.name]
        assert codes.dtype == np.int32 and codes.min() >= 0 and codes.max() < c.card
        if not isinstance(c, NumericColumn):
            continue
        value = c.lo + t.scaled[c.name] * c.span
        assert value.min() >= c.lo and value.max() <= c.hi
        np.testing.assert_array_equal(codes, c.bin_of(value))
        if b.kind == "binned":  # the chosen bin is the argmax of the one-hot part
            np.testing.assert_array_equal(codes, np.argmax(x[:, b.start : b.start + c.bins], 1))
        if c.integer:
            np.testing.assert_allclose(value, np.round(value), rtol=0, atol=1e-6)


def test_float_column_offsets_stay_below_the_next_edge():
    col = NumericColumn("score", 0.0, 1.0, False, numeric_edges(0.0, 1.0, False, 4))
    domain = Domain((col, CategoricalColumn("sex", ("F", "M"))))
    x = np.zeros((4, encoding.width(domain, "bins")))
    x[np.arange(4), np.arange(4)] = 1.0
    x[:, 4] = 1.0  # offset 1: the top of each bin
    t = encoding.decode(domain, x, "bins")
    np.testing.assert_array_equal(t.codes["score"], [0, 1, 2, 3])
    assert t.scaled["score"][-1] == 1.0 and (np.diff(t.scaled["score"]) > 0).all()


def test_the_papers_minmax_encoding_is_unchanged_and_the_paper_presets():
    domain = adult_domain()
    t = random_table(domain, 100, 2)
    paper = sum(c.card if isinstance(c, CategoricalColumn) and c.card > 2 else 1 for c in domain)
    assert encoding.width(domain) == encoding.width(domain, "minmax") == paper
    np.testing.assert_array_equal(encoding.encode(t), encoding.encode(t, "minmax"))
    assert all(b.kind in ("scalar", "onehot") for b in encoding.blocks(domain))
    back = encoding.decode(domain, encoding.encode(t))
    for c in domain:
        if isinstance(c, NumericColumn):
            np.testing.assert_allclose(back.scaled[c.name], t.scaled[c.name], atol=1e-6)
    assert GanOptions(preset="paper").encoding == "minmax"
    with pytest.raises(ValueError):
        encoding.blocks(domain, "quantile")


def plan_with(tmp_path: Path, share: float):
    text = EXAMPLE.read_text().replace("../adult/", str(EXAMPLE.parents[1] / "adult") + "/")
    text = re.sub(r"\n    (encoding|marginal_share|marginal_ways): [^\n]*", "", text)
    text = text.replace("seed: 0 ", f"encoding: bins\n    marginal_share: {share}\n"
                        "    marginal_ways: 1\n    seed: 0 ")  # fmt: skip
    path = tmp_path / "gan.yaml"
    path.write_text(text)
    spec = load_spec(path)
    assert spec.model.synthesizer.options.marginal_share == share
    rho = 0.03
    ctx = PlanContext(spec, (), 1.0, 1e-9, {"synthesizer": rho})
    return spec, BACKEND.plan(ctx), rho


@pytest.mark.slow
def test_marginal_phase_is_planned_and_the_dpsgd_calibration_composes_it(tmp_path):
    _, plan, rho = plan_with(tmp_path, 0.1)
    first, *dpsgd = plan.lines
    assert (first.phase, first.mechanism, first.releases) == ("gan.marginals", "gaussian", 1)
    assert first.rho_per_release == pytest.approx(0.1 * rho)
    assert [x.phase for x in dpsgd] == ["gan.autoencoder", "gan.generator"]
    marginal = PrivacyEvent("marginals", "gaussian", "m", l2_sensitivity=1.0,
                            noise_scale=1.0 / np.sqrt(2 * first.rho), rho=first.rho)  # fmt: skip
    total = epsilon_from_events([marginal, *plan.config.events()], 1e-9).epsilon
    assert total <= 1.0 + 1e-9
    _, plain, _ = plan_with(tmp_path, 0.0)
    assert [x.phase for x in plain.lines] == ["gan.autoencoder", "gan.generator"]
    # the critic gets less budget (more noise) when part of it goes to the marginals
    assert dpsgd[1].noise_scale > plain.lines[1].noise_scale


class FakeOracle:
    """Records what the backend asks for; the answers are the true 1-way marginals."""

    def __init__(self, table: EncodedTable, ledger: list):
        self.table, self.ledger, self.calls = table, ledger, []

    n = 0

    def measure(self, queries, rho, *, phase, label, scales=None):
        self.calls.append((tuple(queries), rho, phase))
        self.ledger.append(("gaussian", phase, rho))
        return [np.bincount(self.table.codes[q.columns[0]],
                            minlength=self.table.domain[q.columns[0]].card) / self.table.n
                for q in queries]  # fmt: skip


@pytest.mark.slow
def test_dp_frequencies_come_from_the_oracle_and_match_the_plans_lines(tmp_path, monkeypatch):
    from dpql.synth.gan import train

    spec, plan, _ = plan_with(tmp_path, 0.2)
    real = random_table(spec.domain, 300, 3)
    events: list = []
    oracle = FakeOracle(real, events)

    class Rows:
        def __enter__(self):
            events.append(("rows", None, None))
            return real

        def __exit__(self, *exc):
            return False

    def fake_train(rows, gan, *, noise, ledger, progress=None, marginals=None):
        assert rows is real
        for e in gan.events():
            events.append(("dpsgd", e.phase, None))
        return SimpleNamespace(domain=rows.domain, options=gan.options)

    pool = random_table(spec.domain, 4 * 50, 4)
    monkeypatch.setattr(train, "train_gan", fake_train)
    monkeypatch.setattr(train, "sample", lambda model, rows, seed: pool)
    small = SimpleNamespace(domain=spec.domain, model=SimpleNamespace(synthesizer=SimpleNamespace(rows=50)))
    ctx = SimpleNamespace(spec=small, private=SimpleNamespace(oracle=oracle, rows=Rows),
                          noise=None, ledger=None, progress=None, seed=0)  # fmt: skip
    result = BACKEND.run(plan, ctx)
    ((queries, rho, phase),) = oracle.calls
    assert queries == marginal_queries(spec.domain) and phase == "marginals"
    assert rho == plan.lines[0].rho
    # ledger order is the plan's line order: the measurement, then the two DP-SGD phases
    charged = [(m, p) for m, p, _ in events if m != "rows"]
    assert charged == [(x.mechanism, event_phase(x)) for x in plan.lines]
    assert result.table.n == 50


def test_resampling_matches_the_noisy_marginals():
    domain = adult_domain()
    pool = random_table(domain, 20000, 5)
    rng = np.random.default_rng(6)
    target = {c.name: rng.uniform(0.6, 1.0, c.card) for c in domain}
    target["age"][0] += 1.0  # skewed towards the first value
    target["workclass"][-1] = -0.01  # noisy answers may be negative: clipped to 0
    out = resample_to_marginals(pool, target, 20000, seed=0)
    for c in domain:
        p = np.clip(target[c.name], 0, None)
        got = np.bincount(out.codes[c.name], minlength=c.card) / out.n
        assert 0.5 * np.abs(got - p / p.sum()).sum() < 0.05, c.name


def test_resampling_rounds_each_pool_row_to_the_floor_or_ceiling_of_its_weight():
    """The draw is post-processing's controlled rounding, not a multinomial one: raked to one
    column's marginal, a pool row of value v has weight p_v / (pool rows of v), and every pool
    row appears the floor or the ceiling of ``rows`` times its weight."""
    domain = adult_domain()
    pool = random_table(domain, 300, 7)
    p = np.random.default_rng(8).uniform(0.5, 1.0, domain["sex"].card)
    rows = 5000
    out = resample_to_marginals(pool, {"sex": p}, rows, seed=1)
    key = {tuple(r): i for i, r in enumerate(np.column_stack(list(pool.codes.values())))}
    assert len(key) == pool.n  # each pool row is told apart by its codes
    drawn = [key[tuple(r)] for r in np.column_stack(list(out.codes.values()))]
    counts = np.bincount(drawn, minlength=pool.n)
    sex = pool.codes["sex"]
    expected = rows * (p / p.sum())[sex] / np.bincount(sex, minlength=p.size)[sex]
    assert out.n == rows
    assert ((counts == np.floor(expected)) | (counts == np.ceil(expected))).all()
