"""DP mechanisms: pure functions of arrays that draw noise from a NoiseSource and log to a Ledger.

Every call appends exactly one :class:`~dpql.privacy.ledger.PrivacyEvent` *before* drawing noise,
so a ledger with a rho cap stops an over-budget release before anything is released.

Neighbouring relation throughout: replace-one with the public row count n (:mod:`dpql.ir.queries`);
callers pass sensitivities computed under that relation (``Query.sensitivity(n)``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

from dpql.privacy.ledger import Ledger, PrivacyEvent
from dpql.privacy.noise import NoiseSource

_SCALE_MARGIN = 2.0**-40  # float rounding of sigma * unit must not lower the noise


def _check_positive(name: str, value: float) -> None:
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be finite and > 0, got {value!r}")


def gaussian_sigma(l2_sensitivity: float, rho: float) -> float:
    """sigma = l2_sensitivity / sqrt(2 rho): the Gaussian mechanism's std for rho-zCDP.

    Bun & Steinke 2016, Prop. 1.6: adding N(0, sigma^2 I) to f with L2 sensitivity Delta is
    Delta^2/(2 sigma^2)-zCDP (as in Vietri et al. 2022, §2.2, Definition 8 and Lemma 1).
    """
    _check_positive("l2_sensitivity", l2_sensitivity)
    _check_positive("rho", rho)
    return l2_sensitivity / math.sqrt(2 * rho)


def gumbel_beta(score_sensitivity: float, k: int, rho: float) -> float:
    """beta = score_sensitivity * sqrt(k / (2 rho)): the Gumbel scale for rho-zCDP top-k.

    Gumbel(beta)-argmax samples the exponential mechanism prop. to exp(u / beta), which is
    (2 Du / beta)-bounded-range, hence Du^2 / (2 beta^2)-zCDP (Cesar & Rogers 2021: eps-BR implies
    eps^2/8-zCDP); one-shot top-k equals k adaptive peels (Durfee & Rogers 2019), which compose to
    k Du^2 / (2 beta^2) = rho. Vietri et al. 2022, §2.2, Definition 9, print the scale as
    ``K / sqrt(2 rho n)``, which is not even in the score's units: this is the calibration
    Lemma 2 rests on.
    """
    _check_positive("score_sensitivity", score_sensitivity)
    _check_positive("rho", rho)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    return score_sensitivity * math.sqrt(k / (2 * rho))


def gaussian_mechanism(
    sums: Sequence[np.ndarray],
    units: Sequence[float],
    l2_sensitivity: float,
    rho: float,
    *,
    noise: NoiseSource,
    ledger: Ledger,
    phase: str,
    label: str,
    count: int | None = None,
) -> list[np.ndarray]:
    """The (discrete) Gaussian mechanism on integer vectors: block ``j`` is released as
    ``sums[j] + Y_j`` with ``Y_j`` i.i.d. discrete Gaussian ``N_Z(0, (sigma * units[j])^2)``,
    ``sigma = gaussian_sigma(l2_sensitivity, rho)``, drawn exactly by
    :meth:`~dpql.privacy.noise.NoiseSource.discrete_gaussian`. Nothing but integers leaves it.

    Guarantee: rho-zCDP under replace-one, provided ``l2_sensitivity`` bounds the L2 change of
    the real vector ``(sums[j] / units[j])_j`` between neighbours (Canonne, Kamath & Steinke
    2020, Theorem 14: independent discrete Gaussians of scales ``sigma_j`` on an integer-valued
    ``q`` are ``eps^2/2``-zCDP when ``sum_j (q_j(D) - q_j(D'))^2 / sigma_j^2 <= eps^2``; here
    ``sum_j ||Delta sums_j||^2 / (sigma units_j)^2 <= l2^2 / sigma^2 = 2 rho``). Each scale is
    raised by a relative ``2^-40`` so float rounding can only add noise.

    ``units[j]`` converts block ``j`` of the released real vector to integer steps (``n / grid``
    for an answer averaged over the public ``n`` on its grid, divided by the block's public
    scale). The event records ``sigma`` and ``l2_sensitivity`` in the real vector's units;
    ``count`` is the number of integers released unless given. Returns int64 arrays.
    """
    blocks = [np.asarray(s) for s in sums]
    if len(blocks) != len(units):
        raise ValueError("one unit per block of sums")
    sizes = [b.size for b in blocks]
    flat = np.concatenate([b.ravel() for b in blocks]) if blocks else np.zeros(0)
    whole = np.rint(flat)
    if not np.array_equal(whole, flat) or (flat.size and np.abs(whole).max() >= 2.0**62):
        raise ValueError(f"{label}: the discrete Gaussian releases integer sums only")
    ints = whole.astype(np.int64)
    for u in units:
        _check_positive("unit", u)
    sigma = gaussian_sigma(l2_sensitivity, rho)
    ledger.append(
        PrivacyEvent(
            phase,
            "gaussian",
            label,
            count=ints.size if count is None else count,
            l2_sensitivity=l2_sensitivity,
            noise_scale=sigma,
            rho=rho,
        )
    )
    # blocks at the same scale share one vectorised draw (e.g. every marginal of a round)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    by_scale: dict[float, list[int]] = {}
    for j, u in enumerate(units):
        by_scale.setdefault(sigma * u * (1 + _SCALE_MARGIN), []).append(j)
    for scale, idx in by_scale.items():
        where = (
            np.arange(ints.size)
            if len(by_scale) == 1
            else np.concatenate([np.arange(offsets[j], offsets[j + 1]) for j in idx])
        )
        ints[where] += noise.discrete_gaussian(scale, where.size)
    parts = np.split(ints, offsets[1:-1])
    return [part.reshape(b.shape) for part, b in zip(parts, blocks, strict=True)]


def gumbel_top_k(
    scores: np.ndarray,
    score_sensitivity: float,
    k: int,
    rho: float,
    *,
    noise: NoiseSource,
    ledger: Ledger,
    phase: str,
    label: str,
    exclude: Iterable[int] | None = None,
) -> np.ndarray:
    """One-shot Gumbel top-k (Durfee & Rogers 2019): indices of the k largest ``scores + Gumbel``.

    Guarantee: rho-zCDP under replace-one, provided every candidate's score changes by at most
    ``score_sensitivity`` between replace-one neighbours (e.g. 2/n for the L1 error of a marginal
    against fixed synthetic answers, 1/n for a scalar query's absolute error). The scale is
    ``gumbel_beta(score_sensitivity, k_used, rho)``.

    ``exclude`` (e.g. already measured queries) are never chosen. ``k_used = min(k, #eligible)``
    depends only on the public exclusion set; the event charges the full ``rho`` the calibration
    used. Returns ``k_used`` int64 indices, best noisy score first.
    """
    values = np.asarray(scores, dtype=np.float64)
    if values.ndim != 1:
        raise ValueError(f"scores must be one-dimensional, got shape {values.shape}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    eligible = np.ones(values.shape, dtype=bool)
    if exclude is not None:
        excluded = np.asarray(list(exclude), dtype=np.int64)
        if excluded.size and (excluded.min() < 0 or excluded.max() >= values.size):
            raise ValueError(f"exclude indices must be in [0, {values.size})")
        eligible[excluded] = False
    k_used = min(k, int(eligible.sum()))
    if k_used == 0:
        raise ValueError(f"{label}: no eligible candidates to select from")
    if not np.all(np.isfinite(values[eligible])):
        raise ValueError(f"{label}: scores of eligible candidates must be finite")
    beta = gumbel_beta(score_sensitivity, k_used, rho)
    ledger.append(
        PrivacyEvent(
            phase,
            "gumbel_top_k",
            label,
            count=k_used,
            score_sensitivity=score_sensitivity,
            noise_scale=beta,
            rho=rho,
        )
    )
    noisy = np.where(eligible, values + noise.gumbel(values.shape, beta), -np.inf)
    top = np.argpartition(-noisy, k_used - 1)[:k_used]
    return top[np.argsort(-noisy[top], kind="stable")].astype(np.int64)
