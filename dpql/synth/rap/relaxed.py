"""Relaxed (differentiable) evaluation of the query IR on a relaxed synthetic table, in JAX.

The relaxed domain (Vietri et al. 2022, §3, Definition 10) represents each synthetic row as a
product distribution over the columns' public encodings:

* a categorical column is a probability vector over its values (softmax of free logits);
* a numeric column is a probability vector over its **public bins** plus one within-bin
  position ``o in [0, 1]``: with probability ``p_b`` the row's value is
  ``v_b = e_b + o * (e_{b+1} - e_b)`` on the [0, 1] scale.

This is a deliberate refinement of the paper's relaxation, where a numeric coordinate is one real
number and bins are recovered with differences of tempered sigmoids: here marginals over numeric
columns are plain products of probabilities (exact on the relaxed domain, no temperature, the
same easy geometry as categorical marginals), while range, halfspace and predicate queries still
use tempered sigmoids (Definition 11) annealed over the fit. A one-hot row with the position of
a real record reproduces that record exactly, so every relaxed query equals its exact
counterpart on integral points in the sharp-sigmoid limit (tested).

Relaxed forms (``S(z) = 1 / (1 + exp(-z))``, ``sigma`` the inverse temperature):

* marginal over blocks ``B_1..B_k``: ``mean_r  p_r^{B_1} (x) ... (x) p_r^{B_k}`` (Definition 10);
* ``u_j <= t``: ``sum_b p_b S(sigma (t - v_b))``; ``u_j > t``: ``sum_b p_b S(sigma (v_b - t))``;
* categorical ``c in C``: ``sum_{c in C} p_c``; ``and``/``or``/``not``: product,
  ``1 - prod(1 - .)``,
  ``1 - .`` (exact for independent columns, which holds within one relaxed row);
* prefix ``prod_j P(u_j <= t_j) * p^{by}``; halfspace ``S(sigma (<theta, E u> - tau)) * p^{by}``
  (Definition 12 evaluated at the row's mean, exact on integral rows);
* moment ``prod_j E[u_j] * P(given)`` (``E[u_j^2]`` for a repeated column).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from dpql.domain import Domain
from dpql.ir.queries import And, CatIn, Not, NumCmp, Or, Pred, TruePred
from dpql.synth.rap.plan import TILE


@dataclass(frozen=True)
class Layout:
    """Where each column's block lives in the logits vector of a relaxed row.

    Every column has one block: categorical values, or public bins for a numeric column.
    ``edges``/``widths`` hold each numeric column's scaled bin edges, padded to the widest.
    """

    domain: Domain
    sizes: tuple[int, ...]
    offsets: tuple[int, ...]
    numeric: tuple[str, ...]
    edges: np.ndarray  # (R, max_bins) lower edges on [0, 1]
    widths: np.ndarray  # (R, max_bins)

    @staticmethod
    def of(domain: Domain) -> Layout:
        sizes = tuple(c.card for c in domain)
        offsets = tuple(int(o) for o in np.cumsum((0, *sizes))[:-1])
        nums = domain.numeric
        width = max((c.card for c in nums), default=1)
        edges = np.zeros((len(nums), width))
        widths = np.zeros((len(nums), width))
        for j, c in enumerate(nums):
            se = c.scaled_edges
            # a nullable column's null bin (the last) stays at edge 0, width 0: NULL_SCALED
            edges[j, : c.bins] = se[:-1]
            widths[j, : c.bins] = np.diff(se)
        return Layout(domain, sizes, offsets, tuple(c.name for c in nums), edges, widths)

    @property
    def width(self) -> int:
        return int(sum(self.sizes))

    def block(self, column: str) -> int:
        return self.domain.names.index(column)

    def numeric_index(self, column: str) -> int:
        return self.numeric.index(column)


PAD_LOGIT = -1e9


def _tile_counts(layout: Layout) -> list[int]:
    return [-(-size // TILE) for size in layout.sizes]


def block_index(layout: Layout) -> tuple[np.ndarray, ...]:
    """Padded softmax groups: blocks with the same number of tiles ``t`` share one
    (blocks, t * TILE) index into ``[logits | PAD]``; past a block's size it points at the PAD
    column, whose probability is exactly 0 after the softmax. Groups are ordered by ``t``."""
    counts = _tile_counts(layout)
    groups = []
    for t in sorted(set(counts)):
        members = [b for b, c in enumerate(counts) if c == t]
        idx = np.full((len(members), t * TILE), layout.width, dtype=np.int32)
        for row, b in enumerate(members):
            off, size = layout.offsets[b], layout.sizes[b]
            idx[row, :size] = np.arange(off, off + size)
        groups.append(idx)
    return tuple(groups)


def tile_starts(layout: Layout) -> tuple[int, ...]:
    """Id of each block's first tile in :func:`tiled_probs`; block ``b``'s tile ``t`` covers its
    values ``t*TILE .. t*TILE + TILE - 1``."""
    counts = _tile_counts(layout)
    starts = [0] * len(counts)
    next_id = 0
    for t in sorted(set(counts)):
        for b, c in enumerate(counts):
            if c == t:
                starts[b], next_id = next_id, next_id + t
    return tuple(starts)


def tiled_probs(logits: jnp.ndarray, index: tuple[np.ndarray, ...]) -> jnp.ndarray:
    """Per-block softmax cut into tiles: (tiles, rows, TILE).

    One padded softmax per group of blocks with the same tile count (:func:`block_index`),
    then a reshape: padding cells are exactly 0. Equal tiles give every k-way marginal the
    same tensor shape, so the loss compiles once however the measured marginals' sizes mix;
    tiles lead so that gathering them (and the gradient's scatter-add) moves whole contiguous
    (rows, TILE) slabs.
    """
    n = logits.shape[0]
    ext = jnp.concatenate([logits, jnp.full((n, 1), PAD_LOGIT, logits.dtype)], axis=1)
    parts = [
        jax.nn.softmax(ext[:, jnp.asarray(idx)], axis=-1).reshape(n, -1, TILE) for idx in index
    ]
    return jnp.transpose(jnp.concatenate(parts, axis=1), (1, 0, 2))


class RowModel:
    """Per-row relaxed quantities for one parameter value (built inside a jitted function)."""

    def __init__(self, layout: Layout, logits: jnp.ndarray, positions: jnp.ndarray, sigma):
        self.layout = layout
        self.logits = logits
        self.positions = jnp.clip(positions, 0.0, 1.0)
        self.sigma = sigma
        self._probs: dict[int, jnp.ndarray] = {}

    def probs(self, column: str) -> jnp.ndarray:
        b = self.layout.block(column)
        if b not in self._probs:
            o, s = self.layout.offsets[b], self.layout.sizes[b]
            self._probs[b] = jax.nn.softmax(self.logits[:, o : o + s], axis=-1)
        return self._probs[b]

    def bin_values(self, column: str) -> jnp.ndarray:
        """(rows, bins) value of the row in each bin, on the [0, 1] scale."""
        j = self.layout.numeric_index(column)
        k = self.layout.domain.card(column)
        lo = jnp.asarray(self.layout.edges[j, :k])
        w = jnp.asarray(self.layout.widths[j, :k])
        return lo[None, :] + self.positions[:, j : j + 1] * w[None, :]

    def mean(self, column: str, power: int = 1) -> jnp.ndarray:
        return jnp.sum(self.probs(column) * self.bin_values(column) ** power, axis=1)

    def pred(self, p: Pred) -> jnp.ndarray:
        """Relaxed probability (rows,) that the row satisfies ``p``."""
        if isinstance(p, TruePred):
            return jnp.ones(self.logits.shape[0], self.logits.dtype)
        if isinstance(p, NumCmp):
            v = self.bin_values(p.column)
            z = (p.threshold - v) if p.op in ("<", "<=") else (v - p.threshold)
            return jnp.sum(self.probs(p.column) * jax.nn.sigmoid(self.sigma * z), axis=1)
        if isinstance(p, CatIn):
            codes = jnp.asarray(sorted(p.codes), dtype=jnp.int32)
            return jnp.sum(self.probs(p.column)[:, codes], axis=1)
        if isinstance(p, And):
            out = self.pred(p.items[0])
            for i in p.items[1:]:
                out = out * self.pred(i)
            return out
        if isinstance(p, Or):
            miss = 1.0 - self.pred(p.items[0])
            for i in p.items[1:]:
                miss = miss * (1.0 - self.pred(i))
            return 1.0 - miss
        if isinstance(p, Not):
            return 1.0 - self.pred(p.item)
        raise TypeError(f"not a predicate: {p!r}")

    def moment(self, columns: tuple[str, ...], given: Pred) -> jnp.ndarray:
        out = self.pred(given)
        for c, power in Counter(columns).items():
            out = out * self.mean(c, power)
        return out
