"""RAP++ options and budget schedule: pure, data-independent, no JAX (``dpql plan`` uses it).

See :mod:`dpql.synth.rap.program` for the program that runs a schedule.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from dpql.ir.queries import Count, Halfspace, Marginal, Moment, Prefix, Query, joint_l2_sensitivity
from dpql.privacy.budget import split_rho
from dpql.spec.models import RapOptions as _RapOptions

# The options model is the spec's (one complete, frozen model per backend): see
# :class:`dpql.spec.models.RapOptions`.
RapOptions = _RapOptions


# ------------------------------------------------------------------------------------------
# Budget schedule (data-independent; printed by `dpql plan`)


@dataclass(frozen=True)
class RapRound:
    """One step of the schedule: which class, how many queries, and its zCDP costs."""

    kind: str  # "init" | "marginal" | "threshold"
    k: int
    rho_select: float
    rho_measure: float


@dataclass(frozen=True)
class RapSchedule:
    rounds: tuple[RapRound, ...]
    init_queries: tuple[Query, ...]
    marginal_candidates: tuple[Marginal, ...]
    threshold_candidates: tuple[Query, ...]

    @property
    def rho(self) -> float:
        return sum(r.rho_select + r.rho_measure for r in self.rounds)


def _split(queries: Sequence[Query]) -> tuple[list[Marginal], list[Query], list[Query]]:
    marg = [q for q in queries if isinstance(q, Marginal)]
    thr = [q for q in queries if isinstance(q, Halfspace | Prefix)]
    scalar = [q for q in queries if isinstance(q, Count | Moment)]
    return marg, thr, scalar


def marginal_candidates(workload: Sequence[Marginal]) -> tuple[Marginal, ...]:
    """Workload marginals plus their 2-way subsets (deduplicated, workload order first)."""
    seen: dict[tuple[str, ...], None] = {}
    for m in workload:
        seen.setdefault(m.columns, None)
    for m in workload:
        for pair in itertools.combinations(m.columns, 2):
            seen.setdefault(pair, None)
    return tuple(Marginal(c) for c in seen if len(c) >= 2)


def plan_rap(
    queries: Sequence[Query],
    rho: float,
    options: RapOptions,
    select_share: Fraction = Fraction(1, 2),
) -> RapSchedule:
    """Split ``rho`` over the init round and the interleaved adaptive rounds.

    Pure and data-independent. Shares that a workload cannot use (no threshold queries, say)
    go to the marginal rounds; the rounds' costs always sum to ``rho`` (up to float rounding
    downwards, see the final scaling).
    """
    marg, thr, scalar = _split(queries)
    ones = sorted(
        {c for m in marg for c in m.columns}, key=[c for m in marg for c in m.columns].index
    )
    init = tuple(Marginal((c,)) for c in ones) + tuple(scalar)
    cands = marginal_candidates(marg)
    n_marg_rounds = min(options.rounds, math.ceil(len(cands) / options.queries_per_round))
    n_thr_rounds = min(options.threshold_rounds, math.ceil(len(thr) / options.thresholds_per_round))
    shares = {
        "init": options.init_share if init else 0.0,
        "threshold": options.threshold_share if n_thr_rounds else 0.0,
    }
    shares["marginal"] = 1.0 - shares["init"] - shares["threshold"] if n_marg_rounds else 0.0
    total = sum(shares.values())
    if total == 0:
        return RapSchedule((), init, cands, tuple(thr))
    # Exact arithmetic (Fractions, floor to float) so the rounds never sum above rho.
    parts = split_rho(
        rho,
        {
            k: Fraction(v).limit_denominator(10**6) / Fraction(total).limit_denominator(10**6)
            for k, v in shares.items()
            if v
        },
    )
    rounds: list[RapRound] = []
    if init:
        rounds.append(RapRound("init", len(init), 0.0, parts["init"]))

    # Each adaptive round: ``select_share`` of its rho to selection, the rest to measurement
    # (Vietri et al. 2022, App. C, use one half each; the planner's default is a quarter, and
    # ``privacy.split`` in the spec can change it).
    def halves(part: float, n_rounds: int) -> tuple[float, float]:
        if not n_rounds:
            return 0.0, 0.0
        each = split_rho(
            part, {"select": select_share / n_rounds, "measure": (1 - select_share) / n_rounds}
        )
        return each["select"], each["measure"]

    m_sel, m_meas = halves(parts.get("marginal", 0.0), n_marg_rounds)
    t_sel, t_meas = halves(parts.get("threshold", 0.0), n_thr_rounds)
    m_rounds = [
        RapRound("marginal", min(options.queries_per_round, len(cands)), m_sel, m_meas)
    ] * n_marg_rounds
    t_rounds = [
        RapRound("threshold", min(options.thresholds_per_round, len(thr)), t_sel, t_meas)
    ] * n_thr_rounds
    # Interleave the two classes evenly: a public, deterministic order in which neither class
    # is left to the last rounds (the fit after each round sees every measurement so far).
    order = sorted(
        [(i / n_marg_rounds, 0, r) for i, r in enumerate(m_rounds)]
        + [((i + 0.5) / n_thr_rounds, 1, r) for i, r in enumerate(t_rounds)],
        key=lambda x: (x[0], x[1]),
    )
    rounds.extend(r for _, _, r in order)
    return RapSchedule(tuple(rounds), init, cands, tuple(thr))


def release_sigma(queries: Sequence[Query], rho: float, n: int) -> float:
    """Per-cell noise std of one Gaussian release of ``queries`` (as the oracle calibrates it)."""
    return joint_l2_sensitivity(queries, n) / math.sqrt(2 * rho)
