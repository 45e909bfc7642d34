"""Pydantic models of the spec's ``schema`` entries: a numeric column (public bounds and bins)
and a categorical column (public values, an optional public grouping). Checks across fields
(min < max, edges covering the bounds, fill values in range) run in :mod:`dpql.spec.load`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from dpql.spec.fields import (
    DEFAULT_BINS,
    MAX_BINS,
    MAX_EDGES,
    MAX_MISSING_VALUES,
    Finite,
    MissingRule,
    NonEmptyStr,
    PathStr,
    SpecModel,
)


class NumericSpec(SpecModel):
    """A numeric column with public bounds and public bins (``bins`` or ``edges``)."""

    type: Literal["numeric"]
    min: Finite = Field(description="Public lower bound (values below are clipped).")
    max: Finite = Field(description="Public upper bound (values above are clipped).")
    integer: bool = False
    bins: Annotated[int, Field(gt=0, le=MAX_BINS)] | None = Field(
        None, description=f"Equal-width bins over [min, max]; {DEFAULT_BINS} when no edges."
    )
    edges: list[Finite] | None = Field(
        None,
        min_length=2,
        max_length=MAX_EDGES,
        description="Strictly increasing bin edges with edges[0] <= min and edges[-1] >= max.",
    )
    missing: MissingRule | None = Field(None, description="Overrides the top-level rule.")
    fill: Finite | None = Field(None, description="Value for missing: fill (in [min, max]).")
    missing_values: list[Finite] | None = Field(
        None,
        min_length=1,
        max_length=MAX_MISSING_VALUES,
        description="Public numbers the data uses for unknown (0, -9, 99), each outside [min, "
        "max] and listed once: a cell whose number equals one (as a double) is a missing cell, "
        "like an empty one, under the column's missing rule. A per-record rule, so the "
        "neighbouring relation and every sensitivity are unchanged (docs/missing.md).",
    )

    @model_validator(mode="before")
    @classmethod
    def _default_bins(cls, data: Any) -> Any:
        # Filled before validation so an implicit default and `bins: 10` hash the same.
        if isinstance(data, dict) and data.get("bins") is None and data.get("edges") is None:
            return {**data, "bins": DEFAULT_BINS}
        return data


MAX_CATEGORIES = 1_000_000  # values of one categorical column (inline or from values_file)


class GroupSpec(SpecModel):
    """A public grouping of a categorical column's values (``dpql.spec.files``): a CSV file
    mapping each fine value to its coarse group. The workload sees the column at the coarse
    level; the released table keeps fine values, drawn uniformly within each group.
    ``sha256`` and ``levels`` (the group of each value, in ``values`` order) are filled in when
    the spec is loaded, so the normalised spec pins the file and is self-contained."""

    file: PathStr | None = Field(
        None, description="CSV with a header: a fine-value column and a group column."
    )
    fine: NonEmptyStr | None = Field(None, description="Fine-value column; default the first.")
    coarse: NonEmptyStr | None = Field(None, description="Group column; default the second.")
    sha256: str | None = Field(
        None,
        description="Filled in at load: sha256 of the file; given, the file must have it.",
    )
    levels: list[NonEmptyStr] | None = Field(
        None, max_length=MAX_CATEGORIES, description="Group of each value (filled in at load)."
    )


class CategoricalSpec(SpecModel):
    """A categorical column; the public ``values`` fix the codes (index in the list). The values
    may come from a public ``values_file`` (one per line, or ``values_column`` of a CSV), read
    when the spec is loaded (never the data file); its sha256 goes into ``values_sha256`` and
    the values into the normalised spec."""

    type: Literal["categorical"]
    values: list[NonEmptyStr] | None = Field(
        None,
        min_length=1,
        max_length=MAX_CATEGORIES,
        description="All categories, unique (or give values_file).",
    )
    values_file: PathStr | None = Field(
        None, description="Public file of the values, relative to the spec: one per line."
    )
    values_column: NonEmptyStr | None = Field(
        None, description="With values_file: read this column of a CSV (with a header)."
    )
    values_sha256: str | None = Field(
        None,
        description="Filled in at load: sha256 of values_file; given, the file must have it.",
    )
    group: GroupSpec | None = Field(
        None, description="Public grouping: marginals use the groups, the output fine values."
    )
    other: str | None = Field(
        None, description="Catch-all category (one of values) for unlisted values."
    )
    missing: MissingRule | None = Field(None, description="Overrides the top-level rule.")
    fill: str | None = Field(None, description="Category for missing: fill (one of values).")
    missing_values: list[NonEmptyStr] | None = Field(
        None,
        min_length=1,
        max_length=MAX_MISSING_VALUES,
        description="Public texts the data uses for unknown (NA, ., 99), none of them among "
        "values and each listed once: a cell whose text (stripped of surrounding whitespace) "
        "equals one is a missing cell, like an empty one, under the column's missing rule. A "
        "per-record rule, so the neighbouring relation and every sensitivity are unchanged "
        "(docs/missing.md).",
    )

    @field_validator("values", "missing_values", mode="before")
    @classmethod
    def _integer_codes_are_names(cls, v: Any) -> Any:
        # `values: [1, 2, 3]` names coded categories; data files read them as text.
        if isinstance(v, list):
            return [str(x) if isinstance(x, int) and not isinstance(x, bool) else x for x in v]
        return v


ColumnSpec = Annotated[NumericSpec | CategoricalSpec, Field(discriminator="type")]
