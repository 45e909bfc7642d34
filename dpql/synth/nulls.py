"""The null state of a ``missing: keep`` column as the synthesizer's noisy answers show it.

Under ``keep`` every column has a public null code, whether or not the data has empty cells
(``dpql.domain``). A column without empty cells then has a structural zero in every marginal
over it, and the noise puts mass there: RAP's fit, which reads answers clipped to be
nonnegative, turns each null cell's noise into mass on rows with an empty cell. Whether a
column's null share is distinguishable from zero is a question about DP outputs only, so the
answer is post-processing and may steer the rest of the synthesis and the table.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from dpql.answers import NoisyAnswer
from dpql.domain import Domain
from dpql.ir.queries import Marginal
from dpql.plan.acceptance import Z


def measured_null_share(
    domain: Domain, column: str, measurements: Sequence[NoisyAnswer]
) -> tuple[float, float] | None:
    """The inverse-variance average of the noisy null shares of ``column`` that its measured
    marginals give, with its sd; None when no measured marginal holds the column. A marginal
    over ``k`` cells with noise sd ``s`` per cell gives the null share as the sum of its
    ``k / card`` null cells, with sd ``s * sqrt(k / card)``. The answers must be the unbiased
    noisy ones (not clipped)."""
    col = domain[column]
    weight = total = 0.0
    for m in measurements:
        q, sd = m.query, m.sd
        if not isinstance(q, Marginal) or column not in q.columns or not sd > 0:
            continue
        shape = tuple(domain.card(c) for c in q.columns)
        cube = np.asarray(m.value, dtype=np.float64).reshape(shape)
        share = float(np.take(cube, col.null_code, axis=q.columns.index(column)).sum())
        var = sd**2 * cube.size / col.card
        weight, total = weight + 1.0 / var, total + share / var
    return None if weight == 0.0 else (total / weight, math.sqrt(1.0 / weight))


def complete_columns(
    domain: Domain, measurements: Sequence[NoisyAnswer], z: float = Z
) -> tuple[str, ...]:
    """The nullable columns whose measured null share is below ``z`` sds (the acceptance
    tests' ``z``): their empty cells, if any, are too few for the noise to show, and the
    synthetic table gets none. A column no measured marginal holds is not listed."""
    out = []
    for col in domain:
        if col.null_code is None:
            continue
        found = measured_null_share(domain, col.name, measurements)
        if found is not None and found[0] < z * found[1]:
            out.append(col.name)
    return tuple(out)
