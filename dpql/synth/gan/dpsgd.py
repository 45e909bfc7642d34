"""DP-SGD in JAX: Poisson subsampling, per-example clipping, Gaussian noise (Abadi et al. 2016).

One DP-SGD step on parameters ``w`` with Poisson rate ``q``, clip norm ``C`` and noise multiplier
``z`` computes (Tantipongpipat et al. 2019, §2.1, Algorithm 1 with microbatch r = 1)::

    B  = {i : row i drawn with probability q}  (independently; see :func:`poisson_mask`)
    g  = ( sum_{i in B} clip(grad l(w, x_i), C) + N(0, z^2 C^2 I) ) / (q * n_public)
    clip(v, C) = v * min(1, C / ||v||_2)      (global norm over the whole parameter pytree)

and hands ``g`` to an optax optimiser. The divisor is the *expected* batch ``q * n_public``, a
public constant, never the realised ``|B|`` (which is private).

Static shapes without overflow. ``B`` is drawn as a Bernoulli mask over all rows and processed in
fixed-size chunks of ``chunk_size`` rows (ranks ``j*chunk .. (j+1)*chunk - 1`` of the sampled
rows), padded and masked, inside a ``lax.fori_loop`` whose trip count ``ceil(|B| / chunk)`` is
dynamic. Every sampled row contributes, whatever ``|B|`` is, so the mechanism is exactly the
Poisson-subsampled Gaussian that the accountant analyses: no truncation, no extra delta.
``chunk_size`` only trades padding against the (rare) second chunk. (The run time of a step
thus depends on ``|B|``; run times are not part of any release.)

Only this module and :mod:`dpql.synth.gan.train` touch private rows. The sampling and noise
key must come from the privacy layer's noise source (``NoiseSource.jax_key()``): secrecy of the
sample is what the amplification-by-subsampling analysis assumes.

Large tables (:func:`poisson_batches`, :func:`sampled_private_gradient`). When the encoded rows
do not fit on the device, each step's sample is drawn on the host *by row number* and only the
sampled rows are fetched (from the data layer's out-of-core row store). The sample has the
distribution of :func:`poisson_mask` (up to the rounding below): every row independently with
probability ``p = floor(q * 2**32) / 2**32 <= q``. It is drawn in O(|B|), not O(n), as the positions
of the successes of those n Bernoulli(p) trials: the gaps between successes are i.i.d.
Geometric(p), sampled by inversion, ``G = 1 + floor(log(U) / log(1 - p))`` with ``U`` uniform
on (0, 1] from 53 random bits (``P(G > k) = P(U <= (1-p)**k) = (1-p)**k``); positions past the
last row end the sample. So the accountant's analysis (Poisson subsampling at rate q, secret
sample) holds unchanged; the only departure from the ideal sampler is float64 rounding in the
inversion (relative 1e-16); the sample itself is never released. The random bits come from a
key of the noise source, like the mask's.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from dpql.synth.gan.plan import DpSgdPhase

Params = Any  # a pytree of arrays
PerExampleLoss = Callable[[Params, jax.Array, Any], jax.Array]
ExtrasFn = Callable[[jax.Array, int], Any]
GAP_SIGMAS = 6.0  # gaps drawn at once per step: expected batch + this many standard deviations


def poisson_mask(key: jax.Array, rows: int, sampling_rate: float) -> jax.Array:
    """Independent inclusion of each of ``rows`` records with probability at most ``q``.

    Row i is included iff 32 random bits ``< floor(q * 2**32)``: the realised rate is
    ``floor(q * 2**32) / 2**32 <= q`` exactly, so accounting at ``q`` is an upper bound (epsilon
    is increasing in q). A float ``uniform < q`` test could round the rate *above* q.
    """
    if sampling_rate >= 1.0:
        return jnp.ones((rows,), dtype=bool)
    threshold = jnp.uint32(math.floor(sampling_rate * 2**32))
    return jax.random.bits(key, (rows,), jnp.uint32) < threshold


def realised_rate(sampling_rate: float) -> float:
    """The inclusion probability both samplers use: ``floor(q * 2**32) / 2**32 <= q`` (1 if
    ``q >= 1``)."""
    if sampling_rate >= 1.0:
        return 1.0
    return math.floor(sampling_rate * 2**32) / 2**32


@partial(jax.jit, static_argnums=(1, 2))
def _step_words(key: jax.Array, steps: int, gaps: int) -> jax.Array:
    """``(steps, gaps, 2)`` random words, step ``s`` from ``split(key, steps)[s]``."""
    keys = jax.random.split(key, steps)
    return jax.vmap(lambda k: jax.random.bits(k, (gaps, 2), jnp.uint32))(keys)


def _geometric_gaps(words: np.ndarray, log1m_p: float, cap: int) -> np.ndarray:
    """Geometric(p) gaps (support 1, 2, ...) by inversion from pairs of 32-bit words, capped at
    ``cap`` (beyond the last row, where the exact value no longer matters)."""
    hi = words[..., 0].astype(np.uint64) >> np.uint64(5)
    lo = words[..., 1].astype(np.uint64) >> np.uint64(6)
    u = ((hi << np.uint64(26)) + lo + np.uint64(1)).astype(np.float64) * 2.0**-53  # (0, 1]
    return 1 + np.minimum(np.floor(np.log(u) / log1m_p), cap).astype(np.int64)


def poisson_batches(
    key: jax.Array, rows: int, sampling_rate: float, steps: int
) -> list[np.ndarray]:
    """The Poisson samples of ``steps`` DP-SGD steps over ``rows`` rows: per step the sorted row
    numbers, each row included independently with probability ``realised_rate(q)`` (see the
    module docstring), in time O(steps * expected batch). Step ``s`` depends only on
    ``split(key, steps)[s]``; ``key`` must come from the noise source and stay secret.
    """
    p = realised_rate(sampling_rate)
    if p >= 1.0:
        return [np.arange(rows, dtype=np.int64) for _ in range(steps)]
    if p <= 0.0 or rows == 0:
        return [np.zeros(0, dtype=np.int64) for _ in range(steps)]
    log1m_p = math.log1p(-p)
    mean = rows * p
    gaps = max(1, math.ceil(mean + GAP_SIGMAS * math.sqrt(mean) + 2))  # one draw almost always
    words = np.asarray(_step_words(key, steps, gaps))
    step_keys = None
    out = []
    for s in range(steps):
        position = np.cumsum(_geometric_gaps(words[s], log1m_p, rows)) - 1
        extra = 0
        while position[-1] < rows:  # the sample is not complete yet: more gaps
            extra += 1
            step_keys = jax.random.split(key, steps) if step_keys is None else step_keys
            more_key = jax.random.fold_in(step_keys[s], extra)
            more = np.asarray(jax.random.bits(more_key, (gaps, 2), jnp.uint32))
            position = np.concatenate(
                [position, position[-1] + np.cumsum(_geometric_gaps(more, log1m_p, rows))]
            )
        out.append(position[position < rows])
    return out


def per_example_gradients(
    loss: PerExampleLoss, params: Params, rows: jax.Array, extras: Any = None
) -> Params:
    """Gradients of ``loss(params, row, extra)`` for every row, stacked on a leading axis."""
    return jax.vmap(jax.grad(loss), in_axes=(None, 0, 0))(params, rows, extras)


def clip_gradients(grads: Params, clip_norm: float) -> Params:
    """Scale each example's gradient (leading axis) to global L2 norm at most ``clip_norm``."""
    leaves = jax.tree.leaves(grads)
    norms = jnp.sqrt(sum(jnp.sum(g.reshape(g.shape[0], -1) ** 2, axis=1) for g in leaves))
    factor = jnp.minimum(1.0, clip_norm / jnp.maximum(norms, 1e-12))
    return jax.tree.map(lambda g: g * factor.reshape((-1,) + (1,) * (g.ndim - 1)), grads)


