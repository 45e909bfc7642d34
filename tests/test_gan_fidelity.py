"""Fidelity by design: the GAN's workload marginals (plan, penalty, sampling)."""

from __future__ import annotations

import itertools
import math
import re
from pathlib import Path
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpql.domain import CategoricalColumn, Domain, EncodedTable, NumericColumn, numeric_edges
from dpql.ir.queries import Marginal
from dpql.privacy.accountant import epsilon_from_events
from dpql.privacy.ledger import Ledger, PrivacyEvent
from dpql.privacy.noise import NoiseSource
from dpql.spec.load import load_spec
from dpql.synth.base import PlanContext
from dpql.synth.gan import (
    BACKEND,
    GanOptions,
    encoding,
    fidelity,
    nets,
    plan_gan,
    sample,
    train_gan,
)
from dpql.synth.gan.plan import SQRT_2_OVER_PI, marginal_queries
from dpql.synth.gan.train import _Fit, finetune

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "adult-gan" / "adult-gan.release.yaml"

DOMAIN = Domain(
    (
        NumericColumn("age", 17, 90, True, numeric_edges(17, 90, True, 6)),
        CategoricalColumn("sex", ("Female", "Male")),
        CategoricalColumn("colour", ("red", "green", "blue", "other")),
        NumericColumn("kids", 0, 5, True, numeric_edges(0, 5, True, 3)),  # 6 levels, 3 bins
        CategoricalColumn("one", ("only",)),
    )
)


def correlated(n: int, seed: int) -> EncodedTable:
    """sex and colour strongly dependent, kids tied to age: structure a product cannot fit."""
    rng = np.random.default_rng(seed)
    sex = rng.integers(0, 2, n)
    colour = np.where(rng.uniform(size=n) < 0.85, sex * 2, rng.integers(0, 4, n))
    age = np.where(sex == 1, rng.integers(17, 35, n), rng.integers(50, 91, n)).astype(float)
    kids = np.where(age < 40, rng.integers(0, 2, n), rng.integers(3, 6, n)).astype(float)
    d = DOMAIN
    codes = {
        "age": d["age"].bin_of(age),
        "sex": sex.astype(np.int32),
        "colour": colour.astype(np.int32),
        "kids": d["kids"].bin_of(kids),
        "one": np.zeros(n, dtype=np.int32),
    }
    return EncodedTable(d, codes, {"age": (age - 17) / 73, "kids": kids / 5})


def exact(t: EncodedTable, cols: tuple[str, ...]) -> np.ndarray:
    cards = [t.domain[c].card for c in cols]
    flat = np.ravel_multi_index(tuple(t.codes[c] for c in cols), cards)
    return np.bincount(flat, minlength=math.prod(cards)) / t.n


PAIRS = (("sex", "colour"), ("age", "kids"), ("age", "sex"), ("colour", "kids"))


@pytest.mark.slow
def test_relaxed_marginals_of_encoded_rows_are_the_exact_marginals():
    t = correlated(300, 0)
    x = encoding.encode(t, "bins")
    maps = fidelity.column_maps(DOMAIN)
    assert {m.column: m.kind for m in maps} == {
        "age": "softmax", "sex": "binary", "colour": "softmax", "kids": "levels",
        "one": "constant",
    }  # fmt: skip
    logits = jnp.asarray((2.0 * x - 1.0) * 60.0)  # one-hot rows as (nearly) certain logits
    probs = fidelity.column_probs(logits, maps)
    for cols in (("age",), ("kids",), *PAIRS, ("age", "colour", "kids"), ("one", "sex")):
        got = np.asarray(fidelity.relaxed_marginal(probs, cols))
        np.testing.assert_allclose(got, exact(t, cols), atol=1e-5, err_msg=str(cols))
    targets = [jnp.asarray(exact(t, c)) for c in PAIRS]
    assert float(fidelity.marginal_loss(logits, maps, PAIRS, targets)) < 1e-8


@pytest.mark.slow
def test_finetuning_on_the_penalty_fits_the_marginals_and_sampling_follows():
    real = correlated(4000, 1)
    cols = tuple((c.name,) for c in DOMAIN) + PAIRS
    fit = _Fit.of(DOMAIN, GanOptions.from_mapping({"encoding": "bins"}),
                  [(c, exact(real, c)) for c in cols])  # fmt: skip
    assert fit is not None
    o = GanOptions.from_mapping({"encoding": "bins", "finetune_steps": 300,
                                 "finetune_batch_size": 256, "generator_noise_dim": 8,
                                 "ae_latent_dim": 4, "finetune_learning_rate": 0.01})  # fmt: skip
    width = encoding.width(DOMAIN, "bins")
    k1, k2 = jax.random.split(jax.random.key(3))
    gen = nets.generator_init(k1, 8, 4, True)
    dec = {"decoder": nets.autoencoder_init(k2, width, 8, 4)["decoder"]}

    def error(g, d) -> float:
        model = SimpleNamespace(domain=DOMAIN, options=o, decoder=d, generator=g, stochastic=True)
        t = sample(model, 4000, 5)
        return max(0.5 * np.abs(exact(t, c) - exact(real, c)).sum() for c in PAIRS)

    before = error(gen, dec)
    gen2, dec2 = finetune(gen, dec, fit, o)
    after = error(gen2, dec2)
    assert before > 0.25 and after < 0.08, (before, after)


