"""DP-SGD in JAX: Poisson subsampling, per-example clipping, Gaussian noise (Abadi et al. 2016).

One DP-SGD step on parameters ``w`` with Poisson rate ``q``, clip norm ``C`` and noise multiplier
``z`` computes (DP-auto-GAN, Algorithm 1 with microbatch r = 1; digest `dp_auto_gan.md` §3.1)::

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
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

Params = Any  # a pytree of arrays
PerExampleLoss = Callable[[Params, jax.Array, Any], jax.Array]
ExtrasFn = Callable[[jax.Array, int], Any]


@dataclass(frozen=True)
class DpSgdPhase:
    """Public parameters of one DP-SGD training phase (fixed by the plan, before data is read).

    ``expected_batch = sampling_rate * n_public``; the privacy cost is that of ``steps``
    compositions of the Poisson-subsampled Gaussian mechanism with (q, noise_multiplier).
    """

    sampling_rate: float
    clip_norm: float
    noise_multiplier: float
    steps: int
    expected_batch: float

    @property
    def chunk_size(self) -> int:
        """Rows per padded chunk: expected batch + 3 standard deviations (overflow is rare)."""
        b = self.expected_batch
        return max(1, math.ceil(b + 3.0 * math.sqrt(b * (1.0 - self.sampling_rate))))


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
    """Independent N(0, std^2) noise with the structure of ``tree`` (one draw for all leaves)."""
    flat, unravel = ravel_pytree(tree)
    return unravel(std * jax.random.normal(key, flat.shape, flat.dtype))


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
    noise = gaussian_noise_like(k_noise, total, phase.noise_multiplier * phase.clip_norm)
    return jax.tree.map(lambda t, e: (t + e) / phase.expected_batch, total, noise)
