"""AIM's plan: the fixed schedule (the public rule for unset options), its budget lines and its
resource cost. Pure and data-free; imports neither mbi nor JAX (see :mod:`dpql.synth.aim`)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction

from dpql.ir.queries import Marginal, Query, joint_l2_sensitivity
from dpql.privacy.budget import BudgetLine, split_rho
from dpql.privacy.mechanisms import gumbel_beta
from dpql.spec.models import AimOptions
from dpql.synth.base import PlanContext, SynthCost, SynthPlan

#: the model-size cap from the machine (:func:`machine_model_cap`): MB per CPU core, within
#: [MODEL_CAP_MIN, MODEL_CAP_MAX] (AIM's reference cap), and at most 1 / MODEL_MEMORY_SHARE of
#: the memory limit
MODEL_MB_PER_CORE = 10.0
MODEL_CAP_MIN, MODEL_CAP_MAX = 20.0, 80.0
MODEL_MEMORY_SHARE = 32
#: the default work of a release's mirror-descent fits per CPU core (:func:`work_model_cap`):
#: junction-tree cells times steps, summed over the schedule's fits. Bounded so that the fits'
#: steps take about as long as compiling one fit's program on a small machine, the fixed cost
#: of a fit: synthesis time then stays bounded whatever n, where a small noise would
#: otherwise let the selection fill the machine's cap with large cliques
FIT_WORK_PER_CORE = 1e8
#: bytes of a model cell (the unit of ``max_model_size``: mbi's ``hypothetical_model_size``)
CELL_BYTES = 8


def usable_cpus() -> int:
    """The CPU cores this process may run on."""
    import os

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return cpus or os.cpu_count() or 1


def machine_model_cap(cpus: int | None = None, memory_bytes: int | None = None) -> float:
    """The model-size cap (MB) of this machine: ``MODEL_MB_PER_CORE`` per usable CPU core
    within [``MODEL_CAP_MIN``, ``MODEL_CAP_MAX``], and at most 1/``MODEL_MEMORY_SHARE`` of
    compile's memory limit (``dpql.plan.resources.memory_limit``).

    A mirror-descent step's work grows with the model's size and XLA spreads it over the
    cores, so the cap scales with them: a small machine keeps each fit short, and from 8
    cores the cap is AIM's reference 80 MB. Mirror descent holds a few copies of the
    potentials, marginals and messages, hence the memory share. Public (no data); the cap in
    use is in the plan's and the record's synthesizer options."""
    from dpql.plan.resources import memory_limit

    cpus = usable_cpus() if cpus is None else cpus
    memory_bytes = memory_limit() if memory_bytes is None else memory_bytes
    cores = min(MODEL_CAP_MAX, max(MODEL_CAP_MIN, MODEL_MB_PER_CORE * cpus))
    return float(min(cores, memory_bytes / 2**20 / MODEL_MEMORY_SHARE))


#: a candidate whose expected noise L1 (fraction of n) reaches this is never offered
NOISE_L1_LIMIT = 1.0
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


#: at most this many adaptive rounds by default: each round re-fits the model, and a fit of a new
#: clique structure costs a compile of mbi's program where it is too large for the host
#: (:data:`dpql.synth.aim.hostfit.HOST_FIT_MAX_WORK`), seconds on a small machine
MAX_DEFAULT_ROUNDS = 4
#: default init share is chosen so that the 1-way release's expected L1 noise per column is at
#: most this (TVD 0.025), within [INIT_SHARE_MIN, INIT_SHARE_MAX]: at most half the budget, so
#: that the marginals carrying the columns' dependence get at least as much as the 1-way ones
ONE_WAY_L1_TARGET = 0.05
INIT_SHARE_MIN, INIT_SHARE_MAX = 0.2, 0.5
#: when even INIT_SHARE_MAX leaves budget for only one selected marginal, the 1-way release gets
#: this share (the one marginal adds little; the 1-way marginals are most of what is learnt)
INIT_SHARE_ONE_MARGINAL = 0.9
#: default number of selected marginals: at most as many as leave the median 2-way candidate's
#: expected noise L1 at or below this (a measurement noisier than that mostly adds noise)
PAIR_L1_TARGET = 0.3
#: at most this many selected marginals by default (AIM's T = 16 d spends most rounds
#: re-measuring; capped as in ``benchmarks/suite``); one per column below it, all of them where
#: even this many leave the median pair's expected noise L1 at most ABUNDANT_PAIR_L1
MAX_MARGINALS = 16
ABUNDANT_PAIR_L1 = 0.05
#: the spanning forest runs by default only where its edges are at most this share of the
#: marginals the budget affords (:attr:`DefaultSchedule.affordable`): the rest go to the
#: adaptive picks
FOREST_SHARE_MAX = 0.5
#: the forest runs whatever FOREST_SHARE_MAX says where each of its edges' noise sd is at most
#: 1/FOREST_SNR_MIN of n (the cells' counts are then well resolved): rare cells
#: are merged (``dpql.synth.aim.program.rare_cells``), so a pair's declared cells overstate the
#: noise it brings where a table's rows sit in few of them, and a spanning forest then costs
#: less than the columns it leaves unmeasured with any other
FOREST_SNR_MIN = 300.0


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
       ``benchmarks/suite``), or 16 whatever the columns where even 16 leave the median pair's
       expected noise L1 at most :data:`ABUNDANT_PAIR_L1` (where pairs are that cheap, more
       of them help; where they are noisier, more do not); never more than the candidates,
       and no more than leaves the median 2-way candidate's expected noise L1 at or below
       :data:`PAIR_L1_TARGET` (at least 1).
    3. (In :func:`plan_aim`) a spanning forest of the pairs first where its edges are at most
       :data:`FOREST_SHARE_MAX` of :attr:`DefaultSchedule.affordable`.
    4. ``rounds = min(m, MAX_DEFAULT_ROUNDS)`` rounds of ``per_round = ceil(m / rounds)``.
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

    def spent_share(self, i: int) -> float:
        """The share of the schedule's rho spent once round ``i`` has measured: AIM scales the
        model-size cap of round ``i``'s picks by it."""
        total = self.rho_init + sum(a + b for a, b in self.rounds)
        spent = self.rho_init
        for a, b in self.rounds[: i + 1]:
            spent += a + b
        return spent / total if total > 0 else 1.0

    def fits(self, iters: int, final_iters: int) -> list[tuple[int, float]]:
        """(mirror-descent steps, :meth:`spent_share`) of each fit the run makes: one per round
        but the spanning forest's (closed form, where rounds follow it); the last fit takes
        ``final_iters`` steps (``iters`` where that is 0)."""
        last = len(self.rounds) - 1
        return [(final_iters or iters if i == last else iters, self.spent_share(i))
                for i in range(len(self.rounds))
                if not (i == 0 and self.tree and i != last)]  # fmt: skip


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
    # the forest only where the budget affords a pair for each of its edges and as many adaptive
    # marginals besides (public rule): a forest that would take most of what the budget affords
    # leaves too few picks for the dependence the selection finds -- unless its edges' noise is
    # small against n whatever the pairs' declared cells (FOREST_SNR_MIN)
    crowded = (
        default is not None
        and options.rounds is None
        and tree > FOREST_SHARE_MAX * default.affordable
    )

    def counts(tree: int) -> tuple[int, int]:
        """Adaptive rounds and picks per round beside a forest of ``tree`` edges."""
        if options.rounds is not None:
            return options.rounds, options.per_round or 1
        r = default.rounds if default else 1
        k = options.per_round or (default.per_round if default else 1)
        if tree and default is not None:
            # the adaptive marginals the budget still affords beside the forest (an edge costs
            # tree_weight of a marginal), in one round fewer (the forest's fit takes the place
            # of the first round's)
            m = max(1, min(r * k, math.floor(default.affordable - options.tree_weight * tree)))
            r = max(1, min(m, MAX_DEFAULT_ROUNDS - 1))
            k = options.per_round or max(1, round(m / r))
        return r, k

    def edge_snr(tree: int) -> float:
        """``1 / sigma`` of each forest edge's cells (sigma a fraction of n) at this schedule."""
        r, k = counts(tree)
        weights = [options.tree_weight * tree] + [float(max(1, min(k, len(cands))))] * r
        init = Fraction(share).limit_denominator(10**6)
        sel = Fraction(options.select_share).limit_denominator(10**6)
        return n * math.sqrt(_round_parts(rho, init, sel, weights)[1][0][1] / tree)

    if crowded and not (cands and rho > 0 and edge_snr(tree) >= FOREST_SNR_MIN):
        tree = 0
    r, k = counts(tree)
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


