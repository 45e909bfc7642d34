"""RAP++ backend: relaxed queries agree with exact ones on integral rows; the program fits."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from dpql.domain import CategoricalColumn, Domain, EncodedTable, NumericColumn, numeric_edges
from dpql.ir.exact import answer_all
from dpql.ir.queries import (
    And,
    CatIn,
    Count,
    Halfspace,
    Marginal,
    Moment,
    Not,
    NumCmp,
    Or,
    Prefix,
    TruePred,
)
from dpql.synth.rap.plan import RapOptions, plan_rap
from dpql.synth.rap.program import (
    _answers_of_rows,
    _build_data,
    _marginals_loss,
    _Measured,
    _statics,
    _threshold_arrays,
    relaxed_marginals,
    round_rows,
    run_rap,
)
from dpql.synth.rap.relaxed import Layout, RowModel


def small_domain() -> Domain:
    return Domain(
        (
            CategoricalColumn("colour", ("red", "green", "blue")),
            NumericColumn("age", 17, 90, True, numeric_edges(17, 90, True, 8)),
            CategoricalColumn("label", ("no", "yes")),
            NumericColumn("hours", 0.0, 100.0, False, numeric_edges(0.0, 100.0, False, 5)),
        )
    )


def random_table(domain: Domain, m: int, seed: int) -> EncodedTable:
    rng = np.random.default_rng(seed)
    codes, scaled = {}, {}
    for c in domain:
        if isinstance(c, CategoricalColumn):
            codes[c.name] = rng.integers(0, c.card, m).astype(np.int32)
        else:
            x = rng.uniform(c.lo, c.hi, m)
            x = np.round(x) if c.integer else x
            scaled[c.name] = (x - c.lo) / c.span
            codes[c.name] = c.bin_of(x)
    return EncodedTable(domain, codes, scaled)


def integral_params(table: EncodedTable) -> tuple[jnp.ndarray, jnp.ndarray]:
    """Relaxed parameters whose rows are (numerically) one-hot copies of ``table``'s records."""
    layout = Layout.of(table.domain)
    logits = np.full((table.n, layout.width), -60.0)
    pos = np.zeros((table.n, max(len(layout.numeric), 1)))
    for col, off in zip(layout.domain.names, layout.offsets, strict=True):
        logits[np.arange(table.n), off + table.codes[col]] = 60.0
    for j, col in enumerate(layout.numeric):
        b = table.codes[col]
        pos[:, j] = (table.scaled[col] - layout.edges[j, b]) / layout.widths[j, b]
    return jnp.asarray(logits, jnp.float32), jnp.asarray(pos, jnp.float32)


def workload(domain: Domain, seed: int) -> list:
    rng = np.random.default_rng(seed)
    pred = And(
        (
            NumCmp("age", ">=", 0.4),
            Or((CatIn("colour", frozenset({0})), Not(NumCmp("hours", "<", 0.3)))),
        )
    )
    return [
        Marginal(("colour", "age")),
        Marginal(("colour", "age", "label")),
        Marginal(("hours",)),
        *[Prefix(("age", "hours"), tuple(rng.uniform(0, 1, 2)), "label") for _ in range(5)],
        *[
            Halfspace(
                ("age", "hours"), tuple(rng.normal(size=2)), float(rng.normal()) * 0.3, "label"
            )
            for _ in range(5)
        ],
        Count(pred),
        Moment(("age",), CatIn("label", frozenset({1}))),
        Moment(("age", "hours"), TruePred()),
    ]


