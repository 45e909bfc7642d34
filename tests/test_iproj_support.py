"""Shared fixtures for the iproj / requirements / accept tests: small tables and an oracle.

The oracle is ``dpql.data.measure.PrivateMeasurer`` itself over the in-memory table, with a
seeded (test-only) noise source.
"""

from __future__ import annotations

import numpy as np

from dpql.data.codec import CuratorLog
from dpql.data.engines import InMemoryEngine
from dpql.data.measure import PrivateMeasurer
from dpql.domain import CategoricalColumn, Domain, EncodedTable, NumericColumn, numeric_edges
from dpql.privacy.ledger import Ledger
from dpql.privacy.noise import NoiseSource


class ExactOracle(PrivateMeasurer):
    """The real measurement layer over an in-memory table, with a seeded (test-only) noise
    source and its own ledger."""

    def __init__(self, table: EncodedTable, seed: int = 0) -> None:
        self.table, self.ledger = table, Ledger()
        engine = InMemoryEngine(table, CuratorLog("test", table.n, table.n))
        super().__init__(engine, table.n, self.ledger, NoiseSource.for_testing(seed))


DOMAIN = Domain(
    (
        NumericColumn("age", 17.0, 90.0, True, numeric_edges(17, 90, True, 8)),
        NumericColumn("hours", 1.0, 99.0, True, numeric_edges(1, 99, True, 7)),
        NumericColumn("x", 0.0, 1.0, False, numeric_edges(0, 1, False, 4)),
        CategoricalColumn("sex", ("Female", "Male")),
        CategoricalColumn("job", ("a", "b", "c")),
        CategoricalColumn("income", ("<=50K", ">50K")),
    )
)


def make_table(n: int, seed: int, shift: float = 0.0, domain: Domain = DOMAIN) -> EncodedTable:
    """Correlated mixed-type rows; ``shift`` moves the joint distribution (a 'synthetic' table)."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, 3)) @ np.array([[1.0, 0.5, 0.2], [0.0, 1.0, 0.4], [0.0, 0.0, 1.0]])
    u = 1 / (1 + np.exp(-(z + shift)))
    sex = (rng.random(n) < 0.4 + 0.3 * u[:, 1]).astype(np.int32)
    job = np.minimum((u[:, 2] * 3 + rng.random(n)).astype(np.int32), 2)
    logit = 3 * (u[:, 0] - 0.5) + 2 * (u[:, 1] - 0.5) + 0.8 * sex - 1.0 + shift
    income = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(np.int32)
    scaled: dict[str, np.ndarray] = {}
    codes: dict[str, np.ndarray] = {"sex": sex, "job": job, "income": income}
    for i, name in enumerate(("age", "hours", "x")):
        col = domain[name]
        v = col.lo + u[:, i] * col.span
        if col.integer:  # type: ignore[union-attr]
            v = np.round(v)
        scaled[name] = (v - col.lo) / col.span
        codes[name] = col.bin_of(v)  # type: ignore[union-attr]
    return EncodedTable(domain, codes, scaled)


def spy_recentre(monkeypatch) -> list:
    """Record what compile's post-processing measures (``run.recentre``: the requirements with
    their compile-time centres and their measures, one pair per call) without changing it."""
    import dpql.postprocess.run as run

    seen: list = []
    original = run.recentre

    def spy(*args, **kwargs):
        out = original(*args, **kwargs)
        seen.append(out)
        return out

    monkeypatch.setattr(run, "recentre", spy)
    return seen


def planned(reqs: tuple, rho: float, n: int, domain: Domain = DOMAIN, share: float | None = None):
    """The post-processing part of a plan for ``reqs`` (what ``run.run_postprocess`` reads): the
    planner's split at ``rho`` for ``n`` rows, its releases, and each phase's rho."""
    from types import SimpleNamespace

    from dpql.plan.requirements import expand_requirements
    from dpql.plan.split import choose_split, with_releases

    m = expand_requirements(reqs, domain)
    split = choose_split(reqs, m, rho=rho, n=n, domain=domain, share=share)
    return SimpleNamespace(
        measures=with_releases(m, split),
        requirements=reqs,
        phase_rho={
            "iproj.measure": float(split.share - split.test_share) * rho,
            "accept.test": float(split.test_share) * rho,
        },
        split=split,
    )


def test_a_constant_count_of_present_rows_is_not_a_support_warning() -> None:
    """Under missing: keep, a table whose columns are all present has a constant count of
    present rows (a ratio's denominator): that is no lack of variation; a constant measure of
    the values still warns (W502)."""
    import dataclasses

    from dpql.domain import CategoricalColumn, Domain
    from dpql.ir.queries import CatIn, Count
    from dpql.plan.requirements import present
    from dpql.postprocess.iproj import _support_warnings

    a = dataclasses.replace(CategoricalColumn("a", ("x", "y")), nullable=True)
    b = dataclasses.replace(CategoricalColumn("b", ("u", "v")), nullable=True)
    domain = Domain((a, b))
    queries = [Count(present(domain, ["a", "b"])), Count(CatIn("a", frozenset({0})))]
    varied, constant = np.ones((5, 2)), np.ones((5, 2))
    varied[:, 1] = [0, 1, 0, 1, 1]
    constant[:, 0] = [0, 1, 0, 1, 1]
    assert _support_warnings(varied, queries, domain) == []
    assert [d.code for d in _support_warnings(constant, queries, domain)] == ["W502"]
