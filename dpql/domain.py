"""The public domain of a release: columns, bounds, categories and bins, all taken from the spec.

Nothing here is ever derived from private data (DESIGN invariant 1). The domain fixes

* the *encoding* every stage agrees on: a categorical value is its index in ``values``; a numeric
  value ``x`` is clipped to ``[lo, hi]`` and scaled to ``u = (x - lo) / (hi - lo)`` in [0, 1];
* the *public discretisation* numeric columns use when they enter a marginal: ``edges`` (in
  original units) cut ``[lo, hi]`` into ``card`` bins, bin ``i`` being ``[edges[i], edges[i+1])``
  with the last bin closed on the right.

Integer columns with ``bins: k`` cut the integer range ``lo .. hi`` into ``k`` equal-width bins of
``[lo, hi + 1)``, so that with ``k = hi - lo + 1`` every integer has its own bin.

A column under ``missing: keep`` is *nullable*: missingness is one more public state, its last
code ``null_code`` (after the values, or after the bins), so ``card`` counts it. A missing
numeric cell has the null bin as its code and the scaled value 0 (``NULL_SCALED``): it
contributes 0 to every moment and counts as the lower bound in range and halfspace queries;
decoding writes it as an empty cell.

A column's ``missing_values`` are the public sentinel values (``missing_values`` in the spec) that
the data uses for "unknown": a cell holding one is a missing cell, exactly like an empty one
(``dpql.data.codec``). They lie outside the column's values (outside ``[lo, hi]``, or not among
the labels), so no released value is ever one of them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class NumericColumn:
    """A numeric column with public bounds ``[lo, hi]`` and public bin ``edges``."""

    name: str
    lo: float
    hi: float
    integer: bool
    edges: tuple[float, ...]
    nullable: bool = False
    #: numbers that stand for a missing cell (compared as doubles), outside ``[lo, hi]``
    missing_values: tuple[float, ...] = ()

    kind = "numeric"

    @property
    def bins(self) -> int:
        """Number of public value bins (the null bin not included)."""
        return len(self.edges) - 1

    @property
    def card(self) -> int:
        """Number of public codes: the value bins, plus the null bin when nullable."""
        return self.bins + int(self.nullable)

    @property
    def null_code(self) -> int | None:
        """The null bin's code (the last), or None when the column is not nullable."""
        return self.bins if self.nullable else None

    @property
    def span(self) -> float:
        return self.hi - self.lo

    def scale(self, x: float) -> float:
        """Map a value in original units to [0, 1] (after clipping to the bounds)."""
        return (min(max(x, self.lo), self.hi) - self.lo) / self.span

    def unscale(self, u: float) -> float:
        return self.lo + u * self.span

    @property
    def scaled_edges(self) -> np.ndarray:
        """Bin edges on the [0, 1] scale (the last may exceed 1 for integer columns)."""
        return (np.asarray(self.edges, dtype=np.float64) - self.lo) / self.span

    def bin_of(self, x: np.ndarray) -> np.ndarray:
        """Bin index of clipped values in original units (vectorised)."""
        idx = np.searchsorted(np.asarray(self.edges), x, side="right") - 1
        return np.clip(idx, 0, self.bins - 1).astype(np.int32)

    def value_in_bin(self, bins: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """Values in original units inside public bins ``bins`` at relative positions ``pos``
        in [0, 1) (vectorised): the ``pos``-quantile integer of the bin for an integer column,
        else the point ``pos`` of the way through it; clipped to the bounds."""
        edges = np.asarray(self.edges)
        lo, hi = edges[bins], edges[bins + 1]
        if self.integer:
            first = np.ceil(lo)
            count = np.maximum(np.ceil(hi) - first, 1)
            x = first + np.minimum(np.floor(pos * count), count - 1)
        else:
            x = lo + pos * (hi - lo)
        return np.clip(x, self.lo, self.hi)

    def decode_bins(self, bins: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rows drawn as public bins ``bins`` (the null code among them where the column is
        nullable) and positions ``pos`` in [0, 1) within them, as the column's (int32 codes,
        scaled values): a value inside its bin (:meth:`value_in_bin`), coded by the bin it
        falls in; a null keeps its code and gets ``NULL_SCALED``."""
        null = bins == self.null_code
        x = self.value_in_bin(np.minimum(bins, self.bins - 1), pos)
        scaled = np.where(null, NULL_SCALED, (x - self.lo) / self.span)
        return np.where(null, bins, self.bin_of(x)).astype(np.int32), scaled


@dataclass(frozen=True)
class CategoricalColumn:
    """A categorical column; a value's code is its index in ``values``.

    A *grouped* column (a public hierarchy, ``group:`` in the spec) has ``values`` = its groups
    (the coarse level every query and synthesizer sees) and ``fine`` = the values the data and
    the released table hold, ``parent[i]`` being the group code of ``fine[i]``. Data cells are
    read at the fine level and coded by their group (:meth:`label_codes`); output codes are
    decoded to a fine value drawn uniformly within the group (``dpql.data.codec``).
    """

    name: str
    values: tuple[str, ...]
    fine: tuple[str, ...] | None = None
    parent: tuple[int, ...] | None = None
    nullable: bool = False
    #: texts that stand for a missing cell (compared with the stripped cell), not among labels
    missing_values: tuple[str, ...] = ()

    kind = "categorical"

    @property
    def card(self) -> int:
        return len(self.values) + int(self.nullable)

    @property
    def null_code(self) -> int | None:
        """The null category's code (the last, ``missing: keep``), or None when not nullable."""
        return len(self.values) if self.nullable else None

    def code_of(self, value: str) -> int:
        return self.values.index(value)

    @property
    def labels(self) -> tuple[str, ...]:
        """The values a data cell (and the released table) may hold: ``fine`` if grouped."""
        return self.fine if self.fine is not None else self.values

    @property
    def label_codes(self) -> tuple[int, ...]:
        """The code of each of :attr:`labels` (its group's code when grouped)."""
        return self.parent if self.parent is not None else tuple(range(len(self.values)))

    def code_of_label(self, label: str) -> int:
        """The code of a data value (a fine value's group code when grouped)."""
        return self.label_codes[self.labels.index(label)]


Column = NumericColumn | CategoricalColumn

NULL_SCALED = 0.0
"""The scaled value of a missing cell of a nullable numeric column (see the module docstring)."""


def numeric_edges(lo: float, hi: float, integer: bool, bins: int) -> tuple[float, ...]:
    """Equal-width public bin edges (see the module docstring for integer columns)."""
    top = hi + 1 if integer else hi
    return tuple(float(e) for e in np.linspace(lo, top, bins + 1))


@dataclass(frozen=True)
class Domain:
    """The ordered columns of a release. Column order is the spec's order."""

    columns: tuple[Column, ...]
    #: the ``missing: drop`` columns: the release describes the rows where they are present
    #: (the complete cases, ``dpql.population``); empty when every row is kept
    complete_in: tuple[str, ...] = ()

    def __iter__(self) -> Iterator[Column]:
        return iter(self.columns)

    def __len__(self) -> int:
        return len(self.columns)

    def __contains__(self, name: object) -> bool:
        return any(c.name == name for c in self.columns)

    def __getitem__(self, name: str) -> Column:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(name)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def card(self, name: str) -> int:
        return self[name].card

    def cells(self, names: tuple[str, ...]) -> int:
        """Number of cells of the marginal over ``names`` (numeric columns by their bins)."""
        out = 1
        for n in names:
            out *= self[n].card
        return out

    @property
    def numeric(self) -> tuple[NumericColumn, ...]:
        return tuple(c for c in self.columns if isinstance(c, NumericColumn))

    @property
    def categorical(self) -> tuple[CategoricalColumn, ...]:
        return tuple(c for c in self.columns if isinstance(c, CategoricalColumn))


@dataclass(frozen=True, eq=False)
class EncodedTable:
    """A table in the public encoding of a :class:`Domain`.

    ``codes[name]`` holds int32 codes for every column (categorical: index in ``values``;
    numeric: public bin). ``scaled[name]`` holds float64 values on [0, 1] for numeric columns.
    The same type carries private data (inside the measurement layer) and synthetic data.
    """

    domain: Domain
    codes: dict[str, np.ndarray]
    scaled: dict[str, np.ndarray]

    @property
    def n(self) -> int:
        first = self.domain.columns[0].name
        return int(self.codes[first].shape[0])

    def take(self, rows: np.ndarray) -> EncodedTable:
        """The rows ``rows`` (indices, in that order, repeats allowed; or a boolean mask) as a
        new table (copies)."""
        return EncodedTable(
            self.domain,
            {k: v[rows] for k, v in self.codes.items()},
            {k: v[rows] for k, v in self.scaled.items()},
        )

    def slice(self, start: int, stop: int) -> EncodedTable:
        """Rows ``start:stop`` (views, no copy): lets evaluators bound their memory."""
        return EncodedTable(
            self.domain,
            {k: v[start:stop] for k, v in self.codes.items()},
            {k: v[start:stop] for k, v in self.scaled.items()},
        )
