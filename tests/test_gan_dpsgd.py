"""DP-SGD building blocks: per-example gradients, clipping, Poisson masks, noise scale."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpql.privacy.noise import NoiseSource
from dpql.synth.gan import dpsgd


def _loss(params, row, extra):
    # A small nonlinear model so per-example gradients differ in direction and norm.
    hidden = jnp.tanh(row @ params["w"] + params["b"])
    return jnp.sum((hidden - extra) ** 2)


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(0)
    params = {"w": jnp.asarray(rng.normal(size=(5, 3))), "b": jnp.asarray(rng.normal(size=3))}
    rows = jnp.asarray(rng.normal(size=(40, 5)) * rng.uniform(0.1, 3.0, size=(40, 1)))
    extras = jnp.asarray(rng.normal(size=(40, 3)))
    return params, rows, extras


def _phase(q: float, clip: float, z: float, expected: float) -> dpsgd.DpSgdPhase:
    return dpsgd.DpSgdPhase(q, clip, z, 1, expected)


def test_per_example_gradients_equal_each_examples_loss_gradient(problem):
    params, rows, extras = problem
    batched = dpsgd.per_example_gradients(_loss, params, rows, extras)
    for i in (0, 7, 39):
        one = jax.grad(_loss)(params, rows[i], extras[i])
        for name in params:
            np.testing.assert_allclose(batched[name][i], one[name], rtol=1e-4, atol=1e-5)


def test_clipping_bounds_every_per_example_norm_and_keeps_small_ones(problem):
    params, rows, extras = problem
    grads = dpsgd.per_example_gradients(_loss, params, rows, extras)

    def norms(g):
        return np.sqrt(
            sum(np.sum(np.reshape(x, (x.shape[0], -1)) ** 2, axis=1) for x in g.values())
        )

    before = norms(grads)
    clip = float(np.median(before))  # half the examples get clipped
    after = norms(dpsgd.clip_gradients(grads, clip))
    assert np.all(after <= clip * (1 + 1e-5))
    small = before <= clip
    assert 0 < small.sum() < len(before)
    np.testing.assert_allclose(after[small], before[small], rtol=1e-5)
    np.testing.assert_allclose(after[~small], clip, rtol=1e-5)


def test_poisson_mask_includes_each_row_at_rate_q():
    rows, q = 200_000, 0.01
    mask = np.asarray(dpsgd.poisson_mask(NoiseSource.for_testing(1).jax_key(), rows, q))
    sd = math.sqrt(rows * q * (1 - q))
    assert abs(mask.sum() - rows * q) < 5 * sd
    # Inclusion does not depend on position: both halves have rate q.
    for half in np.split(mask, 2):
        assert abs(half.sum() - rows / 2 * q) < 5 * math.sqrt(rows / 2 * q)


def test_chunked_sum_covers_every_sampled_row_even_beyond_one_chunk(problem):
    params, rows, _ = problem
    phase = _phase(0.9, 0.5, 1.0, 4.0)  # chunk of 7 rows, ~36 sampled: several chunks
    assert phase.chunk_size < 30
    mask = dpsgd.poisson_mask(NoiseSource.for_testing(2).jax_key(), rows.shape[0], 0.9)

    def loss(p, row, _):
        return _loss(p, row, jnp.zeros(3))

    total = dpsgd.clipped_gradient_sum(loss, params, rows, mask, jax.random.key(0), phase)
    clipped = dpsgd.clip_gradients(dpsgd.per_example_gradients(loss, params, rows), 0.5)
    keep = np.asarray(mask)
    assert keep.sum() > 3 * phase.chunk_size
    for name in params:
        np.testing.assert_allclose(total[name], clipped[name][keep].sum(0), rtol=1e-5, atol=1e-6)


def test_noise_added_to_the_summed_gradient_has_std_z_times_c(problem):
    params, rows, _ = problem
    z, clip, expected = 1.7, 0.3, 25.0
    phase = _phase(1.0, clip, z, expected)  # q = 1: every row sampled, the sum is deterministic

    def loss(p, row, _):
        return _loss(p, row, jnp.zeros(3))

    mask = jnp.ones(rows.shape[0], dtype=bool)
    exact = dpsgd.clipped_gradient_sum(loss, params, rows, mask, jax.random.key(0), phase)
    draw = jax.jit(lambda key: dpsgd.private_gradient(loss, params, rows, key, phase))
    source = NoiseSource.for_testing(3)
    draws = [draw(source.jax_key()) for _ in range(400)]
    noise = np.concatenate([np.ravel(expected * g[k] - exact[k]) for g in draws for k in g])
    # 7 200 draws: the sample std is within 4 standard errors (sd / sqrt(2N)) of z * C.
    assert abs(noise.std() - z * clip) < 4 * z * clip / math.sqrt(2 * noise.size)
    assert abs(noise.mean()) < 4 * z * clip / math.sqrt(noise.size)
