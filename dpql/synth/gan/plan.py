"""DP-auto-GAN planning: both DP-SGD phases' public parameters, the marginals the backend
measures, its budget lines and resource cost, fixed before any data is read.

JAX-free, so ``dpql plan`` and ``dpql check`` load no training code (the program is
:mod:`dpql.synth.gan.program`, training :mod:`dpql.synth.gan.train`). The two phases are
``autoencoder_steps`` and ``critic_steps`` compositions of the Poisson-subsampled Gaussian
mechanism (Tantipongpipat et al. 2019, §2.2 and §3.3); :func:`plan_gan` calibrates their noise
multipliers to an (epsilon, delta) target on the accountant's RDP curves.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Protocol

from dpql.diagnostics import Diagnostic, DiagnosticError
from dpql.domain import Domain
from dpql.ir.queries import Marginal, joint_l2_sensitivity
from dpql.plan.resources import STARTUP_SECONDS, data_rows_in_memory
from dpql.privacy.accountant import calibrate_dpsgd_noise, epsilon_from_events
from dpql.privacy.budget import BudgetLine
from dpql.privacy.ledger import PrivacyEvent
from dpql.spec.models import GanOptions
from dpql.synth.base import PlanContext, SynthCost, SynthPlan
from dpql.synth.gan import encoding

OVER_BUDGET = "gan-over-budget"
MARGINAL_PHASE = "marginals"
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
#: DP-SGD's seconds per flop (6 flops per parameter and example: forward, backward)
SECONDS_PER_GAN_FLOP = 5e-11


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



class EpsilonDelta(Protocol):
    """The GAN's share of the release budget, as an (epsilon, delta)-DP target."""

    @property
    def epsilon(self) -> float: ...

    @property
    def delta(self) -> float: ...


@dataclass(frozen=True)
class GanPlan:
    """Everything training needs, fixed without data: options and both DP-SGD phases.

    ``epsilon`` is the accountant's (epsilon, ``delta``)-DP of the two phases composed, under
    the ledger's neighbouring relation (replace-one at ``n_public``). ``marginals``: the
    columns of each marginal the ``gan.marginals`` release measures (empty: none), chosen by
    the backend's plan from public facts.
    """

    options: GanOptions
    n_public: int
    autoencoder: DpSgdPhase
    critic: DpSgdPhase
    delta: float
    epsilon: float
    marginals: tuple[tuple[str, ...], ...] = ()  # columns of each gan.marginals query, in order

    def events(self) -> tuple[PrivacyEvent, PrivacyEvent]:
        """The ledger events of the two phases (what :func:`train_gan` appends)."""
        return _event("autoencoder", self.autoencoder), _event("generator", self.critic)


_LABELS = {
    "autoencoder": "dp-auto-gan: encoder+decoder DP-SGD",
    "generator": "dp-auto-gan: WGAN critic DP-SGD",
}


def _event(phase: str, p: DpSgdPhase) -> PrivacyEvent:
    return PrivacyEvent.dpsgd(
        phase,
        _LABELS[phase],
        sampling_rate=p.sampling_rate,
        noise_multiplier=p.noise_multiplier,
        steps=p.steps,
        clip_norm=p.clip_norm,
    )


def _phase(batch: int, clip: float, z: float, steps: int, n_public: int) -> DpSgdPhase:
    return DpSgdPhase(min(1.0, batch / n_public), clip, z, steps, float(min(batch, n_public)))


