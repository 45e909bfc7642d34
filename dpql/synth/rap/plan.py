"""RAP++'s plan: options, budget schedule, budget lines and resource cost; pure,
data-independent, no JAX (``dpql plan`` uses it).

See :mod:`dpql.synth.rap.program` for the program that runs a schedule.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from dpql.domain import Domain
from dpql.ir.queries import Count, Halfspace, Marginal, Moment, Prefix, Query, joint_l2_sensitivity
from dpql.plan.resolve import query_cells
from dpql.plan.resources import STARTUP_SECONDS
from dpql.privacy.budget import BudgetLine, split_rho
from dpql.privacy.mechanisms import gumbel_beta
from dpql.spec.models import RapOptions
from dpql.synth.base import PlanContext, SynthCost, SynthPlan

__all__ = ["RapOptions"]  # the options model is the spec's (one complete, frozen model)

# Default 1:3. The paper halves each round (Vietri et al. 2022, App. C, proof of Theorem 1:
# rho/2T to selection, rho/2TK to each of the K measurements); the noise of the measurements,
# not the choice of queries, limits the fit, so selection gets the smaller share.
DEFAULT_SELECTION_SHARE = 0.25
#: Marginals are evaluated on tiles of ``TILE`` values per column
#: (:func:`dpql.synth.rap.relaxed.block_index`).
TILE = 8
#: Seconds per float32 element of a relaxed-table tensor per Adam step (the cost model).
SECONDS_PER_ELEMENT = 8e-10


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


def split_queries(queries: Sequence[Query]) -> tuple[list[Marginal], list[Query], list[Query]]:
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
    marg, thr, scalar = split_queries(queries)
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


def budget_lines(rap: RapSchedule, n: int, cards: dict[str, int]) -> list[BudgetLine]:
    """One line per round and mechanism: Gumbel selection (L1 score sensitivity 2/n) and the
    discrete Gaussian release of the round's queries (with its count of values for the init
    round, whose queries are fixed; ``cards``: the domain's cardinalities)."""
    lines = []
    for i, r in enumerate(rap.rounds):
        phase = f"rap.{r.kind}[{i}]"
        if r.rho_select > 0:
            beta = gumbel_beta(2.0 / n, r.k, r.rho_select)
            lines.append(BudgetLine(phase, "gumbel_top_k", 1, r.rho_select, beta, n))
        pool = (
            rap.init_queries
            if r.kind == "init"
            else (rap.marginal_candidates if r.kind == "marginal" else rap.threshold_candidates)
        )
        chosen = list(pool) if r.kind == "init" else list(pool[: r.k])
        sigma = release_sigma(chosen, r.rho_measure, n)
        count = sum(query_cells(q, cards) for q in chosen) if r.kind == "init" else None
        lines.append(BudgetLine(phase, "gaussian", 1, r.rho_measure, sigma, n, count))
    return lines


def plan(ctx: PlanContext, options: RapOptions | None = None) -> SynthPlan:
    """RAP++'s plan: the schedule of ``options`` (default: the spec's) over the synthesizer's
    rho, its budget lines and its resource cost."""
    spec = ctx.spec
    if options is None:
        options = spec.model.synthesizer.options
    split = spec.model.privacy.split or {}
    sel = Fraction(split.get("selection", DEFAULT_SELECTION_SHARE)).limit_denominator(10**6)
    meas = Fraction(split.get("measurement", 1 - DEFAULT_SELECTION_SHARE)).limit_denominator(
        10**6
    )
    schedule = plan_rap(
        ctx.queries, ctx.phase_rho.get("synthesizer", 0.0), options, sel / (sel + meas)
    )
    return SynthPlan(
        "rap",
        tuple(budget_lines(schedule, spec.rows, {c.name: c.card for c in spec.domain})),
        (schedule, options),
        cost(spec.domain, schedule, options),
        options.model_dump(),
    )


# --------------------------------------------------------------------------------------------
# Resource cost (its share of :func:`dpql.plan.resources.estimate`)


