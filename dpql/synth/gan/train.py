"""Plan, train and sample DP-auto-GAN (Tantipongpipat et al. 2019).

Two phases, each DP-SGD on the private rows (:mod:`dpql.synth.gan.dpsgd`):

1. ``autoencoder``: encoder **and** decoder trained jointly with per-example clipping of the
   joint gradient and Gaussian noise on both (the paper's Algorithm 3, App. A, leaves the
   encoder non-private, and the decoder's gradient depends on the encoder's output, so a
   non-private encoder breaks the decoder's guarantee). Loss: BCE from logits, mean over the n
   coordinates (the reduction under which the paper's clip norm 0.012, the median gradient norm
   of a non-private run, App. E.1, applies).
2. ``generator``: a WGAN in latent space. The critic is trained with DP-SGD on pairs
   (real row, fresh fake row): per-example loss ``-D(real) + D(fake)``, clipped per pair
   (Algorithm 4), then its weights are clamped to +-``critic_weight_clip``. Every
   ``critic_steps_per_generator_step`` critic steps (from step 0) the generator takes one
   non-private RMSProp step on ``-mean D(sigmoid(De(G(z))))`` through the frozen decoder
   (Algorithm 5): it sees only noised critic parameters, so it is post-processing.

3. (``encoding: bins`` with DP-measured marginals) the generator's loss also gets
   ``marginal_weight`` times the squared error of its relaxed marginals against the noisy
   ones (:mod:`dpql.synth.gan.fidelity`), and after phase 2 generator and decoder take
   ``finetune_steps`` Adam steps on that penalty alone (:func:`finetune`). Both see only DP
   outputs (noised critic parameters, the ``gan.marginals`` release): post-processing, no
   ledger event. Sampling then draws each column's code from the decoder's probabilities.

Accounting: the two phases are ``autoencoder_steps`` and ``critic_steps`` compositions of the
Poisson-subsampled Gaussian mechanism; :func:`~dpql.synth.gan.plan.plan_gan` fixes their
parameters before any data is read and :func:`train_gan` appends one ``dpsgd`` ledger event
per phase *before* running it. Only the critic steps are accounted in phase 2 (the paper's
15,000 minibatches of the critic, App. E.1).

Nothing computed from private rows leaves :func:`train_gan` except the DP-SGD-trained parameters:
no training losses, batch sizes or norms are returned or logged (they would be unaccounted).

Data paths (same mechanism, same accounting): a table of at most :data:`DEVICE_ROWS` rows is
encoded once and kept on the device, each step drawing its Poisson mask over all rows inside
the jitted loop; larger tables, or rows held out of core (:class:`PrivateRows`, e.g. the data
layer's row store), are sampled on the host by row number (:func:`dpsgd.poisson_batches`, O(batch)
per step) and only the sampled rows are fetched, encoded and sent to the device, a block of
steps at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np
import optax

from dpql.domain import Domain, EncodedTable
from dpql.privacy.ledger import Ledger
from dpql.privacy.noise import NoiseSource
from dpql.progress import Progress
from dpql.spec.models import GanOptions
from dpql.synth.gan import encoding, fidelity, nets
from dpql.synth.gan.dpsgd import (
    Params,
    PerExampleLoss,
    poisson_batches,
    private_gradient,
    sampled_private_gradient,
)
from dpql.synth.gan.plan import DpSgdPhase, GanPlan

DEVICE_ROWS = 1 << 16  # tables up to this many rows train on a device-resident copy
BLOCK_FLOATS = 1 << 23  # floats of sampled rows sent to the device per block of steps (32 MiB)


class PrivateRows(Protocol):
    """Private rows in the public encoding, addressed by row number (e.g. the data layer's
    out-of-core ``dpql.data.rows.RowStore``). ``take`` returns the rows in the order given."""

    @property
    def domain(self) -> Domain: ...

    @property
    def n(self) -> int: ...

    def take(self, rows: np.ndarray) -> EncodedTable: ...


@dataclass(frozen=True, eq=False)
class _TableRows:
    """An in-memory table as :class:`PrivateRows`."""

    table: EncodedTable

    @property
    def domain(self) -> Domain:
        return self.table.domain

    @property
    def n(self) -> int:
        return self.table.n

    def take(self, rows: np.ndarray) -> EncodedTable:
        return self.table.take(rows)


@dataclass(frozen=True, eq=False)
class GanModel:
    """The released model (G, De) and the public domain it decodes to; no encoder, no critic."""

    domain: Domain
    options: GanOptions
    decoder: Params
    generator: Params
    stochastic: bool = False  # draw each block's code (fitted to marginals) instead of argmax


def _run_phase(
    name: str,
    step: Callable[[Any, jax.Array, Any, Any], Any],
    state: Any,
    inputs: Any,
    phase: DpSgdPhase,
    progress: Progress | None,
    rows: PrivateRows | None = None,
    sample_key: jax.Array | None = None,
    codec: tuple[str, int] = ("minmax", 16),
) -> Any:
    """Run ``state = step(state, i, inputs, batch)`` for ``i < phase.steps`` in jitted
    ``lax.scan`` blocks, reporting progress after each.

    Without ``rows`` the private data is in ``inputs`` and ``batch`` is ``None``: one block per
    expected epoch (``1 / q`` steps). With ``rows`` (:func:`_streamed_blocks`) ``batch`` is the
    step's ``(sampled rows, count)``, drawn on the host from ``sample_key``.

    Private data and noise keys travel as jit *arguments* (``inputs``, batches), never as
    closed-over constants, so they are not embedded in compiled programs (which JAX may cache on
    disk), and they are not part of the returned state.
    """
    total = phase.steps

    def body(s: Any, x: tuple[jax.Array, Any], inputs: Any) -> tuple[Any, None]:
        i, batch = x
        return jax.lax.cond(i < total, lambda s: step(s, i, inputs, batch), lambda s: s, s), None

    if rows is None:
        block = max(1, min(total, round(1 / phase.sampling_rate)))

        @jax.jit
        def run_block(state: Any, start: jax.Array, inputs: Any) -> Any:
            xs = (start + jnp.arange(block), None)
            return jax.lax.scan(lambda s, x: body(s, x, inputs), state, xs)[0]

        for start in range(0, total, block):
            state = jax.block_until_ready(run_block(state, jnp.asarray(start), inputs))
            if progress is not None:
                progress(name, min(start + block, total), total)
        return state

    assert sample_key is not None

    @jax.jit
    def run_sampled(state: Any, start: jax.Array, inputs: Any, batches: Any) -> Any:
        xs = (start + jnp.arange(batches[1].shape[0]), batches)
        return jax.lax.scan(lambda s, x: body(s, x, inputs), state, xs)[0]

    for start, batches in _streamed_blocks(rows, phase, sample_key, codec):
        state = run_sampled(state, jnp.asarray(start), inputs, batches)
        if progress is not None:
            state = jax.block_until_ready(state)
            progress(name, min(start + batches[1].shape[0], total), total)
    return state


def _streamed_blocks(
    rows: PrivateRows, phase: DpSgdPhase, key: jax.Array, codec: tuple[str, int] = ("minmax", 16)
) -> Iterator[tuple[int, tuple[np.ndarray, np.ndarray]]]:
    """Per block of steps: the first step's index and ``(batches, counts)``, ``batches[s, :
    counts[s]]`` the encoded Poisson sample of step ``start + s`` (rows drawn independently
    with probability ``realised_rate(q)`` by :func:`dpsgd.poisson_batches`; block ``b`` uses
    ``fold_in(key, b)``), zero-padded to a multiple of ``phase.chunk_size`` that holds the
    block's largest sample, so no sampled row is ever dropped. Steps past ``phase.steps`` in
    the last block are empty. The padded shape changes rarely (a recompilation each time)."""
    chunk, width = phase.chunk_size, encoding.width(rows.domain, *codec)
    block = max(1, min(phase.steps, BLOCK_FLOATS // (chunk * width)))
    for b, start in enumerate(range(0, phase.steps, block)):
        steps = min(block, phase.steps - start)
        samples = poisson_batches(jax.random.fold_in(key, b), rows.n, phase.sampling_rate, steps)
        counts = np.zeros(block, dtype=np.int32)
        counts[:steps] = [len(x) for x in samples]
        capacity = chunk * max(1, -(-int(counts.max()) // chunk))
        batches = np.zeros((block, capacity, width), dtype=np.float32)
        if counts.any():
            encoded = encoding.encode(rows.take(np.concatenate(samples)), *codec)
            step_of = np.repeat(np.arange(block), counts)
            slot = np.arange(step_of.size) - np.repeat(np.cumsum(counts) - counts, counts)
            batches[step_of, slot] = encoded
        yield start, (batches, counts)


def _gradient(
    loss: PerExampleLoss,
    params: Params,
    data: jax.Array | None,
    batch: Any,
    key: jax.Array,
    phase: DpSgdPhase,
    extras: Any = None,
) -> Params:
    """One noisy DP-SGD gradient: over the device-resident ``data`` (mask drawn in the step), or
    over the step's host-drawn ``batch = (rows, count)``."""
    if batch is None:
        assert data is not None
        return private_gradient(loss, params, data, key, phase, extras)
    return sampled_private_gradient(loss, params, batch[0], batch[1], key, phase, extras)


