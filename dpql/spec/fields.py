"""Field types, limits and the base model shared by the spec's pydantic models
(:mod:`dpql.spec.models`, :mod:`dpql.spec.columns`).

The limits bound the work and memory of loading and planning a spec and keep every number in
the range where dpql's arithmetic is exact enough (spec/language.md §9; E101, E111).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

DEFAULT_BINS = 10  # numeric columns with neither bins nor edges

MAX_ROWS = 10**10  # data.rows and synthesizer rows
MAX_BINS = 1_000_000  # bins of a numeric column (= the largest marginal, E305)
MAX_EDGES = MAX_BINS + 1
MAX_NAME_CHARS = 200
MAX_DESCRIPTION_CHARS = 10_000
MAX_COLUMNS = 1_000
MAX_WORKLOAD_ITEMS = 1_000
MAX_REQUIREMENTS = 200
MAX_DSL_CHARS = 10_000  # one workload item or requirement
MAX_MISSING_VALUES = 100  # a column's declared missing values (sentinels)
MIN_EPSILON, MAX_EPSILON = 1e-6, 1e6
MIN_RHO, MAX_RHO = 1e-12, 1e6
MIN_DELTA, MAX_DELTA = 1e-100, 0.5
#: Every share of a budget (postprocess.share, the synthesizers' phase shares): a smaller one
#: underflows the noise scale it is divided into (a division by zero at plan time).
MIN_SHARE, MAX_SHARE = 0.001, 0.999
MIN_SPLIT = 1e-6  # privacy.split shares (exact to 1e-6)

Probability = Annotated[float, Field(gt=0, lt=1)]
Share = Annotated[float, Field(ge=MIN_SHARE, le=MAX_SHARE, allow_inf_nan=False)]


NonEmptyStr = Annotated[str, Field(min_length=1)]
MAX_PATH_CHARS = 4096


def _path_text(value: str) -> str:
    if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in value):
        raise ValueError("should be a path without control characters (a NUL byte, a line break)")
    return value


#: A file path written in a spec or policy: no control characters (a NUL byte cannot name a
#: file; an escape sequence would be printed in messages), at most 4,096 characters.
PathStr = Annotated[str, Field(min_length=1, max_length=MAX_PATH_CHARS), AfterValidator(_path_text)]
Finite = Annotated[float, Field(allow_inf_nan=False)]
Rows = Annotated[int, Field(gt=0, le=MAX_ROWS)]
Epsilon = Annotated[float, Field(ge=MIN_EPSILON, le=MAX_EPSILON, allow_inf_nan=False)]
Rho = Annotated[float, Field(ge=MIN_RHO, le=MAX_RHO, allow_inf_nan=False)]
Delta = Annotated[float, Field(ge=MIN_DELTA, le=MAX_DELTA)]
SplitShare = Annotated[float, Field(ge=MIN_SPLIT, le=1, allow_inf_nan=False)]
DslStr = Annotated[str, Field(min_length=1, max_length=MAX_DSL_CHARS)]

MissingRule = Literal["error", "drop", "fill", "other", "keep"]


class SpecModel(BaseModel):
    """Base of every spec, policy and project-file model: unknown keys are errors, values are
    frozen, and types are strict."""

    # strict: the YAML loader already types scalars (YAML 1.2 core schema), so "1" is never 1.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
