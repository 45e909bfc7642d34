"""The private-measurement oracle: the only interface through which synthesizers learn about data.

Synthesizers (``dpql.synth``) never import the data layer. They receive an object satisfying
:class:`MeasurementOracle`, implemented by ``dpql.data.measure``, whose every method is a
differentially private mechanism that appends an event to the release's ledger. Everything a
synthesizer computes from the oracle's outputs is post-processing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from dpql.ir.queries import Query


class MeasurementOracle(Protocol):
    """Private access to the true answers of planned queries.

    ``n`` is the *public* row count from the spec (the neighbouring relation is replace-one at
    that n), so scores and sensitivities are computed without looking at the data.
    """

    @property
    def n(self) -> int: ...

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
        """Gaussian mechanism on the concatenated answers of ``queries`` at total ``rho``-zCDP.

        The L2 sensitivity is that of the concatenation (sqrt of the sum of squared per-query
        L2 sensitivities). With ``scales`` (public, > 0), query q is answered as ``c_q q`` in the
        one release (its sensitivity times ``c_q``) and divided back, so its noise sd is
        ``sigma / c_q``. Returns one noisy answer vector per query (averages, not counts, not
        clipped). ``merge`` (public, one integer array or None per query) answers a marginal
        over merged cells: cell ``i`` counts in ``merge[q][i]``, or nowhere at ``-1``; the
        marginal's sensitivity holds (a record still leaves one cell and enters one).
        """
        ...

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
        """One-shot Gumbel top-k over the L1 errors ``||a_q(D) - synthetic_q||_1 - penalty_q``.

        ``synthetic_answers`` and ``penalty`` must be data-independent given the past noisy
        measurements (post-processing). The score's sensitivity is the largest per-candidate L1
        sensitivity (2/n for vector queries, 1/n for scalar ones). With ``merge`` (public, as in
        :meth:`measure`) a candidate is scored over its merged cells. Returns candidate indices.
        """
        ...
