"""RAP++ options and budget schedule: pure, data-independent, no JAX (``dpql plan`` uses it).

See :mod:`dpql.synth.rap` for the program that runs a schedule.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from fractions import Fraction

from dpql.plan.ir import Count, Halfspace, Marginal, Moment, Prefix, Query, joint_l2_sensitivity
from dpql.privacy.budget import split_rho

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class RapOptions:
    """Knobs of the RAP++ program; every one can be set under ``synthesizer.options``."""

    rounds: int = 8
    queries_per_round: int = 4
    threshold_rounds: int = 3
    thresholds_per_round: int = 20
    relaxed_rows: int = 1000
    iterations: int = 400
    warm_iterations: int = 200
    learning_rate: float = 0.05
    sigma_start: float = 8.0
    sigma_max: float = 512.0
    init_share: float = 0.2
    threshold_share: float = 0.25

    @staticmethod
    def from_mapping(options: Mapping[str, object]) -> RapOptions:
        """Build from the spec's ``synthesizer.options``; unknown keys are errors."""
        known = {f.name: f for f in fields(RapOptions)}
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise ValueError(
                f"unknown RAP option(s) {', '.join(unknown)}; known: {', '.join(known)}"
            )
        values: dict[str, object] = {}
        for k, v in options.items():
            kind = int if known[k].type in ("int", int) else float
            if isinstance(v, bool) or not isinstance(v, int | float):
                raise ValueError(f"RAP option '{k}' must be a number, got {v!r}")
            if kind is int and v != int(v):
                raise ValueError(f"RAP option '{k}' must be an integer, got {v!r}")
            values[k] = kind(v)
        opts = RapOptions(**values)  # type: ignore[arg-type]
        opts.validate()
        return opts

    def validate(self) -> None:
        positive = ("rounds", "queries_per_round", "relaxed_rows", "iterations", "warm_iterations")
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"RAP option '{name}' must be at least 1")
        if not 0 <= self.init_share < 1 or not 0 <= self.threshold_share < 1:
            raise ValueError("RAP shares must lie in [0, 1)")
        if self.init_share + self.threshold_share >= 1:
            raise ValueError("init_share + threshold_share must leave budget for marginal rounds")
        if not 0 < self.sigma_start <= self.sigma_max:
            raise ValueError("need 0 < sigma_start <= sigma_max")


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
    # (rap_pp.md §4.2 uses one half each; the planner's default is a quarter, and
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
    # Interleave the two classes evenly (the code interleaves randomly, pitfall 16).
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
