"""Junction trees of clique sets on bit masks: mbi's elimination order and model size without
building its ``Domain`` or networkx graphs, for the AIM selection's size filter (asked for every
candidate at every pick) and for variable elimination's order (asked once per marginal)."""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Sequence


def greedy_order(card: dict[str, int], scopes: Sequence[tuple[str, ...]],
                 elim: Sequence[str]) -> list[str]:  # fmt: skip
    """mbi's ``junction_tree.greedy_order`` (deterministic): repeatedly eliminate the attribute of
    ``elim`` whose neighbouring scopes' union has the fewest cells (ties: the earlier in
    ``elim``), merging those scopes less it. The same order, on bit masks: variable
    elimination asks for one per marginal, and mbi's builds a ``Domain`` per candidate."""
    names = list(card)
    bit = {a: 1 << i for i, a in enumerate(names)}
    masks = {functools.reduce(operator.or_, (bit[a] for a in sc), 0) for sc in scopes}
    sizes: dict[int, int] = {}

    def size(mask: int) -> int:
        if mask not in sizes:
            sizes[mask] = math.prod(card[a] for a in names if mask & bit[a])
        return sizes[mask]

    order, left = [], list(elim)
    while left:
        unions = {}
        for a in left:
            unions[a] = functools.reduce(operator.or_, (m for m in masks if m & bit[a]), 0)
        a = min(left, key=lambda x: size(unions[x]))
        order.append(a)
        left.remove(a)
        masks = {m for m in masks if not m & bit[a]} | {unions[a] & ~bit[a]}
    return order


def junction_cells(
    card: dict[str, int], cliques: Sequence[tuple[str, ...]]
) -> tuple[int, list[int]]:
    """The cells of the junction tree mbi builds for ``cliques`` over the attributes of
    ``card``, and its maximal cliques as bit masks over ``card``'s order: mbi's
    ``junction_tree.hypothetical_model_size`` (MB = cells x 8 / 2^20) on bit masks, for the
    model-size filter that asks it for every candidate at every pick.

    mbi triangulates with no fill where the cliques' graph is a tree, else in the greedy order
    of :func:`greedy_order` (on the graph: the attribute whose neighbourhood, itself included,
    has the fewest cells; ties to the earlier); the maximal cliques of the triangulated graph
    are the maximal elimination cliques."""
    index = {a: i for i, a in enumerate(card)}
    return _graph_cells([card[a] for a in card], _adjacency(index, cliques, [0] * len(card)))


def junction_cells_each(card: dict[str, int], base: Sequence[tuple[str, ...]],
                        extra: Sequence[tuple[str, ...]]) -> list[int]:  # fmt: skip
    """``junction_cells(card, [*base, cl])[0]`` for each ``cl`` of ``extra``. The tree depends
    on the cliques only through their graph, so a candidate whose pairs are all edges of the
    base's graph has the base's size, and candidates that make the same graph share one."""
    index = {a: i for i, a in enumerate(card)}
    cards = [card[a] for a in card]
    adj = _adjacency(index, base, [0] * len(card))
    known: dict[tuple[int, ...], int] = {tuple(adj): _graph_cells(cards, adj)[0]}
    out = []
    for cl in extra:
        key = tuple(_adjacency(index, [cl], list(adj)))
        if key not in known:
            known[key] = _graph_cells(cards, list(key))[0]
        out.append(known[key])
    return out


def _adjacency(index: dict[str, int], cliques: Sequence[tuple[str, ...]],
               adj: list[int]) -> list[int]:  # fmt: skip
    """``adj`` (bit masks of neighbours, no self loops) with every pair of each clique joined."""
    for cl in cliques:
        mask = 0
        for a in cl:
            mask |= 1 << index[a]
        for a in cl:
            i = index[a]
            adj[i] |= mask & ~(1 << i)
    return adj


def _graph_cells(cards: Sequence[int], adj: list[int]) -> tuple[int, list[int]]:
    """:func:`junction_cells` of the graph ``adj`` (which it does not change)."""
    d = len(cards)
    adj = list(adj)
    card_of_bit = {1 << i: k for i, k in enumerate(cards)}
    sizes: dict[int, int] = {}

    def size(mask: int) -> int:
        out = sizes.get(mask)
        if out is None:
            out, rest = 1, mask
            while rest:
                low = rest & -rest
                out *= card_of_bit[low]
                rest ^= low
            sizes[mask] = out
        return out

    edges = sum(m.bit_count() for m in adj) // 2
    if edges and edges == d - 1 and _connected(adj):
        elim = [(1 << i) | (1 << j) for i in range(d) for j in range(i + 1, d) if adj[i] >> j & 1]
    else:
        # each attribute's neighbourhood size, updated only where an elimination changes it
        hood = [size(adj[k] | 1 << k) for k in range(d)]
        elim, left = [], list(range(d))
        while left:
            i = min(left, key=hood.__getitem__)
            left.remove(i)
            nb, bit = adj[i], 1 << i
            elim.append(nb | bit)
            for j in left:
                if nb >> j & 1:
                    adj[j] = (adj[j] | nb) & ~bit & ~(1 << j)
                    hood[j] = size(adj[j] | 1 << j)
    top = [m for m in set(elim) if not any(m != o and m & o == m for o in elim)]
    return sum(size(m) for m in top), top


def _connected(adj: Sequence[int]) -> bool:
    """Whether the graph of the adjacency bit masks ``adj`` is connected."""
    seen, frontier = 1, 1
    while frontier:
        reach = 0
        for i, m in enumerate(adj):
            if frontier >> i & 1:
                reach |= m
        frontier = reach & ~seen
        seen |= reach
    return seen == (1 << len(adj)) - 1
