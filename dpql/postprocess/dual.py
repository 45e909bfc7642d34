"""The dual of the I-projection (Wang et al. 2023, sec. 3, Theorem 1, eq. 4-5):
a proximal Newton solver in JAX for small problems and a stochastic one for large ones, and the
KKT check that certifies a solution. Pure functions of the synthetic rows' features and the
targets; no data."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np

SWEEPS = 20_000  # at most, per proximal Newton direction
SWEEP_RTOL = 1e-13
STOCHASTIC_ABOVE = 50_000_000  # rows * K above which the stochastic solver is the default

# ---------------------------------------------------------------------------------------------
# 3. The dual of the I-projection


@jax.jit
def _newton_terms(lam: jax.Array, Fc: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """f(lam) = log mean exp(-Fc lam) (stable log-sum-exp), its gradient -E_w[Fc] and Hessian
    Cov_w(Fc), with w = softmax(-Fc lam) the tilted distribution (paper eq. 4-5)."""
    s = -Fc @ lam
    f = jax.nn.logsumexp(s) - jnp.log(s.shape[0])
    w = jax.nn.softmax(s)
    mean = w @ Fc
    return f, -mean, (Fc * w[:, None]).T @ Fc - jnp.outer(mean, mean)


@jax.jit
def _value(lam: jax.Array, Fc: jax.Array) -> jax.Array:
    """f(lam) = log mean exp(-Fc lam) alone: what the line search needs (no Hessian)."""
    s = -Fc @ lam
    return jax.nn.logsumexp(s) - jnp.log(s.shape[0])


@jax.jit
def _prox_newton_step(
    g: jax.Array, H: jax.Array, lam: jax.Array, gamma: jax.Array, max_sweeps: int
) -> jax.Array:
    """argmin_x (g - H lam).x + x'Hx/2 + gamma|x|_1 by cyclic coordinate descent from lam (K is
    small), sweeping until no coordinate moves by more than ``SWEEP_RTOL (1 + |x|_inf)`` or
    ``max_sweeps``; returns the direction x - lam. CD converges at a rate set by H's condition
    number, which strongly tilted covariances make large: a fixed 200 sweeps gave inexact
    directions, ~50 Newton steps instead of ~8, or a stall above the KKT tolerance
    (tests/test_iproj_solver.py, examples/adult-external). H is damped so
    singular covariances (redundant measures) keep a unique step. (Starting CD at the smooth
    Newton point instead was slower: near-null directions of H make that point huge and the
    line search then crawls.)"""
    K = g.shape[0]
    H = H + (1e-10 * jnp.trace(H) / K + 1e-14) * jnp.eye(K)
    b = g - H @ lam

    def coord(j: jax.Array, x: jax.Array) -> jax.Array:
        r = b[j] + H[j] @ x - H[j, j] * x[j]
        return x.at[j].set(-jnp.sign(r) * jnp.maximum(jnp.abs(r) - gamma[j], 0.0) / H[j, j])

    def sweep(state: tuple) -> tuple:
        x, _, k = state
        x2 = jax.lax.fori_loop(0, K, coord, x)
        return x2, jnp.max(jnp.abs(x2 - x)) / (1.0 + jnp.max(jnp.abs(x2))), k + 1

    def more(state: tuple) -> jax.Array:
        _, change, k = state
        return (change > SWEEP_RTOL) & (k < max_sweeps)

    x, _, _ = jax.lax.while_loop(more, sweep, (lam, jnp.asarray(jnp.inf, lam.dtype), 0))
    return x - lam


def _newton(
    Fc: np.ndarray,
    gamma: np.ndarray,
    max_iter: int,
    tol: float,
    lam_cap: float,
    ridge: np.ndarray | None = None,
) -> tuple[np.ndarray, int]:
    """Damped proximal Newton with Armijo backtracking on
    f(lam) + sum_k ridge_k lam_k^2 / 2 + gamma ||lam||_1 (``ridge`` 0: the hard I-projection)."""
    K = Fc.shape[1]
    r = np.zeros(K) if ridge is None else np.asarray(ridge, dtype=np.float64)
    with jax.enable_x64(True):
        Fj, gj = jnp.asarray(Fc, dtype=jnp.float64), jnp.asarray(gamma, dtype=jnp.float64)
        rj = jnp.asarray(r)

        def terms(x: np.ndarray) -> tuple[float, jax.Array, jax.Array]:
            f0, g0, H0 = _newton_terms(jnp.asarray(x), Fj)
            return float(f0) + 0.5 * float(r @ (x * x)), g0 + rj * x, H0 + jnp.diag(rj)

        lam = np.zeros(K)
        f, g, H = terms(lam)
        it = 0
        for it in range(1, max_iter + 1):  # noqa: B007 (it is returned)
            if (
                residual_kkt_violation(np.asarray(-g), lam, gamma) <= tol
                or np.max(np.abs(lam)) > lam_cap
            ):
                break
            d = np.asarray(_prox_newton_step(g, H, jnp.asarray(lam), gj, SWEEPS))
            obj = f + gamma @ np.abs(lam)
            decrease = float(np.asarray(g) @ d) + gamma @ (np.abs(lam + d) - np.abs(lam))
            t = 1.0
            while t > 1e-10:  # Armijo on the value alone; gradient and Hessian once accepted
                x = lam + t * d
                f2 = float(_value(jnp.asarray(x), Fj)) + 0.5 * float(r @ (x * x))
                if f2 + gamma @ np.abs(x) <= obj + 0.25 * t * min(decrease, 0):
                    break
                t /= 2
            lam = lam + t * d
            f, g, H = terms(lam)
    return lam, it


@dataclass(frozen=True, eq=False)
class DualSolution:
    lam: np.ndarray
    weights: np.ndarray
    iterations: int
    method: str


def _stochastic(
    Fc: np.ndarray,
    gamma: np.ndarray,
    epochs: int,
    batch: int,
    alpha0: float,
    seed: int,
    ridge: np.ndarray | None = None,
) -> tuple[np.ndarray, int]:
    """Algorithm 1 of Wang et al. 2023 (sec. 3): numerator on batch B_t at lambda_t, denominator
    tau from the previous batch at the current lambda; prox = soft-thresholding at
    alpha_t * gamma; alpha_t = alpha0 / sqrt(epoch + 1). It runs in the log domain by keeping
    ``log tau`` and weighting rows by ``exp(s_i - log tau)`` (log-sum-exp for tau): the paper's
    log-scale Algorithm 2 (App. B) is Algorithm 1 rewritten in ``exp(lambda)`` and still
    exponentiates ``-lambda . q_i`` unshifted, so it overflows as ``|lambda|`` grows."""
    m, K = Fc.shape
    nb = m // batch
    rng = np.random.default_rng(seed)
    with jax.enable_x64(True):
        Fj = jnp.asarray(Fc, dtype=jnp.float64)
        g = jnp.asarray(gamma, dtype=jnp.float64)
        rj = jnp.zeros(K) if ridge is None else jnp.asarray(ridge, dtype=jnp.float64)

        @jax.jit
        def epoch(carry: tuple, xs: tuple) -> tuple:
            perm, alpha = xs

            def step(c: tuple, idx: jax.Array) -> tuple:
                lam, logtau = c
                B = Fj[idx]
                s = -B @ lam
                ratio = jnp.mean(jnp.exp(s - logtau)[:, None] * B, axis=0)
                z = lam + alpha * (ratio - rj * lam)
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
    method: Literal["auto", "newton", "stochastic"] = "auto",
    max_iter: int = 100,
    tol: float = 1e-9,
    epochs: int = 200,
    batch: int = 256,
    alpha0: float | None = None,
    seed: int = 0,
    lam_cap: float = 1e4,
    ridge: float | np.ndarray = 0.0,
) -> DualSolution:
    """lambda* of ``min f(lambda) + gamma ||lambda||_1`` (paper eq. 5); w ∝ exp(-Fc lambda).

    ``ridge`` (K,; Newton only) adds ``sum_k ridge_k lambda_k^2 / 2``: the dual of the penalised
    (MAP) I-projection ``min KL(w || uniform) + sum_k (E_w f_k - a_k)^2 / (2 ridge_k)``, which
    moves each moment only part of the way, by ``Var_k / (Var_k + ridge_k)`` near the start.

    ``auto`` uses Newton unless rows * K > ``STOCHASTIC_ABOVE``. Newton stops at KKT violation
    ``tol`` or when ``max |lambda|`` passes ``lam_cap`` (the dual is unbounded below when the
    target is unreachable; check :func:`kkt_violation`).
    The stochastic step size is
    not given by the paper; default ``alpha0 = min(0.5, 4 / K)`` with
    ``alpha_t = alpha0 / sqrt(epoch + 1)``: f is L-smooth with L <= lambda_max(Cov f) <= K/4 for
    features in [0, 1], so ``4 / K <= 1 / L`` is a stable proximal-gradient step; much larger
    steps overflow the exponential weights.
    """
    Fc = F - target[None, :]
    gam = np.broadcast_to(np.asarray(gamma, dtype=np.float64), (F.shape[1],)).copy()
    if method == "auto":
        method = "stochastic" if F.size > STOCHASTIC_ABOVE else "newton"
    rid = np.broadcast_to(np.asarray(ridge, dtype=np.float64), (F.shape[1],)).copy()
    if method == "newton":
        lam, it = _newton(Fc, gam, max_iter, tol, lam_cap, rid if rid.any() else None)
    else:
        a0 = alpha0 if alpha0 is not None else min(0.5, 4.0 / F.shape[1])
        lam, it = _stochastic(Fc, gam, epochs, min(batch, F.shape[0]), a0, seed, rid)
    s = -Fc @ lam
    w = np.exp(s - s.max())
    return DualSolution(lam, w / w.sum(), it, method)


def residual_kkt_violation(r: np.ndarray, lam: np.ndarray, gamma: np.ndarray) -> float:
    """:func:`kkt_violation` from the residual ``r = E_w f - a*``: the larger of the worst
    feasibility excess ``|r| - gamma`` and the worst slackness gap ``|r - gamma * sign(lambda)|``
    where ``lambda != 0``."""
    feas = np.maximum(np.abs(r) - gamma, 0.0)
    slack = np.where(lam != 0, np.abs(r - gamma * np.sign(lam)), 0.0)
    return float(max(feas.max(initial=0.0), slack.max(initial=0.0)))


def kkt_violation(
    F: np.ndarray, target: np.ndarray, gamma: float | np.ndarray, sol: DualSolution
) -> float:
    """Largest violation of the KKT conditions of (3) at w = sol.weights: feasibility
    |E_w f - a*| <= gamma and complementary slackness E_w f - a* = gamma * sign(lambda) where
    lambda != 0 (the Lagrangian of (3), Wang et al. 2023, App. A.1); w ∝ exp(-Fc lambda) holds by
    construction."""
    r = sol.weights @ F - target
    return residual_kkt_violation(
        r, sol.lam, np.broadcast_to(np.asarray(gamma, dtype=np.float64), r.shape)
    )


# ---------------------------------------------------------------------------------------------
# The penalised projection with the synthesizer's workload answers and box constraints


@dataclass(frozen=True, eq=False)
class SparseQueries:
    """Per-row values of many vector queries whose every row touches at most one cell of each
    (marginals, prefix / halfspace splits by a label, counts, scalar moments): query ``j``'s
    row ``i`` adds ``val[j][i]`` to cell ``idx[j][i]`` of its ``cells[j]``. ``target`` and
    ``ridge`` are one array per query, aligned with its cells."""

    idx: tuple[np.ndarray, ...]
    val: tuple[np.ndarray, ...]
    cells: tuple[int, ...]
    target: tuple[np.ndarray, ...]
    ridge: tuple[np.ndarray, ...]

    def __post_init__(self) -> None:
        # all queries as one sparse (rows x cells) matrix G and its transpose (CSR both), so an
        # evaluation is two sparse mat-vecs instead of a loop over queries
        from scipy.sparse import csr_matrix

        rows = self.idx[0].shape[0] if self.idx else 0
        offsets = np.cumsum([0, *self.cells[:-1]]).astype(np.int64)
        cols = [i + o for i, o in zip(self.idx, offsets, strict=True)]
        keep = [v != 0 for v in self.val]
        r = np.concatenate([np.flatnonzero(k) for k in keep]) if cols else np.zeros(0, int)
        c = np.concatenate([x[k] for x, k in zip(cols, keep, strict=True)]) if cols else r
        v = np.concatenate([x[k] for x, k in zip(self.val, keep, strict=True)]) if cols else r
        g = csr_matrix((v.astype(np.float64), (r, c)), shape=(rows, self.size))
        b = np.concatenate(self.target) if self.target else np.zeros(0)
        object.__setattr__(self, "_g", g)
        object.__setattr__(self, "_gt", g.T.tocsr())
        object.__setattr__(self, "_b", b)

    @property
    def size(self) -> int:
        return int(sum(self.cells))

    def rows(self, keep: np.ndarray) -> SparseQueries:
        """The same queries on the rows ``keep`` (a boolean mask)."""
        return SparseQueries(
            tuple(i[keep] for i in self.idx),
            tuple(v[keep] for v in self.val),
            self.cells,
            self.target,
            self.ridge,
        )

    def flat_means(self, w: np.ndarray) -> np.ndarray:
        """``E_w g`` of every cell, all queries' cells in one flat vector."""
        return np.asarray(self._gt @ w)  # type: ignore[attr-defined]

    def means(self, w: np.ndarray) -> list[np.ndarray]:
        """``E_w g`` of every query (its cells)."""
        return np.split(self.flat_means(w), np.cumsum(self.cells)[:-1])

    def tilt(self, mu: np.ndarray) -> np.ndarray:
        """``(G - b) mu`` per row (the workload's part of the exponent), ``mu`` flat."""
        return np.asarray(self._g @ mu) - float(self._b @ mu)  # type: ignore[attr-defined]


