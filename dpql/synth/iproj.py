"""I-projection post-processing: reweight and resample synthetic rows toward private measurements.

Wang, Sudalairaj, Henning, Greenewald, Srivastava 2023, "Post-processing private synthetic data
for improving utility on selected measures" (digest ``papers/postprocessing.md``):

1. :func:`measure` -- the K measures are answered on the real table in ONE Gaussian release
   calibrated to the L2 sensitivity of the whole vector (sqrt(K)/n for K scalar [0, 1] queries,
   replace-one) through the measurement oracle; this module never sees private rows.
2. :func:`project_to_hull` -- denoise: the noisy answers ``a`` are projected onto the convex hull
   of the per-row query vectors ``f(x_i)`` of the synthetic rows (the paper's QP, sec. 3 / App. B),
   then mixed with a little of the synthetic mean (digest pitfall 2) so the target is interior.
3. :func:`solve_dual` -- the I-projection ``min KL(w || uniform) s.t. |sum_i w_i f(x_i) - a*| <=
   gamma``. By Theorem 1 (eq. 4-5) ``w_i ∝ exp(-lambda . (f(x_i) - a*))`` with lambda minimising
   ``log mean_i exp(-lambda . (f(x_i) - a*)) + gamma ||lambda||_1``. Full-batch: L-BFGS-B on the
   split ``lambda = l+ - l-`` (value and gradient in JAX, stable log-sum-exp). Large tables:
   the paper's stochastic compositional proximal gradient (Algorithm 1, log-domain tau).
4. :func:`resample` -- draw rows with probabilities ``w`` (non-DP seed, recorded).

Everything after step 1 is post-processing of DP outputs. Diagnostics (stable codes):
``E503`` no usable synthetic rows; ``W501`` one distinct row (nothing can move); ``W502`` a measure
is constant on the synthetic rows; ``W503`` rows with NaN dropped from the support; ``W504`` the
noisy target lies far outside what the synthetic support can reach (more than noise explains);
``W505`` the dual solver stopped with a KKT violation above tolerance.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
from scipy.optimize import minimize

from dpql.diagnostics import Diagnostic, DiagnosticError
from dpql.domain import Domain, EncodedTable
from dpql.plan.exact import per_row
from dpql.plan.ir import Query
from dpql.plan.oracle import MeasurementOracle

PHASE = "iproj.measure"
STOCHASTIC_ABOVE = 50_000_000  # rows * K above which the stochastic solver is the default


# ---------------------------------------------------------------------------------------------
# 1. Private measurement (the only step that touches data, through the oracle)


@dataclass(frozen=True, eq=False)
class Measurement:
    """Noisy answers of the measures (flattened cells) and the per-cell noise sd."""

    queries: tuple[Query, ...]
    noisy: np.ndarray
    sigma: float
    rho: float
    n: int


def joint_l2_sensitivity(queries: Sequence[Query], n: int) -> float:
    """L2 sensitivity of the concatenated answers (sqrt(K)/n for K scalar queries)."""
    return math.sqrt(math.fsum(q.sensitivity(n).l2 ** 2 for q in queries))


def measure(
    queries: Sequence[Query], oracle: MeasurementOracle, rho: float, *, label: str
) -> Measurement:
    """One Gaussian release of all measures at ``rho``-zCDP (sigma = Delta_2 / sqrt(2 rho))."""
    answers = oracle.measure(list(queries), rho, phase=PHASE, label=label)
    noisy = np.concatenate([np.ravel(np.asarray(a, dtype=np.float64)) for a in answers])
    sigma = joint_l2_sensitivity(queries, oracle.n) / math.sqrt(2 * rho)
    return Measurement(tuple(queries), noisy, sigma, rho, oracle.n)


def features(queries: Sequence[Query], table: EncodedTable) -> np.ndarray:
    """Per-row query values ``F`` (rows, K) of a synthetic table (cells of vector queries flat)."""
    return np.hstack([per_row(q, table) for q in queries])


# ---------------------------------------------------------------------------------------------
# 2. Denoise: Euclidean projection onto the convex hull of the rows' query vectors


@jax.jit
def _pairwise_fw(
    points: jax.Array, p0: jax.Array, a: jax.Array, tol: float, max_iter: int
) -> tuple[jax.Array, jax.Array]:
    """Pairwise Frank-Wolfe (Lacoste-Julien & Jaggi 2015) for min_p 0.5||P^T p - a||^2, p in
    the simplex. Iterates stay convex combinations (always feasible); linear rate on polytopes.
    Stops when the FW duality gap (>= suboptimality) is below ``tol``."""

    def gap_of(p: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        s = points @ (x - a)
        t = jnp.argmin(s)
        return jnp.dot(p, s) - s[t], s, t

    def cond(state: tuple) -> jax.Array:
        _, _, gap, it = state
        return (gap > tol) & (it < max_iter)

    def body(state: tuple) -> tuple:
        p, x, _, it = state
        _, s, t = gap_of(p, x)
        v = jnp.argmax(jnp.where(p > 0, s, -jnp.inf))
        d = points[t] - points[v]
        step = jnp.clip(-jnp.dot(x - a, d) / jnp.maximum(jnp.dot(d, d), 1e-300), 0.0, p[v])
        p = p.at[t].add(step).at[v].add(-step)
        x = x + step * d
        return p, x, gap_of(p, x)[0], it + 1

    x0 = p0 @ points
    p, x, _, it = jax.lax.while_loop(cond, body, (p0, x0, gap_of(p0, x0)[0], 0))
    return x, jnp.asarray(it)


@dataclass(frozen=True, eq=False)
class HullProjection:
    """``target`` = (1 - eta) * projection + eta * synthetic mean; ``distance`` = ||a - proj||_2."""

    target: np.ndarray
    projection: np.ndarray
    distance: float
    iterations: int


def project_to_hull(
    F: np.ndarray, a: np.ndarray, *, eta: float = 1e-3, tol: float = 1e-14, max_iter: int = 20_000
) -> HullProjection:
    """Denoise ``a`` onto the achievable set {sum_i p_i F_i : p in the simplex} (paper eq. in
    sec. 3, QP for the Gaussian mechanism) over the *distinct* rows, starting from the synthetic
    mean; then mix in ``eta`` of the synthetic mean so the I-projection has a finite dual
    solution (digest pitfall 2). ``tol`` bounds the FW gap, so ||proj - exact|| <= sqrt(2 tol)."""
    uniq, counts = np.unique(F, axis=0, return_counts=True)
    p0 = counts / counts.sum()
    with jax.enable_x64(True):
        x, it = _pairwise_fw(
            jnp.asarray(uniq), jnp.asarray(p0), jnp.asarray(a, dtype=jnp.float64), tol, max_iter
        )
        proj = np.asarray(x)
    target = (1 - eta) * proj + eta * (p0 @ uniq)
    return HullProjection(target, proj, float(np.linalg.norm(a - proj)), int(it))


# ---------------------------------------------------------------------------------------------
# 3. The dual of the I-projection


def _dual_value_grad(lam: jax.Array, Fc: jax.Array) -> tuple[jax.Array, jax.Array]:
    """f(lam) = log mean exp(-Fc lam) and its gradient -E_w[Fc] (w = softmax(-Fc lam))."""
    s = -Fc @ lam
    f = jax.nn.logsumexp(s) - jnp.log(s.shape[0])
    return f, -(jax.nn.softmax(s) @ Fc)


_dual_jit = jax.jit(_dual_value_grad)


@dataclass(frozen=True, eq=False)
class DualSolution:
    lam: np.ndarray
    weights: np.ndarray
    iterations: int
    method: str


def _lbfgs(Fc: np.ndarray, gamma: np.ndarray, max_iter: int, gtol: float) -> tuple[np.ndarray, int]:
    K = Fc.shape[1]
    with jax.enable_x64(True):
        Fj = jnp.asarray(Fc, dtype=jnp.float64)

        def obj(z: np.ndarray) -> tuple[float, np.ndarray]:
            f, g = _dual_jit(jnp.asarray(z[:K] - z[K:]), Fj)
            g = np.asarray(g)
            return float(f) + float(gamma @ (z[:K] + z[K:])), np.concatenate([g + gamma, gamma - g])

        res = minimize(
            obj,
            np.zeros(2 * K),
            jac=True,
            method="L-BFGS-B",
            bounds=[(0.0, None)] * (2 * K),
            options={"maxiter": max_iter, "maxcor": 30, "ftol": 0.0, "gtol": gtol},
        )
    return res.x[:K] - res.x[K:], int(res.nit)


def _stochastic(
    Fc: np.ndarray, gamma: np.ndarray, epochs: int, batch: int, alpha0: float, seed: int
) -> tuple[np.ndarray, int]:
    """Algorithm 1 of the paper with the digest's log-domain fix (sec. 2 step 5): numerator on
    batch B_t at lambda_t, denominator tau from the previous batch at the current lambda;
    prox = soft-thresholding at alpha_t * gamma; alpha_t = alpha0 / sqrt(epoch + 1)."""
    m, K = Fc.shape
    nb = m // batch
    rng = np.random.default_rng(seed)
    with jax.enable_x64(True):
        Fj = jnp.asarray(Fc, dtype=jnp.float64)
        g = jnp.asarray(gamma, dtype=jnp.float64)

        @jax.jit
        def epoch(carry: tuple, xs: tuple) -> tuple:
            perm, alpha = xs

            def step(c: tuple, idx: jax.Array) -> tuple:
                lam, logtau = c
                B = Fj[idx]
                s = -B @ lam
                ratio = jnp.mean(jnp.exp(s - logtau)[:, None] * B, axis=0)
                z = lam + alpha * ratio
                lam = jnp.sign(z) * jnp.maximum(jnp.abs(z) - alpha * g, 0.0)
                logtau = jax.nn.logsumexp(-B @ lam) - jnp.log(B.shape[0])
                return (lam, logtau), None

            return jax.lax.scan(step, carry, perm.reshape(nb, batch))[0], None

        carry = (jnp.zeros(K), jnp.asarray(0.0))
        for e in range(epochs):
            perm = jnp.asarray(rng.permutation(m)[: nb * batch])
            carry, _ = epoch(carry, (perm, alpha0 / math.sqrt(e + 1)))
        return np.asarray(carry[0]), epochs * nb


def solve_dual(
    F: np.ndarray,
    target: np.ndarray,
    gamma: float | np.ndarray = 1e-5,
    *,
    method: Literal["auto", "lbfgs", "stochastic"] = "auto",
    max_iter: int = 2000,
    gtol: float = 1e-11,
    epochs: int = 200,
    batch: int = 256,
    alpha0: float | None = None,
    seed: int = 0,
) -> DualSolution:
    """lambda* of ``min f(lambda) + gamma ||lambda||_1`` (paper eq. 5) and weights w ∝ exp(-Fc lambda).

    ``auto`` uses L-BFGS-B unless rows * K > ``STOCHASTIC_ABOVE``. The stochastic step size is
    not given by the paper; default ``alpha0 = min(0.5, 4 / K)`` (f is K/4-smooth, digest
    pitfall 4) with ``alpha_t = alpha0 / sqrt(epoch + 1)``.
    """
    Fc = F - target[None, :]
    gam = np.broadcast_to(np.asarray(gamma, dtype=np.float64), (F.shape[1],)).copy()
    if method == "auto":
        method = "stochastic" if F.size > STOCHASTIC_ABOVE else "lbfgs"
    if method == "lbfgs":
        lam, it = _lbfgs(Fc, gam, max_iter, gtol)
    else:
        a0 = alpha0 if alpha0 is not None else min(0.5, 4.0 / F.shape[1])
        lam, it = _stochastic(Fc, gam, epochs, min(batch, F.shape[0]), a0, seed)
    s = -Fc @ lam
    w = np.exp(s - s.max())
    return DualSolution(lam, w / w.sum(), it, method)


def kkt_violation(
    F: np.ndarray, target: np.ndarray, gamma: float | np.ndarray, sol: DualSolution
) -> float:
    """Largest violation of the KKT conditions of (3): feasibility |E_w f - a*| <= gamma and
    complementary slackness E_w f - a* = gamma * sign(lambda) where lambda != 0."""
    r = sol.weights @ F - target
    gam = np.broadcast_to(np.asarray(gamma, dtype=np.float64), r.shape)
    feas = np.maximum(np.abs(r) - gam, 0.0)
    active = sol.lam != 0
    slack = np.where(active, np.abs(r - gam * np.sign(sol.lam)), 0.0)
    return float(max(feas.max(initial=0.0), slack.max(initial=0.0)))


# ---------------------------------------------------------------------------------------------
# 4. Resample; the whole post-processing step


def take(table: EncodedTable, idx: np.ndarray) -> EncodedTable:
    """Rows ``idx`` of a table (copies)."""
    return EncodedTable(
        table.domain,
        {k: v[idx] for k, v in table.codes.items()},
        {k: v[idx] for k, v in table.scaled.items()},
    )


def resample(table: EncodedTable, weights: np.ndarray, rows: int, seed: int) -> EncodedTable:
    """Multinomial resampling with replacement (paper sec. 3: same size as the input)."""
    idx = np.random.default_rng(seed).choice(table.n, size=rows, replace=True, p=weights)
    return take(table, np.sort(idx))


@dataclass(frozen=True, eq=False)
class IProjResult:
    """The post-processed table and everything the provenance record reports about the step."""

    table: EncodedTable
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

    def to_json(self) -> dict[str, Any]:
        """JSON form for the provenance record (no rows, no weights; K-vectors are public)."""

        def vec(x: np.ndarray) -> list[float]:
            return [float(v) for v in x]

        return {
            "method": self.method,
            "iterations": self.iterations,
            "gamma": self.gamma,
            "projection_distance": self.projection_distance,
            "kkt_violation": self.kkt_violation,
            "kl_from_synthetic": self.kl,
            "effective_sample_size": self.ess,
            "sampling_seed": self.seed,
            "lambda": vec(self.lam),
            "noisy": vec(self.noisy),
            "target": vec(self.target),
            "synthetic_before": vec(self.before),
            "synthetic_after": vec(self.after),
            "diagnostics": [d.to_json() for d in self.diagnostics],
        }


def _support_warnings(F: np.ndarray, queries: Sequence[Query]) -> list[Diagnostic]:
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
    if const.size:
        out.append(
            Diagnostic(
                "W502",
                f"{const.size} measure(s) are constant on the synthetic rows and cannot move "
                f"(first: {_query_text(queries, const[0], F.shape[1])})",
                hint="the synthetic table lacks variation in these columns",
                severity="warning",
            )
        )
    return out


def _query_text(queries: Sequence[Query], cell: int, K: int) -> str:
    return repr(queries[cell]) if len(queries) == K else f"cell {cell}"


def iproject(
    table: EncodedTable,
    measurement: Measurement,
    *,
    gamma: float | np.ndarray = 1e-5,
    eta: float = 1e-3,
    seed: int = 0,
    rows: int | None = None,
    method: Literal["auto", "lbfgs", "stochastic"] = "auto",
    kkt_tol: float = 1e-6,
) -> IProjResult:
    """Post-process ``table`` toward ``measurement`` (denoise, I-project, resample).

    Never a silent wrong answer: rows with NaN measures are dropped from the support (W503), a
    target outside the reachable hull is replaced by its projection and the distance reported
    (W504 when it exceeds 3 sigma sqrt(K)), a solver that misses the KKT conditions by more than
    ``kkt_tol`` warns (W505); with no usable row raises E503.
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
    diags.extend(_support_warnings(Fk, measurement.queries))
    hull = project_to_hull(Fk, measurement.noisy, eta=eta)
    K = Fk.shape[1]
    if hull.distance > 3 * measurement.sigma * math.sqrt(K):
        diags.append(
            Diagnostic(
                "W504",
                f"the measured statistics lie {hull.distance:.3g} (L2) outside what reweighting "
                f"the synthetic rows can reach (noise explains ~{measurement.sigma * math.sqrt(K):.2g})",
                hint="the synthetic support misses real structure; post-processing moves only "
                "to the nearest reachable point",
                severity="warning",
            )
        )
    sol = solve_dual(Fk, hull.target, gamma, method=method, seed=seed)
    viol = kkt_violation(Fk, hull.target, gamma, sol)
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
    w = np.zeros(F.shape[0])
    w[ok] = sol.weights
    out = resample(table, w, rows if rows is not None else table.n, seed)
    nz = sol.weights[sol.weights > 0]
    return IProjResult(
        table=out,
        weights=w,
        lam=sol.lam,
        noisy=measurement.noisy,
        target=hull.target,
        before=Fk.mean(axis=0),
        reweighted=sol.weights @ Fk,
        after=features(measurement.queries, out).mean(axis=0),
        gamma=float(np.max(gamma)),
        projection_distance=hull.distance,
        kkt_violation=viol,
        kl=float(np.sum(nz * np.log(nz * Fk.shape[0]))),
        ess=float(1.0 / np.sum(sol.weights**2)),
        seed=seed,
        method=sol.method,
        iterations=sol.iterations,
        diagnostics=tuple(diags),
    )


# ---------------------------------------------------------------------------------------------
# 5. External synthesizer: a table made elsewhere, post-processed here


def external_table(
    frame: Any,
    domain: Domain,
    *,
    epsilon: float,
    delta: float,
    ledger: Any,
    label: str = "external synthetic table",
) -> EncodedTable:
    """Encode an externally generated synthetic DataFrame and charge its declared budget.

    ``dpql.codec.encode_frame`` checks the frame against the schema (its diagnostics surface
    as they are); the table's own (epsilon, delta)-DP claim enters the ledger as one
    ``external`` event so the accountant composes it with the post-processing measurements.
    """
    from dpql.codec import encode_frame
    from dpql.privacy.ledger import PrivacyEvent

    table = encode_frame(frame, domain)
    ledger.append(PrivacyEvent.external("synthesize", label, epsilon=epsilon, delta=delta))
    return table
