"""mbi's mirror descent for small graphical models, in numpy on the host (no XLA compile).

mbi's ``MirrorDescent`` (Algorithm 1 of McKenna et al. 2019, Armijo steps, HUGIN message
passing, the unnormalised L2 loss of ``marginal_loss.from_linear_measurements``) compiles one
fused XLA program per clique structure. On a small machine that compile costs seconds, while the
models AIM fits on tables like Adult are tens of thousands of cells, where numpy runs a step in
about a millisecond. :func:`host_estimate` runs the same algorithm on the same parameterisation
(potentials on the measurements' maximal cliques, gradients routed to the smallest containing
clique, mbi's junction tree, message order and step-size rule) in float64, and returns mbi's
``MarkovRandomField``, so everything downstream (warm starts, model marginals, sampling) is
unchanged. :func:`fits_on_host` is the public rule for when it is used.

Arrays here are laid out with their axes in the domain's attribute order (whatever a clique's
own order), so a sub-table broadcasts into a larger one by a reshape alone; the sums and
broadcasts between a clique's table and a sub-table are matrix products (:class:`_Sum`,
:class:`_Spread`), and the clique tables are rewritten in place.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: a fit runs on the host when its steps times its junction tree's cells are at most this: there
#: the numpy steps cost at most about one compile of mbi's program, so the host is the faster
#: whatever mbi's compiled steps cost (many cores, an accelerator); on a small CPU-only machine
#: the host's steps are also the faster ones, so larger fits would gain there too
HOST_FIT_MAX_WORK = 300_000_000
#: mbi's steps per compiled block (``mbi.estimation.CALLBACK_EVERY``): a fit of ``iters`` runs
#: ``ceil(iters / BLOCK)`` blocks, here as there
BLOCK = 50


def logsumexp(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """``log(sum(exp(x)))`` over ``axes``, stable; a slice without mass gives ``-inf``."""
    if not axes:
        return x
    m = x.max(axis=axes, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore"):
        return np.log(np.exp(x - m).sum(axis=axes)) + np.squeeze(m, axis=axes)


def _runs(shape: Sequence[int], keep: Sequence[bool]) -> list[list]:
    """``shape``'s axes merged into runs of neighbours alike in ``keep`` (axes of size 1 left
    out): ``[size, kept]`` each, in order."""
    out: list[list] = []
    for n, k in zip(shape, keep, strict=True):
        if n == 1:
            continue
        if out and out[-1][1] == k:
            out[-1][0] *= n
        else:
            out.append([n, k])
    return out


class _Sum:
    """An array over ``shape`` (C order) summed over the axes ``keep`` leaves out, as matrix
    products over reshaped views, one run of summed axes at a time (largest first, which
    shrinks the rest most). numpy's own reductions and broadcasts crawl where a run of kept
    or summed axes is short (an inner loop of two or three elements); BLAS does not."""

    def __init__(self, shape: Sequence[int], keep: Sequence[bool], dtype) -> None:
        runs = _runs(shape, keep)
        self.out_shape = tuple(n for n, k in zip(shape, keep, strict=True) if k)
        self.steps: list[tuple[str, tuple[int, ...], np.ndarray]] = []
        while any(not k for _, k in runs):
            i = max((i for i, (_, k) in enumerate(runs) if not k), key=lambda i: runs[i][0])
            pre = math.prod(n for n, _ in runs[:i])
            r, post = runs[i][0], math.prod(n for n, _ in runs[i + 1 :])
            if post == 1:
                self.steps.append(("right", (pre, r), np.ones(r, dtype)))
            elif pre == 1 or post > 8:
                self.steps.append(("left", (pre, r, post), np.ones(r, dtype)))
            else:  # a short kept run after: one product with stacked identities
                eye = np.tile(np.eye(post, dtype=dtype), (r, 1))
                self.steps.append(("right", (pre, r * post), eye))
            del runs[i]
            if 0 < i < len(runs) and runs[i - 1][1] == runs[i][1]:
                runs[i - 1][0] *= runs.pop(i)[0]

    def __call__(self, x: np.ndarray) -> np.ndarray:
        for side, shape, op in self.steps:
            x = x.reshape(shape) @ op if side == "right" else np.matmul(op, x.reshape(shape))
        return x.reshape(self.out_shape)


class _Spread:
    """A table over ``keep``'s axes of ``shape`` made into an array that broadcasts against one
    over ``shape`` (reshaped to :attr:`shape`) with the broadcast axes only where numpy's
    broadcasting is fast: the short runs it crawls over are written out by matrix products
    (the transpose of :class:`_Sum`'s)."""

    def __init__(self, shape: Sequence[int], keep: Sequence[bool], dtype) -> None:
        runs = _runs(shape, keep)
        self.shape = tuple(n for n, _ in runs) or (1,)
        self.steps: list[tuple[tuple[int, int], np.ndarray]] = []
        now = [n if k else 1 for n, k in runs]  # the spread table's shape so far
        for i in range(len(runs) - 1, 0, -1):  # a leading broadcast run is fast as it is
            b, kept = runs[i]
            post = math.prod(now[i + 1 :])
            if kept or post > 8:
                continue
            self.steps.append(((math.prod(now[:i]), post),
                               np.tile(np.eye(post, dtype=dtype), (1, b))))  # fmt: skip
            now[i] = b
        self.spread_shape = tuple(now) or (1,)

    def __call__(self, m: np.ndarray) -> np.ndarray:
        for shape, op in self.steps:
            m = m.reshape(shape) @ op
        return m.reshape(self.spread_shape)


@dataclass(frozen=True)
class _Link:
    """How an array over ``sub`` (domain order) relates to one over ``sup`` (domain order):
    the axes of ``sup`` to sum out, the shape that broadcasts ``sub`` into ``sup``, and the
    fast forms of both (:class:`_Sum`, :class:`_Spread`)."""

    axes: tuple[int, ...]
    shape: tuple[int, ...]
    sum: _Sum
    spread: _Spread


def _link(sub: tuple[str, ...], sup: tuple[str, ...], card: dict[str, int], dtype) -> _Link:
    keep = [a in set(sub) for a in sup]
    full = [card[a] for a in sup]
    return _Link(tuple(k for k, a in enumerate(keep) if not a),
                 tuple(n if a else 1 for n, a in zip(full, keep, strict=True)),
                 _Sum(full, keep, dtype), _Spread(full, keep, dtype))  # fmt: skip


class HostProgram:
    """One clique structure's mirror descent (see the module doc): built once per fit."""

    def __init__(self, domain, measurements: Sequence) -> None:
        from mbi import junction_tree
        from mbi.clique_utils import maximal_subset, reverse_clique_mapping
        from mbi.marginal_loss import calculate_l2_lipschitz_from_metadata

        self.domain = domain
        self.dtype = np.dtype(np.float64)
        attrs = list(domain.attributes)
        self.card = card = dict(zip(attrs, domain.shape, strict=True))
        pos = {a: i for i, a in enumerate(attrs)}

        def canon(cl: Sequence[str]) -> tuple[str, ...]:
            return tuple(sorted(cl, key=pos.__getitem__))

        def link(sub: Sequence[str], sup: tuple[str, ...]) -> _Link:
            return _link(canon(sub), sup, card, self.dtype)

        self.canon = canon
        self.cliques = [tuple(c) for c in maximal_subset([m.clique for m in measurements])]
        lip = calculate_l2_lipschitz_from_metadata(domain, list(measurements))
        self.lipschitz = 1.0 if lip is None else float(lip)
        jtree = junction_tree.make_junction_tree(domain, self.cliques)[0]
        maximal = junction_tree.maximal_cliques(jtree)
        self.nodes = [canon(c) for c in maximal]
        node_of = dict(zip(maximal, self.nodes, strict=True))
        self.cells = sum(math.prod(card[a] for a in c) for c in self.nodes)
        # potentials (on the loss cliques) into the smallest supporting junction-tree clique
        expand = reverse_clique_mapping(maximal, self.cliques, domain=domain)
        self.expand = [(node_of[m], [(self.cliques.index(tuple(c)), link(c, node_of[m]))
                                     for c in cls])
                       for m, cls in expand.items()]  # fmt: skip
        self.messages = []
        for i, j in junction_tree.message_passing_order(jtree):
            a, b = node_of[i], node_of[j]
            sep = canon(set(a) & set(b))
            self.messages.append((a, b, sep, link(sep, a), link(sep, b)))

        def smallest(cl: tuple[str, ...], among: Sequence[tuple[str, ...]]) -> tuple[str, ...]:
            return min((c for c in among if set(cl) <= set(c)),
                       key=lambda c: math.prod(card[a] for a in c))  # fmt: skip

        # marginals of the loss cliques from the calibrated junction tree (mbi's ``contract``)
        self.contract = []
        for cl in self.cliques:
            node = smallest(cl, self.nodes)
            self.contract.append((node, link(cl, node)))
        # each measurement reads (and sends its gradient to) its smallest loss clique
        loss_canon = [canon(c) for c in self.cliques]
        self.terms = []
        for m in measurements:
            cl = tuple(m.clique)
            k = loss_canon.index(smallest(canon(cl), loss_canon))
            y = np.asarray(m.noisy_measurement, dtype=self.dtype).reshape([card[a] for a in cl])
            y = np.transpose(y, [cl.index(a) for a in canon(cl)])
            sd = max(float(m.stddev), 1e-12)
            self.terms.append((k, _link(canon(cl), loss_canon[k], card, self.dtype), y, sd))
        self.loss_canon = loss_canon
        # each clique's table, rewritten in place by every message passing
        self._tables = {node: np.empty([card[a] for a in node], self.dtype) for node in self.nodes}

    def zeros(self) -> list[np.ndarray]:
        return [np.zeros([self.card[a] for a in c], self.dtype) for c in self.loss_canon]

    def _log_beliefs(self, theta: list[np.ndarray], out: dict | None = None) -> dict:
        """The potentials summed into the junction tree's cliques (mbi's ``expand``), into
        ``out``'s tables where given, else new ones."""
        beliefs = {}
        for node, parts in self.expand:
            b = np.empty([self.card[a] for a in node], self.dtype) if out is None else out[node]
            if not parts:
                b.fill(0.0)
            for i, (k, link) in enumerate(parts):
                view = b.reshape(link.spread.shape)
                if i:
                    np.add(view, link.spread(theta[k]), out=view)
                else:
                    np.copyto(view, link.spread(theta[k]))
            beliefs[node] = b
        return beliefs

    def _contract(self, probs: dict, total: float) -> list[np.ndarray] | None:
        """Each loss clique's marginal from its junction-tree clique's table, scaled to sum to
        ``total``; ``None`` where a table has no finite positive mass."""
        scale = {}
        for node, p in probs.items():
            z = float(p.sum())
            if not (math.isfinite(z) and z > 0):
                return None
            scale[node] = total / z
        return [link.sum(probs[node]) * scale[node] for node, link in self.contract]

    def marginals(self, theta: list[np.ndarray], total: float) -> list[np.ndarray]:
        """The model's marginals (counts) on the loss cliques: HUGIN message passing (mbi's
        ``message_passing_hugin``) over the junction tree. Each clique's table is exponentiated
        once (less its maximum) and the messages are sums, rescaled to a maximum of 1; where
        that leaves a clique without mass (potentials hundreds of nats apart), the same
        passing in log space (:meth:`log_marginals`)."""
        probs = self._log_beliefs(theta, self._tables)
        for b in probs.values():
            np.subtract(b, b.max(), out=b)
            np.exp(b, out=b)
        sent: dict[tuple, np.ndarray] = {}
        for a, b, _sep, la, lb in self.messages:
            msg = la.sum(probs[a])
            back = sent.get((b, a))
            if back is not None:  # HUGIN: a's table holds b's message; divide it out
                msg = np.divide(msg, back, out=np.zeros_like(msg), where=back > 0)
            top = msg.max()
            if not top > 0:
                return self.log_marginals(theta, total)
            msg = msg / top
            sent[(a, b)] = msg
            view = probs[b].reshape(lb.spread.shape)
            np.multiply(view, lb.spread(msg), out=view)
        out = self._contract(probs, total)
        return self.log_marginals(theta, total) if out is None else out

    def log_marginals(self, theta: list[np.ndarray], total: float) -> list[np.ndarray]:
        """:meth:`marginals` in log space throughout (mbi's own arithmetic)."""
        beliefs = self._log_beliefs(theta)
        sent: dict[tuple, np.ndarray] = {}
        for a, b, _sep, la, lb in self.messages:
            tau = beliefs[a]
            if (b, a) in sent:
                tau = tau - sent[(b, a)].reshape(la.shape)
            msg = logsumexp(tau, la.axes)
            sent[(a, b)] = msg
            beliefs[b] = beliefs[b] + msg.reshape(lb.shape)
        probs = {node: np.exp(b - logsumexp(b, tuple(range(b.ndim))))
                 for node, b in beliefs.items()}  # fmt: skip
        out = self._contract(probs, total)
        assert out is not None  # normalised in log space: every clique sums to 1
        return out

    def loss_and_grad(self, mu: list[np.ndarray]) -> tuple[float, list[np.ndarray]]:
        """mbi's ``_l2_loss`` (``sum 0.5 ||(Q mu - y) / sd||^2``) and its gradient in ``mu``."""
        loss = 0.0
        grad = [np.zeros_like(m) for m in mu]
        for k, link, y, sd in self.terms:
            m = link.sum(mu[k])
            diff = (m - y) / sd
            loss += 0.5 * float(np.vdot(diff, diff))
            grad[k] += (diff / sd).reshape(link.shape)
        return loss, grad

    def run(self, theta: list[np.ndarray], total: float, steps: int) -> list[np.ndarray]:
        """``steps`` of mbi's ``MirrorDescent._step`` (Armijo line search) from ``theta``. A
        step's marginals at its start are the previous step's trial marginals where that step
        was taken, or its own starting ones where it was not: one message passing per step.
        BLAS runs on one thread: the products are small, and waking threads (and fighting
        other processes for the cores) costs more than they save."""
        from threadpoolctl import threadpool_limits

        with threadpool_limits(1, user_api="blas"):
            return self._run(theta, total, steps)

    def _run(self, theta: list[np.ndarray], total: float, steps: int) -> list[np.ndarray]:
        alpha = 2.0 / (self.lipschitz * total)
        theta = [np.asarray(t, self.dtype) for t in theta]
        mu = self.marginals(theta, total)
        loss, grad = self.loss_and_grad(mu)
        for _ in range(steps):
            theta2 = [t - alpha * g for t, g in zip(theta, grad, strict=True)]
            mu2 = self.marginals(theta2, total)
            # the trial's gradient too: a taken step (most are) starts the next one from it
            loss2, grad2 = self.loss_and_grad(mu2)
            gain = sum(float(np.vdot(g, m - m2)) for g, m, m2 in zip(grad, mu, mu2, strict=True))
            if loss - loss2 >= 0.5 * alpha * gain:
                theta, mu, loss, grad, alpha = theta2, mu2, loss2, grad2, 1.01 * alpha
            else:
                alpha = 0.5 * alpha
        return theta

    def to_host(self, potentials) -> list[np.ndarray]:
        """An mbi ``CliqueVector`` over this program's loss cliques, in domain-order arrays."""
        out = []
        for cl in self.cliques:
            v = np.asarray(potentials[cl].values, dtype=np.float64)
            out.append(np.transpose(v, [cl.index(a) for a in self.canon(cl)]))
        return out

    def clique_vector(self, tables: list[np.ndarray]):
        """An mbi ``CliqueVector`` over the loss cliques from domain-order ``tables`` (each in
        its clique's own order, JAX's default float)."""
        import jax.numpy as jnp
        from mbi import CliqueVector, Factor

        dtype = jnp.result_type(float)
        factors = {}
        for cl, c, v in zip(self.cliques, self.loss_canon, tables, strict=True):
            arr = np.transpose(v, [c.index(a) for a in cl])
            factors[cl] = Factor(self.domain.project(cl), jnp.asarray(arr.astype(dtype)))
        return CliqueVector(self.domain, list(self.cliques), factors)

    def model(self, theta: list[np.ndarray], total: float):
        """mbi's ``MarkovRandomField`` of ``theta`` (potentials in each clique's own order)."""
        from mbi.markov_random_field import MarkovRandomField

        return MarkovRandomField(potentials=self.clique_vector(theta), marginals=None,
                                 total=float(total))  # fmt: skip


def steps(iters: int) -> int:
    """The mirror-descent steps of a fit of ``iters`` (whole blocks of :data:`BLOCK`)."""
    return math.ceil(iters / BLOCK) * BLOCK


def fits_on_host(program: HostProgram, iters: int) -> bool:
    """The rule for where a fit runs: on the host when its work (steps times junction-tree
    cells) is at most :data:`HOST_FIT_MAX_WORK`, else mbi's compiled program. It reads only the
    public domain and the cliques, which are DP outputs (and in the record)."""
    return steps(iters) * program.cells <= HOST_FIT_MAX_WORK


def host_estimate(program: HostProgram, total: float, iters: int, warm=None):
    """mbi's ``MirrorDescent().estimate(domain, measurements, known_total=total, iters=iters,
    warm_start=warm)`` on the host: ``ceil(iters / BLOCK) * BLOCK`` steps from ``warm``'s
    potentials re-expressed over the program's cliques (zeros without one)."""
    from dpql.synth.aim.graphical import expand_potentials

    if warm is None:
        theta = program.zeros()
    else:
        theta = program.to_host(expand_potentials(warm, program.domain, program.cliques))
    return program.model(program.run(theta, total, steps(iters)), total)
