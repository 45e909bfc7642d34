"""AIM (McKenna et al. 2022) on the graphical-model estimators of ``mbi`` 2.x, as a dpql backend.

The mechanism logic follows ``benchmarks/rap/peers.py`` (which follows the reference script),
but every private access goes through dpql's measurement oracle (exact discrete Gaussian,
Gumbel top-k, dpql's ledger), with these deliberate differences from the reference script:

* **Fixed schedule.** AIM anneals its per-round budget from the data (it halves sigma when a
  round's measurement barely moved the model), so its number of rounds is data-dependent. dpql
  prints every ledger event before any data is read, so here the schedule is fixed by the plan:
  one release of every column's 1-way marginal (``init_share`` of rho), then ``rounds`` equal
  rounds, each ``per_round`` one-at-a-time Gumbel selections (``select_share`` of the round)
  and one discrete Gaussian release of the chosen marginals. Options left unset follow a public
  rule from n, the budget and the domain (:func:`default_schedule`): small or low-budget tables
  put more on the 1-way marginals and select fewer marginals; at most 4 rounds, since each
  re-fit of a new clique structure costs seconds of XLA compilation.
* **Diverse picks.** The picks of one round share no column pair (each selection is among the
  candidates that share none with the round's earlier picks), so a round's single re-fit learns
  as much as several one-marginal rounds would, at the compile cost of one (the comparison
  with plain top-k rounds is in ``benchmarks/suite``).
* **Unweighted scores.** The oracle's selection score is ``||a(D) - model||_1 - penalty`` with
  sensitivity 2/n; the penalty is AIM's expected noise L1 of measuring that marginal in this
  round (``sqrt(2/pi) sigma cells``), so a candidate's score is its expected improvement.
* **Noise-aware candidates.** A candidate whose expected noise L1 at the round's sigma is >= 1
  (half the largest possible L1 error, 2) is never offered: its measurement would tell less than
  it adds. AIM's model-size filter (``max_model_size`` MB, scaled by the share of the budget
  spent) is kept.
* **Warm starts, one compile per fit.** Each round's estimate starts from the last (``iters``
  mirror-descent steps), the final one runs ``final_iters``. Everything around mbi's fused
  mirror-descent program (initial state, warm-start expansion, model marginals, row sampling)
  runs in numpy (``dpql.synth.graphical``), since mbi would compile each of those small eager
  operations anew for every clique structure.
* **Balanced rows.** The rows sampled from the final model are rearranged by value swaps within
  columns until their marginals on the workload (the maximal candidates) are close to the
  model's expected counts (``balance_sweeps`` passes, ``dpql.synth.graphical.balance_rows``),
  which removes most of the sampling noise an ``n``-row sample adds to those marginals
  (``benchmarks/suite``).

Only marginal queries of the workload drive the candidates (the downward closure of its
marginals, 2-way and up; all column pairs when it has none); other queries (thresholds,
moments) are left to post-processing. ``plan`` imports neither mbi nor JAX.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dpql.ir.queries import Marginal, Query, joint_l2_sensitivity
from dpql.privacy.budget import BudgetLine, split_rho
from dpql.privacy.mechanisms import gumbel_beta
from dpql.spec.models import AimOptions
from dpql.synth.base import PlanContext, RunContext, SynthCost, SynthPlan, SynthResult, Traits

#: the model-size cap from the machine (:func:`machine_model_cap`): MB per CPU core, within
#: [MODEL_CAP_MIN, MODEL_CAP_MAX] (AIM's reference cap), and at most 1 / MODEL_MEMORY_SHARE of
#: the memory limit
MODEL_MB_PER_CORE = 10.0
MODEL_CAP_MIN, MODEL_CAP_MAX = 20.0, 80.0
MODEL_MEMORY_SHARE = 32


def machine_model_cap(cpus: int | None = None, memory_bytes: int | None = None) -> float:
    """The default ``max_model_size`` (MB) on this machine: ``MODEL_MB_PER_CORE`` per usable
    CPU core within [``MODEL_CAP_MIN``, ``MODEL_CAP_MAX``], and at most 1/``MODEL_MEMORY_SHARE``
    of compile's memory limit (``dpql.plan.resources.memory_limit``).

    A mirror-descent step's work grows with the model's size and XLA spreads it over the
    cores, so the cap scales with them: a small machine keeps each fit short, and from 8
    cores the cap is AIM's reference 80 MB. Mirror descent holds a few copies of the
    potentials, marginals and messages, hence the memory share. Public (no data); the cap in
    use is in the plan's and the record's synthesizer options."""
    import os

    from dpql.plan.resources import memory_limit

    if cpus is None:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
        cpus = cpus or os.cpu_count() or 1
    memory_bytes = memory_limit() if memory_bytes is None else memory_bytes
    cores = min(MODEL_CAP_MAX, max(MODEL_CAP_MIN, MODEL_MB_PER_CORE * cpus))
    return float(min(cores, memory_bytes / 2**20 / MODEL_MEMORY_SHARE))


#: a candidate whose expected noise L1 (fraction of n) reaches this is never offered
NOISE_L1_LIMIT = 1.0
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


#: at most this many adaptive rounds by default: each round re-fits the model, and each fit of a
#: new clique structure costs mbi seconds of XLA compilation on a small machine
MAX_DEFAULT_ROUNDS = 4
#: default init share is chosen so that the 1-way release's expected L1 noise per column is at
#: most this (TVD 0.025), within [INIT_SHARE_MIN, INIT_SHARE_MAX]
ONE_WAY_L1_TARGET = 0.05
INIT_SHARE_MIN, INIT_SHARE_MAX = 0.2, 0.7
#: when even INIT_SHARE_MAX leaves budget for only one selected marginal, the 1-way release gets
#: this share (the one marginal adds little; the 1-way marginals are most of what is learnt)
INIT_SHARE_ONE_MARGINAL = 0.9
#: default number of selected marginals: at most as many as leave the median 2-way candidate's
#: expected noise L1 at or below this (a measurement noisier than that mostly adds noise)
PAIR_L1_TARGET = 0.3
#: at most this many selected marginals by default (AIM's T = 16 d spends most rounds
#: re-measuring; capped as in ``benchmarks/rap``); one per column below it, all of them where
#: even this many leave the median pair's expected noise L1 at most ABUNDANT_PAIR_L1
MAX_MARGINALS = 16
ABUNDANT_PAIR_L1 = 0.05


@dataclass(frozen=True)
class DefaultSchedule:
    """The public rule's choice and its reasons (printed by ``dpql plan``)."""

    init_share: float
    rounds: int
    per_round: int
    one_way_l1: float  # expected L1 noise of a column's 1-way marginal at ``init_share``
    pair_l1: float  # expected L1 noise of the median 2-way candidate, one of ``rounds*per_round``
    affordable: int = 0  # marginals the budget after the 1-way release affords at PAIR_L1_TARGET