@pytest.mark.slow
def test_relaxed_answers_equal_exact_on_integral_rows():
    domain = small_domain()
    table = random_table(domain, 300, 1)
    qs = workload(domain, 2)
    exact = answer_all(qs, table)
    layout = Layout.of(domain)
    thresholds = [q for q in qs if isinstance(q, Halfspace | Prefix)]
    scalars = [q for q in qs if isinstance(q, Count | Moment)]
    statics = _statics(layout, thresholds, scalars)
    params = integral_params(table)
    relaxed = _answers_of_rows(
        params, layout, statics, _threshold_arrays(statics, thresholds), thresholds, 1e5, qs
    )
    rm = RowModel(layout, *params, 1e5)
    for q, e in zip(qs, exact, strict=True):
        if isinstance(q, Count | Moment):
            r = np.asarray(
                [
                    float(
                        jnp.mean(
                            rm.pred(q.predicate)
                            if isinstance(q, Count)
                            else rm.moment(q.columns, q.given)
                        )
                    )
                ]
            )
        else:
            r = relaxed[q]
        # float32 arithmetic; a value within 1e-4 of a threshold could flip, none do at this seed
        np.testing.assert_allclose(r, e, atol=2e-4, err_msg=repr(q))


@pytest.mark.slow
def test_tiled_marginal_loss_equals_the_loss_over_cells():
    """Cutting blocks into TILE-wide tiles (sizes 2, 9 and 19 straddle tile edges) changes
    nothing: the jitted loss equals sum w * (relaxed marginal - target)^2 over real cells."""
    domain = Domain(
        (
            CategoricalColumn("a", ("x", "y")),
            CategoricalColumn("b", tuple(f"b{i}" for i in range(9))),
            CategoricalColumn("c", tuple(f"c{i}" for i in range(19))),
            NumericColumn("d", 0.0, 1.0, False, numeric_edges(0.0, 1.0, False, 5)),
        )
    )
    layout = Layout.of(domain)
    statics = _statics(layout, [], [])
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(50, layout.width)).astype(np.float32)
    params = (jnp.asarray(logits), jnp.zeros((50, 1), jnp.float32))
    columns = [("c",), ("a", "c"), ("c", "b", "a"), ("b", "d"), ("a", "b", "c", "d")]
    measured = [
        _Measured(Marginal(cols), rng.random(math.prod(domain.card(c) for c in cols)), s)
        for cols, s in zip(columns, (0.5, 1.0, 2.0, 0.25, 1.5), strict=True)
    ]
    data = _build_data(statics, measured, [])
    got = float(_marginals_loss(params, data["marginals"], statics))
    probs = {}
    for c, o, k in zip(domain.names, layout.offsets, layout.sizes, strict=True):
        e = np.exp(logits[:, o : o + k].astype(np.float64))
        probs[c] = e / e.sum(axis=1, keepdims=True)
    est = relaxed_marginals(probs, columns)
    want = sum(np.sum((est[m.query.columns] - m.answer) ** 2) / m.sigma**2 for m in measured)
    assert got == pytest.approx(want, rel=1e-4)


def test_rounding_integral_rows_reproduces_the_table():
    domain = small_domain()
    table = random_table(domain, 200, 3)
    out = round_rows(Layout.of(domain), integral_params(table), table.n, seed=0)
    qs = [Marginal(("colour", "age", "label")), Marginal(("hours", "label"))]
    for a, b in zip(answer_all(qs, table), answer_all(qs, out), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-12)


