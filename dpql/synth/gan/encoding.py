"""Mixed-type vector encoding of an :class:`EncodedTable`, fixed by the public domain alone.

DP-auto-GAN (digest `dp_auto_gan.md` §1.2) feeds the networks one vector in [0, 1]^n per row:

* a categorical column with k > 2 values is a one-hot block of width k (decoded by argmax);
* a categorical column with 2 values is one 0/1 coordinate (decoded by thresholding at 0.5),
  as in the authors' ``LabelBinarizer``, which is what makes ADULT 106-dimensional;
* a numeric column is its [0, 1]-scaled value (the domain's public min-max scaling), decoded by
  clipping to [0, 1], unscaling, and rounding integer columns in original units.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dpql.domain import CategoricalColumn, Domain, EncodedTable, NumericColumn


@dataclass(frozen=True)
class Block:
    """Coordinates ``start : start + width`` of the vector encode column ``column``."""

    column: str
    start: int
    width: int


def blocks(domain: Domain) -> tuple[Block, ...]:
    """The block of every column, in domain order."""
    out: list[Block] = []
    start = 0
    for c in domain:
        width = c.card if isinstance(c, CategoricalColumn) and c.card > 2 else 1
        out.append(Block(c.name, start, width))
        start += width
    return tuple(out)


def width(domain: Domain) -> int:
    """Length n of the encoded vector."""
    last = blocks(domain)[-1]
    return last.start + last.width


def encode(table: EncodedTable) -> np.ndarray:
    """The (rows, n) float32 matrix of ``table`` in [0, 1]."""
    out = np.zeros((table.n, width(table.domain)), dtype=np.float32)
    for b in blocks(table.domain):
        column = table.domain[b.column]
        if isinstance(column, NumericColumn):
            out[:, b.start] = table.scaled[b.column]
        elif b.width == 1:
            out[:, b.start] = table.codes[b.column] == 1
        else:
            out[np.arange(table.n), b.start + table.codes[b.column]] = 1.0
    return out


def decode(domain: Domain, x: np.ndarray) -> EncodedTable:
    """Rows of the domain from (rows, n) vectors (the paper's post-processing, digest §1.2)."""
    codes: dict[str, np.ndarray] = {}
    scaled: dict[str, np.ndarray] = {}
    for b in blocks(domain):
        column = domain[b.column]
        block = np.asarray(x[:, b.start : b.start + b.width], dtype=np.float64)
        if isinstance(column, NumericColumn):
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