def expected_l1(sigma: float, cells: int) -> float:
    """E||noise||_1 of a marginal of ``cells`` cells with per-cell noise sd ``sigma`` (fraction
    of n): ``sqrt(2/pi) sigma cells``; half of it is the expected TVD the noise adds."""
    return SQRT_2_OVER_PI * sigma * cells


def default_schedule(
    cards: Sequence[int],
    pair_cells: Sequence[int],
    n: int,
    rho: float,
    select_share: float,
    init_share: float | None = None,
    n_candidates: int | None = None,
) -> DefaultSchedule:
    """The public rule for the options a spec leaves unset (public facts only: column
    cardinalities, the 2-way candidates' cell counts ``pair_cells``, the number of candidates
    of every size ``n_candidates`` (default: the pairs'), the public n and the budget).

    1. ``init_share``: the share of rho whose 1-way release has expected L1 noise
       :data:`ONE_WAY_L1_TARGET` per column (mean over columns), clipped to
       [:data:`INIT_SHARE_MIN`, :data:`INIT_SHARE_MAX`]: small or low-budget tables spend more on
       the 1-way marginals every later estimate rests on, since a fixed small share leaves
       their noise large where n or the budget is small. Where even that leaves budget for
       only one selected marginal, :data:`INIT_SHARE_ONE_MARGINAL`: the one marginal adds
       little, while tables that afford several marginals lose by giving them up.
    2. The number of selected marginals ``m``: one per column, at least 4 and at most
       :data:`MAX_MARGINALS` (16; AIM's T = 16 d spends most rounds re-measuring; capped as in
       ``benchmarks/rap``), or 16 whatever the columns where even 16 leave the median pair's
       expected noise L1 at most :data:`ABUNDANT_PAIR_L1` (where pairs are that cheap, more
       of them help; where they are noisier, more do not); never more than the candidates,
       and no more than leaves the median 2-way candidate's expected noise L1 at or below
       :data:`PAIR_L1_TARGET` (at least 1).
    3. ``rounds = min(m, MAX_DEFAULT_ROUNDS)`` rounds of ``per_round = ceil(m / rounds)``.
    """
    d = len(cards)
    chosen = init_share is None
    if init_share is None:
        # sigma of the joint 1-way release at share s: sqrt(2 d) / (n sqrt(2 s rho))
        l1_at_1 = sum(expected_l1(math.sqrt(d) / (n * math.sqrt(rho)), c) for c in cards) / d
        init_share = min(INIT_SHARE_MAX, max(INIT_SHARE_MIN, (l1_at_1 / ONE_WAY_L1_TARGET) ** 2))
    pairs = sorted(pair_cells)
    median = pairs[len(pairs) // 2] if pairs else 1
    # one marginal measured with rho_m: sigma = sqrt(2) / (n sqrt(2 rho_m)) = 1 / (n sqrt(rho_m))
    rho_needed = (SQRT_2_OVER_PI * median / (n * PAIR_L1_TARGET)) ** 2

    def marginals(share: float) -> int:
        rest = (1 - share) * (1 - select_share) * rho
        m = max(4, min(MAX_MARGINALS, d))
        if (
            rho_needed > 0
            and rest / MAX_MARGINALS >= rho_needed * (PAIR_L1_TARGET / ABUNDANT_PAIR_L1) ** 2
        ):  # even MAX_MARGINALS leave the median pair's noise L1 <= ABUNDANT_PAIR_L1
            m = MAX_MARGINALS
        m = max(1, min(n_candidates or len(pair_cells) or 1, m))
        return max(1, min(m, math.floor(rest / rho_needed))) if rho_needed > 0 else m

    m = marginals(init_share)
    if chosen and m == 1 and init_share == INIT_SHARE_MAX:
        init_share = INIT_SHARE_ONE_MARGINAL
        m = marginals(init_share)
    sigma1 = math.sqrt(d) / (n * math.sqrt(init_share * rho))
    one_way = sum(expected_l1(sigma1, c) for c in cards) / d
    rest = (1 - init_share) * (1 - select_share) * rho
    rounds = min(m, MAX_DEFAULT_ROUNDS)
    per_round = math.ceil(m / rounds)
    pair_l1 = expected_l1(1 / (n * math.sqrt(rest / (rounds * per_round))), median)
    affordable = math.floor(rest / rho_needed) if rho_needed > 0 else MAX_MARGINALS
    return DefaultSchedule(init_share, rounds, per_round, one_way, pair_l1, affordable)


def candidates(queries: Sequence[Query], columns: Sequence[str]) -> tuple[tuple[str, ...], ...]:
    """Workload marginals and their subsets of 2 or more columns (workload order, then size)."""
    seen: dict[tuple[str, ...], None] = {}
    marg = [q.columns for q in queries if isinstance(q, Marginal)]
    for cl in marg:
        for r in range(len(cl), 1, -1):
            for sub in itertools.combinations(cl, r):
                seen.setdefault(sub, None)
    if not seen:
        for pair in itertools.combinations(columns, 2):
            seen.setdefault(pair, None)
    return tuple(seen)


@dataclass(frozen=True)
class AimSchedule:
    columns: tuple[str, ...]
    candidates: tuple[tuple[str, ...], ...]
    rho_init: float
    rounds: tuple[tuple[float, float], ...]  # (rho_select, rho_measure) per round
    n: int
    per_round: int = 1  # marginals selected (Gumbel top-k) and measured (one release) per round
    init_share: float = INIT_SHARE_MIN  # the share of rho on the 1-way release
    targets: tuple[tuple[str, ...], ...] = ()  # the row balancer's: the maximal candidates
    #: picks of the spanning-forest round (round 0 when positive; :func:`spanning_picks`) and
    #: the pairs it picks among
    tree: int = 0
    tree_pairs: tuple[tuple[str, ...], ...] = ()

    def init_sigma(self) -> float:
        qs = [Marginal((c,)) for c in self.columns]
        return joint_l2_sensitivity(qs, self.n) / math.sqrt(2 * self.rho_init)

    def k(self) -> int:
        return max(1, min(self.per_round, len(self.candidates)))

    def picks(self, i: int) -> int:
        """Marginals selected (one at a time) and measured (one release) in round ``i``."""
        return self.tree if i == 0 and self.tree else self.k()

    def phase(self, i: int) -> str:
        return "aim.tree" if i == 0 and self.tree else f"aim.round[{i - bool(self.tree)}]"

    def round_sigma(self, i: int) -> float:
        qs = [Marginal(self.columns[:1])] * self.picks(i)
        return joint_l2_sensitivity(qs, self.n) / math.sqrt(2 * self.rounds[i][1])


def plan_aim(columns: Sequence[str], queries: Sequence[Query], rho: float, n: int,
             options: AimOptions, cards: Sequence[int] | None = None,
             cells: Callable[[tuple[str, ...]], int] | None = None) -> AimSchedule:  # fmt: skip
    """The fixed schedule (pure, data-free); its costs sum to at most ``rho``. Options left
    unset follow :func:`default_schedule` (``cards``: the columns' cardinalities; ``cells``: a
    candidate's cell count; both public)."""
    cands = candidates(queries, columns)
    cards = list(cards) if cards is not None else [2] * len(columns)
    cells = cells or (lambda cl: math.prod(cards[list(columns).index(c)] for c in cl))
    default = default_schedule(
        cards, [cells(cl) for cl in cands if len(cl) == 2], n, rho, options.select_share,
        options.init_share, len(cands),
    ) if rho > 0 and n > 0 else None  # fmt: skip
    share = options.init_share if options.init_share is not None else (
        default.init_share if default else INIT_SHARE_MIN
    )  # fmt: skip
    top = tuple(maximal(cands, columns))
    pairs = tuple(cl for cl in cands if len(cl) == 2)
    tree = spanning_picks(columns, pairs) if options.tree and rho > 0 and n > 0 else 0
    # the forest only where the budget affords a pair for each of its edges (public rule)
    if default is not None and options.rounds is None and tree > default.affordable:
        tree = 0
    if options.rounds is not None:
        r, k = options.rounds, options.per_round or 1
    else:
        r = default.rounds if default else 1
        k = options.per_round or (default.per_round if default else 1)
        if tree and default is not None:
            # the adaptive marginals the budget still affords beside the forest, in one round
            # fewer (the forest's fit takes the place of the first round's)
            m = max(1, min(r * k, default.affordable - tree))
            r = max(1, min(m, MAX_DEFAULT_ROUNDS - 1))
            k = options.per_round or max(1, round(m / r))
    if not cands or rho <= 0:
        return AimSchedule(tuple(columns), cands, rho, (), n, k, share, top)
    k_eff = max(1, min(k, len(cands)))
    tree_pairs: tuple[tuple[str, ...], ...] = ()
    weights = [options.tree_weight * tree] * bool(tree) + [float(k_eff)] * r
    init = Fraction(share).limit_denominator(10**6)
    sel = Fraction(options.select_share).limit_denominator(10**6)
    parts = _round_parts(rho, init, sel, weights)
    if tree:
        # the pairs the forest may use: those its measurement's noise would not swamp (public:
        # cells and sigma); the forest then spans what they connect
        sigma = math.sqrt(tree / parts[1][0][1]) / n
        tree_pairs = tuple(
            cl for cl in pairs if SQRT_2_OVER_PI * sigma * cells(cl) < NOISE_L1_LIMIT
        )
        fewer = spanning_picks(columns, tree_pairs)
        if fewer < tree:
            tree = fewer
            weights = [options.tree_weight * tree] * bool(tree) + [float(k_eff)] * r
            parts = _round_parts(rho, init, sel, weights)
    return AimSchedule(tuple(columns), cands, parts[0], tuple(parts[1]), n, k, share, top,
                       tree, tree_pairs if tree else ())  # fmt: skip


def _round_parts(
    rho: float, init: Fraction, sel: Fraction, weights: Sequence[float]
) -> tuple[float, list[tuple[float, float]]]:
    """rho of the 1-way release, and (selection, measurement) rho of each round: the rest in
    proportion to ``weights``, each round's ``sel`` share on its selections."""
    total = sum(Fraction(w).limit_denominator(10**6) for w in weights)
    shares = {"init": init}
    for i, w in enumerate(weights):
        part = (1 - init) * Fraction(w).limit_denominator(10**6) / total
        shares[f"s{i}"] = part * sel
        shares[f"m{i}"] = part * (1 - sel)
    p = split_rho(rho, shares)
    return p["init"], [(p[f"s{i}"], p[f"m{i}"]) for i in range(len(weights))]


def spanning_picks(columns: Sequence[str], pairs: Sequence[tuple[str, ...]]) -> int:
    """Edges of a spanning forest of the graph on ``columns`` whose edges are ``pairs``: the
    number of columns less the number of connected components (public: the workload's
    pairs)."""
    return len(columns) - len(_components(columns, pairs))


def _components(columns: Sequence[str], pairs: Sequence[tuple[str, ...]]) -> list[set[str]]:
    parent = {c: c for c in columns}

    def find(c: str) -> str:
        while parent[c] != c:
            parent[c] = parent[parent[c]]
            c = parent[c]
        return c

    for a, b in pairs:
        parent[find(a)] = find(b)
    groups: dict[str, set[str]] = {}
    for c in columns:
        groups.setdefault(find(c), set()).add(c)
    return list(groups.values())


#: a cell of a noisy 1-way marginal below this many sigmas is "rare" (MST's domain compression)
RARE_SIGMAS = 3.0


def pool_rare(y: np.ndarray, sigma: float) -> np.ndarray:
    """A noisy 1-way marginal with its rare cells (noisy value below ``RARE_SIGMAS`` sigma)
    shrunk towards their mean, where there are at least three: the empirical-Bayes (James-Stein)
    estimate ``m + (1 - b)(y - m)`` with ``b = sigma^2 / (sigma^2 + tau^2)`` and ``tau^2`` the
    rare cells' variance beyond the noise's. Where noise dwarfs the rare counts (``tau^2 = 0``)
    this is MST's domain compression (one merged cell, decompressed uniformly; McKenna et al.
    2021, sec. 4) without changing the domain; where the rare cells really differ (a long
    ordinal tail) it leaves them nearly as measured. Post-processing of ``y`` only."""
    rare = y < RARE_SIGMAS * sigma
    if rare.sum() < 3:
        return y
    m = float(y[rare].mean())
    tau2 = max(0.0, float(y[rare].var(ddof=1)) - sigma**2)
    b = sigma**2 / (sigma**2 + tau2)
    out = y.copy()
    out[rare] = m + (1.0 - b) * (y[rare] - m)
    return out


def maximal(candidates: Sequence[tuple[str, ...]], columns: Sequence[str]) -> list[tuple[str, ...]]:
    """The candidates inside no other candidate: the workload's own marginals (the row
    balancer's targets). ``candidates`` is downward closed (:func:`candidates`), so a candidate
    inside another is inside one with a single column more: O(candidates x columns)."""
    have = {frozenset(cl) for cl in candidates}
    return [cl for cl in candidates
            if not any(frozenset((*cl, c)) in have for c in columns if c not in cl)]  # fmt: skip


def select_parts(rho_select: float, k: int) -> list[float]:
    """A round's selection budget split over its ``k`` one-at-a-time selections (summing to at
    most ``rho_select``). ``k`` exponential mechanisms at ``rho/k`` each cost what one Gumbel
    top-k at ``rho`` does (same scale, :func:`~dpql.privacy.mechanisms.gumbel_beta`)."""
    parts = split_rho(rho_select, {j: Fraction(1, k) for j in range(k)})
    return [parts[j] for j in range(k)]


def overlaps(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """Two candidates share a pair of columns (or are one column each and equal): measuring
    both in one round mostly re-measures the same dependence."""
    return len(set(a) & set(b)) >= min(2, len(a), len(b))


def budget_lines(s: AimSchedule, cards: dict[str, int] | None = None) -> list[BudgetLine]:
    """The 1-way release (with its count of values, given the domain's ``cards``), then per
    round its selections and its release of the picked marginals (chosen by the selections:
    no count)."""
    count = sum(cards[c] for c in s.columns) if cards is not None else None
    lines = [BudgetLine("aim.init", "gaussian", 1, s.rho_init, s.init_sigma(), s.n, count)]
    for i, (rs, rm) in enumerate(s.rounds):
        for r in select_parts(rs, s.picks(i)):
            lines.append(BudgetLine(s.phase(i), "gumbel_top_k", 1, r,
                                    gumbel_beta(2.0 / s.n, 1, r), s.n))  # fmt: skip
        lines.append(BudgetLine(s.phase(i), "gaussian", 1, rm, s.round_sigma(i), s.n))
    return lines


def _pick_forest(oracle, s: AimSchedule, model, rs: float, sigma: float,
                 cells: Callable[[tuple[str, ...]], int]) -> list[tuple[str, ...]]:  # fmt: skip
    """The spanning-forest round's ``s.tree`` picks (MST's tree selection, McKenna et al. 2021
    sec. 4, as Kruskal's algorithm with an exponential mechanism per edge): each among the
    planned pairs that join two components of the forest so far, scored by their L1 error
    against ``model`` (the 1-way model) less their expected noise, as every AIM pick is.
    ``s.tree`` is the planned pairs' spanning-forest size, so every pick has a pool."""
    from dpql.synth.graphical import model_marginal

    n = s.n
    synth = {cl: model_marginal(model, cl) / n for cl in s.tree_pairs}
    where = {c: i for i, c in enumerate(s.columns)}  # column -> its component's label
    cls: list[tuple[str, ...]] = []
    for j, r in enumerate(select_parts(rs, s.tree)):
        pool = [cl for cl in s.tree_pairs if where[cl[0]] != where[cl[1]]]
        chosen = oracle.select(
            [Marginal(cl) for cl in pool], [synth[cl] for cl in pool], 1, r, phase=s.phase(0),
            label=f"spanning forest, edge {j + 1}/{s.tree}",
            penalty=[SQRT_2_OVER_PI * sigma * cells(cl) for cl in pool],
        )  # fmt: skip
        a, b = pool[chosen[0]]
        old, new = where[a], where[b]
        where = {c: new if w == old else w for c, w in where.items()}
        cls.append((a, b))
    return cls


def _pick_round(oracle, s: AimSchedule, i: int, model, rs: float, sigma: float, limit: float,
                mdom, cells: Callable[[tuple[str, ...]], int]) -> list[tuple[str, ...]]:
    """An adaptive round's ``s.k()`` picks, one at a time, among the candidates that the
    round's noise would not swamp and that keep the model within ``limit`` MB."""
    from mbi import junction_tree

    from dpql.synth.graphical import IndependentModel, model_marginal

    n = s.n
    if isinstance(model, IndependentModel):  # its junction tree is cl and singletons
        card = dict(zip(mdom.attributes, mdom.shape, strict=True))

        def model_size(cl: tuple[str, ...]) -> float:
            return (cells(cl) + sum(card[c] for c in s.columns if c not in cl)) * 8 / 2**20
    else:

        def model_size(cl: tuple[str, ...], now=tuple(model.cliques)) -> float:
            return junction_tree.hypothetical_model_size(mdom, [*now, cl])

    in_model = set()
    for c in model.cliques:
        for r in range(2, len(c) + 1):
            in_model.update(itertools.combinations(c, r))
    live = [
        cl
        for cl in s.candidates
        if SQRT_2_OVER_PI * sigma * cells(cl) < NOISE_L1_LIMIT
        and (cl in in_model or model_size(cl) <= limit)
    ]
    if len(live) < s.k():  # public fallback: the smallest candidates (events are planned)
        live += [c for c in sorted(s.candidates, key=cells) if c not in live]
        live = live[: max(s.k(), len(live))]
    synth = {cl: model_marginal(model, cl) / n for cl in live}
    cls: list[tuple[str, ...]] = []
    # k selections one at a time, each among the candidates that share no column pair with
    # this round's earlier picks (all unpicked ones if none is left): one release per round
    # still re-fits once, but its marginals tell different things. A clique already measured
    # is picked again only where its error beats its noise (the penalty), i.e. where it pays.
    for j, r in enumerate(select_parts(rs, s.k())):
        pool = [cl for cl in live if cl not in cls]
        pool = [cl for cl in pool if not any(overlaps(cl, c) for c in cls)] or pool
        chosen = oracle.select(
            [Marginal(cl) for cl in pool], [synth[cl] for cl in pool], 1, r,
            phase=s.phase(i), label=f"{s.phase(i)}, pick {j + 1}/{s.k()}",
            penalty=[SQRT_2_OVER_PI * sigma * cells(cl) for cl in pool],
        )  # fmt: skip
        cls.append(pool[chosen[0]])
    return cls


class AimBackend:
    name = "aim"
    traits = Traits()

    def declared_budget(self, spec: object) -> tuple[float, float]:
        return 0.0, 0.0

    def plan(self, ctx: PlanContext, options: AimOptions | None = None) -> SynthPlan:
        spec = ctx.spec
        if options is None:
            options = spec.model.synthesizer.options
        if options.max_model_size is None:
            options = options.model_copy(update={"max_model_size": machine_model_cap()})
        dom = spec.domain
        s = plan_aim(dom.names, ctx.queries, ctx.phase_rho.get("synthesizer", 0.0), spec.rows,
                     options, [dom.card(c) for c in dom.names], dom.cells)  # fmt: skip
        # cost: the model (capped at max_model_size MB); time is dominated by mbi's XLA
        # compilation of each round's new clique structure
        # the row balancer holds the workload marginals' counts and targets (float32) and the
        # model's marginal of each (float64)
        balance = 16 * sum(dom.cells(cl) for cl in s.targets) if options.balance_sweeps else 0
        cost = SynthCost(
            {"aim.model": options.max_model_size * 2**20, "aim.balance": balance},
            2.0 * max(1, len(s.rounds))
            + 0.002 * (options.iters * len(s.rounds) + options.final_iters)
            # the row balancer (dpql.synth.graphical.BALANCE_WORK), a fixed amount of work
            + (1.5 if options.balance_sweeps else 0.0),
        )
        opts = options.model_dump()
        opts["rounds"] = len(s.rounds) - bool(s.tree)
        opts["per_round"] = s.k()
        opts["tree"] = bool(s.tree)
        opts["tree_edges"] = s.tree
        opts["init_share"] = s.init_share
        cards = {c.name: c.card for c in spec.domain}
        return SynthPlan("aim", tuple(budget_lines(s, cards)), (s, options), cost, opts)

    def run(self, plan: SynthPlan, ctx: RunContext) -> SynthResult:
        from dpql.synth.graphical import import_mbi

        import_mbi()
        from mbi import Domain, LinearMeasurement

        from dpql.domain import NULL_SCALED, EncodedTable, NumericColumn
        from dpql.synth.graphical import (
            IndependentModel,
            balance_rows,
            model_marginal,
            quick_start_mirror_descent,
            sample_rows,
            tree_model,
        )
        from dpql.synth.jax_cache import enable_compilation_cache

        enable_compilation_cache()
        s, options = plan.config
        oracle = ctx.private.oracle
        n = s.n
        dom = ctx.spec.domain
        mdom = Domain(list(s.columns), [dom.card(c) for c in s.columns])

        def estimate(meas, iters, warm=None):
            return quick_start_mirror_descent().estimate(
                mdom, meas, known_total=float(n), iters=iters, warm_start=warm
            )

        ones = [Marginal((c,)) for c in s.columns]
        sigma0 = s.init_sigma()
        noisy = oracle.measure(ones, s.rho_init, phase="aim.init",
                               label=f"{len(ones)} one-way marginals")  # fmt: skip
        # the model learns from the 1-way answers with rare cells pooled; post-processing gets
        # them as released (``measured``)
        fitted = [pool_rare(np.asarray(y, dtype=np.float64), sigma0) if options.pool_rare
                  else np.asarray(y, dtype=np.float64) for y in noisy]  # fmt: skip
        meas = [
            LinearMeasurement(y * n, (c,), stddev=sigma0 * n)
            for c, y in zip(s.columns, fitted, strict=True)
        ]
        measured = [(q, y, sigma0) for q, y in zip(ones, noisy, strict=True)]
        # the 1-way model is the product of the (clipped, normalised) noisy 1-way marginals:
        # no mirror descent (and no XLA compilation) for it
        model = IndependentModel(
            {c: np.clip(y, 0, None) for c, y in zip(s.columns, fitted, strict=True)}, n
        )
        picked: list[tuple[str, ...]] = []
        tree: list[tuple[str, ...]] = []
        spent = s.rho_init
        total = s.rho_init + sum(a + b for a, b in s.rounds)
        for i, (rs, rm) in enumerate(s.rounds):
            spent += rs + rm
            sigma = s.round_sigma(i)
            limit = options.max_model_size * spent / total
            if i == 0 and s.tree:
                cls = _pick_forest(oracle, s, model, rs, sigma, dom.cells)
                tree = list(cls)
            else:
                cls = _pick_round(oracle, s, i, model, rs, sigma, limit, mdom, dom.cells)
            ys = oracle.measure([Marginal(cl) for cl in cls], rm, phase=s.phase(i),
                                label=f"{s.phase(i)}: {cls}")  # fmt: skip
            for cl, y in zip(cls, ys, strict=True):
                meas.append(LinearMeasurement(np.asarray(y, dtype=np.float64) * n, cl,
                                              stddev=sigma * n))  # fmt: skip
                measured.append((Marginal(cl), y, sigma))
                picked.append(cl)
            last = i == len(s.rounds) - 1
            iters = options.final_iters if last and options.final_iters else options.iters
            if i == 0 and s.tree and not last:
                # the forest's model in closed form (a Bayesian network over it): no mirror
                # descent and no compile for a structure the next round's fit replaces
                pairs = {cl: np.asarray(y, dtype=np.float64) for cl, y in zip(cls, ys, strict=True)}
                model = tree_model(mdom, dict(zip(s.columns, fitted, strict=True)), pairs, n)
            else:
                model = estimate(meas, iters, model if i else None)
            if ctx.progress:
                ctx.progress("aim", i + 1, len(s.rounds))
        if not s.rounds:
            model = estimate(meas, options.final_iters or options.iters)
        rows = ctx.spec.model.synthesizer.rows
        rng = np.random.default_rng(ctx.seed)
        data = sample_rows(model, rows, rng)
        if options.balance_sweeps:
            # the workload's marginals (the maximal candidates), at the model's expected counts
            scale = rows / float(n)
            targets = [(cl, model_marginal(model, cl) * scale) for cl in s.targets]
            data = balance_rows(data, targets, {c: dom.card(c) for c in s.columns}, rng,
                                sweeps=options.balance_sweeps)  # fmt: skip
        order = rng.permutation(rows)
        codes, scaled = {}, {}
        for c in s.columns:
            code = np.asarray(data[c], dtype=np.int32)[order]
            column = dom[c]
            if isinstance(column, NumericColumn):
                null = code == column.null_code  # missing: keep, the null bin
                x = column.value_in_bin(np.minimum(code, column.bins - 1), rng.random(rows))
                scaled[c] = np.where(null, NULL_SCALED, (x - column.lo) / column.span)
                code = np.where(null, code, column.bin_of(x)).astype(np.int32)
            codes[c] = code
        table = EncodedTable(dom, codes, scaled)
        info = {
            "options": dict(plan.options),
            "selected": [list(c) for c in picked],
            "spanning_forest": [list(c) for c in tree],
            "picks_per_round": [s.picks(i) for i in range(len(s.rounds))],
            "model_cliques": [list(c) for c in model.cliques],
        }
        return SynthResult(table, info, tuple(measured))


BACKEND = AimBackend()
