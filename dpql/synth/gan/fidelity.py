"""Fidelity by design: the generator fitted to the workload's DP-measured marginals.

With ``encoding: bins`` every column is a block of the decoder's output that names one of the
column's domain codes: a one-hot block (categorical, or an integer column's values), a one-hot
block over a numeric column's public bins (its offset coordinate aside), or one 0/1 coordinate
(a binary categorical). Read as probabilities -- a softmax over a one-hot block, a sigmoid on a
binary coordinate -- the decoder gives each generated row a product distribution over the
domain's codes, so the **relaxed marginal** of a batch of generated rows over columns
``c_1..c_k`` is the batch mean of the outer product ``p^{c_1} (x) ... (x) p^{c_k}`` (RAP's
Definition 10, as :mod:`dpql.synth.rap.relaxed`), in the C order of
:class:`dpql.ir.queries.Marginal` answers. Sampling a code from each block
(:func:`sample_encoded`) makes that relaxed marginal the expected marginal of the sampled rows,
which is why the penalty carries over to the table.

Everything here is post-processing: the targets are noisy marginals released by the Gaussian
mechanism (``gan.marginals``), the parameters are DP-SGD outputs, and the random draws come from
the public optimisation seed. Nothing here reads private rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from dpql.domain import CategoricalColumn, Domain, NumericColumn
from dpql.synth.gan import encoding


@dataclass(frozen=True)
class ColumnMap:
    """How column ``column``'s codes are read off the decoder's block ``start : start+width``.

    ``kind``: ``"softmax"`` (the first ``card`` coordinates are the codes' logits),
    ``"levels"`` (softmax over integer values, mapped to codes by ``to_codes``), ``"binary"``
    (one sigmoid coordinate), ``"constant"`` (a one-valued column). ``offset``: the index of a
    binned column's within-bin offset coordinate (sigmoid), else -1.
    """

    column: str
    kind: str
    start: int
    width: int
    card: int
    offset: int = -1
    to_codes: np.ndarray | None = None  # (levels, card) 0/1 matrix


def column_maps(domain: Domain, integer_levels: int = 16) -> tuple[ColumnMap, ...]:
    """The code map of every column under ``encoding: bins`` (public: the domain alone)."""
    out = []
    for b in encoding.blocks(domain, "bins", integer_levels):
        c = domain[b.column]
        if b.kind == "onehot":
            out.append(ColumnMap(b.column, "softmax", b.start, b.width, c.card))
        elif b.kind == "binned":
            out.append(ColumnMap(b.column, "softmax", b.start, b.width - 1, c.card,
                                 offset=b.start + b.width - 1))  # fmt: skip
        elif b.kind == "levels":
            assert isinstance(c, NumericColumn)
            m = np.zeros((b.width, c.card), dtype=np.float32)
            values = np.ceil(c.lo) + np.arange(b.width - int(c.nullable))
            m[np.arange(values.size), c.bin_of(np.clip(values, c.lo, c.hi))] = 1.0
            if c.nullable:
                m[-1, c.null_code] = 1.0
            out.append(ColumnMap(b.column, "levels", b.start, b.width, c.card, to_codes=m))
        elif isinstance(c, CategoricalColumn):
            kind = "binary" if c.card == 2 else "constant"
            out.append(ColumnMap(b.column, kind, b.start, 1, c.card))
        else:  # pragma: no cover - blocks() gives numeric columns no scalar kind under bins
            raise ValueError(f"column {b.column!r} has no code block under encoding: bins")
    return tuple(out)


def column_probs(logits: jax.Array, maps: Sequence[ColumnMap]) -> dict[str, jax.Array]:
    """(rows, card) code probabilities of every column from decoder logits (rows, width)."""
    out = {}
    for m in maps:
        block = logits[:, m.start : m.start + m.width]
        if m.kind == "softmax":
            out[m.column] = jax.nn.softmax(block, axis=-1)
        elif m.kind == "levels":
            out[m.column] = jax.nn.softmax(block, axis=-1) @ jnp.asarray(m.to_codes)
        elif m.kind == "binary":
            p = jax.nn.sigmoid(block[:, 0])
            out[m.column] = jnp.stack([1.0 - p, p], axis=1)
        else:
            out[m.column] = jnp.ones((logits.shape[0], m.card), logits.dtype)
    return out


_LETTERS = "abcdefghijklmnopqrstuvwxy"


def relaxed_marginal(probs: dict[str, jax.Array], columns: Sequence[str]) -> jax.Array:
    """Batch mean of the outer product of the columns' probabilities, flattened in C order."""
    spec = ",".join(f"z{_LETTERS[i]}" for i in range(len(columns)))
    out = jnp.einsum(f"{spec}->{_LETTERS[: len(columns)]}", *(probs[c] for c in columns))
    return out.reshape(-1) / probs[columns[0]].shape[0]


def marginal_loss(
    logits: jax.Array,
    maps: Sequence[ColumnMap],
    marginals: Sequence[tuple[str, ...]],
    targets: Sequence[jax.Array],
) -> jax.Array:
    """``sum_q ||relaxed marginal_q(batch) - target_q||_2^2`` over the measured marginals.

    Squared error keeps unbiased noise harmless on average: ``E||m - y||^2 = ||m - a||^2 +
    const`` for ``y = a + noise`` with zero-mean noise, so the minimiser does not chase it."""
    probs = column_probs(logits, maps)
    total = jnp.zeros((), logits.dtype)
    for cols, y in zip(marginals, targets, strict=True):
        total = total + jnp.sum((relaxed_marginal(probs, cols) - y) ** 2)
    return total


def sample_encoded(key: jax.Array, logits: jax.Array, maps: Sequence[ColumnMap]) -> jax.Array:
    """Rows in the ``bins`` encoding with one code *drawn* per block (Gumbel-max on the
    softmax, Bernoulli on a binary coordinate) instead of the argmax, so the table's expected
    marginals are the relaxed ones the generator was fitted to; offsets are the sigmoid."""
    x = jnp.zeros_like(logits)
    keys = jax.random.split(key, len(maps))
    for k, m in zip(keys, maps, strict=True):
        block = logits[:, m.start : m.start + m.width]
        if m.kind in ("softmax", "levels"):
            pick = jnp.argmax(block + jax.random.gumbel(k, block.shape, block.dtype), axis=1)
            x = x.at[:, m.start : m.start + m.width].set(jax.nn.one_hot(pick, m.width))
            if m.offset >= 0:
                x = x.at[:, m.offset].set(jax.nn.sigmoid(logits[:, m.offset]))
        elif m.kind == "binary":
            u = jax.random.uniform(k, (logits.shape[0],))
            x = x.at[:, m.start].set((u < jax.nn.sigmoid(block[:, 0])).astype(logits.dtype))
    return x
