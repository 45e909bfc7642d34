"""A stand-in for ``dpql.data.measure.open_measurer``, used only while that module is missing.

``dpql compile`` imports its measurement layer from ``dpql.data.measure`` (being written at the
time of this benchmark). Until it exists, ``run.py`` patches ``dpql.compile.open_measurer`` with
:func:`open_measurer` below and still runs :func:`dpql.compile.compile_release` end to end (plan,
RAP++, decode, atomic writes, provenance). The stand-in implements the
:class:`dpql.plan.oracle.MeasurementOracle` contract with dpql's own pieces only: the table is
read and encoded by ``dpql.data.load.load_table``, exact answers come from
``dpql.plan.exact.answer_all``, and noise and accounting from ``dpql.privacy.mechanisms``
(``gaussian_mechanism`` / ``gumbel_top_k``, each appending to the release's ledger).
``results.json`` records which measurement layer produced each RAP++ row.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from dpql.data.load import load_table, rules_from_spec
from dpql.domain import EncodedTable
from dpql.plan.exact import answer_all
from dpql.plan.ir import Query
from dpql.privacy.ledger import Ledger
from dpql.privacy.mechanisms import gaussian_mechanism, gumbel_top_k
from dpql.privacy.noise import NoiseSource


class _Summary(dict):
    """Curator-only summary; a dict with ``to_json`` (both shapes ``compile.py`` has used)."""

    def to_json(self) -> dict[str, Any]:
        return dict(self)


class StandinMeasurer:
    def __init__(self, spec: Any, ledger: Ledger, noise: NoiseSource) -> None:
        missing, other = rules_from_spec(spec.model)
        result = load_table(
            spec.data_path, spec.domain, fmt=spec.data_format, missing=missing, other=other
        )
        self._table: EncodedTable = result.table
        self._n = int(spec.model.data.rows)  # the public row count
        self._ledger = ledger
        self._noise = noise

    @property
    def n(self) -> int:
        return self._n

    def measure(
        self, queries: Sequence[Query], rho: float, *, phase: str, label: str
    ) -> list[np.ndarray]:
        answers = answer_all(list(queries), self._table)
        l2 = math.sqrt(sum(q.sensitivity(self._n).l2 ** 2 for q in queries))
        noisy = gaussian_mechanism(
            np.concatenate([np.ravel(a) for a in answers]), l2, rho,
            noise=self._noise, ledger=self._ledger, phase=phase, label=label,
        )  # fmt: skip
        return np.split(noisy, np.cumsum([np.size(a) for a in answers])[:-1])

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
    ) -> list[int]:
        answers = answer_all(list(candidates), self._table)
        scores = np.array(
            [
                np.abs(np.ravel(a) - np.ravel(s)).sum()
                for a, s in zip(answers, synthetic_answers, strict=True)
            ]
        )
        if penalty is not None:
            scores = scores - np.asarray(penalty, dtype=np.float64)
        sens = max(q.sensitivity(self._n).l1 for q in candidates)
        picked = gumbel_top_k(
            scores, sens, k, rho, noise=self._noise, ledger=self._ledger, phase=phase,
            label=label,
        )  # fmt: skip
        return [int(i) for i in picked]

    def private_table(self) -> EncodedTable:
        return self._table

    def curator_summary(self) -> _Summary:
        return _Summary(
            {"measurement_layer": "benchmarks/rap/standin_measure.py", "rows": self._table.n}
        )


def open_measurer(spec: Any, ledger: Ledger, noise: NoiseSource) -> StandinMeasurer:
    return StandinMeasurer(spec, ledger, noise)