def _decoded(decoder: Params, generator: Params, z: jax.Array) -> jax.Array:
    return jax.nn.sigmoid(nets.decode_logits(decoder, nets.generate_latent(generator, z)))


def train_gan(
    private_rows: EncodedTable | PrivateRows,
    plan: GanPlan,
    *,
    noise: NoiseSource,
    ledger: Ledger,
    progress: Progress | None = None,
    marginals: Sequence[tuple[tuple[str, ...], np.ndarray]] | None = None,
) -> GanModel:
    """Train DP-auto-GAN on the private rows under ``plan`` (module docstring).

    ``marginals``: DP-released marginals ``(columns, noisy answer)``. With
    ``encoding: bins`` the generator's WGAN loss gets ``marginal_weight`` times the marginal
    penalty (:func:`fidelity.marginal_loss`), then generator and decoder take
    ``finetune_steps`` non-private steps on the penalty alone, and the model samples each
    block's code. Both only post-process DP outputs (noised critic parameters, noisy marginals).

    Appends the plan's two ``dpsgd`` events to ``ledger``, each before its phase runs. Sampling
    and DP noise use keys from ``noise``; parameter initialisation uses ``plan.options.seed``.
    The Poisson analysis does not depend on the row count, so ``private_rows.n`` may differ from
    ``plan.n_public`` (the gradient divisor stays the public ``q * n_public``).

    ``private_rows``: an in-memory table (kept on the device up to :data:`DEVICE_ROWS` rows,
    else sampled on the host) or rows addressed by number (:class:`PrivateRows`, always sampled
    on the host, so memory does not grow with the row count). Both paths sample each row
    independently with the same probability ``dpsgd.realised_rate(q) <= q`` per step.
    """
    codec = _codec(plan.options)
    width = encoding.width(private_rows.domain, *codec)
    if isinstance(private_rows, EncodedTable) and private_rows.n <= DEVICE_ROWS:
        source = _Source(width, data=jnp.asarray(encoding.encode(private_rows, *codec)))
    elif isinstance(private_rows, EncodedTable):
        source = _Source(width, rows=_TableRows(private_rows), codec=codec)
    else:
        source = _Source(width, rows=private_rows, codec=codec)
    k_ae, k_gan = jax.random.split(jax.random.key(plan.options.seed))
    ae_event, critic_event = plan.events()
    ledger.append(ae_event)
    decoder = _train_autoencoder(source, plan, k_ae, noise, progress)
    fit = _Fit.of(private_rows.domain, plan.options, marginals)
    ledger.append(critic_event)
    generator = _train_wgan(source, decoder, plan, k_gan, noise, progress, fit)
    if fit is not None and plan.options.finetune_steps > 0:
        generator, decoder = finetune(generator, decoder, fit, plan.options, progress)
    to_numpy = partial(jax.tree.map, np.asarray)
    return GanModel(private_rows.domain, plan.options, to_numpy(decoder), to_numpy(generator),
                    stochastic=fit is not None)  # fmt: skip


