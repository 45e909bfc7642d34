"""The population a release describes under ``missing: drop``: the complete cases.

A row with an empty cell in a ``drop`` column is left out of the table the measurement layer
reads, but the public row count ``n`` of the spec stays the neighbouring relation's (every
sensitivity is computed at it). So every measured answer is a sum over the *kept* rows divided
by ``n``: a marginal sums to about ``p = kept / n``, not 1. A synthesizer that fits such answers
with a table of whole rows has to put the missing mass ``1 - p`` somewhere, and the release
becomes a mixture of the kept rows and noise.

:class:`PopulationOracle` wraps the measurement oracle and divides every answer by a DP estimate
``p_hat`` of ``p``, so answers are averages over the kept rows and every synthesizer (RAP, AIM,
the GAN's measured marginals, post-processing of an external table) fits the complete-case
population; the synthetic row count stays the public ``synthesizer.rows``. The estimate costs no
budget: it is post-processing of the first release that holds one, the inverse-variance average
of the noisy totals of its marginals (each total has variance ``cells * sigma_q^2``) and of its
``count(true)`` answers (variance ``sigma_q^2``; a requirement's measures carry one under
``drop``, ``dpql.plan.requirements``), and it is then fixed for the rest of the release, so all
answers share one scale. A selection compares the real unnormalised answers with the synthetic
answers times ``p_hat`` (public once released): the score's sensitivity is unchanged.

Under ``missing: keep`` a column's null state is public whether or not the data has empty cells;
:func:`without_unsupported_nulls` removes the few empty cells the noise gives a column whose
measured share of them is indistinguishable from zero.

Dividing by ``p_hat`` multiplies each answer's noise sd by ``1 / p_hat`` (:attr:`sd_scale`);
the estimate's own relative sd (:attr:`share_sd` / ``p_hat``, usually well under 1%) adds to it
in quadrature, relative to the answer. Both are reported in the record's ``population``
section, with the columns that define the population.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from dpql.answers import NoisyAnswer
from dpql.domain import EncodedTable
from dpql.ir.oracle import MeasurementOracle
from dpql.ir.queries import Count, Marginal, Query, TruePred, joint_l2_sensitivity
from dpql.plan.acceptance import Z
from dpql.privacy.mechanisms import gaussian_sigma
from dpql.synth.nulls import complete_columns


def dropped_columns(spec: Any) -> tuple[str, ...]:
    """The columns whose rule is ``missing: drop`` (a ``dpql.spec`` ReleaseSpec), schema order."""
    return tuple(n for n, c in spec.columns.items() if (c.missing or spec.missing) == "drop")


def share_estimate(
    queries: Sequence[Query],
    answers: Sequence[np.ndarray],
    rho: float,
    n: int,
    scales: Sequence[float] | None = None,
) -> tuple[float, float] | None:
    """``(p_hat, sd)``: the inverse-variance average of the totals of the marginals and the
    ``count(true)`` answers of one Gaussian release (noisy answers, its rho and its public
    scales), or None when it holds neither. Post-processing of DP outputs only."""
    c = [1.0] * len(queries) if scales is None else [float(x) for x in scales]
    sigma = gaussian_sigma(joint_l2_sensitivity(queries, n, c), rho)
    weight = total = 0.0
    for q, a, ci in zip(queries, answers, c, strict=True):
        a = np.asarray(a, dtype=np.float64).ravel()
        if isinstance(q, Marginal):
            var = a.size * (sigma / ci) ** 2
        elif isinstance(q, Count) and isinstance(q.predicate, TruePred):
            var = (sigma / ci) ** 2
        else:
            continue
        weight += 1.0 / var
        total += float(a.sum()) / var
    if weight == 0.0:
        return None
    return min(max(total / weight, 1.0 / n), 1.0), 1.0 / math.sqrt(weight)


class PopulationOracle:
    """A measurement oracle whose answers are averages over the complete cases (module
    docstring). Wraps the private measurer; sees noisy outputs only."""

    def __init__(self, inner: MeasurementOracle, columns: tuple[str, ...]):
        self._inner = inner
        self.columns = columns
        self.share: float | None = None
        self.share_sd: float | None = None

    @property
    def n(self) -> int:
        """The public row count (sensitivities stay at it)."""
        return self._inner.n

    @property
    def sd_scale(self) -> float:
        """The factor the division multiplies each answer's noise sd by (``1 / p_hat``)."""
        return 1.0 / self.share if self.share else 1.0

    def measure(
        self,
        queries: Sequence[Query],
        rho: float,
        *,
        phase: str,
        label: str,
        scales: Sequence[float] | None = None,
        merge: Sequence[np.ndarray | None] | None = None,
    ) -> list[np.ndarray]:
        answers = self._inner.measure(
            queries, rho, phase=phase, label=label, scales=scales, merge=merge
        )
        if self.share is None and merge is None:  # merged cells may leave some rows out
            found = share_estimate(queries, answers, rho, self.n, scales)
            if found is not None:
                self.share, self.share_sd = found
        if self.share is None:
            return answers
        return [np.asarray(a, dtype=np.float64) / self.share for a in answers]

    def select(
        self,
        candidates: Sequence[Query],
        synthetic_answers: Sequence[np.ndarray],
        k: int,
        rho: float,
        *,
        phase: str,
        label: str,
        penalty: Sequence[float] | None = None,
        merge: Sequence[np.ndarray | None] | None = None,
    ) -> list[int]:
        s = self.share or 1.0
        scaled = [np.asarray(a, dtype=np.float64) * s for a in synthetic_answers]
        return self._inner.select(
            candidates, scaled, k, rho, phase=phase, label=label, penalty=penalty, merge=merge
        )

    def to_json(self) -> dict[str, Any]:
        """The record's ``population`` section (public columns and DP outputs only)."""
        names = ", ".join(self.columns)
        return {
            "rows": "complete cases",
            "describes": f"the rows where {names} {'is' if len(self.columns) == 1 else 'are'} "
            "present",
            "complete_in": list(self.columns),
            "kept_share": self.share,
            "kept_share_sd": self.share_sd,
        }