def test_rounding_keeps_independent_columns_independent():
    """Relaxed rows whose columns are independent (every row the same product distribution)
    must round to a table whose columns are independent, with each column's counts those of
    the relaxed rows in expectation. One random shift per relaxed row, shared by
    all columns, drew every column of a row at the same quantile (code correlations near 1)."""
    domain = Domain(
        (
            *(CategoricalColumn(f"c{i}", tuple("abcde")) for i in range(4)),
            NumericColumn("x", 0.0, 10.0, False, numeric_edges(0.0, 10.0, False, 6)),
        )
    )
    layout = Layout.of(domain)
    rng = np.random.default_rng(11)
    probs = {c: rng.dirichlet(np.ones(s)) for c, s in zip(domain.names, layout.sizes, strict=True)}
    m = 2000
    logits = np.concatenate([np.log(probs[c]) for c in domain.names])
    params = (
        jnp.asarray(np.tile(logits, (m, 1)), jnp.float32),
        jnp.asarray(rng.random((m, 1)), jnp.float32),
    )
    # one copy per relaxed row (where the shared shift coupled the columns), then 2-3 copies
    for rows in (m, 5 * m // 2):
        out = round_rows(layout, params, rows, seed=1)
        codes = np.stack([out.codes[c] for c in domain.names]).astype(np.float64)
        # Independent columns: each pairwise Pearson correlation is ~ N(0, 1/rows).
        corr = np.corrcoef(codes)[np.triu_indices(len(domain.names), 1)]
        assert np.max(np.abs(corr)) < 5 / math.sqrt(rows), corr
        # Marginals: a relaxed row with c copies puts floor(c p) or ceil(c p) copies on each
        # value (systematic sampling), c p in expectation, variance f (1 - f), f = frac(c p).
        # (All rows share one distribution, so which rows get the extra copies is immaterial.)
        copies = np.full(m, rows // m) + (np.arange(m) < rows % m)
        for col in domain.names:
            p = probs[col]
            expect = rows * p
            frac = np.outer(copies, p) % 1.0
            sd = np.sqrt((frac * (1 - frac)).sum(axis=0))
            got = np.bincount(out.codes[col], minlength=p.size)
            assert np.all(np.abs(got - expect) <= 5 * sd + 1), (col, got, expect, sd)


class ExactOracle:
    """A test oracle with negligible noise: answers exactly, selects the worst queries."""

    def __init__(self, table: EncodedTable, n: int):
        self.table, self.n = table, n
        self.calls: list[tuple[str, int]] = []

    def measure(self, queries, rho, *, phase, label):
        self.calls.append((phase, len(queries)))
        return answer_all(list(queries), self.table)

    def select(self, candidates, synthetic_answers, k, rho, *, phase, label, penalty=None):
        self.calls.append((phase, k))
        real = answer_all(list(candidates), self.table)
        score = [np.abs(a - s).sum() for a, s in zip(real, synthetic_answers, strict=True)]
        return list(np.argsort(score)[::-1][:k])


def tvd(a, b):
    return 0.5 * float(np.abs(a - b).sum())


@pytest.mark.slow
def test_rap_fits_measured_marginals_better_than_uniform_rows():
    domain = small_domain()
    rng = np.random.default_rng(5)
    table = random_table(domain, 2000, 4)
    # correlate label with colour and age so 2-way structure matters
    table.codes["label"][:] = ((table.codes["colour"] == 0) | (table.scaled["age"] > 0.7)).astype(
        np.int32
    )
    table.codes["label"][rng.random(table.n) < 0.1] ^= 1
    wl = [
        Marginal(c)
        for c in (
            ("colour", "age", "label"),
            ("colour", "hours", "label"),
            ("age", "hours", "label"),
        )
    ]
    opts = RapOptions(rounds=3, queries_per_round=2, relaxed_rows=200, iterations=300)
    schedule = plan_rap(wl, 1.0, opts)
    assert math.isclose(schedule.rho, 1.0, rel_tol=1e-12) and schedule.rho <= 1.0
    oracle = ExactOracle(table, table.n)
    res = run_rap(oracle, domain, wl, schedule, opts, rows=2000, seed=0)
    assert res.table.n == 2000
    assert ("rap.select", 2) in oracle.calls and oracle.calls[0][0] == "rap.measure"
    uniform = random_table(domain, 2000, 9)
    real = answer_all(wl, table)
    fit = np.mean([tvd(a, b) for a, b in zip(real, answer_all(wl, res.table), strict=True)])
    base = np.mean([tvd(a, b) for a, b in zip(real, answer_all(wl, uniform), strict=True)])
    assert fit < 0.5 * base, (fit, base)


def test_schedule_never_exceeds_budget_and_interleaves():
    from dpql.ir.queries import Halfspace as H

    domain = small_domain()
    wl = [Marginal(("colour", "age", "label"))] + [
        H(("age", "hours"), (1.0, -1.0), 0.0, "label")
    ] * 1
    for rho in (1e-4, 0.0117, 3.3):
        s = plan_rap(wl, rho, RapOptions())
        assert s.rho <= rho
        kinds = [r.kind for r in s.rounds]
        assert kinds[0] == "init" and "threshold" in kinds and "marginal" in kinds
    assert domain.cells(("colour", "age", "label")) == 48


def test_options_reject_unknown_keys_and_inconsistent_values():
    with pytest.raises(ValueError, match="roundz"):
        RapOptions.from_mapping({"roundz": 3})
    with pytest.raises(ValueError, match="sigma_start <= sigma_max"):
        RapOptions.from_mapping({"sigma_start": 9.0, "sigma_max": 8.0})
    assert RapOptions.from_mapping({"rounds": 3}).rounds == 3


def test_every_rap_option_can_be_set_in_the_spec_with_a_position(tmp_path):
    """The spec owns the complete options model: `sigma_max` (once only in the backend's own
    copy) is accepted, and a bad value is an error at its line and column."""
    from dpql.diagnostics import DiagnosticError
    from dpql.spec.load import load_spec

    root = Path(__file__).resolve().parents[1] / "examples" / "adult"
    text = (root / "adult.release.yaml").read_text(encoding="utf-8")
    spec = tmp_path / "r.yaml"
    (tmp_path / "adult_train.csv.gz").symlink_to(root / "adult_train.csv.gz")
    good = text.replace("method: rap", "method: rap\n  options: {sigma_max: 256}", 1)
    spec.write_text(good, encoding="utf-8")
    assert load_spec(spec).model.synthesizer.options.sigma_max == 256
    spec.write_text(good.replace("sigma_max: 256", "sigma_max: -1"), encoding="utf-8")
    with pytest.raises(DiagnosticError) as err:
        load_spec(spec)
    (d,) = err.value.diagnostics
    assert d.pos is not None and d.pos.line > 1 and "sigma_max" in d.message


def test_synthesizers_never_import_the_data_layer():
    """The privacy boundary: dpql.synth sees only the oracle, never dpql.data (DESIGN inv. 2)."""
    root = Path(__file__).resolve().parents[1] / "dpql" / "synth"
    offenders = []
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [
                f"{path.name}: {n}" for n in names if n == "dpql.data" or n.startswith("dpql.data.")
            ]
    assert not offenders, offenders


class NoisyOracle(ExactOracle):
    """:class:`ExactOracle` with seeded Gaussian noise at the sd RAP is told it has."""

    def __init__(self, table: EncodedTable, n: int, seed: int):
        super().__init__(table, n)
        self.rng = np.random.default_rng(seed)

    def measure(self, queries, rho, *, phase, label):
        from dpql.synth.rap.plan import release_sigma

        sd = release_sigma(list(queries), rho, self.n)
        exact = super().measure(queries, rho, phase=phase, label=label)
        return [a + self.rng.normal(0.0, sd, np.shape(a)) for a in exact]


def test_a_nullable_column_without_empty_cells_gets_none_from_the_fit():
    """Under keep, a complete column's null cell is closed after the init round's noisy 1-way
    answer cannot tell its share from 0, so the fit puts no rows there (before any clean-up),
    while a column with a real null share keeps it."""
    domain = Domain(
        (
            CategoricalColumn("colour", ("red", "green", "blue"), nullable=True),
            CategoricalColumn("label", ("no", "yes"), nullable=True),
        )
    )
    rng = np.random.default_rng(3)
    codes = {
        "colour": rng.integers(0, 3, 4000).astype(np.int32),  # complete
        "label": rng.choice(3, 4000, p=[0.4, 0.3, 0.3]).astype(np.int32),  # 30% empty
    }
    table = EncodedTable(domain, codes, {})
    wl = [Marginal(("colour", "label"))]
    opts = RapOptions(rounds=2, queries_per_round=1, relaxed_rows=200, iterations=200)
    for seed in range(3):
        res = run_rap(NoisyOracle(table, table.n, seed), domain, wl, plan_rap(wl, 0.02, opts),
                      opts, rows=4000, seed=seed)  # fmt: skip
        assert not (res.table.codes["colour"] == 3).any()
        assert abs((res.table.codes["label"] == 2).mean() - 0.3) < 0.05
