"""Marginals of a fitted graphical model: its junction tree calibrated once, then each marginal
from the smallest connected part of the tree that covers it.

A calibrated junction tree holds every clique's marginal ``P(C)`` and every separator's
``P(S)``; the distribution of the attributes of any connected subtree ``T`` is
``prod_{C in T} P(C) / prod_{S in T} P(S)`` (Koller & Friedman 2009, sec. 10.3), since a
connected subtree of a junction tree is a junction tree of its own attributes. So a marginal
inside one clique is a sum over that clique's table, and any other marginal is variable
elimination over the few tables of the subtree joining its attributes, not over the whole
model: a release asks for hundreds of 3-way marginals of one model (the selection's
candidates, the balancing targets), and one calibration serves them all.

Tables are kept with their axes in the domain's attribute order. Post-processing of the
model's potentials only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from dpql.synth.aim.graphical import aligned, import_mbi
from dpql.synth.aim.hostfit import logsumexp
from dpql.synth.aim.junction import greedy_order


class CalibratedTree:
    """The junction tree mbi builds for ``model``'s cliques (``make_junction_tree``), with each
    clique's and separator's probability table, from one log-space HUGIN pass
    (mbi's ``message_passing``) over the potentials. :meth:`marginal` answers any marginal in
    counts (``model.total``), row-major over the asked attributes."""

    def __init__(self, model) -> None:
        import_mbi()
        from mbi import junction_tree

        domain = model.domain
        self.attrs = list(domain.attributes)
        self.card = dict(zip(self.attrs, domain.shape, strict=True))
        self.total = float(model.total)
        pos = {a: i for i, a in enumerate(self.attrs)}
        self.canon = lambda cl: tuple(sorted(cl, key=pos.__getitem__))
        cliques = [tuple(c) for c in model.cliques]
        jtree, elimination = junction_tree.make_junction_tree(domain, cliques)
        #: mbi's elimination order of the tree (the sampler draws in its reverse)
        self.elimination = list(elimination)
        self.nodes = [self.canon(c) for c in jtree.nodes]
        node_of = dict(zip(jtree.nodes, self.nodes, strict=True))
        self.adj: dict[tuple[str, ...], list[tuple[str, ...]]] = {c: [] for c in self.nodes}
        for u, v in jtree.edges:
            self.adj[node_of[u]].append(node_of[v])
            self.adj[node_of[v]].append(node_of[u])
        logb = {c: np.zeros(self.shape(c)) for c in self.nodes}
        for f in model.potentials.tables.values():
            own = tuple(f.domain.attributes)
            home = min((c for c in self.nodes if set(own) <= set(c)), key=self.cells)
            logb[home] = logb[home] + aligned(own, np.asarray(f.values, np.float64), home)
        sent: dict[tuple, tuple[tuple[str, ...], np.ndarray]] = {}
        for u, v in junction_tree.message_passing_order(jtree):
            a, b = node_of[u], node_of[v]
            tau = logb[a]
            if (b, a) in sent:  # HUGIN: a's table holds b's message; divide it out (0/0 = 0)
                back = aligned(*sent[(b, a)], a)
                with np.errstate(invalid="ignore"):
                    tau = np.where(np.isneginf(back), -np.inf, tau - back)
            sep = tuple(x for x in a if x in b)
            msg = logsumexp(tau, tuple(k for k, x in enumerate(a) if x not in b))
            sent[(a, b)] = (sep, msg)
            logb[b] = logb[b] + aligned(sep, msg, b)
        self.prob = {c: np.exp(b - logsumexp(b, tuple(range(b.ndim)))) for c, b in logb.items()}
        self.component = self._components()
        # sums and conditionals of clique tables, shared by the marginals asked of this tree
        self._projections: dict[tuple, np.ndarray] = {}
        self._conditionals: dict[tuple, np.ndarray] = {}

    # -- small helpers -------------------------------------------------------------------

    def shape(self, cl: Sequence[str]) -> list[int]:
        return [self.card[a] for a in cl]

    def cells(self, cl: Sequence[str]) -> int:
        return math.prod(self.card[a] for a in cl)

    def _components(self) -> dict[tuple[str, ...], int]:
        label: dict[tuple[str, ...], int] = {}
        for k, start in enumerate(self.nodes):
            if start in label:
                continue
            stack = [start]
            while stack:
                c = stack.pop()
                if c not in label:
                    label[c] = k
                    stack.extend(self.adj[c])
        return label

    # -- marginals -----------------------------------------------------------------------

    def marginal(self, cl: Sequence[str]) -> np.ndarray:
        """The model's marginal on ``cl`` in counts, row-major over ``cl``. Attributes in
        different components of the tree are independent in the model: their parts multiply."""
        cl = tuple(cl)
        parts: dict[int, list[str]] = {}
        for a in cl:
            home = next(c for c in self.nodes if a in c)
            parts.setdefault(self.component[home], []).append(a)
        got: tuple[str, ...] = ()
        p = np.ones(())
        for label, attrs in parts.items():
            group = self.canon(attrs)
            p = np.multiply.outer(p, self._group_marginal(group, label))
            got = (*got, *group)
        p = np.transpose(p, [got.index(a) for a in cl])
        return (p / p.sum() * self.total).ravel()

    def _group_marginal(self, group: tuple[str, ...], label: int) -> np.ndarray:
        """The probability table over ``group`` (domain order), all in component ``label``:
        from the smallest clique holding it, else from the subtree joining its attributes."""
        comp = [c for c in self.nodes if self.component[c] == label]
        holders = [c for c in comp if set(group) <= set(c)]
        if holders:
            return self._projection(min(holders, key=self.cells), group)
        # the subtree rooted at its first clique: P(root) times P(C | S) for every other clique
        # C and the separator S towards the root, each summed at once over the attributes
        # that no other table of the subtree and no asked attribute mentions
        order = self._subtree(group, comp)
        parent: dict[tuple[str, ...], tuple[str, ...] | None] = {order[0]: None}
        frontier = [order[0]]
        while frontier:
            c = frontier.pop()
            for d in self.adj[c]:
                if d in order and d not in parent:
                    parent[d] = c
                    frontier.append(d)
        factors = []
        for c in order:
            # the subtree's edges are the tree's edges between its cliques
            links = [d for d in self.adj[c] if d in parent]
            needed = self.canon({a for a in c if a in group or any(a in d for d in links)})
            sep = () if parent[c] is None else self.canon(set(c) & set(parent[c]))
            factors.append((needed, self._conditional(c, needed, sep)))
        return self._eliminate(factors, group)

    def _projection(self, c: tuple[str, ...], keep: tuple[str, ...]) -> np.ndarray:
        """Clique ``c``'s table summed onto ``keep`` (a subset of ``c``, domain order)."""
        key = (c, keep)
        if key not in self._projections:
            axes = tuple(k for k, a in enumerate(c) if a not in keep)
            self._projections[key] = self.prob[c].sum(axis=axes)
        return self._projections[key]

    def _conditional(self, c: tuple[str, ...], keep: tuple[str, ...],
                     sep: tuple[str, ...]) -> np.ndarray:  # fmt: skip
        """``P(keep | sep)`` from clique ``c`` (``sep`` within ``keep``), zero where
        ``P(sep)`` is."""
        key = (c, keep, sep)
        if key not in self._conditionals:
            joint = self._projection(c, keep)
            if sep:
                ps = aligned(sep, self._projection(c, sep), keep)
                joint = np.divide(joint, ps, out=np.zeros_like(joint), where=ps > 0)
            self._conditionals[key] = joint
        return self._conditionals[key]

    def _subtree(self, group: tuple[str, ...], comp: list[tuple[str, ...]]) -> list:
        """A connected set of cliques covering ``group``: the clique holding most of it, then
        shortest paths to a clique holding each attribute still missing (exactness needs only
        connectedness; fewer cliques mean less elimination)."""
        start = max(comp, key=lambda c: (len(set(c) & set(group)), -self.cells(c)))
        sub = [start]
        missing = set(group) - set(start)
        while missing:
            parent: dict = {c: None for c in sub}
            frontier = list(sub)
            hit = None
            while frontier and hit is None:
                nxt = []
                for c in frontier:
                    for d in self.adj[c]:
                        if d not in parent:
                            parent[d] = c
                            if missing & set(d):
                                hit = d
                                break
                            nxt.append(d)
                    if hit is not None:
                        break
                frontier = nxt
            assert hit is not None  # the component holds every attribute of the group
            while hit is not None and hit not in sub:
                sub.append(hit)
                missing -= set(hit)
                hit = parent[hit]
        return sub

    def _eliminate(self, factors: list, keep: tuple[str, ...]) -> np.ndarray:
        """The product of ``factors`` ((attributes, table) pairs) summed onto ``keep`` (domain
        order), eliminating in mbi's greedy order and multiplying only the tables that
        mention the attribute eliminated."""
        elim = [a for a in self.attrs if a not in keep and any(a in at for at, _ in factors)]
        for z in greedy_order(self.card, [*(at for at, _ in factors), keep], elim):
            bucket = [f for f in factors if z in f[0]]
            union = self.canon({a for at, _ in bucket for a in at})
            prod = aligned(*bucket[0], union)
            for f in bucket[1:]:
                prod = prod * aligned(*f, union)
            out = prod.sum(axis=union.index(z))
            out = out / max(float(out.max()), 1e-300)  # a scale only: the result is normalised
            factors = [f for f in factors if z not in f[0]]
            factors.append((tuple(a for a in union if a != z), out))
        p = np.ones(self.shape(keep))
        for at, arr in factors:
            p = p * aligned(at, arr, keep)
        return p
