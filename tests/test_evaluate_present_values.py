"""The curator's report measures a requirement as compile does: over the rows where its
columns are present (a ``missing: keep`` column's empty cells are not values)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dpql.data.codec import encode_frame
from dpql.domain import CategoricalColumn, Domain, NumericColumn, numeric_edges
from dpql.evaluate.models import check_requirement, tstr_encoded
from dpql.ir.queries import (
    CatIn,
    CorrRequirement,
    MeanRequirement,
    ModelRequirement,
    Tolerance,
)


def test_mean_and_corr_skip_the_empty_cells() -> None:
    domain = Domain((
        NumericColumn("x", 0.0, 10.0, False, numeric_edges(0.0, 10.0, False, 5), nullable=True),
        NumericColumn("y", 0.0, 10.0, False, numeric_edges(0.0, 10.0, False, 5), nullable=True),
        CategoricalColumn("g", ("a", "b"), nullable=True),
    ))  # fmt: skip
    rng = np.random.default_rng(0)
    x = rng.uniform(2, 9, 2000)
    y = np.clip(x + rng.normal(0, 1, 2000), 0, 10)
    x[rng.random(2000) < 0.3] = np.nan  # empty cells, most of them far from the mean
    df = pd.DataFrame({"x": x, "y": y, "g": rng.choice(["a", "b"], 2000)})
    table = encode_frame(df, domain).table
    mean = MeanRequirement("x", CatIn("g", frozenset({0})), Tolerance(within=0.1))
    corr = CorrRequirement("x", "y", Tolerance(within=0.1))
    got_mean = check_requirement(mean, table, table).real
    got_corr = check_requirement(corr, table, table).real
    present = ~np.isnan(x)
    assert got_mean == pytest.approx(np.nanmean(x[df.g.to_numpy() == "a"]), abs=1e-9)
    assert got_corr == pytest.approx(np.corrcoef(x[present], y[present])[0, 1], abs=1e-9)


def test_tstr_scores_a_nullable_binary_label_over_its_present_rows() -> None:
    """A two-valued label under ``missing: keep`` is a binary problem over the rows where it is
    present, as the logistic requirement is: its null code is not a third class that F1 and
    AUC average in."""
    domain = Domain((
        NumericColumn("x", 0.0, 1.0, False, numeric_edges(0.0, 1.0, False, 4)),
        CategoricalColumn("y", ("0", "1"), nullable=True),
    ))  # fmt: skip
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, 400)
    y = np.where(x > 0.5, "1", "0").astype(object)
    y[:3] = None  # empty label cells: the rows are left out, as pandas and sklearn users do
    table = encode_frame(pd.DataFrame({"x": x, "y": y}), domain).table
    for model in ("logistic", "hgb"):
        s = tstr_encoded(table, table, "y", model)
        assert s.accuracy > 0.95
        assert s.f1 > 0.95
        assert s.auc > 0.95
    req = ModelRequirement("logistic", "y", ("x",), Tolerance(within=0.05))
    assert check_requirement(req, table, table).synthetic > 0.9  # the requirement's own check


def test_tstr_scores_a_table_without_a_present_label() -> None:
    """A synthetic table whose label is empty in every row trains nothing; it is scored, not
    a crash."""
    domain = Domain((
        NumericColumn("x", 0.0, 1.0, False, numeric_edges(0.0, 1.0, False, 4)),
        CategoricalColumn("y", ("0", "1"), nullable=True),
    ))  # fmt: skip
    x = np.linspace(0, 1, 40)
    test = encode_frame(pd.DataFrame({"x": x, "y": np.where(x > 0.5, "1", "0")}), domain).table
    empty = encode_frame(pd.DataFrame({"x": x, "y": [None] * 40}), domain).table
    s = tstr_encoded(empty, test, "y", "logistic")
    assert 0.0 <= s.accuracy <= 1.0


def test_a_model_requirement_is_checked_over_the_rows_where_its_columns_are_present() -> None:
    """As compile tests it (``dpql.postprocess.accept.finite_rows``): the model is fitted and
    scored where its label and features are present, a two-valued label's F1 that of its
    positive value (not a macro average with the null code)."""
    domain = Domain((
        NumericColumn("x", 0.0, 1.0, False, numeric_edges(0.0, 1.0, False, 4), nullable=True),
        CategoricalColumn("y", ("0", "1"), nullable=True),
    ))  # fmt: skip
    rng = np.random.default_rng(1)
    x = rng.uniform(0, 1, 400)
    y = np.where(x > 0.5, "1", "0").astype(object)
    x[rng.random(400) < 0.2] = np.nan
    y[rng.random(400) < 0.05] = None
    table = encode_frame(pd.DataFrame({"x": x, "y": y}), domain).table
    req = ModelRequirement("logistic", "y", ("x",), Tolerance(metric="f1", op=">=", bound=0.5))
    check = check_requirement(req, table, table)
    assert check.real > 0.9 and check.synthetic > 0.9
