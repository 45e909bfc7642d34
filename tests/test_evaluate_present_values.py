"""The curator's report measures a requirement as compile does: over the rows where its
columns are present (a ``missing: keep`` column's empty cells are not values)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dpql.data.codec import encode_frame
from dpql.domain import CategoricalColumn, Domain, NumericColumn, numeric_edges
from dpql.evaluate.models import check_requirement
from dpql.ir.queries import CatIn, CorrRequirement, MeanRequirement, Tolerance


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
