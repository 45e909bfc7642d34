"""The RAP++ rounding as it was before issue 19's fix, for before/after benchmark runs only.

``dpql.synth.rap.round_rows`` drew one random shift per relaxed row and shared it across all
columns: with one output row per relaxed row, every column of a row was drawn at the same
quantile of its distribution, which coupled the columns through their declared value order.
The suite's ``dpql-shared-shift`` method runs ``compile_release`` with this function patched in
(:func:`patch`); nothing else uses it.
"""

from __future__ import annotations

import numpy as np

from dpql.domain import CategoricalColumn, EncodedTable, NumericColumn
from dpql.synth.rap.relaxed import Layout


def round_rows_shared_shift(layout: Layout, params, rows: int, seed: int) -> EncodedTable:
    """Verbatim the pre-fix ``round_rows``: ``shift`` is drawn once per relaxed row."""
    from dpql.synth.rap.program import column_probs

    probs = column_probs(layout, params[0])
    positions = np.clip(np.asarray(params[1], dtype=np.float64), 0.0, 1.0)
    rng = np.random.default_rng(seed)
    m = positions.shape[0]
    copies = np.full(m, rows // m)
    copies[rng.choice(m, rows % m, replace=False)] += 1
    owner = np.repeat(np.arange(m), copies)
    start = np.repeat(np.cumsum(copies) - copies, copies)
    rank = np.arange(rows) - start
    shift = rng.random(m)  # the bug: one shift per relaxed row, shared by every column
    codes: dict[str, np.ndarray] = {}
    scaled: dict[str, np.ndarray] = {}
    for col, size in zip(layout.domain.names, layout.sizes, strict=True):
        cdf = np.cumsum(probs[col], axis=1)[owner]
        shuffled = rank[np.lexsort((rng.random(rows), owner))]
        u = (shuffled + shift[owner]) / copies[owner]
        draw = np.minimum((cdf < u[:, None]).sum(axis=1), size - 1).astype(np.int32)
        column = layout.domain[col]
        if isinstance(column, CategoricalColumn):
            codes[col] = draw
            continue
        assert isinstance(column, NumericColumn)
        x = column.value_in_bin(draw, positions[owner, layout.numeric_index(col)])
        scaled[col] = (x - column.lo) / column.span
        codes[col] = column.bin_of(x)
    order = rng.permutation(rows)
    return EncodedTable(
        layout.domain,
        {k: v[order] for k, v in codes.items()},
        {k: v[order] for k, v in scaled.items()},
    )


def patch() -> None:
    """Make ``dpql.synth.rap.run_rap`` round with the pre-fix function (this process only)."""
    import dpql.synth.rap.program as rap

    rap.round_rows = round_rows_shared_shift
