"""Peak memory and running time of ``dpql compile``, estimated from public facts before any data
is read (spec/language.md §9).

A plan that the planner accepts could still ask compile for far more memory than the machine
has: a million halfspaces, a range with a million thresholds, a billion output rows, a relaxed
table of 10^8 rows, or 2-way marginals over 45 columns of 1,000 bins each. The estimate below
adds up the large arrays each phase of compile allocates, from the spec alone (the public row
count ``n``, the schema's bins and categories, the planned queries, the RAP++ options and the
synthetic row count), and :func:`resource_diagnostics` refuses the plan (E160) when the peak is
above the limit, or warns with the figures (W160) when it is above half of it or the run is
expected to take more than an hour.

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

import itertools
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dpql.diagnostics import Diagnostic, SourcePos
from dpql.domain import Domain
from dpql.ir.queries import Halfspace, Marginal, Prefix, Query, query_columns
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
TILE = 8  # values per tile of a relaxed marginal (dpql.synth.relaxed.TILE)
SECONDS_PER_ELEMENT = 8e-10  # one float32 element of a relaxed-table tensor per Adam step
STARTUP_SECONDS = 20.0  # imports, XLA compilation of the fit
SECONDS_PER_CELL_IO = 1.5e-6  # reading or writing one cell of a CSV
SECONDS_PER_DATA_OP = 2e-9  # one multiply-add of an exact query over the data
SECONDS_PER_MEASURE = 2.3e-6  # one post-processing measure on one synthetic row (all passes)
# The SQL engines code a categorical cell by its position in the public list of values: time
# linear in the list, per row and listed value (fitted on DuckDB).
SECONDS_PER_LABEL_SCAN = 7e-10
SECONDS_PER_GAN_FLOP = 5e-11  # DP-SGD: 6 flops per parameter and example (forward, backward)


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


def _tiles(domain: Domain, columns: Sequence[str]) -> int:
    return math.prod(-(-domain.card(c) // TILE) for c in columns)


def _capacity(tiles: int) -> int:
    return max(16, 1 << max(tiles - 1, 0).bit_length())


def _data_rows_in_memory(n: int, engine: str) -> int:
    if engine == "memory":
        return n
    if engine == "auto":
        return min(n, AUTO_MEMORY_ROWS)
    return 0  # duckdb / spark: out of core


def _rap_parts(domain: Domain, schedule: Any, options: Any) -> dict[str, float]:
    """Arrays of the RAP++ fit (JAX, float32) and of its selection rounds (numpy)."""
    R = options.relaxed_rows
    width = sum(c.card for c in domain) + max(len(domain.numeric), 1)
    tiles = sum(-(-c.card // TILE) for c in domain)
    parts: dict[str, float] = {}
    # Parameters, gradients, Adam's two moments, updates; the softmax per tile group.
    parts["relaxed table"] = 4.0 * R * width * 6 + 4.0 * R * tiles * TILE * 3
    # Marginal loss: the tiles of the measured marginals, gathered per factor (and their
    # gradient). Which candidates are selected depends on the data: each arity is taken at
    # its share of the selections and the candidates' mean size.
    n_marginal = sum(r.k for r in schedule.rounds if r.kind == "marginal")
    by_arity: dict[int, list[int]] = {}
    for m in schedule.marginal_candidates:
        by_arity.setdefault(len(m.columns), []).append(_tiles(domain, m.columns))
    init = [q for q in schedule.init_queries if isinstance(q, Marginal)]
    chosen: dict[int, float] = {1: sum(_tiles(domain, q.columns) for q in init)} if init else {}
    total = sum(len(ts) for ts in by_arity.values())
    for k, ts in by_arity.items():
        picked = min(len(ts), math.ceil(n_marginal * len(ts) / total))
        chosen[k] = chosen.get(k, 0) + picked * sum(ts) / len(ts)
    loss = 0.0
    for k, t in chosen.items():
        cap = _capacity(math.ceil(t))
        loss += 4.0 * cap * R * (2 * k * TILE + (TILE ** (k - 1) if k >= 4 else 0))
    parts["marginal loss"] = loss
    # Threshold families: every candidate of a group is evaluated on every relaxed row.
    hs: dict[tuple[Any, ...], int] = {}
    pf: dict[tuple[Any, ...], list[Prefix]] = {}
    for q in schedule.threshold_candidates:
        if isinstance(q, Halfspace):
            hs[(q.columns, q.by)] = hs.get((q.columns, q.by), 0) + 1
        elif isinstance(q, Prefix):
            pf.setdefault((q.columns, q.by), []).append(q)
    thr = sum(5.0 * 4 * R * m for m in hs.values())
    for (cols, _), qs in pf.items():
        thr += 4.0 * R * len(qs) * (3 * max(domain.card(c) for c in cols) + 4)
    parts["threshold queries"] = thr
    # Selection: the relaxed marginals of all candidates (Khatri-Rao products of the leads).
    lead = max(
        (math.prod(domain.card(c) for c in m.columns[:-1]) for m in schedule.marginal_candidates),
        default=0,
    )
    parts["selection"] = 4.0 * R * lead * 2
    return parts


def _minmax_width(domain: Domain) -> int:
    """Length of the paper's (``minmax``) encoding: one-hot categoricals, one coordinate else."""
    return sum(c.card if c.kind == "categorical" and c.card > 2 else 1 for c in domain)