def gaussian_noise_like(key: jax.Array, tree: Params, std: float) -> Params:
    """Independent N(0, std^2) noise with the structure of ``tree`` (one draw for all leaves).

    Secure-mode construction (Holohan & Braghin 2021, "Secure random sampling in differential
    privacy", as in Opacus' ``secure_mode``): each coordinate is the sum of four independent
    float32 normals of sd ``std / 2``, which smooths the lattice structure of a single float
    sample. The key is 128 bits from the OS CSPRNG (:meth:`dpql.privacy.noise.NoiseSource.
    jax_key`). Noisy gradients are never released: only rows sampled from the final generator
    are, so no published number is a noisy gradient whose float bits could be inspected
    (docs/privacy.md)."""
    flat, unravel = ravel_pytree(tree)
    draws = jax.random.normal(key, (4, *flat.shape), flat.dtype)
    return unravel((std / 2) * draws.sum(axis=0))


def clipped_gradient_sum(
    loss: PerExampleLoss,
    params: Params,
    data: jax.Array,
    mask: jax.Array,
    key: jax.Array,
    phase: DpSgdPhase,
    extras: ExtrasFn | None = None,
) -> Params:
    """``sum_{i : mask_i} clip(grad loss(params, data_i, extra_i), C)`` in padded chunks.

    ``extras(key, chunk)`` draws per-example non-private inputs (the critic's fake records),
    one per row of a chunk; padded rows are computed and then multiplied by zero.
    """
    chunk = phase.chunk_size
    count = jnp.sum(mask)
    rank = jnp.cumsum(mask) - 1

    def add_chunk(j: jax.Array, total: Params) -> Params:
        (idx,) = jnp.nonzero(mask & (rank // chunk == j), size=chunk, fill_value=0)
        valid = (jnp.arange(chunk) < count - j * chunk).astype(data.dtype)
        extra = None if extras is None else extras(jax.random.fold_in(key, j), chunk)
        grads = clip_gradients(
            per_example_gradients(loss, params, data[idx], extra), phase.clip_norm
        )
        return jax.tree.map(lambda t, g: t + jnp.tensordot(valid, g, axes=1), total, grads)

    zeros = jax.tree.map(jnp.zeros_like, params)
    return jax.lax.fori_loop(0, (count + chunk - 1) // chunk, add_chunk, zeros)


def _noisy_mean(total: Params, key: jax.Array, phase: DpSgdPhase) -> Params:
    noise = gaussian_noise_like(key, total, phase.noise_multiplier * phase.clip_norm)
    return jax.tree.map(lambda t, e: (t + e) / phase.expected_batch, total, noise)


def private_gradient(
    loss: PerExampleLoss,
    params: Params,
    data: jax.Array,
    key: jax.Array,
    phase: DpSgdPhase,
    extras: ExtrasFn | None = None,
) -> Params:
    """One noisy DP-SGD gradient (module docstring); ``key`` must be a noise-source key."""
    k_sample, k_extras, k_noise = jax.random.split(key, 3)
    mask = poisson_mask(k_sample, data.shape[0], phase.sampling_rate)
    total = clipped_gradient_sum(loss, params, data, mask, k_extras, phase, extras)
    return _noisy_mean(total, k_noise, phase)


def sampled_private_gradient(
    loss: PerExampleLoss,
    params: Params,
    batch: jax.Array,
    count: jax.Array,
    key: jax.Array,
    phase: DpSgdPhase,
    extras: ExtrasFn | None = None,
) -> Params:
    """:func:`private_gradient` on a sample drawn on the host: rows ``batch[:count]`` are the
    step's Poisson sample (:func:`poisson_batches`), the rest padding. Every sampled row counts,
    whatever ``count`` is (``batch`` is as long as the largest sample). ``key`` splits as in
    :func:`private_gradient` (its sampling part unused), so with every row sampled both give
    the same gradient for the same key.
    """
    _, k_extras, k_noise = jax.random.split(key, 3)
    mask = jnp.arange(batch.shape[0]) < count
    total = clipped_gradient_sum(loss, params, batch, mask, k_extras, phase, extras)
    return _noisy_mean(total, k_noise, phase)
