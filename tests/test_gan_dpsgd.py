"""DP-SGD building blocks: per-example gradients, clipping, Poisson masks and host-side Poisson
samples by row number, noise scale; training on rows sampled on the host."""

from __future__ import annotations

import math
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpql.domain import CategoricalColumn, Domain, EncodedTable, NumericColumn, numeric_edges
from dpql.privacy.ledger import Ledger
from dpql.privacy.noise import NoiseSource
from dpql.synth.gan import GanOptions, dpsgd, encoding, plan_gan, train


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


@pytest.fixture(autouse=True)
def _full_float32_products():
    """Every test compares two ways of computing the same gradients: at full float32 matrix
    precision, since an accelerator's default (TF32 on GPUs) rounds them differently."""
    with jax.default_matmul_precision("highest"):
        yield


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


@pytest.mark.slow
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


@pytest.mark.slow
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


# --------------------------------------------------------------------------------------------
# Host-side Poisson sampling by row number (large tables)


def _sizes_are_binomial(samples: list[np.ndarray], rows: int, q: float) -> None:
    """Batch sizes ~ Binomial(rows, q): sample mean and variance within 5 standard errors."""
    sizes = np.array([s.size for s in samples], dtype=np.float64)
    m, mean, var = sizes.size, rows * q, rows * q * (1 - q)
    assert abs(sizes.mean() - mean) < 5 * math.sqrt(var / m)
    # standard error of the sample variance: var * sqrt(2 / (m - 1) + excess kurtosis / m)
    kurtosis = (1 - 6 * q * (1 - q)) / var
    assert abs(sizes.var(ddof=1) - var) < 5 * var * math.sqrt(2 / (m - 1) + kurtosis / m)


@pytest.mark.slow
@pytest.mark.parametrize("gap_sigmas", [6.0, -2.0])  # -2: most steps need a second draw of gaps
def test_poisson_batches_include_each_row_independently_at_rate_q(gap_sigmas, monkeypatch):
    monkeypatch.setattr(dpsgd, "GAP_SIGMAS", gap_sigmas)
    rows, q, steps = 2_000, 0.03, 3_000
    samples = dpsgd.poisson_batches(NoiseSource.for_testing(5).jax_key(), rows, q, steps)
    assert len(samples) == steps
    for s in samples:
        assert s.dtype == np.int64 and np.all(np.diff(s) > 0)
        assert s.size == 0 or (s[0] >= 0 and s[-1] < rows)
    _sizes_are_binomial(samples, rows, q)
    # Each row's inclusion count ~ Binomial(steps, q), the same for every row (no edge effects):
    # the chi-square statistic over all rows is ~ chi2(rows), mean rows, sd sqrt(2 rows).
    counts = np.bincount(np.concatenate(samples), minlength=rows)
    mean, var = steps * q, steps * q * (1 - q)
    assert abs(((counts - mean) ** 2 / var).sum() - rows) < 5 * math.sqrt(2 * rows)
    for r in (0, rows - 1):
        assert abs(counts[r] - mean) < 5 * math.sqrt(var)
    # The first sampled row is Geometric: P(row 0) = q, P(row 1 first) = q (1 - q).
    firsts = np.array([s[0] if s.size else rows for s in samples])
    for k in (0, 1):
        p = q * (1 - q) ** k
        assert abs((firsts == k).mean() - p) < 5 * math.sqrt(p * (1 - p) / steps)


def test_poisson_batches_at_large_n_are_binomial_and_do_work_of_the_batch_size(monkeypatch):
    """Each step draws about one batch's worth of gaps, O(batch) and not O(rows): the gaps
    drawn over all steps are counted, not timed."""
    rows, q, steps = 10_000_000, 64 / 10_000_000, 2_000
    drawn: list[int] = []
    gaps = dpsgd._geometric_gaps

    def counting(words, log1m_p, cap):
        out = gaps(words, log1m_p, cap)
        drawn.append(out.size)
        return out

    monkeypatch.setattr(dpsgd, "_geometric_gaps", counting)
    samples = dpsgd.poisson_batches(NoiseSource.for_testing(6).jax_key(), rows, q, steps)
    _sizes_are_binomial(samples, rows, dpsgd.realised_rate(q))
    assert max(s[-1] for s in samples if s.size) > rows * 0.99  # the whole table is reachable
    batch = rows * dpsgd.realised_rate(q)
    assert len(drawn) >= steps and sum(drawn) < steps * (batch + 10 * math.sqrt(batch) + 3)


def test_poisson_batches_edge_rates_and_reproducibility():
    key = NoiseSource.for_testing(7).jax_key()
    full = dpsgd.poisson_batches(key, 5, 1.0, 3)
    assert [s.tolist() for s in full] == [[0, 1, 2, 3, 4]] * 3
    assert all(s.size == 0 for s in dpsgd.poisson_batches(key, 5, 1e-12, 3))  # rate rounds to 0
    assert dpsgd.realised_rate(0.1) <= 0.1 and 0.1 - dpsgd.realised_rate(0.1) < 2**-32
    a = dpsgd.poisson_batches(key, 1_000, 0.1, 4)
    b = dpsgd.poisson_batches(key, 1_000, 0.1, 4)
    c = dpsgd.poisson_batches(NoiseSource.for_testing(8).jax_key(), 1_000, 0.1, 4)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c, strict=True))
    assert len({tuple(s) for s in a}) == 4  # steps are not copies of each other