def tiles(domain: Domain, columns: Sequence[str]) -> int:
    """Tiles of the marginal over ``columns``."""
    return math.prod(-(-domain.card(c) // TILE) for c in columns)


def capacity(tiles: int) -> int:
    """Slots allocated for ``tiles`` marginal tiles: the next power of two (at least 16), so
    the loss is recompiled only when the measured tiles double."""
    return max(16, 1 << max(tiles - 1, 0).bit_length())


def cost_parts(domain: Domain, schedule: RapSchedule, options: RapOptions) -> dict[str, float]:
    """Arrays of the RAP++ fit (JAX, float32) and of its selection rounds (numpy)."""
    R = options.relaxed_rows
    width = sum(c.card for c in domain) + max(len(domain.numeric), 1)
    n_tiles = sum(-(-c.card // TILE) for c in domain)
    parts: dict[str, float] = {}
    # Parameters, gradients, Adam's two moments, updates; the softmax per tile group.
    parts["relaxed table"] = 4.0 * R * width * 6 + 4.0 * R * n_tiles * TILE * 3
    # Marginal loss: the tiles of the measured marginals, gathered per factor (and their
    # gradient). Which candidates are selected depends on the data: each arity is taken at
    # its share of the selections and the candidates' mean size.
    n_marginal = sum(r.k for r in schedule.rounds if r.kind == "marginal")
    by_arity: dict[int, list[int]] = {}
    for m in schedule.marginal_candidates:
        by_arity.setdefault(len(m.columns), []).append(tiles(domain, m.columns))
    init = [q for q in schedule.init_queries if isinstance(q, Marginal)]
    chosen: dict[int, float] = {1: sum(tiles(domain, q.columns) for q in init)} if init else {}
    total = sum(len(ts) for ts in by_arity.values())
    for k, ts in by_arity.items():
        picked = min(len(ts), math.ceil(n_marginal * len(ts) / total))
        chosen[k] = chosen.get(k, 0) + picked * sum(ts) / len(ts)
    loss = 0.0
    for k, t in chosen.items():
        cap = capacity(math.ceil(t))
        loss += 4.0 * cap * R * (2 * k * TILE + (TILE ** (k - 1) if k >= 4 else 0))
    parts["marginal loss"] = loss
    # Threshold families: every candidate of a group is evaluated on every relaxed row.
    hs: dict[tuple[Any, ...], int] = {}
    pf: dict[tuple[Any, ...], list[Prefix]] = {}
    for q in schedule.threshold_candidates:
        if isinstance(q, Halfspace):
            hs[(q.columns, q.by)] = hs.get((q.columns, q.by), 0) + 1
        elif isinstance(q, Prefix):
            pf.setdefault((q.columns, q.by), []).append(q)
    thr = sum(5.0 * 4 * R * m for m in hs.values())
    for (cols, _), qs in pf.items():
        thr += 4.0 * R * len(qs) * (3 * max(domain.card(c) for c in cols) + 4)
    parts["threshold queries"] = thr
    # Selection: the relaxed marginals of all candidates (Khatri-Rao products of the leads).
    lead = max(
        (math.prod(domain.card(c) for c in m.columns[:-1]) for m in schedule.marginal_candidates),
        default=0,
    )
    parts["selection"] = 4.0 * R * lead * 2
    return parts


def cost(domain: Domain, schedule: RapSchedule, options: RapOptions) -> SynthCost:
    """RAP++'s share of the estimate: the relaxed table's tensors and Adam steps, and the
    candidates it answers besides the workload (2-way subsets, 1-way init marginals)."""
    rap = cost_parts(domain, schedule, options)
    steps = options.iterations + max(len(schedule.rounds) - 1, 0) * options.warm_iterations
    seconds = STARTUP_SECONDS + steps * (sum(rap.values()) - rap["selection"]) / 4.0 * (
        SECONDS_PER_ELEMENT
    )
    pool = (*schedule.marginal_candidates, *schedule.init_queries)
    extra = tuple(m for m in pool if isinstance(m, Marginal))
    return SynthCost(rap, seconds, extra)
