"""End to end on a tiny table: train (ledger, progress) and sample rows inside the domain."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from dpql.domain import CategoricalColumn, Domain, EncodedTable, NumericColumn, numeric_edges
from dpql.privacy.accountant import epsilon_from_events
from dpql.privacy.ledger import Ledger
from dpql.privacy.noise import NoiseSource
from dpql.synth.gan import GanOptions, encoding, plan_gan, sample, train_gan

DOMAIN = Domain(
    (
        NumericColumn("age", 17, 90, True, numeric_edges(17, 90, True, 8)),
        CategoricalColumn("sex", ("Female", "Male")),
        CategoricalColumn("colour", ("red", "green", "blue", "other")),
        NumericColumn("score", 0.0, 1.0, False, numeric_edges(0.0, 1.0, False, 5)),
    )
)


def table(n: int, seed: int) -> EncodedTable:
    rng = np.random.default_rng(seed)
    age = rng.integers(17, 91, n).astype(float)
    score = rng.uniform(0, 1, n)
    codes = {
        "age": DOMAIN["age"].bin_of(age),
        "sex": rng.integers(0, 2, n).astype(np.int32),
        "colour": rng.integers(0, 4, n).astype(np.int32),
        "score": DOMAIN["score"].bin_of(score),
    }
    return EncodedTable(DOMAIN, codes, {"age": (age - 17) / 73, "score": score})


def assert_in_domain(t: EncodedTable) -> None:
    for c in t.domain:
        codes = t.codes[c.name]
        assert codes.dtype == np.int32 and codes.min() >= 0 and codes.max() < c.card
        if isinstance(c, NumericColumn):
            u = t.scaled[c.name]
            assert u.min() >= 0 and u.max() <= 1
            value = c.lo + u * c.span
            np.testing.assert_array_equal(codes, c.bin_of(value))
            if c.integer:
                np.testing.assert_allclose(value, np.round(value), atol=1e-9)


def test_encoding_round_trips_and_has_the_papers_widths():
    t = table(50, 0)
    x = encoding.encode(t)
    assert x.shape == (50, 1 + 1 + 4 + 1) and x.min() >= 0 and x.max() <= 1
    back = encoding.decode(DOMAIN, x)
    for name in DOMAIN.names:
        np.testing.assert_array_equal(back.codes[name], t.codes[name])
    np.testing.assert_allclose(back.scaled["score"], t.scaled["score"], atol=1e-6)


@pytest.fixture(scope="module")
def trained():
    options = GanOptions.from_mapping(
        {
            "ae_steps": 30,
            "critic_steps": 30,
            "ae_batch_size": 20,
            "critic_batch_size": 20,
            "ae_latent_dim": 4,
            "generator_noise_dim": 8,
            "critic_steps_per_generator_step": 3,
            "noise_multipliers": [1.5, 1.5],
        }
    )
    plan = plan_gan(options, 200, SimpleNamespace(epsilon=50.0, delta=1e-5))
    ledger, calls = Ledger(), []
    model = train_gan(
        table(200, 1),
        plan,
        noise=NoiseSource.for_testing(0),
        ledger=ledger,
        progress=lambda *args: calls.append(args),
    )
    return plan, ledger, calls, model


@pytest.mark.slow
def test_training_appends_one_event_per_phase_with_the_plans_parameters(trained):
    plan, ledger, _, _ = trained
    assert ledger.events == plan.events()
    ae, critic = ledger.events
    assert (ae.phase, ae.mechanism, ae.sampling_rate, ae.steps) == ("autoencoder", "dpsgd", 0.1, 30)
    assert (critic.phase, critic.noise_multiplier, critic.l2_sensitivity) == (
        "generator",
        1.5,
        0.022,
    )
    assert math.isclose(epsilon_from_events(ledger.events, plan.delta).epsilon, plan.epsilon)


def test_progress_reports_each_phase_up_to_its_total(trained):
    _, _, calls, _ = trained
    assert calls[0][0] == "autoencoder" and calls[-1] == ("generator", 30, 30)
    assert ("autoencoder", 30, 30) in calls


def test_samples_are_rows_of_the_domain_and_reproducible_by_seed(trained):
    *_, model = trained
    rows = sample(model, 300, seed=4)
    assert rows.n == 300
    assert_in_domain(rows)
    again = sample(model, 300, seed=4)
    for name in DOMAIN.names:
        np.testing.assert_array_equal(rows.codes[name], again.codes[name])
