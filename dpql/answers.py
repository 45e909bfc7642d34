"""A noisy answer already paid for: what a synthesizer hands post-processing and the record."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dpql.ir.queries import Query


@dataclass(frozen=True, eq=False)
class NoisyAnswer:
    """One released answer: ``query``, its noisy ``value`` (an array over the query's cells,
    as the oracle returns it; a fraction of n) and ``sd``, the noise's standard deviation per
    cell (NaN where unknown). A DP output: anything computed from it is post-processing."""

    query: Query
    value: Any
    sd: float
