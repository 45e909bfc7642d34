"""Statistics over present values under `missing: keep` (na.rm): ratio estimators of sums over
the rows where a statistic's columns are present and their count, every sum at the public n."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dpql.data.codec import encode_frame
from dpql.domain import CategoricalColumn, Domain, NumericColumn, numeric_edges
from dpql.ir.exact import answer_all
from dpql.ir.queries import CatIn, CorrRequirement, MeanRequirement, ModelRequirement, Tolerance
from dpql.plan.estimates import predicted_error, requirement_value, value_sd
from dpql.plan.requirements import present, requirement_queries
from dpql.postprocess.accept import build_test, finite_rows

N = 4000


def _domain(nullable: bool = True) -> Domain:
    return Domain(
        (
            NumericColumn("x", 0, 100, False, numeric_edges(0, 100, False, 10), nullable=nullable),
            NumericColumn("y", 0, 100, False, numeric_edges(0, 100, False, 10), nullable=nullable),
            CategoricalColumn("g", ("F", "M"), nullable=nullable),
        )
    )


def _frame(seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    g = rng.choice(["F", "M"], N)
    x = np.clip(rng.normal(40, 15, N), 0, 100)
    y = np.clip(0.6 * x + 10 * (g == "M") + rng.normal(0, 10, N), 0, 100)
    df = pd.DataFrame({"x": x.round(3).astype(str), "y": y.round(3).astype(str), "g": g})
    df.loc[rng.random(N) < 0.4 * (x > 50), "y"] = ""  # not missing at random: present rows differ
    df.loc[rng.random(N) < 0.1, "x"] = ""
    df.loc[rng.random(N) < 0.05, "g"] = ""
    return df


def _table(df: pd.DataFrame):
    return encode_frame(df, _domain(), {c: "keep" for c in df.columns}).table


def _exact(req, table):
    qs = requirement_queries(req, table.domain)
    answers = {q: float(np.ravel(a)[0]) for q, a in zip(qs, answer_all(list(qs), table), strict=True)}
    return requirement_value(req, answers, table.domain), answers


def _numeric(df: pd.DataFrame) -> pd.DataFrame:
    return df.replace("", np.nan).assign(
        x=lambda d: d.x.astype(float), y=lambda d: d.y.astype(float)
    )


def test_mean_over_present_values_is_pandas_na_rm() -> None:
    df = _frame()
    table = _table(df)
    req = MeanRequirement("y", CatIn("g", frozenset({0})), Tolerance(within=1.0))
    value, _ = _exact(req, table)
    real = _numeric(df)
    assert value == pytest.approx(real.loc[real.g == "F", "y"].mean(), abs=1e-4)
    # centred at a compile-time centre the value is the same
    centred = MeanRequirement("y", req.given, req.tolerance, centre=0.25)
    assert _exact(centred, table)[0] == pytest.approx(value, abs=1e-4)


def test_corr_over_present_values_is_pairwise_complete() -> None:
    df = _frame()
    table = _table(df)
    for centres in (None, (0.375, 0.25)):
        req = CorrRequirement("x", "y", Tolerance(within=0.05), centres=centres)
        value, answers = _exact(req, table)
        real = _numeric(df)[["x", "y"]].dropna()
        assert value == pytest.approx(real.x.corr(real.y), abs=1e-4)
        # the delta method runs through the ratio (a finite, positive sd)
        sd = value_sd(req, answers, 1.0 / N, table.domain)
        assert 0 < sd < 0.05
    # at plan time (no data) the error is predicted, and is finite
    planned = CorrRequirement("x", "y", Tolerance(within=0.05))
    assert 0 < predicted_error(planned, 1.0 / N, table.domain) < 1


def test_present_is_true_without_nullable_columns() -> None:
    d = _domain(nullable=False)
    assert present(d, ("x", "y")) == present(d, ())
    req = CorrRequirement("x", "y", Tolerance(within=0.05))
    assert len(requirement_queries(req, d)) == 5  # no count: the plain moments


@pytest.mark.parametrize("model", ["logistic", "linear"])
def test_model_metric_is_over_complete_cases(model: str) -> None:
    df = _frame(1)
    table = _table(df)
    req = (
        ModelRequirement("logistic", "g", ("x", "y"), Tolerance(within=0.02))
        if model == "logistic"
        else ModelRequirement("linear", "y", ("x", "g"), Tolerance(within=0.05))
    )
    test = build_test(req, finite_rows(table, ("x", "y", "g")))
    # the accuracy / R^2 over all rows (missing cells as NULL_SCALED) differs from the one
    # over complete cases; the ratio of the parts gives the latter
    complete = finite_rows(table, ("x", "y", "g"))
    assert complete.n < table.n and not (complete.codes["y"] == 10).any()
    on_all = test.synthetic_value(table)
    on_complete = test.synthetic_value(complete)
    assert on_all == pytest.approx(on_complete, abs=1e-9)


def test_sql_engine_agrees_on_present_rows(tmp_path) -> None:
    from dpql.data.engines import open_engine
    from dpql.ir.queries import query_grid

    df = _frame(2)
    path = tmp_path / "t.csv"
    df.to_csv(path, index=False)
    table = _table(df)
    reqs = [
        CorrRequirement("x", "y", Tolerance(within=0.05), centres=(0.375, 0.25)),
        MeanRequirement("y", CatIn("g", frozenset({1})), Tolerance(within=1.0)),
        ModelRequirement("linear", "y", ("x", "g"), Tolerance(within=0.05)),
    ]
    queries = list(dict.fromkeys(q for r in reqs for q in requirement_queries(r, table.domain)))
    fitted = build_test(
        ModelRequirement("logistic", "g", ("x", "y"), Tolerance(within=0.02)),
        finite_rows(table, ("x", "y", "g")),
    ).measured
    queries += list(fitted)
    engine = open_engine(path, table.domain, engine="duckdb", missing={c: "keep" for c in df})
    try:
        sums = engine.sums(queries)
    finally:
        engine.close()
    exact = answer_all(queries, table)
    for q, s, a in zip(queries, sums, exact, strict=True):
        assert np.ravel(s)[0] * query_grid(q) / N == pytest.approx(np.ravel(a)[0], abs=1e-5), q


def test_each_model_is_tested_on_its_own_complete_cases() -> None:
    """Two models over different columns: each is fitted and scored on the rows where its own
    columns are present, not on the rows where every model's columns are."""
    from test_iproj_support import ExactOracle

    from dpql.postprocess.accept import accept_models

    table = _table(_frame(3))
    logit = ModelRequirement("logistic", "g", ("x",), Tolerance(within=0.05))
    linear = ModelRequirement("linear", "y", ("x",), Tolerance(within=0.5))
    res = accept_models([logit, linear], table, ExactOracle(table, seed=1), 50.0)
    own = build_test(logit, finite_rows(table, ("x", "g")))
    assert res[0].synthetic_after == pytest.approx(own.synthetic_value(table), abs=1e-12)
    # the rows with y present are another population: the score there differs
    both = finite_rows(table, ("x", "g", "y"))
    assert res[0].synthetic_after != pytest.approx(own.synthetic_value(both), abs=1e-4)
    assert abs(res[0].real_noisy - res[0].synthetic_after) < 0.01  # one table: same accuracy