def full_population() -> dict[str, Any]:
    """The record's ``population`` section when no column is dropped: every row."""
    return {
        "rows": "all",
        "describes": "every row of the table",
        "complete_in": [],
        "kept_share": None,
        "kept_share_sd": None,
    }


class WithOracle:
    """A private-data handle (``dpql.synth.base.PrivateData``) whose ``oracle`` is replaced."""

    def __init__(self, private: Any, oracle: Any):
        self._private = private
        self.oracle = oracle

    def rows(self) -> Any:
        return self._private.rows()

    def public_table(self, path: Any) -> Any:
        return self._private.public_table(path)


def without_unsupported_nulls(
    table: EncodedTable,
    measurements: Sequence[NoisyAnswer],
    seed: int,
    z: float = Z,
) -> EncodedTable:
    """``table`` with no empty cell in a ``missing: keep`` column whose null state its measured
    marginals cannot tell from zero (``dpql.synth.nulls.complete_columns``, below ``z`` sds, the
    acceptance tests' ``z``): a column without empty cells keeps its public null state, and the
    noise would otherwise give it a few. Each such cell is replaced by the column's value in
    another synthetic row drawn at random among those with one. Post-processing of the
    synthesizer's noisy answers (``measurements``) and its table only;
    a column no measured marginal holds is left as it is."""
    codes, scaled = dict(table.codes), dict(table.scaled)
    rng = np.random.default_rng(seed)
    for name in complete_columns(table.domain, measurements, z):
        col = table.domain[name]
        null = codes[col.name] == col.null_code
        present = np.flatnonzero(~null)
        if not null.any() or present.size == 0:
            continue
        donors = rng.choice(present, int(null.sum()))
        codes[col.name] = codes[col.name].copy()
        codes[col.name][null] = codes[col.name][donors]
        if col.name in scaled:
            scaled[col.name] = scaled[col.name].copy()
            scaled[col.name][null] = scaled[col.name][donors]
    return EncodedTable(table.domain, codes, scaled)
