"""Mixed-type vector encoding of an :class:`EncodedTable`, fixed by the public domain alone.

DP-auto-GAN (Tantipongpipat et al. 2019, App. E: categorical features one-hot, continuous ones
min-max scaled) feeds the networks one vector in [0, 1]^n per row:

* a categorical column with k > 2 values is a one-hot block of width k (decoded by argmax);
* a categorical column with 2 values is one 0/1 coordinate (decoded by thresholding at 0.5),
  as in the authors' ``LabelBinarizer``, which is what makes ADULT 106-dimensional;
* a numeric column is its [0, 1]-scaled value (the domain's public min-max scaling), decoded by
  clipping to [0, 1], unscaling, and rounding integer columns in original units.

That is the paper's ``minmax`` encoding. The ``bins`` encoding (CTGAN's mode-specific
idea from public information only) replaces a numeric column's coordinate by a one-hot block
over its public bins (the null bin included) plus one within-bin offset in [0, 1], decoded by
argmax and then inside the chosen bin; an integer column with at most ``integer_levels`` values
is a one-hot block over its values. Every width and edge comes from the public domain.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dpql.domain import NULL_SCALED, CategoricalColumn, Domain, EncodedTable, NumericColumn

MODES = ("minmax", "bins")


@dataclass(frozen=True)
class Block:
    """Coordinates ``start : start + width`` of the vector encode column ``column``."""

    column: str
    start: int
    width: int
    kind: str = "scalar"  # "scalar" (min-max or binary), "onehot", "levels", "binned"


def _levels(column: NumericColumn, integer_levels: int) -> int:
    """Number of integer values of ``column`` when the ``bins`` encoding one-hots them, else 0."""
    if not column.integer:
        return 0
    count = int(np.floor(column.hi) - np.ceil(column.lo)) + 1
    return count if 0 < count <= integer_levels else 0


def blocks(domain: Domain, mode: str = "minmax", integer_levels: int = 16) -> tuple[Block, ...]:
    """The block of every column, in domain order, for encoding ``mode`` (module docstring)."""
    if mode not in MODES:
        raise ValueError(f"unknown gan encoding {mode!r}")
    out: list[Block] = []
    start = 0
    for c in domain:
        if isinstance(c, NumericColumn) and mode == "bins":
            levels = _levels(c, integer_levels)
            if levels:
                width, kind = levels + int(c.nullable), "levels"
            else:
                width, kind = c.card + 1, "binned"
        elif isinstance(c, CategoricalColumn) and c.card > 2:
            width, kind = c.card, "onehot"
        else:
            width, kind = 1, "scalar"
        out.append(Block(c.name, start, width, kind))
        start += width
    return tuple(out)


def width(domain: Domain, mode: str = "minmax", integer_levels: int = 16) -> int:
    """Length n of the encoded vector."""
    last = blocks(domain, mode, integer_levels)[-1]
    return last.start + last.width


def _bin_ranges(column: NumericColumn) -> tuple[np.ndarray, np.ndarray]:
    """Each value bin's ``[low, high]`` inside the column's bounds (original units)."""
    edges = np.asarray(column.edges, dtype=np.float64)
    return np.maximum(edges[:-1], column.lo), np.minimum(edges[1:], column.hi)


def encode(table: EncodedTable, mode: str = "minmax", integer_levels: int = 16) -> np.ndarray:
    """The (rows, n) float32 matrix of ``table`` in [0, 1]."""
    out = np.zeros((table.n, width(table.domain, mode, integer_levels)), dtype=np.float32)
    rows = np.arange(table.n)
    for b in blocks(table.domain, mode, integer_levels):
        column = table.domain[b.column]
        if b.kind == "levels":
            assert isinstance(column, NumericColumn)
            codes = table.codes[b.column]
            value = column.lo + table.scaled[b.column] * column.span
            level = np.clip(np.round(value - np.ceil(column.lo)), 0, b.width - 1 - column.nullable)
            if column.nullable:
                level = np.where(codes == column.null_code, b.width - 1, level)
            out[rows, b.start + level.astype(np.int64)] = 1.0
        elif b.kind == "binned":
            assert isinstance(column, NumericColumn)
            codes = table.codes[b.column]
            out[rows, b.start + codes] = 1.0
            low, high = _bin_ranges(column)
            value = column.lo + table.scaled[b.column] * column.span
            k = np.minimum(codes, column.bins - 1)
            span = high[k] - low[k]
            offset = np.where(span > 0, (value - low[k]) / np.where(span > 0, span, 1.0), 0.0)
            if column.nullable:
                offset = np.where(codes == column.null_code, 0.0, offset)
            out[:, b.start + b.width - 1] = np.clip(offset, 0.0, 1.0)
        elif isinstance(column, NumericColumn):
            out[:, b.start] = table.scaled[b.column]
        elif b.width == 1:
            out[:, b.start] = table.codes[b.column] == 1
        else:
            out[np.arange(table.n), b.start + table.codes[b.column]] = 1.0
    return out


def decode(
    domain: Domain, x: np.ndarray, mode: str = "minmax", integer_levels: int = 16
) -> EncodedTable:
    """Rows of the domain from (rows, n) vectors (the inverse of the paper's pre-processing;
    for ``bins``, argmax of a numeric column's block, then its offset inside that bin)."""
    codes: dict[str, np.ndarray] = {}
    scaled: dict[str, np.ndarray] = {}
    for b in blocks(domain, mode, integer_levels):
        column = domain[b.column]
        block = np.asarray(x[:, b.start : b.start + b.width], dtype=np.float64)
        if b.kind == "levels":
            assert isinstance(column, NumericColumn)
            level = np.argmax(block, axis=1)
            value = np.clip(np.ceil(column.lo) + level, column.lo, column.hi)
            code = column.bin_of(value)
            if column.nullable:
                null = level == b.width - 1
                value = np.where(null, column.lo, value)
                code = np.where(null, column.null_code, code)
            scaled[b.column] = np.where(code == column.null_code, NULL_SCALED,
                                        (value - column.lo) / column.span)  # fmt: skip
            codes[b.column] = code.astype(np.int32)
        elif b.kind == "binned":
            assert isinstance(column, NumericColumn)
            code = np.argmax(block[:, :-1], axis=1)
            k = np.minimum(code, column.bins - 1)
            low, high = _bin_ranges(column)
            value = low[k] + np.clip(block[:, -1], 0.0, 1.0) * (high[k] - low[k])
            last = k == column.bins - 1
            edges = np.asarray(column.edges, dtype=np.float64)
            if column.integer:  # integers of [edge_k, edge_k+1), the last bin closed at hi
                first = np.ceil(low[k])
                top = np.where(last, np.floor(high[k]), np.ceil(edges[k + 1]) - 1)
                value = np.clip(np.round(value), first, np.maximum(first, top))
            else:  # [edge_k, edge_k+1): stay below the next edge
                below = np.nextafter(edges[k + 1], -np.inf)
                value = np.where(last, value, np.minimum(value, below))
            value = np.clip(value, column.lo, column.hi)
            code = np.where(code == column.bins, code, column.bin_of(value))  # null bin kept
            null = code == column.null_code if column.nullable else np.zeros(len(code), bool)
            scaled[b.column] = np.where(null, NULL_SCALED, (value - column.lo) / column.span)
            codes[b.column] = code.astype(np.int32)
        elif isinstance(column, NumericColumn):
            value = column.lo + np.clip(block[:, 0], 0.0, 1.0) * column.span
            if column.integer:
                value = np.clip(np.round(value), column.lo, column.hi)
            scaled[b.column] = (value - column.lo) / column.span
            codes[b.column] = column.bin_of(value)
        elif b.width == 1:  # binary (or single-valued) categorical
            codes[b.column] = ((block[:, 0] > 0.5) & (column.card == 2)).astype(np.int32)
        else:
            codes[b.column] = np.argmax(block, axis=1).astype(np.int32)
    return EncodedTable(domain, codes, scaled)