@dataclass(frozen=True, eq=False)
class _Fit:
    """The marginal penalty's public parts: code maps, measured column sets, noisy targets."""

    maps: tuple[fidelity.ColumnMap, ...]
    columns: tuple[tuple[str, ...], ...]
    targets: tuple[np.ndarray, ...]

    @staticmethod
    def of(
        domain: Domain,
        options: GanOptions,
        marginals: Sequence[tuple[tuple[str, ...], np.ndarray]] | None,
    ) -> _Fit | None:
        if not marginals or options.encoding != "bins":
            return None
        cols = tuple(tuple(c) for c, _ in marginals)
        targets = tuple(np.asarray(y, dtype=np.float32) for _, y in marginals)
        return _Fit(fidelity.column_maps(domain, options.integer_levels), cols, targets)

    def loss(self, logits: jax.Array, targets: Any) -> jax.Array:
        return fidelity.marginal_loss(logits, self.maps, self.columns, targets)


def finetune(
    generator: Params,
    decoder: Params,
    fit: _Fit,
    options: GanOptions,
    progress: Progress | None = None,
) -> tuple[Params, Params]:
    """Adam on generator and decoder to minimise the marginal penalty alone: non-private
    post-processing (it sees DP-SGD's parameters and the noisy marginals, never a row). Fresh
    latent draws each step from the public ``options.seed``. Returns ``(generator, decoder)``."""
    o = options
    opt = optax.adam(o.finetune_learning_rate)
    params = (generator, decoder)

    def loss(p: tuple[Params, Params], z: jax.Array, targets: Any) -> jax.Array:
        return fit.loss(nets.decode_logits(p[1], nets.generate_latent(p[0], z)), targets)

    def step(state: Any, key: jax.Array, targets: Any) -> tuple[Any, None]:
        p, s = state
        z = jax.random.normal(key, (o.finetune_batch_size, o.generator_noise_dim))
        grad = jax.grad(loss)(p, z, targets)
        updates, s = opt.update(grad, s, p)
        return (optax.apply_updates(p, updates), s), None

    block = min(o.finetune_steps, 500)

    @jax.jit
    def run_block(state: Any, keys: jax.Array, targets: Any) -> Any:
        return jax.lax.scan(lambda s, k: step(s, k, targets), state, keys)[0]

    keys = jax.random.split(jax.random.fold_in(jax.random.key(o.seed), 16), o.finetune_steps)
    targets = tuple(jnp.asarray(y) for y in fit.targets)
    state = (params, opt.init(params))
    for start in range(0, o.finetune_steps, block):
        # a shorter last block compiles once more (jit caches by shape)
        state = jax.block_until_ready(run_block(state, keys[start : start + block], targets))
        if progress is not None:
            progress("finetune", min(start + block, o.finetune_steps), o.finetune_steps)
    return state[0]