def plan_gan(
    options: GanOptions,
    n_public: int,
    budget: EpsilonDelta,
    split: Mapping[str, float] | None = None,
    other_events: Sequence[PrivacyEvent] = (),
) -> GanPlan:
    """Fix both phases' noise multipliers for an (epsilon, delta) target; reads no data.

    ``budget`` bounds the composition of the two GAN phases with ``other_events`` (data-free
    events planned for the same release, e.g. the I-projection measurements; empty when
    ``budget`` is the GAN's own share). With ``options.noise_multipliers`` set (the paper's
    reproduction runs) those are used. Otherwise the autoencoder's noise is calibrated so that
    phase *alone* is (``s * epsilon``, delta)-DP, ``s = split["autoencoder"]`` (the spec's
    ``privacy.split``, default 1/2), and the critic's so that everything *composed* on the
    accountant's RDP curves is (epsilon, delta)-DP: the critic gets its basic-composition share
    plus the slack of RDP composition (paper Lemma 4). Raises ``gan-over-budget`` when the
    budget cannot be met.
    """
    o, delta = options, budget.delta

    def phases(z_ae: float, z_critic: float) -> tuple[DpSgdPhase, DpSgdPhase]:
        return (
            _phase(o.ae_batch_size, o.ae_clip_norm, z_ae, o.ae_steps, n_public),
            _phase(o.critic_batch_size, o.critic_clip_norm, z_critic, o.critic_steps, n_public),
        )

    try:
        if o.noise_multipliers is None:
            share = (split or {"autoencoder": 0.5})["autoencoder"]
            q_ae, q_critic = (p.sampling_rate for p in phases(1.0, 1.0))
            z_ae = calibrate_dpsgd_noise(q_ae, o.ae_steps, share * budget.epsilon, delta)
            ae_event = _event("autoencoder", phases(z_ae, 1.0)[0])
            z_critic = calibrate_dpsgd_noise(
                q_critic, o.critic_steps, budget.epsilon, delta,
                other_events=[ae_event, *other_events],
            )  # fmt: skip
            ae, critic = phases(z_ae, z_critic)
        else:
            ae, critic = phases(*o.noise_multipliers)
        plan = GanPlan(o, n_public, ae, critic, delta, 0.0)
        total = epsilon_from_events([*plan.events(), *other_events], delta).epsilon
        if total > budget.epsilon:
            raise ValueError(
                f"noise multipliers {ae.noise_multiplier:.4g}, {critic.noise_multiplier:.4g} "
                f"spend epsilon={total:.4f} at delta={delta:g}"
            )
    except ValueError as e:
        message = f"the gan cannot meet its budget epsilon={budget.epsilon:g}: {e}"
        hint = "raise noise_multipliers, lower the steps, or give the gan a larger budget share"
        raise DiagnosticError([Diagnostic(OVER_BUDGET, message, hint=hint)]) from e
    return dataclasses.replace(plan, epsilon=epsilon_from_events(plan.events(), delta).epsilon)


# --------------------------------------------------------------------------------------------
# The backend's plan


def plan(ctx: PlanContext, options: GanOptions | None = None) -> SynthPlan:
    """DP-SGD noise for the GAN so that it and the planned zCDP phases fit (epsilon,
    delta) together (the other phases enter as placeholder Gaussian events of their rho)."""
    spec = ctx.spec
    others = [
        PrivacyEvent(
            phase,
            "gaussian",
            f"planned {phase}",
            l2_sensitivity=1.0,
            noise_scale=1.0 / math.sqrt(2 * rho),
            rho=rho,
        )
        for phase, rho in ctx.phase_rho.items()
        if phase != "synthesizer" and rho > 0
    ]
    doc = spec.doc
    where = ("synthesizer", "options") if doc.has(("synthesizer", "options")) else (
        "synthesizer",
    )
    pos = doc.key_pos(where)
    if options is None:
        options = spec.model.synthesizer.options
    _refuse_kept_missing(spec)
    marginal_lines: tuple[BudgetLine, ...] = ()
    measured: tuple[Marginal, ...] = ()
    share = options.effective_marginal_share
    if share > 0 and ctx.phase_rho.get("synthesizer", 0.0) > 0:
        rho_m = share * ctx.phase_rho["synthesizer"]
        measured = marginal_queries(spec.domain, ctx.queries, options, rho_m, spec.rows)
        l2 = joint_l2_sensitivity(measured, spec.rows)
        sigma = l2 / math.sqrt(2 * rho_m)
        others.append(
            PrivacyEvent(
                MARGINAL_PHASE,
                "gaussian",
                f"planned gan marginals ({len(measured)})",
                l2_sensitivity=l2,
                noise_scale=sigma,
                rho=rho_m,
            )
        )
        marginal_lines = (
            BudgetLine(
                f"gan.{MARGINAL_PHASE}",
                "gaussian",
                1,
                rho_m,
                sigma,
                spec.rows,
                sum(q.cells(spec.domain) for q in measured),
            ),
        )
    target = SimpleNamespace(epsilon=ctx.epsilon, delta=ctx.delta)
    try:
        gan = plan_gan(
            options, spec.rows, target, spec.model.privacy.split, other_events=tuple(others)
        )
    except (ValueError, ArithmeticError) as e:  # noise multipliers the accountant refuses
        raise DiagnosticError(
            [
                Diagnostic(
                    "E152",
                    f"the gan options cannot be planned: {e or type(e).__name__}",
                    pos,
                    "use noise multipliers and step counts in the range of the paper's "
                    "(noise about 0.5 to 10), or leave noise_multipliers out to calibrate "
                    "them",
                )
            ]
        ) from None
    gan = dataclasses.replace(gan, marginals=tuple(q.columns for q in measured))
    lines = marginal_lines + tuple(
        BudgetLine(f"gan.{e.phase}", "dpsgd", e.steps or 1, None, e.noise_multiplier, spec.rows)
        for e in gan.events()
    )
    synth_cost = cost(
        spec.domain, options, spec.rows, spec.model.data.engine,
        encoding.width(spec.domain, options.encoding, options.integer_levels),
        sum(spec.domain.cells(q.columns) for q in measured) if options.finetune_steps else 0,
        spec.model.synthesizer.rows * (options.resample_pool if marginal_lines else 1),
    )  # fmt: skip
    return SynthPlan("gan", lines, gan, synth_cost, options.model_dump(mode="json"))