def _gan_sizes(domain: Domain, o: Any, width: int | None = None) -> tuple[int, int]:
    """Parameters of the DP-auto-GAN autoencoder and of its critic and generator
    (dpql.synth.gan.nets) for an encoded vector of ``width`` coordinates
    (dpql.synth.gan.encoding.width; default: the ``minmax`` encoding's)."""
    n = width or _minmax_width(domain)
    d = o.ae_latent_dim
    h = o.ae_hidden if o.ae_hidden is not None else (n + d) // 2
    ae = 2 * (n * h + h * d) + 2 * h + n + d
    hidden = o.critic_hidden if o.critic_hidden is not None else (2 * n // 3, n // 3)
    sizes = (n, *hidden, 1)
    critic = sum(a * b + b for a, b in itertools.pairwise(sizes))
    z = o.generator_noise_dim
    critic += 2 * z * z + z * d
    return ae, critic


def _gan_parts(domain: Domain, o: Any, n_mem: int, width: int | None = None) -> dict[str, float]:
    """DP-SGD's per-example gradients (a padded batch of them), the networks with their
    optimiser states, and the encoded data (float32)."""
    ae, critic = _gan_sizes(domain, o, width)
    n = width or _minmax_width(domain)

    def padded(batch: int) -> float:
        return batch + 6 * math.sqrt(batch) + 1

    grads = max(padded(o.ae_batch_size) * ae, padded(o.critic_batch_size) * critic)
    return {
        "gan per-example gradients": 4.0 * grads,
        "gan networks": 4.0 * 4 * (ae + critic),
        "gan encoded data": 4.0 * n_mem * n,
    }


def rap_cost(domain: Domain, workload: Sequence[Query], schedule: Any, options: Any) -> Any:
    """RAP++'s share of the estimate: the relaxed table's tensors and Adam steps, and the
    candidates it answers besides the workload (2-way subsets, 1-way init marginals)."""
    from dpql.synth.base import SynthCost

    rap = _rap_parts(domain, schedule, options)
    steps = options.iterations + max(len(schedule.rounds) - 1, 0) * options.warm_iterations
    seconds = STARTUP_SECONDS + steps * (sum(rap.values()) - rap["selection"]) / 4.0 * (
        SECONDS_PER_ELEMENT
    )
    pool = (*schedule.marginal_candidates, *schedule.init_queries)
    extra = tuple(m for m in pool if isinstance(m, Marginal))
    return SynthCost(rap, seconds, extra)


def gan_cost(
    domain: Domain,
    options: Any,
    n: int,
    engine: str,
    width: int | None = None,
    marginal_cells: int = 0,
    sampled_rows: int = 0,
) -> Any:
    """DP-auto-GAN's share of the estimate: networks, per-example gradients, encoded data, the
    non-private fine-tuning on ``marginal_cells`` measured cells (``width``: the encoded
    vector's length, from the backend's encoding), and drawing ``sampled_rows`` rows from the
    generator in one pass (:func:`gan_sampling_bytes`)."""
    from dpql.synth.base import SynthCost

    gan = _gan_parts(domain, options, _data_rows_in_memory(n, engine), width)
    ae, critic = _gan_sizes(domain, options, width)
    o = options
    flops = o.ae_steps * o.ae_batch_size * ae + o.critic_steps * o.critic_batch_size * critic
    if marginal_cells:  # fine-tuning: forward and backward through G and De, relaxed marginals
        flops += o.finetune_steps * o.finetune_batch_size * (ae + critic + marginal_cells)
    sampling = gan_sampling_bytes(domain, options, sampled_rows, width)
    return SynthCost(gan, STARTUP_SECONDS + SECONDS_PER_GAN_FLOP * 6 * flops, sampling=sampling)


def gan_sampling_bytes(domain: Domain, o: Any, rows: int, width: int | None = None) -> float:
    """Peak bytes of drawing ``rows`` rows from the generator (dpql.synth.gan.train.sample): one
    float32 pass holds per row the noise and the generator's hidden layer, the latent code and
    the decoder's hidden layer, and four vectors of the encoding's width (logits, the drawn
    one-hot rows, the Gumbel draw, the host copy); then the decoded rows' codes and values."""
    n = width or _minmax_width(domain)
    h = o.ae_hidden if o.ae_hidden is not None else (n + o.ae_latent_dim) // 2
    floats = 2 * o.generator_noise_dim + o.ae_latent_dim + h + 4 * n
    return rows * (4.0 * floats + 16.0 * len(domain))


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
    """Estimate compile's peak memory and time from the plan's public facts."""
    cols = len(domain)
    numeric = len(domain.numeric)
    width = sum(c.card for c in domain)
    max_card = max((c.card for c in domain), default=1)
    n_mem = _data_rows_in_memory(n, engine)
    parts: dict[str, float] = {}
    # Data: the encoded table kept by the in-memory engine; reading it (pandas) is transient.
    parts["data table"] = n_mem * (4.0 * cols + 8.0 * numeric) if n_mem else DUCKDB_BYTES
    read = n_mem * cols * CSV_CELL_BYTES if n_mem else (1 << 20) * cols * 12
    # Exact answers of the workload and of RAP's other candidates (the 2-way subsets of its
    # marginals, the 1-way init marginals), cached while the release runs. One pass over the
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
