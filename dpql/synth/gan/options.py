"""User-facing options of the DP-auto-GAN synthesizer (``synthesizer.options`` in a release spec).

Defaults are the paper's ADULT setting (Tantipongpipat et al. 2019, App. E.1; digest
`dp_auto_gan.md` §5.2): Adam(0.005) autoencoder with latent 15, 10 000 steps at expected batch 64
and clip norm 0.012 on the feature-mean BCE; RMSProp(0.005, alpha 0.99) WGAN with 15 000 critic
steps at expected batch 128, clip norm 0.022, 15 critic steps per generator step, critic weights
clamped to +-0.01, generator noise dimension 64. Layer widths follow the authors' code: autoencoder
hidden ``(n + d) // 2``, critic hidden ``(2n // 3, n // 3)`` (digest §2.4).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dpql.diagnostics import DiagnosticSink, SourcePos, did_you_mean

UNKNOWN_OPTION = "gan-unknown-option"
BAD_OPTION = "gan-bad-option"


@dataclass(frozen=True)
class GanOptions:
    """Architecture, optimisation and DP-SGD hyper-parameters (all public, none data-derived).

    ``noise_multipliers = (psi_autoencoder, psi_critic)`` fixes the noise as in the paper's
    reproduction runs; when ``None`` the planner calibrates both to the GAN's budget share
    (see :func:`dpql.synth.gan.train.plan_gan`). ``seed`` seeds parameter initialisation only;
    DP noise and Poisson sampling draw from the privacy layer's noise source.
    """

    ae_latent_dim: int = 15
    ae_hidden: int | None = None
    ae_batch_size: int = 64
    ae_steps: int = 10_000
    ae_learning_rate: float = 0.005
    ae_clip_norm: float = 0.012
    critic_hidden: tuple[int, ...] | None = None
    critic_batch_size: int = 128
    critic_steps: int = 15_000
    critic_learning_rate: float = 0.005
    critic_clip_norm: float = 0.022
    critic_weight_clip: float = 0.01
    critic_steps_per_generator_step: int = 15
    generator_noise_dim: int = 64
    generator_learning_rate: float = 0.005
    generator_layer_norm: bool = True
    noise_multipliers: tuple[float, float] | None = None
    seed: int = 0

    @staticmethod
    def from_mapping(raw: Mapping[str, Any] | None, pos: SourcePos | None = None) -> GanOptions:
        """Validate ``synthesizer.options``; raise :class:`DiagnosticError` listing every problem.

        Codes: ``gan-unknown-option`` (with a did-you-mean hint), ``gan-bad-option``.
        """
        sink = DiagnosticSink()
        names = [f.name for f in dataclasses.fields(GanOptions)]
        values: dict[str, Any] = {}
        for key, value in (raw or {}).items():
            if key not in names:
                hint = did_you_mean(str(key), names) or f"known options: {', '.join(names)}"
                sink.error(UNKNOWN_OPTION, f"unknown gan option '{key}'", pos, hint)
                continue
            try:
                values[key] = _CHECKS[key](value)
            except ValueError as e:
                sink.error(BAD_OPTION, f"gan option '{key}': {e} (got {value!r})", pos)
        sink.raise_if_errors()
        return GanOptions(**values)


def _int(minimum: int):
    def check(v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            raise ValueError(f"expected an integer >= {minimum}")
        return v

    return check


def _positive_float(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not (0 < v < math.inf):
        raise ValueError("expected a positive finite number")
    return float(v)


def _optional(check):
    return lambda v: None if v is None else check(v)


def _widths(v: Any) -> tuple[int, ...]:
    if not isinstance(v, list | tuple) or not v:
        raise ValueError("expected a non-empty list of layer widths")
    return tuple(_int(1)(w) for w in v)


def _noise_pair(v: Any) -> tuple[float, float]:
    if not isinstance(v, list | tuple) or len(v) != 2:
        raise ValueError("expected [autoencoder_noise_multiplier, critic_noise_multiplier]")
    return (_positive_float(v[0]), _positive_float(v[1]))


def _bool(v: Any) -> bool:
    if not isinstance(v, bool):
        raise ValueError("expected true or false")
    return v


_CHECKS = {
    "ae_latent_dim": _int(1),
    "ae_hidden": _optional(_int(1)),
    "ae_batch_size": _int(1),
    "ae_steps": _int(1),
    "ae_learning_rate": _positive_float,
    "ae_clip_norm": _positive_float,
    "critic_hidden": _optional(_widths),
    "critic_batch_size": _int(1),
    "critic_steps": _int(1),
    "critic_learning_rate": _positive_float,
    "critic_clip_norm": _positive_float,
    "critic_weight_clip": _positive_float,
    "critic_steps_per_generator_step": _int(1),
    "generator_noise_dim": _int(1),
    "generator_learning_rate": _positive_float,
    "generator_layer_norm": _bool,
    "noise_multipliers": _optional(_noise_pair),
    "seed": _int(0),
}