# L-BFGS's stopping gradient (max-norm, preconditioned coordinates) of solve_penalised. The
# preconditioner divides a box column's gradient by its spread over the rows (in noise sds, large),
# so the stop must be tighter than the KKT check (``iproj.iproject(kkt_tol=1e-6)``) it serves.
PENALISED_GTOL = 1e-8


def solve_penalised(
    F: np.ndarray,
    target: np.ndarray,
    ridge: np.ndarray,
    extra: SparseQueries,
    *,
    gamma: np.ndarray | None = None,
    max_iter: int = 5000,
    tol: float = PENALISED_GTOL,
    start: np.ndarray | None = None,
    weights: np.ndarray | None = None,
) -> tuple[DualSolution, np.ndarray, float]:
    """The MAP reweighting with extra penalised queries: ``min KL(w || uniform) + sum_k (E_w f_k -
    a_k)^2 / (2 ridge_k) + sum_j (E_w g_j - b_j)^2 / (2 ridge_j)`` through its dual

        min_{lambda, mu} log mean_i exp(-(F_i - a) lambda - (G_i - b) mu)
                         + sum_k ridge_k lambda_k^2 / 2 + sum_k gamma_k |lambda_k|
                         + sum_j ridge_j mu_j^2 / 2,

    solved by L-BFGS-B (scipy) in float64. A column with ``ridge_k = 0`` is a hard constraint:
    ``|E_w f_k - a_k| <= gamma_k`` (a box; ``gamma_k = 0`` an equality). The L1 terms are
    smooth after the split ``lambda_k = p_k - q_k`` with ``p_k, q_k >= 0`` (bounds). The ``G``
    queries are sparse (:class:`SparseQueries`), so an evaluation costs O(rows (K + number of
    queries)) whatever their cell count. Returns the solution (``lam`` the K duals; ``method``
    ``"lbfgs"``), ``mu`` and the KKT violation (:func:`residual_kkt_violation` on the F columns,
    the largest gradient entry on the G ones). ``start`` (lambda then mu) and ``weights`` (where
    to take the diagonal preconditioner) warm-start it."""
    from scipy.optimize import minimize

    K = F.shape[1]
    Fc = F - target[None, :]
    gam = np.zeros(K) if gamma is None else np.asarray(gamma, dtype=np.float64)
    split = np.flatnonzero(gam > 0)  # columns whose dual is p - q
    rid = np.concatenate([np.asarray(ridge, dtype=np.float64), *extra.ridge])
    m = F.shape[0]
    b_flat = np.concatenate(extra.target) if extra.target else np.zeros(0)
    n_x = K + extra.size

    def unpack(x: np.ndarray) -> np.ndarray:
        z = x[:n_x].copy()
        z[split] -= x[n_x:]
        return z

    def smooth(z: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        lam, mu = z[:K], z[K:]
        s = -(Fc @ lam) - extra.tilt(mu)
        top = s.max()
        e = np.exp(s - top)
        tot = e.sum()
        w = e / tot
        f = top + math.log(tot) - math.log(m) + 0.5 * float(rid @ (z * z))
        g = np.concatenate([-(w @ Fc), -(extra.flat_means(w) - b_flat)]) + rid * z
        return f, g, w

    def fg(x: np.ndarray) -> tuple[float, np.ndarray]:
        f, g, _ = smooth(unpack(x))
        f += float(gam[split] @ (x[split] + x[n_x:]))
        out = np.concatenate([g, -g[split] + gam[split]])
        out[split] += gam[split]
        return f, out

    # Diagonal preconditioner: x = y / sqrt(h), h the Hessian's diagonal at ``weights`` (the
    # start's tilted weights when the caller has them, else uniform): each query's variance
    # over the rows plus its ridge, so L-BFGS sees a problem of unit curvature in every
    # coordinate (the ridges span orders of magnitude).
    u = np.full(m, 1.0 / m) if weights is None else np.asarray(weights, dtype=np.float64)
    var_f = u @ (Fc * Fc) - (u @ Fc) ** 2
    var_g = [
        np.bincount(i, weights=u * v * v, minlength=c)
        - np.bincount(i, weights=u * v, minlength=c) ** 2
        for i, v, c in zip(extra.idx, extra.val, extra.cells, strict=True)
    ]
    root = np.sqrt(np.concatenate([var_f, *var_g]) + rid)
    root = np.where(root > 0, root, 1.0)
    root = np.concatenate([root, root[split]])

    def fg_y(y: np.ndarray) -> tuple[float, np.ndarray]:
        f, g = fg(y / root)
        return f, g / root

    z0 = np.zeros(n_x) if start is None else np.asarray(start, dtype=np.float64)
    x0 = np.concatenate([z0, np.maximum(-z0[split], 0.0)])
    x0[split] = np.maximum(z0[split], 0.0)
    bounds = [(None, None)] * n_x + [(0.0, None)] * split.size
    for k in split:
        bounds[k] = (0.0, None)
    res = minimize(
        fg_y, x0 * root, jac=True, method="L-BFGS-B", bounds=bounds,
        options={"maxiter": max_iter, "gtol": tol, "ftol": 1e-16, "maxcor": 20},
    )  # fmt: skip
    z = unpack(res.x / root)
    _, grad, w = smooth(z)
    viol = max(
        residual_kkt_violation(-grad[:K], z[:K], gam), float(np.max(np.abs(grad[K:]), initial=0.0))
    )
    sol = DualSolution(z[:K], w, int(res.nit), "lbfgs")
    return sol, z[K:], viol
