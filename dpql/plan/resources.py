"""Peak memory and running time of ``dpql compile``, estimated from public facts before any data
is read (spec/language.md §9).

A plan that the planner accepts could still ask compile for far more memory than the machine
has: a million halfspaces, a range with a million thresholds, a billion output rows, a relaxed
table of 10^8 rows, or 2-way marginals over 45 columns of 1,000 bins each. The estimate below
adds up the large arrays each phase of compile allocates, from the spec alone (the public row
count ``n``, the schema's bins and categories, the planned queries, the synthetic row count and
the backend's own share, which its plan states: ``SynthCost``, :mod:`dpql.synth.base`), and
:func:`resource_diagnostics` refuses the plan (E160) when the peak is above the limit, or warns
with the figures (W160) when it is above half of it or the run is expected to take more than an
hour.

It is a model, not a measurement: each term is the size of one array family (data answers,
relaxed-table tensors, rounding buffers, post-processing features), with the worst case where
compile chooses adaptively, the candidates' mean size), plus a fixed base. It is meant as an
upper bound on compile's peak (tests/test_resource_bounds.py compiles small specs of the
benchmark suite against it); small specs are over-estimated by the base. The time figure is
rougher and is only used to warn.

The limit is :data:`DEFAULT_MEMORY_LIMIT` (8 GiB), or ``$DPQL_MEMORY_LIMIT`` (bytes, or a
number with a unit: ``16GiB``, ``512MB``) on a machine with more memory to give.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dpql.diagnostics import Diagnostic, SourcePos
from dpql.domain import Domain
from dpql.ir.queries import Halfspace, Marginal, Query, query_columns
from dpql.plan.resolve import query_cells

DEFAULT_MEMORY_LIMIT = 8 * 2**30
#: Warn when the estimate is above this fraction of the limit, or the time above an hour.
WARN_FRACTION = 0.5
WARN_SECONDS = 3600.0
MEMORY_LIMIT_ENV = "DPQL_MEMORY_LIMIT"

# Constants of the model (bytes and seconds), measured on the Adult example (2 cores).
# Python, numpy, pandas, JAX and XLA's compiled programs: what a whole RAP release with
# post-processing holds besides the arrays below, so that the estimate bounds compile
BASE_BYTES = 1152 * 2**20
CSV_CELL_BYTES = 64  # a data cell while pandas parses the file (strings)
OUT_CELL_BYTES = 64  # an output cell while the table is formatted and written
ROW_CHUNK = 1 << 16  # rows per chunk of the in-memory engine (dpql.ir.exact.ROW_CHUNK)
AUTO_MEMORY_ROWS = 2_000_000  # ``engine: auto`` keeps about this many rows in memory at most
DUCKDB_BYTES = 2**30  # DuckDB's memory_limit, then the Arrow batches it streams
STARTUP_SECONDS = 20.0  # imports, XLA compilation of the fit
SECONDS_PER_CELL_IO = 1.5e-6  # reading or writing one cell of a CSV
SECONDS_PER_DATA_OP = 2e-9  # one multiply-add of an exact query over the data
SECONDS_PER_MEASURE = 2.3e-6  # one post-processing measure on one synthetic row (all passes)
# The SQL engines code a categorical cell by its position in the public list of values: time
# linear in the list, per row and listed value (fitted on DuckDB).
SECONDS_PER_LABEL_SCAN = 7e-10


@dataclass(frozen=True)
class ResourceEstimate:
    """Estimated peak memory (bytes) and time (seconds) of ``dpql compile``.

    ``parts`` names the largest array families (bytes), ``phase`` the phase at the peak.
    """

    peak_bytes: int
    seconds: float
    phase: str
    parts: Mapping[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "peak_memory_bytes": self.peak_bytes,
            "peak_phase": self.phase,
            "seconds": round(self.seconds, 1),
        }

    def summary(self) -> str:
        top = sorted(self.parts.items(), key=lambda kv: -kv[1])[:3]
        what = ", ".join(f"{k} {format_bytes(v)}" for k, v in top if v >= 2**20)
        return (
            f"peak memory about {format_bytes(self.peak_bytes)} (at {self.phase}"
            + (f"; {what}" if what else "")
            + f"), time about {format_seconds(self.seconds)}"
        )


def format_bytes(x: float) -> str:
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if x >= size:
            return f"{x / size:.3g} {unit}"
    return f"{int(x)} B"


def format_seconds(s: float) -> str:
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s / 60:.0f} min"
    if s < 48 * 3600:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.3g} days"


_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "kib": 2**10, "m": 10**6, "mb": 10**6}
_UNITS |= {"mib": 2**20, "g": 10**9, "gb": 10**9, "gib": 2**30, "t": 10**12, "tb": 10**12}
_UNITS |= {"tib": 2**40}


def memory_limit(environ: Mapping[str, str] | None = None) -> int:
    """The limit in bytes: ``$DPQL_MEMORY_LIMIT`` if set and valid, else the default."""
    text = (os.environ if environ is None else environ).get(MEMORY_LIMIT_ENV, "").strip()
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)", text)
    if not m or m.group(2).lower() not in _UNITS:
        return DEFAULT_MEMORY_LIMIT
    value = float(m.group(1)) * _UNITS[m.group(2).lower()]
    return int(value) if math.isfinite(value) and value >= 2**20 else DEFAULT_MEMORY_LIMIT


# --------------------------------------------------------------------------------------------
# The model


def data_rows_in_memory(n: int, engine: str) -> int:
    """Data rows the engine holds in memory (the SQL engines stream: none)."""
    if engine == "memory":
        return n
    if engine == "auto":
        return min(n, AUTO_MEMORY_ROWS)
    return 0  # duckdb / spark: out of core


def estimate(
    *,
    domain: Domain,
    n: int,
    engine: str,
    output_rows: int,
    workload: Sequence[Query],
    synth: Any = None,
    measures: int = 0,
    model_requirements: int = 0,
) -> ResourceEstimate:
    """Estimate compile's peak memory and time from the plan's public facts (``synth``: the
    backend's ``SynthCost``, whose ``parts``, ``seconds``, ``extra_queries`` and ``sampling``
    are added in)."""
    cols = len(domain)
    numeric = len(domain.numeric)
    width = sum(c.card for c in domain)
    max_card = max((c.card for c in domain), default=1)
    n_mem = data_rows_in_memory(n, engine)
    parts: dict[str, float] = {}
    # Data: the encoded table kept by the in-memory engine; reading it (pandas) is transient.
    parts["data table"] = n_mem * (4.0 * cols + 8.0 * numeric) if n_mem else DUCKDB_BYTES
    read = n_mem * cols * CSV_CELL_BYTES if n_mem else (1 << 20) * cols * 12
    # Exact answers of the workload and of the backend's other candidates (RAP's 2-way subsets
    # of its marginals and 1-way init marginals), cached while the release runs. One pass over the
    # queries: a workload may hold a million of them.
    cards = {c.name: c.card for c in domain}
    cells = reads = 0
    groups: dict[tuple[Any, ...], int] = {}  # halfspaces per (columns, label)
    for q in workload:
        cells += query_cells(q, cards)
        reads += len(query_columns(q)) + 1
        if isinstance(q, Halfspace):
            groups[(q.columns, q.by)] = groups.get((q.columns, q.by), 0) + 1
    cost = synth
    if cost is not None and cost.extra_queries:
        seen = {q.columns for q in workload if isinstance(q, Marginal)}
        for m in cost.extra_queries:
            if m.columns not in seen:
                seen.add(m.columns)
                cells += query_cells(m, cards)
                reads += len(m.columns) + 1
    parts["query answers"] = 28.0 * cells  # sums, answers, synthetic answers, differences
    # Halfspaces on the data: one float64 (rows x group) product per row chunk.
    chunk = min(max(n_mem, 1), ROW_CHUNK) if n_mem else ROW_CHUNK
    hs_data = 9.0 * chunk * max(groups.values(), default=0)
    parts["reading data"] = read
    parts["halfspaces on data"] = hs_data
    measure_phase = max(read, hs_data)
    data_ops = n * reads

    fit = sum(cost.parts.values()) if cost is not None else 0.0
    fit_seconds = cost.seconds if cost is not None else 0.0
    if cost is not None:
        parts.update(cost.parts)
    # Rounding to output rows, the table, formatting and writing it.
    N = output_rows
    rounding = 8.0 * N * 8 + 9.0 * N * max_card + N * (4.0 * cols + 8.0 * numeric)
    writing = N * cols * OUT_CELL_BYTES
    parts["output rows"] = rounding + writing
    # Post-processing: the measures on every synthetic row (float64, a few copies).
    post = 8.0 * N * measures * 5 + 8.0 * N * width * model_requirements
    parts["post-processing"] = post

    persistent = parts["data table"] + parts["query answers"]
    sampling = cost.sampling if cost is not None else 0.0
    parts["sampling"] = sampling
    phases = {
        "measurement": measure_phase,
        "synthesis": fit,
        "sampling": fit + sampling,
        "rounding and writing": rounding + writing,
        "post-processing": post + rounding,
    }
    phase = max(phases, key=phases.__getitem__)
    peak = BASE_BYTES + persistent + phases[phase]
    # Rows beyond what the in-memory engine holds are coded by the SQL engines' list lookup.
    labels = sum(len(c.labels) for c in domain.categorical)
    seconds = (
        2.0
        + (n - n_mem) * labels * SECONDS_PER_LABEL_SCAN
        + n * cols * SECONDS_PER_CELL_IO
        + data_ops * SECONDS_PER_DATA_OP
        + fit_seconds
        + N * cols * SECONDS_PER_CELL_IO
        + N * measures * SECONDS_PER_MEASURE
    )
    kept = {k: int(min(v, 2**62)) for k, v in parts.items()}
    return ResourceEstimate(int(min(peak, 2**62)), seconds, phase, kept)


def resource_diagnostics(
    est: ResourceEstimate, where: SourcePos | None, limit: int | None = None
) -> list[Diagnostic]:
    """E160 when the estimated peak memory is above the limit; W160 when it is above half of
    it, or the time above an hour (the figures are in the message)."""
    limit = memory_limit() if limit is None else limit
    if est.peak_bytes > limit:
        return [
            Diagnostic(
                "E160",
                f"dpql compile would need about {format_bytes(est.peak_bytes)} of memory, above "
                f"the limit of {format_bytes(limit)}: {est.summary()}",
                where,
                "ask for fewer or smaller queries, fewer relaxed or output rows, or coarser "
                f"bins; on a machine with more memory, raise ${MEMORY_LIMIT_ENV}",
            )
        ]
    if est.peak_bytes > WARN_FRACTION * limit or est.seconds > WARN_SECONDS:
        return [
            Diagnostic(
                "W160",
                f"dpql compile is estimated to need much memory or time: {est.summary()} "
                f"(memory limit {format_bytes(limit)})",
                where,
                "check that the machine can give this much before running compile",
                "warning",
            )
        ]
    return []
