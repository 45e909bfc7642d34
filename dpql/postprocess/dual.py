"""The dual of the I-projection (Wang et al. 2023, eq. 4-5; digest ``postprocessing.md``):
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
            if _kkt(np.asarray(-g), lam, gamma) <= tol or np.max(np.abs(lam)) > lam_cap:
                break
            d = np.asarray(_prox_newton_step(g, H, jnp.asarray(lam), gj, SWEEPS))
            obj = f + gamma @ np.abs(lam)
            decrease = float(np.asarray(g) @ d) + gamma @ (np.abs(lam + d) - np.abs(lam))
            t = 1.0
            while t > 1e-10:
                f2, g2, H2 = terms(lam + t * d)
                if f2 + gamma @ np.abs(lam + t * d) <= obj + 0.25 * t * min(decrease, 0):
                    break
                t /= 2
            lam, f, g, H = lam + t * d, f2, g2, H2
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
    """Algorithm 1 of the paper with the digest's log-domain fix (sec. 2 step 5): numerator on
    batch B_t at lambda_t, denominator tau from the previous batch at the current lambda;
    prox = soft-thresholding at alpha_t * gamma; alpha_t = alpha0 / sqrt(epoch + 1)."""
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
    not given by the paper; default ``alpha0 = min(0.5, 4 / K)`` (f is K/4-smooth, digest
    pitfall 4) with ``alpha_t = alpha0 / sqrt(epoch + 1)``.
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


def _kkt(r: np.ndarray, lam: np.ndarray, gamma: np.ndarray) -> float:
    feas = np.maximum(np.abs(r) - gamma, 0.0)
    slack = np.where(lam != 0, np.abs(r - gamma * np.sign(lam)), 0.0)
    return float(max(feas.max(initial=0.0), slack.max(initial=0.0)))


def kkt_violation(
    F: np.ndarray, target: np.ndarray, gamma: float | np.ndarray, sol: DualSolution
) -> float:
    """Largest violation of the KKT conditions of (3) at w = sol.weights: feasibility
    |E_w f - a*| <= gamma and complementary slackness E_w f - a* = gamma * sign(lambda) where
    lambda != 0 (digest sec. 1.3); w ∝ exp(-Fc lambda) holds by construction."""
    r = sol.weights @ F - target
    return _kkt(r, sol.lam, np.broadcast_to(np.asarray(gamma, dtype=np.float64), r.shape))
