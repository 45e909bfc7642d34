"""DP-auto-GAN planning: both DP-SGD phases' public parameters, fixed before any data is read.

JAX-free, so ``dpql plan`` and ``dpql check`` never import it (the training program is
:mod:`dpql.synth.gan.train`). The two phases are ``autoencoder_steps`` and ``critic_steps``
compositions of the Poisson-subsampled Gaussian mechanism (Tantipongpipat et al. 2019, §2.2
and §3.3); :func:`plan_gan` calibrates their noise multipliers to an (epsilon,
delta) target on the accountant's RDP curves.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from dpql.diagnostics import Diagnostic, DiagnosticError
from dpql.privacy.accountant import calibrate_dpsgd_noise, epsilon_from_events
from dpql.privacy.ledger import PrivacyEvent
from dpql.synth.gan.options import GanOptions

OVER_BUDGET = "gan-over-budget"


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


