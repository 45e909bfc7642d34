"""MST and AIM (McKenna et al. 2021, 2022) driven through the estimators of ``mbi`` 2.x.

``mbi`` 2.0's wheel ships the estimation library (``Dataset``, ``Domain``, ``LinearMeasurement``,
``MirrorDescent``) but not the mechanism scripts (``mechanisms/mst.py``, ``mechanisms/aim.py`` of
github.com/ryan112358/private-pgm). This module re-implements those two mechanisms on top of the
2.x API, following the reference scripts step by step, with three deliberate changes so that the
comparison with dpql is like for like:

* **Neighbouring relation.** dpql is replace-one at a public row count ``n`` (`dpql/ir/queries.py`).
  The reference scripts are add/remove-one (count vectors: L2 sensitivity 1, L1 score sensitivity
  ``wgt``). Here every count vector has L2 sensitivity sqrt(2) and every selection score L1
  sensitivity ``2 * wgt``; the total ``n`` is public, so the estimators get ``known_total = n``.
* **Noise and accounting** go through dpql's own mechanisms (`dpql.privacy.mechanisms`):
  ``gaussian_mechanism`` for measurements and ``gumbel_top_k(k=1)`` for the exponential mechanism
  (Gumbel-max *is* the exponential mechanism; at scale ``beta = Du sqrt(1/(2 rho))`` it is the
  reference scripts' EM with ``eps = sqrt(8 rho)``, which is ``eps^2/8 = rho``-zCDP). Every call
  appends to a dpql ``Ledger``; the driver checks that the ledger's total rho is <= the budget.
* **Scoring** (MST's 2-way scores, AIM's candidate errors) needs the model's marginals on
  cliques outside the model. They are computed by one numpy einsum over the model's
  potentials (:func:`dpql.synth.aim.graphical.model_marginal`, shared with dpql's aim backend;
  checked equal to mbi's ``variable_elimination``), because mbi's jitted ``variable_elimination``
  compiles once per (model, clique) pair: 126 s for MST's 105 pairs on the benchmark machine,
  minutes per AIM round.

Everything else (budget splits, domain compression and Kruskal selection of MST; workload
weights, bias correction, model-size filter, sigma annealing and last-round rule of AIM) is the
reference scripts' logic.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import networkx as nx
import numpy as np
from mbi import Dataset, Domain, LinearMeasurement, WeightedQuery, junction_tree
from mbi.estimation import MirrorDescent

from dpql.privacy.ledger import Ledger
from dpql.privacy.mechanisms import gaussian_mechanism, gumbel_top_k
from dpql.privacy.noise import NoiseSource
from dpql.synth.aim.graphical import model_marginal as _model_marginal

SQRT2 = math.sqrt(2.0)  # L2 sensitivity of one count vector under replace-one
Log = Callable[[str], None]


@dataclass
class PeerResult:
    data: Dataset  # synthetic records over the (uncompressed) mbi domain
    ledger: Ledger
    info: dict = field(default_factory=dict)


def _counts(data: Dataset, clique: Sequence[str]) -> np.ndarray:
    """The true count vector of ``clique`` (= ``data.project(clique).datavector()``, in numpy)."""
    clique = tuple(clique)
    shape = data.domain.project(clique).shape
    idx = np.ravel_multi_index(tuple(np.asarray(data.data[a]) for a in clique), shape)
    return np.bincount(idx, minlength=math.prod(shape)).astype(np.float64)


def _estimate(domain: Domain, measurements, n: int, iters: int, warm_start=None):
    return MirrorDescent().estimate(
        domain, measurements, known_total=float(n), iters=iters, warm_start=warm_start
    )


# ------------------------------------------------------------------------------------------
# MST


def _compress_domain(data: Dataset, sigma: float, noisy: dict[str, np.ndarray]):
    """MST's compress_domain: keep values whose noisy count is >= 3 sigma, merge the rest.

    A merged value's measurement is re-expressed over the new domain: the sum of the merged
    noisy counts, divided by sqrt(#merged) so that its noise has std sigma (WeightedQuery).
    """
    mapping: dict[str, np.ndarray] = {}
    measurements = []
    for col, y in noisy.items():
        sup = y >= 3 * sigma
        if sup.all():
            measurements.append(LinearMeasurement(y, (col,), stddev=sigma))
            continue
        k = int(sup.sum())
        m = np.full(y.size, k, dtype=np.int64)
        m[sup] = np.arange(k)
        mapping[col] = m
        merged = y.size - k
        y2 = np.append(y[sup], y[~sup].sum() / math.sqrt(merged))
        w = np.ones(k + 1)
        w[-1] = 1.0 / math.sqrt(merged)
        measurements.append(LinearMeasurement(y2, (col,), stddev=sigma, query=WeightedQuery(w)))
    return data.compress(mapping), measurements, mapping


def mst(
    data: Dataset,
    rho: float,
    n: int,
    noise: NoiseSource,
    *,
    iters: int = 5000,
    select_iters: int = 1000,
    log: Log = print,
) -> PeerResult:
    """MST: 1/3 of rho on all 1-way marginals, 1/3 on Kruskal (d-1 EM picks), 1/3 on the tree."""
    ledger = Ledger()
    attrs = list(data.domain.attributes)
    d = len(attrs)
    # 1-way marginals, one Gaussian release of their concatenation at rho/3
    x1 = [_counts(data, (a,)) for a in attrs]
    (y1,) = gaussian_mechanism(  # count vectors: integer sums, unit 1
        [np.concatenate(x1)], [1.0], SQRT2 * math.sqrt(d), rho / 3, noise=noise, ledger=ledger,
        phase="mst.measure", label=f"{d} one-way marginals",
    )  # fmt: skip
    sigma = SQRT2 * math.sqrt(d) / math.sqrt(2 * rho / 3)  # = gaussian_sigma(...)
    parts = np.split(y1.astype(np.float64), np.cumsum([v.size for v in x1])[:-1])
    cdata, log1, mapping = _compress_domain(data, sigma, dict(zip(attrs, parts, strict=True)))
    log(f"mst: sigma {sigma:.1f}, compressed domain {dict(cdata.domain.config)}")
    # selection: L1 error of every 2-way marginal under the 1-way model, Kruskal by EM
    t = time.perf_counter()
    model = _estimate(cdata.domain, log1, n, select_iters)
    cands = list(itertools.combinations(attrs, 2))
    score = {e: float(np.abs(_counts(cdata, e) - _model_marginal(model, e)).sum()) for e in cands}
    rho_each = rho / 3 / (d - 1)
    ds = nx.utils.UnionFind(attrs)
    tree: list[tuple[str, str]] = []
    for i in range(d - 1):
        live = [e for e in cands if ds[e[0]] != ds[e[1]]]
        pick = gumbel_top_k(
            np.array([score[e] for e in live]), 2.0, 1, rho_each, noise=noise, ledger=ledger,
            phase="mst.select", label=f"Kruskal edge {i + 1}/{d - 1}",
        )  # fmt: skip
        e = live[int(pick[0])]
        tree.append(e)
        ds.union(*e)
    log(f"mst: tree selected in {time.perf_counter() - t:.1f}s: {tree}")
    # the tree's 2-way marginals, one Gaussian release at rho/3
    x2 = [_counts(cdata, e) for e in tree]
    (y2,) = gaussian_mechanism(  # count vectors: integer sums, unit 1
        [np.concatenate(x2)], [1.0], SQRT2 * math.sqrt(d - 1), rho / 3, noise=noise, ledger=ledger,
        phase="mst.measure", label=f"{d - 1} two-way marginals",
    )  # fmt: skip
    sigma2 = SQRT2 * math.sqrt(d - 1) / math.sqrt(2 * rho / 3)
    log2 = [
        LinearMeasurement(y.astype(np.float64), e, stddev=sigma2)
        for e, y in zip(tree, np.split(y2, np.cumsum([v.size for v in x2])[:-1]), strict=True)
    ]
    t = time.perf_counter()
    model = _estimate(cdata.domain, log1 + log2, n, iters)
    log(f"mst: estimation ({iters} iters) {time.perf_counter() - t:.1f}s")
    synth = model.synthetic_data(rows=n).decompress(mapping)
    return PeerResult(synth, ledger, {"tree": [list(e) for e in tree], "iters": iters})


# ------------------------------------------------------------------------------------------
# AIM


def _powerset(cl: Sequence[str]):
    return itertools.chain.from_iterable(
        itertools.combinations(cl, r) for r in range(1, len(cl) + 1)
    )


def _downward_closure(cliques) -> list[tuple[str, ...]]:
    out: set[tuple[str, ...]] = set()
    for cl in cliques:
        out.update(_powerset(cl))
    return sorted(out, key=lambda c: (len(c), c))  # total order: reproducible across processes


def _compile_workload(workload: Sequence[tuple[str, ...]]) -> dict[tuple[str, ...], float]:
    """Candidate -> weight: sum over workload cliques of the size of the overlap (weights 1)."""
    return {
        cl: float(sum(len(set(cl) & set(w)) for w in workload))
        for cl in _downward_closure(workload)
    }


def _filter_candidates(candidates, model, size_limit: float):
    free = set(_downward_closure(model.cliques))
    cliques = list(model.cliques)
    return {
        cl: w
        for cl, w in candidates.items()
        if cl in free
        or junction_tree.hypothetical_model_size(model.domain, [*cliques, cl]) <= size_limit
    }



def aim(
    data: Dataset,
    workload: Sequence[tuple[str, ...]],
    rho: float,
    n: int,
    noise: NoiseSource,
    *,
    rounds: int | None = None,
    max_rounds: int | None = None,
    max_model_size: float = 80.0,
    iters: int = 1000,
    final_iters: int | None = None,
    log: Log = print,
) -> PeerResult:
    """AIM (reference script logic; accounting in rho with replace-one sensitivities).

    ``rounds`` is AIM's own parameter T (default 16 d): it sets the initial per-round budget
    (sigma = sqrt(T / (2 * 0.9 rho)) in unit-sensitivity terms, EM eps = sqrt(8 * 0.1 rho / T)),
    so a smaller T means fewer, less noisy rounds. ``max_rounds`` (not in the reference) caps
    the number of adaptive rounds for wall time: round ``max_rounds`` is made the last one by
    AIM's own last-round rule (it spends whatever budget is left).
    """
    ledger = Ledger()
    attrs = list(data.domain.attributes)
    T = rounds or 16 * len(attrs)
    candidates = _compile_workload(workload)
    answers = {cl: _counts(data, cl) for cl in candidates}
    oneway = [cl for cl in candidates if len(cl) == 1]
    # unit-sensitivity sigma of the reference script; the released std is sqrt(2) times it
    su = math.sqrt(T / (2 * 0.9 * rho))
    eps = math.sqrt(8 * 0.1 * rho / T)
    rho_used = len(oneway) * 0.5 / su**2
    x1 = [answers[cl] for cl in oneway]
    (y1,) = gaussian_mechanism(  # count vectors: integer sums, unit 1
        [np.concatenate(x1)], [1.0], SQRT2 * math.sqrt(len(oneway)), rho_used, noise=noise,
        ledger=ledger, phase="aim.measure", label=f"{len(oneway)} one-way marginals",
    )  # fmt: skip
    measurements = [
        LinearMeasurement(y.astype(np.float64), cl, stddev=SQRT2 * su)
        for cl, y in zip(oneway, np.split(y1, np.cumsum([v.size for v in x1])[:-1]), strict=True)
    ]
    model = _estimate(data.domain, measurements, n, iters)
    t_round, terminate, picked = 0, False, []
    while not terminate:
        t0 = time.perf_counter()
        t_round += 1
        if rho - rho_used < 2 * (0.5 / su**2 + eps**2 / 8) or t_round == max_rounds:
            remaining = rho - rho_used  # spend what is left in one last round
            su = math.sqrt(1 / (2 * 0.9 * remaining))
            eps = math.sqrt(8 * 0.1 * remaining)
            terminate = True
        rho_sel, rho_meas = eps**2 / 8, 0.5 / su**2
        rho_used += rho_sel + rho_meas
        size_limit = max_model_size * rho_used / rho
        small = _filter_candidates(candidates, model, size_limit)
        sigma = SQRT2 * su
        keys = list(small)
        errors = np.array([
            small[cl] * (np.abs(answers[cl] - _model_marginal(model, cl)).sum()
                         - math.sqrt(2 / math.pi) * sigma * data.domain.size(cl))
            for cl in keys
        ])  # fmt: skip
        sens = 2.0 * max(abs(small[cl]) for cl in keys)  # replace-one: 2 * wgt
        pick = gumbel_top_k(
            errors, sens, 1, rho_sel, noise=noise, ledger=ledger,
            phase="aim.select", label=f"round {t_round}",
        )  # fmt: skip
        cl = keys[int(pick[0])]
        x = answers[cl]
        (y,) = gaussian_mechanism(
            [x], [1.0], SQRT2, rho_meas, noise=noise, ledger=ledger,
            phase="aim.measure", label=f"round {t_round}: {cl}",
        )  # fmt: skip
        measurements.append(LinearMeasurement(y.astype(np.float64), cl, stddev=sigma))
        z = _model_marginal(model, cl)
        model = _estimate(data.domain, measurements, n, iters, warm_start=model)
        w = _model_marginal(model, cl)
        picked.append(cl)
        annealed = bool(np.abs(w - z).sum() <= sigma * math.sqrt(2 / math.pi) * x.size)
        if annealed:
            su /= 2
            eps *= 2
        log(
            f"aim: round {t_round} {cl} cells {x.size} candidates {len(keys)} "
            f"budget {rho_used / rho:.3f}{' anneal' if annealed else ''} "
            f"{time.perf_counter() - t0:.1f}s"
        )
    if final_iters and final_iters != iters:
        model = _estimate(data.domain, measurements, n, final_iters, warm_start=model)
    synth = model.synthetic_data(rows=n)
    return PeerResult(
        synth, ledger, {"rounds_param": T, "max_rounds": max_rounds, "rounds_run": t_round,
                        "selected": [list(c) for c in picked],
                        "max_model_size": max_model_size, "iters": iters,
                        "final_iters": final_iters or iters},
    )  # fmt: skip
