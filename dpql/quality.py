"""A quality headline a newcomer can judge: how far each column's distribution in the synthetic
table is from a reference, in total variation distance (TVD, half the L1 distance of two
distributions: 0 identical, 1 disjoint), next to a scale that says what "far" means.

* :func:`compile_headline` (``dpql compile``, public): the released table against the
  synthesizer's own *noisy* 1-way answers. Both are DP outputs, so this is post-processing and
  may be shown anywhere. The scale is the measurement noise: the expected TVD between a noisy
  1-way answer and the exact one, ``sqrt(2/pi) sigma cells / 2`` for Gaussian noise of sd
  ``sigma`` per cell. A shift within that scale is as close as the noise lets anyone know.
* :func:`report_headline` (``dpql evaluate``, curator-only): the synthetic table against the
  real one, next to the TVD between two random halves of the real table (the sampling scale).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpql.answers import NoisyAnswer
from dpql.domain import EncodedTable
from dpql.ir.exact import answer
from dpql.ir.queries import Marginal


@dataclass(frozen=True)
class ColumnShift:
    """One column's 1-way TVD from the reference, and the scale it is judged against."""

    column: str
    tvd: float
    scale: float


@dataclass(frozen=True)
class QualityHeadline:
    """Per-column 1-way shifts; ``against`` names the reference, ``scale_is`` the scale."""

    against: str
    scale_is: str
    columns: tuple[ColumnShift, ...]

    @property
    def worst(self) -> ColumnShift:
        return max(self.columns, key=lambda c: (c.tvd, c.column))

    @property
    def mean_tvd(self) -> float:
        return float(np.mean([c.tvd for c in self.columns]))

    @property
    def mean_scale(self) -> float:
        return float(np.mean([c.scale for c in self.columns]))

    def text(self) -> str:
        """One line: the largest and the mean 1-way shift, each with its scale."""
        w = self.worst
        return (
            f"quality: largest 1-way shift from {self.against}: '{w.column}' TVD {w.tvd:.3f} "
            f"({self.scale_is}: {w.scale:.3f}); mean over {len(self.columns)} columns "
            f"{self.mean_tvd:.3f} ({self.mean_scale:.3f})"
        )

    def to_json(self) -> dict[str, Any]:
        w = self.worst
        return {
            "against": self.against,
            "scale_is": self.scale_is,
            "largest": {"column": w.column, "tvd": w.tvd, "scale": w.scale},
            "mean_tvd": self.mean_tvd,
            "mean_scale": self.mean_scale,
            "columns": [{"column": c.column, "tvd": c.tvd, "scale": c.scale}
                        for c in self.columns],
        }  # fmt: skip


def tvd(p: np.ndarray, q: np.ndarray) -> float:
    """Half the L1 distance of two vectors of cell shares."""
    return 0.5 * float(np.abs(np.asarray(p, float).ravel() - np.asarray(q, float).ravel()).sum())


def noise_tvd(sigma: float, cells: int) -> float:
    """Expected TVD between a Gaussian-noised answer (sd ``sigma`` per cell) and the exact one."""
    return 0.5 * cells * sigma * math.sqrt(2 / math.pi)


def compile_headline(
    table: EncodedTable, measurements: Iterable[NoisyAnswer]
) -> QualityHeadline | None:
    """The released table's 1-way shares against the synthesizer's noisy 1-way answers (the
    least noisy one of each column); None when the synthesizer measured no 1-way marginal
    (gan without measured marginals, external tables)."""
    best: dict[str, tuple[np.ndarray, float]] = {}
    for m in measurements:
        query, noisy, sigma = m.query, m.value, m.sd
        if not (isinstance(query, Marginal) and len(query.columns) == 1):
            continue
        if not (isinstance(sigma, float | int) and math.isfinite(sigma)):
            continue
        col = query.columns[0]
        if col not in best or sigma < best[col][1]:
            best[col] = (np.asarray(noisy, dtype=float).ravel(), float(sigma))
    if not best or table.n == 0:
        return None
    shifts = []
    for c in table.domain.names:
        if c not in best:
            continue
        y, s = best[c]
        synthetic = np.asarray(answer(Marginal((c,)), table), dtype=float).ravel()
        if synthetic.size == y.size:  # the same cells (a grouped column: its groups)
            shifts.append(ColumnShift(c, tvd(synthetic, y), noise_tvd(s, y.size)))
    if not shifts:
        return None
    return QualityHeadline("the noisy 1-way answers", "the noise alone", tuple(shifts))


def report_headline(
    real: EncodedTable, synthetic: EncodedTable, columns: Sequence[str], seed: int = 0
) -> QualityHeadline | None:
    """The synthetic table's 1-way shares against the real table's (CURATOR-ONLY), each next to
    the TVD between two random halves of the real table (seeded)."""
    if real.n < 2 or synthetic.n == 0 or not columns:
        return None
    perm = np.random.default_rng(seed).permutation(real.n)
    half = real.n // 2
    a, b = real.take(perm[:half]), real.take(perm[half:])
    shifts = tuple(
        ColumnShift(
            c,
            tvd(answer(Marginal((c,)), synthetic), answer(Marginal((c,)), real)),
            tvd(answer(Marginal((c,)), a), answer(Marginal((c,)), b)),
        )
        for c in columns
    )
    return QualityHeadline("the real table", "two random halves of the real table", shifts)