def marginal_queries(
    domain: Any,
    workload: Sequence[Any] = (),
    options: GanOptions | None = None,
    rho: float = 0.0,
    n: int = 1,
) -> tuple[Marginal, ...]:
    """The marginals the ``gan.marginals`` phase releases, chosen from public facts only.

    Always every 1-way marginal, in domain order. With ``encoding: bins`` and
    ``marginal_ways >= 2``, also k-way marginals (2 <= k <= ``marginal_ways``) over column
    sets contained in a workload marginal (every column pair when the workload has no marginal
    over two or more columns), smallest (fewest cells) first, while the candidate's
    expected L1 noise ``sqrt(2/pi) * sigma * cells`` stays below ``marginal_noise_limit``,
    where ``sigma = sqrt(K) / (n sqrt(rho))`` is the per-cell noise (as a fraction of n) of one
    Gaussian release of all ``K`` chosen marginals at ``rho`` (joint L2 sensitivity
    ``sqrt(2 K) / n`` under replace-one). Depends on the domain, the workload, the options,
    ``rho`` and the public ``n``: never on data."""
    ones = tuple(Marginal((c.name,)) for c in domain)
    o = options
    if o is None or o.encoding != "bins" or o.marginal_ways < 2 or rho <= 0:
        return ones
    names = list(domain.names)
    candidates: set[tuple[str, ...]] = set()
    for q in workload:
        if isinstance(q, Marginal) and len(set(q.columns)) >= 2:
            cols = sorted(set(q.columns), key=names.index)
            for k in range(2, min(o.marginal_ways, len(cols)) + 1):
                candidates.update(itertools.combinations(cols, k))
    if not candidates:  # no k-way workload marginal: every pair, for a general-purpose table
        candidates.update(itertools.combinations(names, 2))
    ordered = sorted(candidates, key=lambda c: (domain.cells(c), [names.index(x) for x in c]))
    chosen: list[Marginal] = []
    for cols in ordered:
        sigma = math.sqrt(len(ones) + len(chosen) + 1) / (n * math.sqrt(rho))
        if SQRT_2_OVER_PI * sigma * domain.cells(cols) >= o.marginal_noise_limit:
            break  # cells grow and sigma grows along the order: no later candidate fits
        chosen.append(Marginal(cols))
    return ones + tuple(chosen)


def _refuse_kept_missing(spec: Any) -> None:
    """E109 for a ``missing: keep`` column: the GAN's encoding has no state for a missing cell."""
    model, doc = spec.model, spec.doc
    diags = []
    for name, col in model.columns.items():
        if (col.missing or model.missing) != "keep":
            continue
        at = ("schema", name, "missing") if col.missing else ("missing",)
        diags.append(
            Diagnostic(
                "E109",
                f"missing: keep is not supported by the gan synthesizer (column '{name}'): "
                "its encoding has no state for a missing cell",
                doc.value_pos(at),
                "use method: rap (or aim), or missing: drop / fill for this column",
            )
        )
    if diags:
        raise DiagnosticError(diags)