@pytest.mark.slow
def test_sampled_gradient_equals_the_masked_one_when_every_row_is_sampled(problem):
    params, rows, _ = problem
    phase = _phase(1.0, 0.4, 1.3, 40.0)

    def loss(p, row, _):
        return _loss(p, row, jnp.zeros(3))

    key = NoiseSource.for_testing(9).jax_key()
    masked = dpsgd.private_gradient(loss, params, rows, key, phase)
    padded = jnp.concatenate([rows, jnp.full((9, rows.shape[1]), 50.0)])  # padding is ignored
    sampled = dpsgd.sampled_private_gradient(loss, params, padded, rows.shape[0], key, phase)
    for name in params:
        np.testing.assert_allclose(sampled[name], masked[name], rtol=1e-5, atol=1e-7)


# --------------------------------------------------------------------------------------------
# Training on rows sampled on the host


def _table(n: int, seed: int) -> EncodedTable:
    domain = Domain(
        (
            NumericColumn("age", 17, 90, True, numeric_edges(17, 90, True, 8)),
            CategoricalColumn("colour", ("red", "green", "blue", "other")),
            CategoricalColumn("sex", ("F", "M")),
        )
    )
    rng = np.random.default_rng(seed)
    age = rng.integers(17, 91, n).astype(float)
    codes = {
        "age": domain["age"].bin_of(age),
        "colour": rng.integers(0, 4, n).astype(np.int32),
        "sex": rng.integers(0, 2, n).astype(np.int32),
    }
    return EncodedTable(domain, codes, {"age": (age - 17) / 73})


TableRows = train._TableRows


class CountingRows:
    """Rows addressed by number that record every fetch (stands in for the data layer's store)."""

    def __init__(self, table: EncodedTable):
        self.table, self.fetched = table, 0
        self.domain, self.n = table.domain, table.n

    def take(self, rows: np.ndarray) -> EncodedTable:
        self.fetched += rows.size
        return TableRows(self.table).take(rows)


def test_streamed_blocks_hold_exactly_each_steps_sample_encoded(monkeypatch):
    table = _table(300, 0)
    phase = dpsgd.DpSgdPhase(0.03, 1.0, 1.0, 15, 9.0)
    width = encoding.width(table.domain)
    monkeypatch.setattr(train, "BLOCK_FLOATS", 6 * phase.chunk_size * width)  # 6 steps a block
    key = NoiseSource.for_testing(10).jax_key()
    blocks = list(train._streamed_blocks(train._TableRows(table), phase, key))
    assert [start for start, _ in blocks] == [0, 6, 12]
    dense = encoding.encode(table)
    for b, (start, (batches, counts)) in enumerate(blocks):
        assert batches.shape[0] == counts.shape[0] == 6
        assert batches.shape[1] % phase.chunk_size == 0 and batches.shape[1] >= counts.max()
        steps = min(6, phase.steps - start)
        expected = dpsgd.poisson_batches(jax.random.fold_in(key, b), 300, 0.03, steps)
        for s in range(6):
            want = dense[expected[s]] if s < steps else dense[:0]
            assert counts[s] == len(want)
            np.testing.assert_array_equal(batches[s, : counts[s]], want)
            assert not batches[s, counts[s] :].any()


@pytest.mark.slow
def test_training_on_rows_sampled_on_the_host(monkeypatch):
    options = GanOptions.from_mapping(
        {
            "ae_steps": 20,
            "critic_steps": 20,
            "ae_batch_size": 30,
            "critic_batch_size": 30,
            "ae_latent_dim": 3,
            "generator_noise_dim": 4,
            "critic_steps_per_generator_step": 2,
            "noise_multipliers": [1.5, 1.5],
        }
    )
    plan = plan_gan(options, 600, SimpleNamespace(epsilon=50.0, delta=1e-5))
    rows = CountingRows(_table(600, 1))
    ledger, calls = Ledger(), []
    model = train.train_gan(
        rows, plan, noise=NoiseSource.for_testing(11), ledger=ledger,
        progress=lambda *a: calls.append(a),
    )  # fmt: skip
    assert ledger.events == plan.events()
    assert calls[-1] == ("generator", 20, 20) and ("autoencoder", 20, 20) in calls
    # Only the sampled rows were fetched: about 40 steps * 30 rows, never the whole table.
    assert 0.5 * 1200 < rows.fetched < 1.5 * 1200
    synthetic = train.sample(model, 100, seed=0)
    assert synthetic.n == 100 and set(synthetic.codes["colour"]) <= {0, 1, 2, 3}


def test_large_in_memory_tables_are_sampled_on_the_host_too(monkeypatch):
    sources = []

    def phase(source, *args):
        sources.append(source)
        return {}

    monkeypatch.setattr(train, "_train_autoencoder", phase)
    monkeypatch.setattr(train, "_train_wgan", phase)
    monkeypatch.setattr(train, "sample", None)
    options = GanOptions.from_mapping(
        {"preset": "paper", "ae_steps": 5, "critic_steps": 5, "noise_multipliers": [2.0, 2.0]}
    )
    plan = plan_gan(options, 600, SimpleNamespace(epsilon=1e3, delta=1e-5))
    small, large = _table(100, 2), _table(600, 3)
    monkeypatch.setattr(train, "DEVICE_ROWS", 100)
    for t in (small, large):
        train.train_gan(t, plan, noise=NoiseSource.for_testing(12), ledger=Ledger())
    device, host = sources[0], sources[2]
    assert device.rows is None and device.data.shape == (100, encoding.width(small.domain))
    assert host.data is None and host.rows.table is large and host.width == device.width
