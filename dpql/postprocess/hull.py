"""Denoising for the I-projection: the noisy answers projected onto what reweighting the
synthetic rows can reach.

Wang, Sudalairaj, Henning, Greenewald, Srivastava 2023, "Post-processing private synthetic data
for improving utility on selected measures" (sec. 3, App. B): the Gaussian answers ``a`` are
projected onto the convex hull of the per-row query vectors ``f(x_i)`` (the paper's QP, exact by
NNLS), in the noise's own metric ``sum_k (x_k - a_k)^2 / sigma_k^2``, after
:func:`project_to_affine_hull` removes the noise that only breaks identities between redundant
measures. Post-processing of DP outputs: nothing here reads private rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, eq=False)
class HullProjection:
    """The point of the hull nearest to ``a`` and ``distance`` = ||a - projection||_2."""

    projection: np.ndarray
    distance: float


def project_to_hull(
    F: np.ndarray, a: np.ndarray, scale: np.ndarray | None = None
) -> HullProjection:
    """Denoise ``a`` onto the achievable set {sum_i p_i F_i : p in the simplex} (the paper's QP for
    the Gaussian mechanism, sec. 3 / App. B) over the *distinct* rows.

    ``scale`` (K,) weighs the cells: the projection minimises ``||scale * (a - x)||_2`` (with
    ``scale = 1 / sigma`` the maximum-likelihood point under independent Gaussian noise);
    ``distance`` is measured in that metric. Default: Euclidean.
    Solved exactly by Lawson-Hanson NNLS (active set; at most K + 1 rows carry weight) with the
    simplex constraint ``1'p = 1`` as a heavily weighted extra row; p is then renormalised so the
    projection is an exact convex combination (reachable by construction).
    """
    from scipy.optimize import nnls

    s = np.ones(F.shape[1]) if scale is None else np.asarray(scale, dtype=np.float64)
    uniq = np.unique(F, axis=0)
    big = 1e3 * max(1.0, float(np.abs(uniq * s).max()))
    A = np.vstack([(uniq * s).T, np.full(uniq.shape[0], big)])
    p, _ = nnls(A, np.append(a * s, big), maxiter=50 * A.shape[1])
    x = (p / p.sum()) @ uniq
    return HullProjection(x, float(np.linalg.norm(s * (a - x))))


def project_to_affine_hull(
    F: np.ndarray, a: np.ndarray, rtol: float = 1e-10, scale: np.ndarray | None = None
) -> np.ndarray:
    """Projection of ``a`` onto the affine hull of the rows of ``F`` (Euclidean, or in the metric
    ``||scale * (.)||_2`` when ``scale`` is given, as in :func:`project_to_hull`).

    Linear identities that hold on every row (redundant measures: ``count(sex == "Female") +
    count(sex == "Male") = 1``) hold on every reweighting too; noise breaks them in the answers.
    The hull lies in the affine hull, so by Pythagoras projecting onto it first does not change
    the hull projection, and it tells the two apart: a point that only violates identities lands
    inside the hull, where no boundary correction (``eta``) is needed.
    """
    s = np.ones(F.shape[1]) if scale is None else np.asarray(scale, dtype=np.float64)
    uniq = np.unique(F, axis=0) * s  # the whitened coordinates, where the metric is Euclidean
    center = uniq.mean(axis=0)
    _, sv, vt = np.linalg.svd(uniq - center, full_matrices=False)
    basis = vt[: int(np.sum(sv > rtol * max(float(sv.max(initial=0.0)), 1e-300)))]
    return (center + ((a * s - center) @ basis.T) @ basis) / s
