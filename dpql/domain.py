"""The public domain of a release: columns, bounds, categories and bins, all taken from the spec.

Nothing here is ever derived from private data (DESIGN invariant 1). The domain fixes

* the *encoding* every stage agrees on: a categorical value is its index in ``values``; a numeric
  value ``x`` is clipped to ``[lo, hi]`` and scaled to ``u = (x - lo) / (hi - lo)`` in [0, 1];
* the *public discretisation* numeric columns use when they enter a marginal: ``edges`` (in
  original units) cut ``[lo, hi]`` into ``card`` bins, bin ``i`` being ``[edges[i], edges[i+1])``
  with the last bin closed on the right.

Integer columns with ``bins: k`` cut the integer range ``lo .. hi`` into ``k`` equal-width bins of
``[lo, hi + 1)``, so that with ``k = hi - lo + 1`` every integer has its own bin.
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

    kind = "numeric"

    @property
    def card(self) -> int:
        """Number of public bins."""
        return len(self.edges) - 1

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
        return np.clip(idx, 0, self.card - 1).astype(np.int32)


@dataclass(frozen=True)
class CategoricalColumn:
    """A categorical column; a value's code is its index in ``values``."""

    name: str
    values: tuple[str, ...]

    kind = "categorical"

    @property
    def card(self) -> int:
        return len(self.values)

    def code_of(self, value: str) -> int:
        return self.values.index(value)


Column = NumericColumn | CategoricalColumn


def numeric_edges(lo: float, hi: float, integer: bool, bins: int) -> tuple[float, ...]:
    """Equal-width public bin edges (see the module docstring for integer columns)."""
    top = hi + 1 if integer else hi
    return tuple(float(e) for e in np.linspace(lo, top, bins + 1))


@dataclass(frozen=True)
class Domain:
    """The ordered columns of a release. Column order is the spec's order."""

    columns: tuple[Column, ...]

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

    def slice(self, start: int, stop: int) -> EncodedTable:
        """Rows ``start:stop`` (views, no copy): lets evaluators bound their memory."""
        return EncodedTable(
            self.domain,
            {k: v[start:stop] for k, v in self.codes.items()},
            {k: v[start:stop] for k, v in self.scaled.items()},
        )
