"""I-projection post-processing: reweight and resample synthetic rows toward private measurements.

Wang, Sudalairaj, Henning, Greenewald, Srivastava 2023, "Post-processing private synthetic data
for improving utility on selected measures" (sec. 3, Theorem 1, Algorithm 1; App. B):

1. :func:`measure` -- the K measures are answered on the real table through the measurement
   oracle (this module never sees private rows) in Gaussian releases calibrated to the L2
   sensitivity of each release's vector (replace-one; ``dpql.ir.queries.joint_l2_sensitivity``: 1/n
   per first moment or count, 1/(2n) per centred product, 1/(4n) per centred square, so the
   second moments cost less noise than the paper's raw ones): one release per requirement
   (``dpql.plan.requirements.Release``, the planner's split, ``dpql.plan.split``; without
   ``releases``, ONE release of all of them, the paper); a measure in several releases is their
   inverse-variance average, so every measure carries its own noise sd ``sigma_k``.
2. :func:`project_to_hull` -- denoise: the noisy answers ``a`` are projected onto the convex hull
   of the per-row query vectors ``f(x_i)`` of the synthetic rows (the paper's QP, sec. 3 / App. B;
   exact, by NNLS) in the metric ``sum_k (x_k - a_k)^2 / sigma_k^2`` -- the maximum-likelihood
   point of the Gaussian release; with one release all sigma_k are equal and it is the paper's
   Euclidean QP -- after :func:`project_to_affine_hull` removes the noise that only breaks
   identities between redundant measures. A projection on the hull's relative boundary is mixed
   with ``eta`` of the synthetic mean so the tilt stays finite (on the boundary lambda* is
   unbounded and the dual solver does not converge).
3. :func:`solve_dual` -- the I-projection ``min KL(w || uniform) s.t. |sum_i w_i f(x_i) - a*| <=
   gamma``. By Theorem 1 (eq. 4-5) ``w_i ∝ exp(-lambda . (f(x_i) - a*))`` with lambda minimising
   ``log mean_i exp(-lambda . (f(x_i) - a*)) + gamma ||lambda||_1``. Full-batch: damped proximal
   Newton with Armijo backtracking (value, gradient, Hessian in JAX, stable log-sum-exp). Large:
   the paper's stochastic compositional proximal gradient (Algorithm 1, log-domain tau).
4. :func:`dpql.sampling.resample` -- draw rows with probabilities ``w`` (non-DP seed, recorded).

Step 2 lives in :mod:`dpql.postprocess.hull`, step 3 in :mod:`dpql.postprocess.dual`, step 4 in
:mod:`dpql.sampling`; this module measures and runs the whole step (:func:`iproject`).

Everything after step 1 is post-processing of DP outputs. Diagnostics (stable codes):
``E503`` no usable synthetic rows; ``W501`` one distinct row (nothing can move); ``W502`` a measure
is constant on the synthetic rows; ``W503`` rows with NaN dropped from the support; ``W504`` the
noisy target lies far outside what the synthetic support can reach (more than noise explains);
``W505`` the dual solver stopped with a KKT violation above tolerance; ``W508`` the reweighting
was held at the effective-sample-size floor (the targets need a concentrated table).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal

import numpy as np

from dpql.answers import NoisyAnswer
from dpql.diagnostics import Diagnostic, DiagnosticError
from dpql.domain import Domain, EncodedTable
from dpql.ir.exact import per_row, per_row_sparse
from dpql.ir.oracle import MeasurementOracle
from dpql.ir.queries import (
    And,
    CatIn,
    Count,
    Halfspace,
    Marginal,
    Not,
    Prefix,
    Query,
    TruePred,
    joint_l2_sensitivity,
)
from dpql.plan.requirements import Release, joint_release, release_rhos
from dpql.postprocess.dual import (
    DualSolution,
    SparseQueries,
    residual_kkt_violation,
    solve_dual,
    solve_penalised,
)
from dpql.postprocess.hull import project_to_affine_hull, project_to_hull
from dpql.privacy.mechanisms import gaussian_sigma
from dpql.sampling import resample

PHASE = "iproj.measure"
# the workload queries the noise-aware projection penalises (:func:`sparse_workload`)
PENALISED = (Marginal, Prefix, Halfspace, Count)


# ---------------------------------------------------------------------------------------------
# 1. Private measurement (the only step that touches data, through the oracle)


@dataclass(frozen=True, eq=False)
class Measurement:
    """Noisy answers of the measures (flattened cells), each cell's noise sd (K,; a number is
    broadcast to every cell), the rho spent in all and the public row count."""

    queries: tuple[Query, ...]
    noisy: np.ndarray
    sigma: np.ndarray
    rho: float
    n: int

    def __post_init__(self) -> None:
        sigma = np.broadcast_to(np.asarray(self.sigma, dtype=np.float64), np.shape(self.noisy))
        object.__setattr__(self, "sigma", sigma.copy())


@dataclass(frozen=True, eq=False)
class Boxes:
    """Box constraints of the projection, ``|E_w columns_j - centre_j| <= half_width_j``:
    ``columns`` (one row per table row, one column per box) are public per-row statistics on
    the measures' own scale (so one KKT tolerance serves both), ``sd`` each one's noise sd, the
    scale on which the resampling keeps it (:func:`~dpql.sampling.resample`). Compile boxes each
    requirement's value, linearised at the table's moments
    (``dpql.postprocess.run.requirement_boxes``)."""

    columns: np.ndarray
    centre: np.ndarray
    half_width: np.ndarray
    sd: np.ndarray

    def __post_init__(self) -> None:
        m = self.columns.shape[1]
        if not (self.centre.shape == self.half_width.shape == self.sd.shape == (m,)):
            raise ValueError("one centre, half-width and sd per box column")
        if np.any(self.half_width < 0) or not np.all(self.sd > 0):
            raise ValueError("half-widths must be >= 0 and sds > 0")


def measure(
    queries: Sequence[Query],
    oracle: MeasurementOracle,
    rho: float,
    *,
    label: str,
    releases: Sequence[Release] = (),
    scales: Sequence[np.ndarray] | None = None,
) -> Measurement:
    """Gaussian releases of the measures spending ``rho``-zCDP in all.

    Release ``g`` answers the scalar queries ``cells`` at ``share * rho`` (the shares sum to 1,
    so by zCDP composition the total is ``rho``); without ``releases``, one release of every
    measure (sigma = Delta_2 / sqrt(2 rho), the paper). A query answered by several releases
    gets their inverse-variance average (post-processing). Each release is one ledger event.
    ``scales`` (one array per release, aligned with its cells; public, > 0, from
    ``allocation.allocation_scales``) spread a release's noise unevenly: release ``g``
    answers ``c_k q_k`` with sigma_g for L2 sensitivity ``sqrt(sum_k c_k^2 Delta_k^2)``, so
    measure ``k`` gets sd ``sigma_g / c_k`` from it.
    """
    queries = tuple(queries)
    releases = tuple(releases) or (joint_release(len(queries)),)
    if sum((r.share for r in releases), Fraction(0)) != 1:
        raise ValueError("release shares must sum to 1")
    if scales is not None and [len(c) for c in scales] != [len(r.cells) for r in releases]:
        raise ValueError("scales need one array per release, one number per cell")
    total = np.zeros(len(queries))  # sum of answer / sigma^2
    precision = np.zeros(len(queries))
    single = np.full(len(queries), np.nan)  # the answer itself, for a query in one release
    releases_of = np.zeros(len(queries), dtype=np.int64)
    for i, (rel, rho_g) in enumerate(zip(releases, release_rhos(releases, rho), strict=True)):
        part = [queries[c] for c in rel.cells]
        name = label if len(releases) == 1 else f"{label} ({i + 1}/{len(releases)})"
        c = np.ones(len(part)) if scales is None else np.asarray(scales[i], dtype=np.float64)
        spread = None if scales is None else c.tolist()
        ans = oracle.measure(part, rho_g, phase=PHASE, label=name, scales=spread)
        if any(np.size(a) != 1 for a in ans):
            raise ValueError("separate releases need scalar queries")
        y = np.array([float(np.ravel(a)[0]) for a in ans])
        s = gaussian_sigma(joint_l2_sensitivity(part, oracle.n, c.tolist()), rho_g) / c
        s = s * getattr(oracle, "sd_scale", 1.0)  # answers renormalised (dpql.population)
        total[list(rel.cells)] += y / s**2
        precision[list(rel.cells)] += 1 / s**2
        single[list(rel.cells)] = y
        releases_of[list(rel.cells)] += 1
    if not (precision > 0).all():
        raise ValueError("every query must be in at least one release")
    # a query answered once keeps its released value bit for bit (a whole number of grid steps)
    noisy = np.where(releases_of == 1, single, total / precision)
    return Measurement(queries, noisy, 1 / np.sqrt(precision), rho, oracle.n)


def sparse_workload(
    measurements: Sequence[NoisyAnswer], table: EncodedTable, prior_rows: float
) -> SparseQueries | None:
    """The synthesizer's noisy workload answers (``SynthResult.measurements``: DP outputs it
    already paid for) as penalised queries of the projection: per-row sparse features on
    ``table`` (:func:`~dpql.ir.exact.per_row_sparse`: every row touches at most one cell),
    targets the noisy answers and ridge ``prior_rows * sigma^2`` (the dual of the penalty
    ``(E_w g - b)^2 / (2 sigma^2)`` against the prior's ``prior_rows * KL``). Only marginals,
    prefixes, halfspaces and counts (:data:`PENALISED`) with a finite positive sd take part;
    None when none does."""
    idx, val, cells, target, ridge = [], [], [], [], []
    for m in measurements:
        q, sd = m.query, m.sd
        b = np.ravel(np.asarray(m.value, dtype=np.float64))
        if not isinstance(q, PENALISED) or not (math.isfinite(sd) and sd > 0):
            continue
        if not np.isfinite(b).all():
            continue
        i, v = per_row_sparse(q, table)
        k = q.cells(table.domain)
        if b.size != k:
            continue
        idx.append(i)
        val.append(v)
        cells.append(k)
        target.append(b)
        ridge.append(np.full(k, float(prior_rows) * sd * sd))
    if not idx:
        return None
    return SparseQueries(tuple(idx), tuple(val), tuple(cells), tuple(target), tuple(ridge))


def features(queries: Sequence[Query], table: EncodedTable) -> np.ndarray:
    """Per-row query values ``F`` (rows, K) of a synthetic table (cells of vector queries flat)."""
    return np.hstack([per_row(q, table) for q in queries])


# ---------------------------------------------------------------------------------------------
# The whole post-processing step (denoise: dpql.postprocess.hull; resample: dpql.sampling)


@dataclass(frozen=True, eq=False)
class IProjResult:
    """The post-processed table and everything the provenance record reports about the step."""

    table: EncodedTable
    queries: tuple[Query, ...]
    sigma: np.ndarray
    weights: np.ndarray
    lam: np.ndarray
    noisy: np.ndarray
    target: np.ndarray
    before: np.ndarray
    reweighted: np.ndarray
    after: np.ndarray
    gamma: float
    projection_distance: float
    kkt_violation: float
    kl: float
    ess: float
    seed: int
    method: str
    iterations: int
    diagnostics: tuple[Diagnostic, ...] = field(default=())
    prior_rows: float | None = None  # MAP prior strength (None: the hard I-projection)
    ess_floor: float = 0.0  # the floor on ess, in rows
    shrink: float = 1.0  # fraction of the way to the target kept to respect ess_floor
    resampling_shift: float = 0.0  # max_k |after_k - reweighted_k| / sigma_k
    penalty_cells: int = 0  # workload cells penalised in the projection (0: none)
    boxes: int = 0  # box constraints of the projection (requirement values, score equations)

    def to_json(self) -> dict[str, Any]:
        """JSON form for the provenance record's ``postprocess`` section: no rows, no weights.

        The K-vectors (in ``measures`` order) are ``noise_sigma`` (each measure's noise sd,
        public: a function of the plan) and DP outputs or functions of DP outputs and the
        synthetic table: ``noisy`` (the Gaussian answers), ``target`` (their projection onto
        what reweighting can reach, paper sec. 3), ``synthetic_before`` / ``synthetic_after``
        (the measures on the table before / after) and ``lambda`` (the dual, paper eq. 4-5).
        ``measures`` describes each query (numeric columns ``u(x)`` on their [0, 1] scale).
        """
        from dpql.plan.describe import describe_query

        def vec(x: np.ndarray) -> list[float | None]:
            return [float(v) if math.isfinite(v) else None for v in x]  # JSON has no NaN

        return {
            "solver": self.method,
            "measures": [describe_query(q, self.table.domain) for q in self.queries],
            "noise_sigma": vec(self.sigma),
            "iterations": self.iterations,
            "gamma": self.gamma,
            "projection_distance": self.projection_distance,
            "kkt_violation": self.kkt_violation,
            "kl_from_synthetic": self.kl,
            "effective_sample_size": self.ess,
            "prior_rows": self.prior_rows,
            "ess_floor": self.ess_floor,
            "shrink": self.shrink,
            "resampling_shift_sd": self.resampling_shift,
            "sampling_seed": self.seed,
            "lambda": vec(self.lam),
            "noisy": vec(self.noisy),
            "target": vec(self.target),
            "synthetic_before": vec(self.before),
            "synthetic_after": vec(self.after),
            "boxes": self.boxes,
            "diagnostics": [d.to_json() for d in self.diagnostics],
        }


def _support_warnings(
    F: np.ndarray, queries: Sequence[Query], domain: Domain | None = None
) -> list[Diagnostic]:
    out = []
    if np.unique(F, axis=0).shape[0] == 1:
        out.append(
            Diagnostic(
                "W501",
                "the synthetic table has one distinct row on the measures: post-processing "
                "cannot change it",
                hint="check the synthesizer output (mode collapse?)",
                severity="warning",
            )
        )
        return out
    const = np.flatnonzero(np.ptp(F, axis=0) == 0)
    if len(queries) == F.shape[1]:  # a table with every value present has constant row counts
        const = np.array([k for k in const if not _presence_count(queries[k], domain)], int)
    if const.size:
        out.append(
            Diagnostic(
                "W502",
                f"{const.size} measure(s) are constant on the synthetic rows and cannot move "
                f"(first: {_query_text(queries, const[0], F.shape[1], domain)})",
                hint="the synthetic table lacks variation in these columns",
                severity="warning",
            )
        )
    return out


def _presence_count(query: Query, domain: Domain | None) -> bool:
    """Whether ``query`` counts the rows where some nullable columns hold a value (the
    denominator of a statistic over present values, ``dpql.plan.requirements.normaliser``)."""
    if domain is None or not isinstance(query, Count):
        return isinstance(query, Count) and isinstance(query.predicate, TruePred)
    pred = query.predicate
    items = pred.items if isinstance(pred, And) else (pred,)
    return all(
        isinstance(p, TruePred)
        or (
            isinstance(p, Not)
            and isinstance(p.item, CatIn)
            and p.item.column in domain
            and domain[p.item.column].nullable
            and p.item.codes == frozenset({domain[p.item.column].null_code})
        )
        for p in items
    )


def _query_text(queries: Sequence[Query], cell: int, K: int, domain: Domain | None = None) -> str:
    """The measure as the spec's language writes it (``count(savings == "A63")``), never the
    IR's repr."""
    if len(queries) != K:
        return f"cell {cell}"
    if domain is None:
        return repr(queries[cell])
    from dpql.plan.describe import describe_query

    return describe_query(queries[cell], domain)


def iproject(
    table: EncodedTable,
    measurement: Measurement,
    *,
    gamma: float | np.ndarray = 1e-5,
    eta: float = 0.05,
    seed: int = 0,
    rows: int | None = None,
    method: Literal["auto", "newton", "stochastic"] = "auto",
    kkt_tol: float = 1e-6,
    prior_rows: float | None = None,
    ess_floor: float = 0.0,
    workload: SparseQueries | None = None,
    boxes: Boxes | None = None,
    move: bool = True,
) -> IProjResult:
    """Post-process ``table`` toward ``measurement`` (denoise, I-project, resample).

    Noise-aware (``prior_rows`` set): the MAP reweighting ``min prior_rows * KL(w || uniform) +
    sum_k (E_w f_k - a_k)^2 / (2 sigma_k^2)``, the synthetic table read as a prior worth
    ``prior_rows`` rows (ridge ``prior_rows * sigma_k^2`` in the dual). ``None``: the paper's
    hard I-projection ``|E_w f_k - a_k| <= gamma``. ``workload`` (with ``prior_rows``;
    :func:`sparse_workload`): the synthesizer's own noisy workload answers join the objective
    as further penalties ``(E_w g_j - b_j)^2 / (2 sigma_j^2)``, solved jointly by L-BFGS
    (``dual.solve_penalised``). ``boxes`` (:class:`Boxes`): hard constraints ``|E_w c_j -
    centre_j| <= half_width_j`` on further per-row statistics (dual: an L1 term of weight
    ``half_width_j``, no ridge); the resampling keeps them (:func:`~dpql.sampling.resample`).
    ``ess_floor`` (fraction of the usable rows): when the weights' effective sample size would
    fall below it, every target and box centre is pulled toward the table's own value (by
    bisection on the fraction ``shrink`` of the way kept) until it does not, with ``W508``
    giving the figures.
    ``move`` false: the weights stay uniform (nothing to do), the rest is reported as usual.

    Never a silent wrong answer: rows with NaN measures are dropped from the support (W503), a
    target outside the reachable hull is replaced by its projection and the distance reported
    (W504 when ``||(noisy - target) / sigma||_2`` exceeds 3 sqrt(K)), a solver that misses the
    KKT conditions by more than ``kkt_tol`` warns (W505); with no usable row raises E503.
    """
    F = features(measurement.queries, table)
    if F.shape[1] != measurement.noisy.shape[0]:
        raise ValueError("measurement and queries disagree on the number of cells")
    diags: list[Diagnostic] = []
    ok = np.isfinite(F).all(axis=1)
    if not ok.any():
        raise DiagnosticError(
            [
                Diagnostic(
                    "E503",
                    "no synthetic row has finite values for the post-processing measures",
                    hint="the synthetic table is empty or all NaN; check the synthesizer",
                )
            ]
        )
    if not ok.all():
        diags.append(
            Diagnostic(
                "W503",
                f"{int((~ok).sum())} synthetic row(s) with NaN measures get weight 0",
                hint="check the synthesizer output",
                severity="warning",
            )
        )
    Fk = F[ok]
    diags.extend(_support_warnings(Fk, measurement.queries, table.domain))
    K = Fk.shape[1]
    scale = 1.0 / measurement.sigma  # the noise's own metric (one release: Euclidean)
    aff = project_to_affine_hull(Fk, measurement.noisy, scale=scale)
    hull = project_to_hull(Fk, aff, scale=scale)
    target = hull.projection
    distance = float(np.linalg.norm(measurement.noisy - target))
    whitened = float(np.linalg.norm((measurement.noisy - target) * scale))
    if np.linalg.norm(aff - target) > 1e-7:
        # The projection lies on the hull's relative boundary, where the exponential tilt
        # degenerates (lambda -> infinity, weight on a face of <= K+1 rows): pull the target eta
        # of the way back to the synthetic mean, strictly inside the hull, where lambda* is
        # finite; the further inside, the smaller lambda* and the faster the dual converges,
        # at the price of a bias of eta toward the synthetic answers. Noise that only
        # breaks an identity between the measures (count(a) + count(not a) = 1) is removed by
        # the affine projection exactly, so it does not trigger this bias.
        target = (1 - eta) * target + eta * Fk.mean(axis=0)
    ridge = np.zeros(K) if prior_rows is None else float(prior_rows) * measurement.sigma**2
    # the ridge keeps a penalised measure's dual finite: gamma serves the hard projection only
    gam = np.broadcast_to(np.asarray(gamma if prior_rows is None else 0.0, dtype=np.float64), (K,))
    if boxes is not None and boxes.columns.shape[1]:
        Fk = np.hstack([Fk, boxes.columns[ok]])
        target = np.concatenate([target, boxes.centre])
        ridge = np.concatenate([ridge, np.zeros(boxes.centre.size)])
        gam = np.concatenate([gam, boxes.half_width])
    penal = workload.rows(ok) if workload is not None and prior_rows else None
    smooth_viol: dict[int, float] = {}  # id(solution) -> its KKT violation

    def plain(tgt: np.ndarray) -> Any:  # without the workload (Newton, ~0.3 s here)
        return solve_dual(Fk, tgt, gam, method=method, seed=seed, ridge=ridge)

    def joint(tgt: np.ndarray, hint: Any) -> Any:
        """With the workload penalties (L-BFGS), started from the duals ``hint`` found
        without them at the same target and zero workload duals."""
        assert penal is not None
        x0 = np.concatenate([hint.lam, np.zeros(penal.size)])
        sol, _, v = solve_penalised(
            Fk, tgt, ridge, penal, gamma=gam, start=x0, weights=hint.weights
        )
        smooth_viol[id(sol)] = v
        return sol

    def ess(s: Any) -> float:
        return float(1.0 / np.sum(s.weights**2))

    m = Fk.shape[0]
    floor = float(ess_floor) * m
    shrink = 1.0
    if not move:
        sol = DualSolution(np.zeros(Fk.shape[1]), np.full(m, 1.0 / m), 0, "none")
        ess0 = float(m)
    else:
        sol = plain(target)
        ess0 = ess(sol)
        if penal is not None and ess0 >= floor:
            sol = joint(target, sol)
            ess0 = ess(sol)
    if ess0 < floor:
        start = Fk.mean(axis=0)
        full = target
        lo, hi, best = 0.0, 1.0, None
        for _ in range(12):  # bisection on the fraction of the way to the target
            mid = 0.5 * (lo + hi)
            # on the requirements alone: a joint solve far from the table takes ~10-30 s, and
            # the joint solution is checked against the floor below
            trial = plain(start + mid * (full - start))
            if ess(trial) >= floor:
                lo, best = mid, trial
            else:
                hi = mid
        shrink = lo
        target = start + lo * (full - start)
        sol = best if best is not None else plain(target)
        for _ in range(8 if penal is not None else 0):  # the joint solution, floored too
            trial = joint(target, sol)
            if ess(trial) >= floor or shrink == 0:
                sol = trial
                break
            shrink *= 0.8
            target = start + shrink * (full - start)
            sol = plain(target)
        else:
            if penal is not None:  # eight shrinks did not reach the floor: the last joint
                sol = joint(target, sol)
        diags.append(
            Diagnostic(
                "W508",
                f"meeting the measured targets would concentrate the table on an effective "
                f"{ess0:.0f} of {m} rows ({100 * ess0 / m:.1f}%); post-processing moved "
                f"{100 * shrink:.0f}% of the way instead, keeping an effective "
                f"{1.0 / np.sum(sol.weights**2):.0f} rows (floor {100 * ess_floor:.0f}%)",
                hint="the synthetic table lacks rows like the real ones these requirements "
                "describe; more budget for the synthesizer, or a looser requirement",
                severity="warning",
            )
        )
    resid = sol.weights @ Fk - target - ridge * sol.lam
    if penal is None or not move:
        viol = residual_kkt_violation(resid, sol.lam, gam) if move else 0.0
    else:  # the smooth problem's KKT violation, workload duals included, at the kept solution
        viol = smooth_viol.get(id(sol), residual_kkt_violation(resid, sol.lam, gam))
    # the box columns (after the K measures) count in the KKT check only
    box_cols = Fk[:, K:]
    Fk, target, lam = Fk[:, :K], target[:K], sol.lam[:K]
    if whitened > 3 * math.sqrt(K):  # ||noise / sigma||_2 ~ sqrt(K) (chi with K dof)
        diags.append(
            Diagnostic(
                "W504",
                f"the measured statistics lie {distance:.3g} (L2) outside what reweighting "
                f"the synthetic rows can reach: {whitened:.3g} noise sd, where noise explains "
                f"~{math.sqrt(K):.2g}",
                hint="the synthetic support misses real structure; post-processing moves only "
                "to the nearest reachable point",
                severity="warning",
            )
        )
    if viol > kkt_tol:
        diags.append(
            Diagnostic(
                "W505",
                f"the I-projection solver ({sol.method}) stopped {viol:.2g} from the KKT "
                "conditions",
                hint="raise gamma or the iteration limit",
                severity="warning",
            )
        )
    wk = sol.weights
    w = np.zeros(F.shape[0])
    w[ok] = wk
    keep = None
    if boxes is not None and box_cols.shape[1]:
        keep = boxes.columns / boxes.sd
    out = resample(table, w, rows if rows is not None else table.n, seed, keep=keep)
    nz = sol.weights[sol.weights > 0]
    after = features(measurement.queries, out).mean(axis=0)
    reweighted = wk @ Fk
    with np.errstate(invalid="ignore", divide="ignore"):
        shift = np.abs(after - reweighted) / measurement.sigma
    return IProjResult(
        table=out,
        queries=measurement.queries,
        sigma=measurement.sigma,
        weights=w,
        lam=lam,
        noisy=measurement.noisy,
        target=target,
        before=Fk.mean(axis=0),
        reweighted=reweighted,
        after=after,
        gamma=float(np.max(gamma)) if prior_rows is None else 0.0,
        projection_distance=distance,
        kkt_violation=viol,
        # KL(w || uniform) >= 0; rounding can take the sum a few ulps below zero.
        kl=max(0.0, float(np.sum(nz * np.log(nz * Fk.shape[0])))),
        ess=float(1.0 / np.sum(wk**2)),
        seed=seed,
        method=sol.method,
        iterations=sol.iterations,
        diagnostics=tuple(diags),
        prior_rows=None if prior_rows is None else float(prior_rows),
        ess_floor=floor,
        shrink=shrink,
        resampling_shift=float(np.nanmax(shift, initial=0.0)),
        penalty_cells=0 if penal is None else penal.size,
        boxes=0 if boxes is None else int(boxes.centre.size),
    )