def adult_plan(tmp_path: Path, extra: str, rho: float = 0.03, ways: int = 3):
    text = EXAMPLE.read_text().replace("../adult/", str(EXAMPLE.parents[1] / "adult") + "/")
    text = re.sub(r"\n    (encoding|marginal_share|marginal_ways): [^\n]*", "", text)
    text = text.replace("    seed: 0 ", f"    {extra}\n    seed: 0 ")
    path = tmp_path / "gan.yaml"
    path.write_text(text)
    spec = load_spec(path)
    workload = tuple(Marginal(c) for c in itertools.combinations(spec.domain.names, ways))
    ctx = PlanContext(spec, workload, 1.0, 1e-5, {"synthesizer": rho})
    return spec, workload, BACKEND.plan(ctx)


@pytest.mark.slow
def test_plan_releases_one_way_and_noise_aware_workload_pairs_within_budget(tmp_path):
    spec, workload, plan = adult_plan(tmp_path, "encoding: bins")
    first, *dpsgd = plan.lines
    rho_m = 0.5 * 0.03  # the bins encoding's default share
    assert (first.phase, first.mechanism, first.releases) == ("gan.marginals", "gaussian", 1)
    assert first.rho == pytest.approx(rho_m)
    assert [x.phase for x in dpsgd] == ["gan.autoencoder", "gan.generator"]
    measured = plan.config.marginals
    d, n = spec.domain, spec.rows
    assert measured[: len(d)] == tuple((c.name,) for c in d)
    pairs = measured[len(d) :]
    assert 10 <= len(pairs) < 105 and all(len(p) == 2 for p in pairs)
    # sensitivity sqrt(2 K)/n under replace-one; sigma = l2 / sqrt(2 rho)
    sigma = math.sqrt(2 * len(measured)) / n / math.sqrt(2 * rho_m)
    assert first.noise_scale == pytest.approx(sigma)
    assert all(SQRT_2_OVER_PI * sigma * d.cells(p) < 1.0 for p in pairs)
    names = list(d.names)
    order = sorted(itertools.combinations(names, 2),
                   key=lambda c: (d.cells(c), [names.index(x) for x in c]))  # fmt: skip
    assert order[: len(pairs)] == list(pairs)  # smallest first
    nxt = math.sqrt(len(measured) + 1) / (n * math.sqrt(rho_m))
    assert SQRT_2_OVER_PI * nxt * d.cells(order[len(pairs)]) >= 1.0  # the next would not fit
    assert pairs == tuple(q.columns for q in marginal_queries(
        d, workload, spec.model.synthesizer.options, rho_m, n)[len(d):])  # fmt: skip
    # the marginal release and both DP-SGD phases compose within the budget
    m = PrivacyEvent("marginals", "gaussian", "m", l2_sensitivity=1.0,
                     noise_scale=1 / math.sqrt(2 * first.rho), rho=first.rho)  # fmt: skip
    assert epsilon_from_events([m, *plan.config.events()], 1e-5).epsilon <= 1.0 + 1e-9


@pytest.mark.slow
def test_selection_is_public_and_limited_to_the_workload_and_encoding(tmp_path):
    spec, pairs3, none = adult_plan(tmp_path, "encoding: minmax")
    assert [x.phase for x in none.lines] == ["gan.autoencoder", "gan.generator"]  # share 0
    d, n, rho = spec.domain, spec.rows, 0.015

    def chosen(workload, **options):
        o = GanOptions.from_mapping({"encoding": "bins", **options})
        return marginal_queries(d, workload, o, rho, n)

    ones = tuple(Marginal((c.name,)) for c in d)
    fallback = chosen(ones)  # no k-way workload marginal: candidates are all pairs
    assert fallback[: len(d)] == ones and len(fallback) > len(d)
    assert all(len(q.columns) == 2 for q in fallback[len(d):])
    assert chosen(pairs3, marginal_ways=1) == ones
    minmax = GanOptions.from_mapping({"encoding": "minmax", "marginal_share": 0.2})
    assert marginal_queries(d, pairs3, minmax, rho, n) == ones  # minmax: raking only
    base = chosen(pairs3)
    assert len(chosen(pairs3, marginal_noise_limit=5.0)) > len(base) > len(ones)
    assert len(chosen(pairs3, marginal_ways=3)) >= len(base)
    only = (Marginal(("age", "sex", "race")),)  # pairs come from workload marginals only
    got = {q.columns for q in chosen(only)[len(d):]}
    assert got == {("age", "sex"), ("age", "race"), ("race", "sex")}  # domain order


@pytest.mark.slow
def test_training_with_marginals_appends_only_the_dpsgd_events_and_samples_codes():
    options = GanOptions.from_mapping({
        "encoding": "bins", "ae_steps": 6, "critic_steps": 6, "ae_batch_size": 20,
        "critic_batch_size": 20, "ae_latent_dim": 4, "generator_noise_dim": 8,
        "critic_steps_per_generator_step": 2, "noise_multipliers": [1.5, 1.5],
        "finetune_steps": 20, "finetune_batch_size": 64,
    })  # fmt: skip
    plan = plan_gan(options, 200, SimpleNamespace(epsilon=50.0, delta=1e-5))
    real = correlated(200, 2)
    marginals = [(c, exact(real, c)) for c in ((c.name,) for c in DOMAIN)]
    ledger, calls = Ledger(), []
    model = train_gan(real, plan, noise=NoiseSource.for_testing(0), ledger=ledger,
                      progress=lambda *a: calls.append(a), marginals=marginals)  # fmt: skip
    assert [e.phase for e in ledger.events] == ["autoencoder", "generator"]
    assert model.stochastic and calls[-1] == ("finetune", 20, 20)
    t = sample(model, 300, 0)
    for c in DOMAIN:
        assert t.codes[c.name].min() >= 0 and t.codes[c.name].max() < c.card
    np.testing.assert_array_equal(sample(model, 300, 0).codes["age"], t.codes["age"])
