"""``dpql.synth.aim.inference``: marginals from a calibrated junction tree equal the marginals
of the whole joint table, inside cliques, across them, across components of a forest,
and where the model has structural zeros."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    mbi = pytest.importorskip("mbi")

from mbi import CliqueVector, Domain, Factor, LinearMeasurement
from mbi.estimation import MirrorDescent
from mbi.markov_random_field import MarkovRandomField

from dpql.synth.aim.inference import CalibratedTree


def _random_model(dom: Domain, cliques, seed: int, zeros: bool = False) -> MarkovRandomField:
    """Random potentials on ``cliques`` (some cells at -inf with ``zeros``)."""
    rng = np.random.default_rng(seed)
    factors = {}
    for cl in cliques:
        v = rng.normal(0.0, 1.5, dom.project(cl).shape)
        if zeros:
            v[rng.random(v.shape) < 0.2] = -np.inf
        factors[cl] = Factor(dom.project(cl), np.asarray(v))
    potentials = CliqueVector(dom, list(cliques), factors)
    return MarkovRandomField(potentials=potentials, marginals=None, total=1000.0)


def _reference(model, cl) -> np.ndarray:
    """The marginal from the whole joint table (the domains here are small): the product of
    the exponentiated potentials over every attribute, normalised to the model's total."""
    dom = model.domain
    joint = np.zeros(dom.shape)
    for f in model.potentials.tables.values():
        attrs = list(f.domain.attributes)
        v = np.transpose(np.asarray(f.values, np.float64),
                         sorted(range(len(attrs)), key=lambda k: dom.attributes.index(attrs[k])))
        joint = joint + v.reshape([dom[a] if a in attrs else 1 for a in dom.attributes])
    p = np.exp(joint - joint.max())
    p = p.sum(axis=tuple(k for k, a in enumerate(dom.attributes) if a not in cl))
    kept = [a for a in dom.attributes if a in cl]
    p = np.transpose(p, [kept.index(a) for a in cl])
    return (p / p.sum() * float(model.total)).ravel()


def test_every_three_way_marginal_of_a_loopy_model_is_the_joints():
    dom = Domain(list("abcdefgh"), [4, 3, 5, 2, 3, 4, 2, 3])
    cliques = [("a", "b", "c"), ("c", "d", "e"), ("e", "f", "a"), ("b", "d", "f"),
               ("g", "h", "a"), ("g", "h", "c")]  # fmt: skip
    model = _random_model(dom, cliques, seed=1)
    tree = CalibratedTree(model)
    for cl in [*itertools.combinations(dom.attributes, 3), ("h", "a"), ("d",), ("f", "b", "a")]:
        np.testing.assert_allclose(tree.marginal(cl), _reference(model, cl), rtol=1e-4,
                                   atol=1e-6, err_msg=str(cl))  # fmt: skip


def test_a_chain_marginal_needs_the_whole_path_and_a_forest_multiplies_components():
    """Ends of a long chain are dependent only through every clique between them; attributes in
    separate components of the tree are independent in the model."""
    dom = Domain(list("abcdefxy"), [3, 2, 4, 2, 3, 2, 3, 4])
    cliques = [("a", "b"), ("b", "c"), ("c", "d"), ("d", "e"), ("e", "f"), ("x", "y")]
    model = _random_model(dom, cliques, seed=2)
    tree = CalibratedTree(model)
    assert len(set(tree.component.values())) == 2
    for cl in [("a", "f"), ("f", "a", "c"), ("a", "x"), ("y", "c", "f"), ("x", "y", "a")]:
        np.testing.assert_allclose(tree.marginal(cl), _reference(model, cl), rtol=1e-4,
                                   atol=1e-6, err_msg=str(cl))  # fmt: skip


def test_structural_zeros_give_zero_cells_not_nans():
    dom = Domain(list("abcde"), [3, 3, 2, 4, 2])
    cliques = [("a", "b"), ("b", "c"), ("c", "d"), ("d", "e"), ("a", "e")]
    model = _random_model(dom, cliques, seed=3, zeros=True)
    tree = CalibratedTree(model)
    for cl in itertools.combinations(dom.attributes, 3):
        got = tree.marginal(cl)
        assert np.isfinite(got).all()
        np.testing.assert_allclose(got, _reference(model, cl), rtol=1e-4, atol=1e-6)


def test_a_value_impossible_in_one_clique_is_impossible_everywhere():
    """A whole slice of zeros (a value of ``b`` that ``(a, b)`` rules out) reaches the other
    cliques through their separators without a NaN (HUGIN's 0/0 is 0)."""
    dom = Domain(list("abcd"), [3, 3, 2, 4])
    model = _random_model(dom, [("a", "b"), ("b", "c"), ("c", "d"), ("b", "d")], seed=5)
    rng = np.random.default_rng(5)
    ab = rng.normal(size=(3, 3))
    ab[:, 1] = -np.inf  # b == 1 is impossible
    factors = dict(model.potentials.tables)
    factors[("a", "b")] = Factor(dom.project(("a", "b")), np.asarray(ab))
    model = MarkovRandomField(
        potentials=CliqueVector(dom, list(factors), factors), marginals=None, total=1000.0
    )
    tree = CalibratedTree(model)
    for cl in [("b",), ("a", "d"), ("d", "b", "c"), ("c", "a")]:
        got = tree.marginal(cl)
        assert np.isfinite(got).all()
        np.testing.assert_allclose(got, _reference(model, cl), rtol=1e-4, atol=1e-6)
    assert tree.marginal(("b",))[1] == 0.0


def test_a_fitted_models_marginals_sum_to_its_total():
    dom = Domain(list("abcd"), [3, 4, 2, 5])
    rng = np.random.default_rng(4)
    meas = [LinearMeasurement(rng.random(dom.size(c)) * 100, c, stddev=1.0)
            for c in [("a", "b"), ("b", "c"), ("c", "d")]]  # fmt: skip
    model = MirrorDescent().estimate(dom, meas, known_total=500.0, iters=30)
    tree = CalibratedTree(model)
    for cl in [("a", "d"), ("d", "b", "a"), ("c",)]:
        assert tree.marginal(cl).sum() == pytest.approx(500.0)