def work_model_cap(s: AimSchedule, iters: int, final_iters: int, cpus: int) -> float:
    """The model-size cap (MB) that bounds the work of the schedule's fits: round ``i``'s
    model is within the cap times :meth:`AimSchedule.spent_share`, and a mirror-descent step's
    work is proportional to the model's cells, so ``sum(steps x share) x cells`` over the fits
    (:meth:`AimSchedule.fits`) is at most :data:`FIT_WORK_PER_CORE` x ``cpus`` cell-steps.
    Public: the schedule, the options and the machine."""
    weight = sum(steps * share for steps, share in s.fits(iters, final_iters))
    if weight <= 0:
        return MODEL_CAP_MAX
    return FIT_WORK_PER_CORE * cpus / weight * CELL_BYTES / 2**20


def plan(ctx: PlanContext, options: AimOptions | None = None) -> SynthPlan:
    """AIM's plan: the fixed schedule of ``options`` (default: the spec's; an unset
    ``max_model_size`` from this machine), its budget lines and its resource cost."""
    spec = ctx.spec
    if options is None:
        options = spec.model.synthesizer.options
    dom = spec.domain
    # the schedule prices a measurement by its value cells: a nullable column's null cell
    # holds its missing share, which a complete column does not have and which the release
    # clears where the noisy answers cannot tell it from zero (dpql.synth.nulls)
    values = {c.name: c.card - int(c.nullable) for c in dom}
    s = plan_aim(dom.names, ctx.queries, ctx.phase_rho.get("synthesizer", 0.0), spec.rows,
                 options, [values[c] for c in dom.names],
                 lambda cl: math.prod(values[c] for c in cl))  # fmt: skip
    if options.max_model_size is None:
        cpus = usable_cpus()
        work = work_model_cap(s, options.iters, options.final_iters, cpus)
        cap = min(machine_model_cap(cpus), max(0.01, math.floor(work * 100) / 100))
        options = options.model_copy(update={"max_model_size": cap})
    # cost: the model (capped at max_model_size MB); time is dominated by mbi's XLA
    # compilation of each round's new clique structure
    # the row balancer holds the workload marginals' counts and targets (float32) and the
    # model's marginal of each (float64)
    balance = 16 * sum(dom.cells(cl) for cl in s.targets) if options.balance_sweeps else 0
    cost = SynthCost(
        {"aim.model": options.max_model_size * 2**20, "aim.balance": balance},
        2.0 * max(1, len(s.rounds))
        + 0.002 * (options.iters * len(s.rounds) + options.final_iters)
        # the row balancer (dpql.synth.aim.graphical.BALANCE_WORK), a fixed amount of work
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