# --------------------------------------------------------------------------------------------
# Resource cost (its share of :func:`dpql.plan.resources.estimate`)


def _minmax_width(domain: Domain) -> int:
    """Length of the paper's (``minmax``) encoding: one-hot categoricals, one coordinate else."""
    return sum(c.card if c.kind == "categorical" and c.card > 2 else 1 for c in domain)


def _sizes(domain: Domain, o: Any, width: int | None = None) -> tuple[int, int]:
    """Parameters of the DP-auto-GAN autoencoder and of its critic and generator
    (dpql.synth.gan.nets) for an encoded vector of ``width`` coordinates
    (dpql.synth.gan.encoding.width; default: the ``minmax`` encoding's)."""
    n = width or _minmax_width(domain)
    d = o.ae_latent_dim
    h = o.ae_hidden if o.ae_hidden is not None else (n + d) // 2
    ae = 2 * (n * h + h * d) + 2 * h + n + d
    hidden = o.critic_hidden if o.critic_hidden is not None else (2 * n // 3, n // 3)
    sizes = (n, *hidden, 1)
    critic = sum(a * b + b for a, b in itertools.pairwise(sizes))
    z = o.generator_noise_dim
    critic += 2 * z * z + z * d
    return ae, critic


def _parts(domain: Domain, o: Any, n_mem: int, width: int | None = None) -> dict[str, float]:
    """DP-SGD's per-example gradients (a padded batch of them), the networks with their
    optimiser states, and the encoded data (float32)."""
    ae, critic = _sizes(domain, o, width)
    n = width or _minmax_width(domain)

    def padded(batch: int) -> float:
        return batch + 6 * math.sqrt(batch) + 1

    grads = max(padded(o.ae_batch_size) * ae, padded(o.critic_batch_size) * critic)
    return {
        "gan per-example gradients": 4.0 * grads,
        "gan networks": 4.0 * 4 * (ae + critic),
        "gan encoded data": 4.0 * n_mem * n,
    }


def cost(
    domain: Domain,
    options: Any,
    n: int,
    engine: str,
    width: int | None = None,
    marginal_cells: int = 0,
    sampled_rows: int = 0,
) -> SynthCost:
    """DP-auto-GAN's share of the estimate: networks, per-example gradients, encoded data, the
    non-private fine-tuning on ``marginal_cells`` measured cells (``width``: the encoded
    vector's length, from the backend's encoding), and drawing ``sampled_rows`` rows from the
    generator in one pass (:func:`sampling_bytes`)."""
    gan = _parts(domain, options, data_rows_in_memory(n, engine), width)
    ae, critic = _sizes(domain, options, width)
    o = options
    flops = o.ae_steps * o.ae_batch_size * ae + o.critic_steps * o.critic_batch_size * critic
    if marginal_cells:  # fine-tuning: forward and backward through G and De, relaxed marginals
        flops += o.finetune_steps * o.finetune_batch_size * (ae + critic + marginal_cells)
    sampling = sampling_bytes(domain, options, sampled_rows, width)
    return SynthCost(gan, STARTUP_SECONDS + SECONDS_PER_GAN_FLOP * 6 * flops, sampling=sampling)


def sampling_bytes(domain: Domain, o: Any, rows: int, width: int | None = None) -> float:
    """Peak bytes of drawing ``rows`` rows from the generator (dpql.synth.gan.train.sample): one
    float32 pass holds per row the noise and the generator's hidden layer, the latent code and
    the decoder's hidden layer, and four vectors of the encoding's width (logits, the drawn
    one-hot rows, the Gumbel draw, the host copy); then the decoded rows' codes and values."""
    n = width or _minmax_width(domain)
    h = o.ae_hidden if o.ae_hidden is not None else (n + o.ae_latent_dim) // 2
    floats = 2 * o.generator_noise_dim + o.ae_latent_dim + h + 4 * n
    return rows * (4.0 * floats + 16.0 * len(domain))
