"""The private measurer: the :class:`~dpql.ir.oracle.MeasurementOracle` over the real table.

This is the privacy boundary's only exit. What leaves it is (a) noisy answers from the Gaussian
mechanism, (b) indices chosen by Gumbel top-k, and (c) the public n it was given. Each call
appends one event to the ledger (through :mod:`dpql.privacy.mechanisms`, whose noise comes from
the :class:`~dpql.privacy.noise.NoiseSource`). The curator-only :meth:`curator_summary` is kept
apart: it holds the true row count and must never be written next to the release.

Neighbouring relation: replace-one with the *public* row count ``n`` of the spec (tables D, D'
of n rows differing in one record). Every answer is ``sum / n`` with that public n, even when
the file holds another number of rows (rows dropped for missing values); so sensitivities are
the IR's (``Query.sensitivity(n)``) and nothing depends on the true count:

* ``measure``: each query's sum is an integer number of steps of its public grid (1 for
  counts and cells; ``2^-20`` for real-valued moments, rounded per record, which keeps every
  record inside its range: :func:`~dpql.ir.queries.query_grid`). With public scales ``c_q > 0``
  the real vector ``(c_q a_q(D))_q`` has L2 sensitivity ``sqrt(sum_q (c_q Delta_2(q))^2)``
  (sqrt(2)/n per vector query, 1/n per scalar one); independent discrete Gaussian noise of
  scale ``sigma / c_q`` (in answer units) on each integer sum is rho-zCDP at that sensitivity
  (Canonne, Kamath & Steinke 2020, Thm 14; :func:`~dpql.privacy.mechanisms.gaussian_mechanism`).
  Dividing the noisy integer by ``n / grid`` is post-processing, and the published float is a
  function of that integer only;
* ``select``: the score ``||a_q(D) - s_q||_1 - penalty_q`` changes by at most ``Delta_1(q)``
  (2/n for vector queries, 1/n for scalar ones) by the triangle inequality, since ``s_q`` and
  the penalty are fixed given past outputs; Gumbel top-k is calibrated to the largest of these
  (:func:`~dpql.privacy.mechanisms.gumbel_beta`: an L1 score over a marginal vector moves by
  2/n when one row changes cell, not the vector's L2 sensitivity sqrt(2)/n). A penalty such as
  ``cells / n`` against size bias is public, hence DP-neutral;
* ``merge`` (both): a public map of a marginal's cells onto fewer cells (summed; ``-1``: left
  out) answers the merged marginal instead, MST's compressed domain (McKenna et al. 2021,
  sec. 4). A record that changes cell moves from one merged cell to another (or within one, or
  out of the kept ones), so the merged vector's L1 change is at most 2 and its L2 change at most
  sqrt(2) steps: the marginal's sensitivities hold unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from dpql.data.codec import CuratorLog
from dpql.data.engines import MeasurementEngine
from dpql.diagnostics import InternalError
from dpql.ir.queries import Marginal, Query, joint_l2_sensitivity, query_grid
from dpql.privacy.ledger import Ledger
from dpql.privacy.mechanisms import gaussian_mechanism, gumbel_top_k
from dpql.privacy.noise import NoiseSource


def merge_cells(sums: np.ndarray, cells: np.ndarray, query: Query) -> np.ndarray:
    """``sums`` (a marginal's exact integer cells, row-major) summed onto the merged cells:
    cell ``i`` goes to ``cells[i]``, or nowhere where that is ``-1``. Every merged cell
    ``0 .. cells.max()`` has a cell of its own (the map is onto)."""
    cells = np.asarray(cells)
    if not isinstance(query, Marginal) or cells.shape != sums.shape or cells.dtype.kind != "i":
        raise InternalError("a cell map is an integer array over a marginal's cells")
    size = int(cells.max()) + 1 if cells.size else 0
    if cells.min(initial=0) < -1 or np.unique(cells[cells >= 0]).size != size:
        raise InternalError("a cell map sends each cell to one of 0..m-1 (onto) or to -1")
    out = np.zeros(size, dtype=sums.dtype)
    keep = cells >= 0
    np.add.at(out, cells[keep], sums[keep])
    return out


@dataclass(frozen=True)
class CuratorSummary:
    """CURATOR-ONLY facts about the private table (true row count, clip counts, file hash).
    Never part of a release, provenance record or ledger."""

    log: CuratorLog
    public_rows: int
    distinct_queries_answered: int

    def to_json(self) -> dict[str, object]:
        log = self.log
        return {
            "curator_only": True,
            "source": log.source,
            "sha256": log.sha256,
            "public_rows": self.public_rows,
            "rows_read": log.rows_read,
            "rows_kept": log.rows_kept,
            "missing": dict(log.missing),
            "undeclared": dict(log.undeclared),
            "clipped_low": dict(log.clipped_low),
            "clipped_high": dict(log.clipped_high),
            "ignored_columns": list(log.ignored_columns),
            "malformed_rows": log.malformed_rows,
            "distinct_queries_answered": self.distinct_queries_answered,
        }


class PrivateMeasurer:
    """Gaussian measurements and Gumbel selections of exact answers held by an engine.

    Exact answers are computed once per distinct query (batched per call) and cached; they never
    leave this object except through a mechanism.
    """

    def __init__(self, engine: MeasurementEngine, n: int, ledger: Ledger, noise: NoiseSource):
        if n < 1:
            raise InternalError(f"public row count must be >= 1, got {n}")
        self._engine = engine
        self._n = n
        self._ledger = ledger
        self._noise = noise
        self._sums: dict[Query, np.ndarray] = {}
        #: ``progress(phase, step, total)`` around each scan of the data for exact answers
        #: (how many distinct queries a scan answers: public, from the plan)
        self.progress: Callable[[str, int, int], None] | None = None

    @property
    def n(self) -> int:
        """The public row count of the spec (never the data's)."""
        return self._n

    def _grid_sums(self, queries: Sequence[Query]) -> list[np.ndarray]:
        """Exact integer sums on each query's grid (engine answers, cached)."""
        todo = list(dict.fromkeys(q for q in queries if q not in self._sums))
        if todo:
            if self.progress is not None:  # a scan of the data can take minutes (Spark)
                self.progress("scan data", 0, len(todo))
            for q, s in zip(todo, self._engine.sums(todo), strict=True):
                self._sums[q] = s
            if self.progress is not None:
                self.progress("scan data", len(todo), len(todo))
        return [self._sums[q] for q in queries]

    def _merged_sums(
        self, queries: Sequence[Query], merge: Sequence[np.ndarray | None] | None
    ) -> list[np.ndarray]:
        """Exact sums, each summed over its public cell ``merge`` map where one is given."""
        sums = self._grid_sums(queries)
        if merge is None:
            return sums
        if len(merge) != len(queries):
            raise InternalError("measurement: one cell map (or None) per query")
        return [
            s if m is None else merge_cells(s, m, q)
            for q, s, m in zip(queries, sums, merge, strict=True)
        ]

    def _answers(
        self, queries: Sequence[Query], merge: Sequence[np.ndarray | None] | None = None
    ) -> list[np.ndarray]:
        sums = self._merged_sums(queries, merge)
        return [s * query_grid(q) / self._n for q, s in zip(queries, sums, strict=True)]

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
        """Discrete Gaussian mechanism on the integer sums of ``queries`` on their public grids
        (:func:`~dpql.ir.queries.query_grid`), released as answers ``(sum + Y) * grid / n``:
        rho-zCDP under replace-one neighbours at the public n, with L2 sensitivity
        ``sqrt(sum_q (c_q * q.sensitivity(n).l2) ** 2)`` of the scaled answers (sqrt(2)/n per
        vector query, 1/n per scalar one, times its scale). Query q gets noise sd ``sigma /
        c_q`` in answer units (``sigma * n / (c_q * grid)`` grid steps). Scales (default 1,
        finite, > 0) must be chosen from public information. Every published answer times
        ``n / grid`` is an integer. With ``merge`` (public, see the module docstring) a
        marginal's answer is over its merged cells. Returns one unclipped noisy vector per
        query; appends one ledger event."""
        if not queries:
            return []
        c = np.ones(len(queries)) if scales is None else np.asarray(scales, dtype=np.float64)
        if c.shape != (len(queries),) or not (np.isfinite(c).all() and (c > 0).all()):
            raise InternalError("measurement scales must be one finite positive number per query")
        grids = [query_grid(q) for q in queries]
        l2 = joint_l2_sensitivity(queries, self._n, c.tolist())
        noisy = gaussian_mechanism(
            self._merged_sums(queries, merge),
            [self._n / (ci * g) for ci, g in zip(c, grids, strict=True)],
            l2,
            rho,
            noise=self._noise,
            ledger=self._ledger,
            phase=phase,
            label=label,
        )
        return [part.astype(np.float64) * g / self._n for part, g in zip(noisy, grids, strict=True)]

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
        """Gumbel top-k on the scores ``||a_q(D) - synthetic_q||_1 - penalty_q``: rho-zCDP under
        replace-one neighbours at the public n, with score sensitivity
        ``max_q q.sensitivity(n).l1`` (2/n with a vector query among the candidates, else
        1/n), valid because ``synthetic_answers``, ``penalty`` and ``merge`` (the cells each
        candidate is scored over) are fixed by past outputs. Returns the chosen candidate
        indices; appends one ledger event."""
        if not candidates:
            raise InternalError("select: no candidates")
        if len(synthetic_answers) != len(candidates) or (
            penalty is not None and len(penalty) != len(candidates)
        ):
            raise InternalError("select: one synthetic answer and penalty per candidate")
        answers = self._answers(candidates, merge)
        scores = np.empty(len(candidates))
        for i, (a, s) in enumerate(zip(answers, synthetic_answers, strict=True)):
            s = np.asarray(s, dtype=np.float64)
            if s.shape != a.shape:
                raise InternalError(
                    f"select: synthetic answer {i} has shape {s.shape}, the query has {a.shape}"
                )
            scores[i] = np.abs(a - s).sum()
        if penalty is not None:
            scores -= np.asarray(penalty, dtype=np.float64)
        sensitivity = max(q.sensitivity(self._n).l1 for q in candidates)
        chosen = gumbel_top_k(
            scores,
            sensitivity,
            k,
            rho,
            noise=self._noise,
            ledger=self._ledger,
            phase=phase,
            label=label,
        )
        return [int(i) for i in chosen]

    def close(self) -> None:
        """Release the engine (DuckDB temp files, Spark caches)."""
        self._engine.close()

    def curator_summary(self) -> CuratorSummary:
        """CURATOR-ONLY (true row count, clip counts, file hash): never put it in a release."""
        return CuratorSummary(self._engine.curator_log, self._n, len(self._sums))