@dataclass(frozen=True, eq=False)
class _Source:
    """The private rows of both phases: the encoded table on the device (``data``, ``width``
    columns) or rows sampled on the host (``rows``)."""

    width: int
    data: jax.Array | None = None
    rows: PrivateRows | None = None
    codec: tuple[str, int] = ("minmax", 16)

    def keys(self, noise: NoiseSource) -> tuple[jax.Array, jax.Array | None]:
        """A phase's step key and, for host sampling, its sampling key (both from ``noise``)."""
        return noise.jax_key(), None if self.rows is None else noise.jax_key()


def _train_autoencoder(
    source: _Source,
    plan: GanPlan,
    init_key: jax.Array,
    noise: NoiseSource,
    progress: Progress | None,
) -> Params:
    """Phase 1: DP-SGD on encoder and decoder jointly; returns the decoder parameters."""
    o, n = plan.options, source.width
    hidden = o.ae_hidden or (n + o.ae_latent_dim) // 2  # the authors' width rule
    params = nets.autoencoder_init(init_key, n, hidden, o.ae_latent_dim)
    optimizer = optax.adam(o.ae_learning_rate, b1=0.9, b2=0.999, eps=1e-8)

    def loss(params: Params, x: jax.Array, _: None) -> jax.Array:
        logits = nets.decode_logits(params, nets.encode(params, x))
        return jnp.mean(optax.sigmoid_binary_cross_entropy(logits, x))

    def step(state: Any, i: jax.Array, inputs: tuple[Any, jax.Array], batch: Any) -> Any:
        (params, opt_state), (data, key) = state, inputs
        step_key = jax.random.fold_in(key, i)
        grad = _gradient(loss, params, data, batch, step_key, plan.autoencoder)
        updates, opt_state = optimizer.update(grad, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    state = (params, optimizer.init(params))
    noise_key, sample_key = source.keys(noise)
    inputs = (source.data, noise_key)
    params = _run_phase(
        "autoencoder", step, state, inputs, plan.autoencoder, progress, source.rows, sample_key,
        source.codec,
    )[0]
    return {"decoder": params["decoder"]}


def _train_wgan(
    source: _Source,
    decoder: Params,
    plan: GanPlan,
    init_key: jax.Array,
    noise: NoiseSource,
    progress: Progress | None,
    fit: _Fit | None = None,
) -> Params:
    """Phase 2: DP-SGD critic, non-private generator through the frozen decoder (its loss plus
    ``marginal_weight`` times the marginal penalty when ``fit`` is given)."""
    o, n = plan.options, source.width
    k_gen, k_critic = jax.random.split(init_key)
    generator = nets.generator_init(
        k_gen, o.generator_noise_dim, o.ae_latent_dim, o.generator_layer_norm
    )
    critic = nets.critic_init(k_critic, n, o.critic_hidden or (2 * n // 3, n // 3))
    rmsprop = dict(decay=0.99, eps=1e-8, eps_in_sqrt=False)  # torch RMSprop(alpha=0.99)
    critic_opt = optax.rmsprop(o.critic_learning_rate, **rmsprop)
    gen_opt = optax.rmsprop(o.generator_learning_rate, **rmsprop)
    fakes_per_generator_step = round(plan.critic.expected_batch)

    def critic_loss(params: Params, real: jax.Array, fake: jax.Array) -> jax.Array:
        return nets.critic(params, fake) - nets.critic(params, real)

    weight = o.marginal_weight if fit is not None else 0.0

    def generator_loss(
        gen: Params, critic: Params, decoder: Params, z: jax.Array, targets: Any
    ) -> jax.Array:
        logits = nets.decode_logits(decoder, nets.generate_latent(gen, z))
        out = -jnp.mean(nets.critic(critic, jax.nn.sigmoid(logits)))
        if weight > 0:
            assert fit is not None
            out = out + weight * fit.loss(logits, targets)
        return out

    def step(state: Any, i: jax.Array, inputs: tuple[Any, ...], batch: Any) -> Any:
        (critic, critic_state, gen, gen_state), (data, decoder, key, targets) = state, inputs
        k_critic_step, k_z = jax.random.split(jax.random.fold_in(key, i))

        def fakes(k: jax.Array, rows: int) -> jax.Array:
            return _decoded(decoder, gen, jax.random.normal(k, (rows, o.generator_noise_dim)))

        grad = _gradient(critic_loss, critic, data, batch, k_critic_step, plan.critic, fakes)
        updates, critic_state = critic_opt.update(grad, critic_state, critic)
        critic = optax.apply_updates(critic, updates)
        # WGAN weight clipping: post-processing of noised parameters, privacy-neutral.
        bound = o.critic_weight_clip
        critic = jax.tree.map(lambda w: jnp.clip(w, -bound, bound), critic)

        def generator_step(g: tuple[Params, Any]) -> tuple[Params, Any]:
            z = jax.random.normal(k_z, (fakes_per_generator_step, o.generator_noise_dim))
            grad = jax.grad(generator_loss)(g[0], critic, decoder, z, targets)
            updates, g_state = gen_opt.update(grad, g[1], g[0])
            return optax.apply_updates(g[0], updates), g_state

        take = i % o.critic_steps_per_generator_step == 0
        gen, gen_state = jax.lax.cond(take, generator_step, lambda g: g, (gen, gen_state))
        return critic, critic_state, gen, gen_state

    state = (critic, critic_opt.init(critic), generator, gen_opt.init(generator))
    noise_key, sample_key = source.keys(noise)
    targets = None if fit is None else tuple(jnp.asarray(y) for y in fit.targets)
    inputs = (source.data, decoder, noise_key, targets)
    return _run_phase(
        "generator", step, state, inputs, plan.critic, progress, source.rows, sample_key,
        source.codec,
    )[2]


def sample(model: GanModel, rows: int, seed: int) -> EncodedTable:
    """``rows`` synthetic records: ``z ~ N(0, I)`` -> ``sigmoid(De(G(z)))`` -> decode.

    Post-processing of the released model; ``seed`` is not privacy-relevant and may be recorded.
    """
    k_z, k_draw = jax.random.split(jax.random.key(seed))
    z = jax.random.normal(k_z, (rows, model.options.generator_noise_dim))
    if model.stochastic:
        maps = fidelity.column_maps(model.domain, model.options.integer_levels)

        @jax.jit
        def draw(decoder: Params, generator: Params, z: jax.Array) -> jax.Array:
            logits = nets.decode_logits(decoder, nets.generate_latent(generator, z))
            return fidelity.sample_encoded(k_draw, logits, maps)

        x = draw(model.decoder, model.generator, z)
    else:
        x = jax.jit(_decoded)(model.decoder, model.generator, z)
    return encoding.decode(model.domain, np.asarray(x), *_codec(model.options))


def _codec(options: GanOptions) -> tuple[str, int]:
    """The vector encoding's ``(mode, integer_levels)`` (:mod:`dpql.synth.gan.encoding`)."""
    return options.encoding, options.integer_levels
