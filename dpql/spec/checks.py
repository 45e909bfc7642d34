"""Checks of a validated spec that the pydantic models cannot express alone: numeric bounds and
bins (finite, representable, not finer than float resolution), category lists, the missing-value
rules, and the privacy section. Each returns located diagnostics; nothing reads data."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Literal

from dpql.diagnostics import (
    Diagnostic,
    did_you_mean,
)
from dpql.spec.columns import CategoricalSpec, NumericSpec
from dpql.spec.models import PHASES_OF_METHOD, ReleaseSpec
from dpql.spec.yamlpos import (
    Path_,
    YamlDoc,
)

_SUFFIX_FORMAT: dict[str, Literal["csv", "parquet"]] = {
    ".csv": "csv",
    ".csv.gz": "csv",
    ".parquet": "parquet",
    ".pq": "parquet",
}


def implied_format(path: str) -> Literal["csv", "parquet"] | None:
    """The data format a file name implies, or None."""
    name = path.lower()
    return next((f for suffix, f in _SUFFIX_FORMAT.items() if name.endswith(suffix)), None)


def dotted(path: Sequence[str | int]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "the document"


def spec_checks(spec: ReleaseSpec, doc: YamlDoc) -> list[Diagnostic]:
    """Cross-field checks of a release spec, each positioned at the value to fix."""
    out: list[Diagnostic] = []
    for name, col in spec.columns.items():
        here = ("schema", name)
        if isinstance(col, NumericSpec):
            out += _numeric_checks(col, here, doc)
        else:
            out += _categorical_checks(col, here, doc)
        out += _missing_checks(col, spec.missing, here, doc)
        out += _missing_values_checks(col, here, doc)
    out += _error_rule_checks(spec, doc)
    out += _guidance(spec, doc)
    out += _privacy_checks(spec, doc)
    data = spec.data
    if data.format is None and implied_format(data.path) is None:
        out.append(
            Diagnostic(
                "E110",
                f"cannot tell the format of '{data.path}' from its extension",
                doc.value_pos(("data", "path")),
                "add 'format: csv' or 'format: parquet' under data",
            )
        )
    if implied_format(spec.output.path) is None:  # the table is written as its name says
        out.append(
            Diagnostic(
                "E110",
                f"cannot tell the format of the table '{spec.output.path}' from its extension",
                doc.value_pos(("output", "path")),
                "name the table *.csv, *.csv.gz or *.parquet: it is written in that format, "
                "and dpql evaluate and other readers tell it by that name",
            )
        )
    return out


#: A bin must span at least this many representable doubles (ulps at its magnitude), so that
#: values in it, their [0, 1] scale and the bin edges stay distinct (spec/language.md §9).
MIN_BIN_ULPS = 1024


def _too_fine(lo: float, hi: float, bins: int) -> str | None:
    """Why ``bins`` equal bins over ``[lo, hi]`` cannot be represented, or None."""
    span = hi - lo
    if not math.isfinite(span):
        return f"max - min overflows ({hi:g} - {lo:g} is not a finite number)"
    ulp = math.ulp(max(abs(lo), abs(hi)))
    width = span / bins
    if width < MIN_BIN_ULPS * ulp:
        what = "the range" if bins == 1 else f"each of the {bins:,} bins"
        return (
            f"{what} would be {width:.3g} wide at magnitude {max(abs(lo), abs(hi)):.3g}, where "
            f"doubles are {ulp:.3g} apart: values could not be told apart (a bin must span "
            f"at least {MIN_BIN_ULPS:,} representable values)"
        )
    return None


def _numeric_checks(col: NumericSpec, here: Path_, doc: YamlDoc) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    if col.min >= col.max:
        out.append(
            Diagnostic(
                "E104",
                f"min ({col.min:g}) must be below max ({col.max:g}) in '{dotted(here)}'",
                doc.value_pos((*here, "max")),
            )
        )
    else:
        top = col.max + 1 if col.integer else col.max
        why = _too_fine(col.min, top, (col.bins or 1) if col.edges is None else 1)
        if why is not None:
            out.append(
                Diagnostic(
                    "E104",
                    f"bounds of '{dotted(here)}' unusable: {why}",
                    doc.value_pos((*here, "max")),
                    "declare bounds that fit the values (rescale or shift the column if "
                    "needed), or use fewer bins",
                )
            )
    if col.integer:
        for key in ("min", "max"):
            value = getattr(col, key)
            if not float(value).is_integer():
                out.append(
                    Diagnostic(
                        "E104",
                        f"{key} of integer column '{here[-1]}' must be a whole number",
                        doc.value_pos((*here, key)),
                    )
                )
    if col.edges is None:
        return out
    edges = col.edges
    if doc.has((*here, "bins")):
        out.append(
            Diagnostic(
                "E105",
                f"'{dotted(here)}' gives both bins and edges",
                doc.key_pos((*here, "bins")),
                "keep one of them",
            )
        )
    for i in range(1, len(edges)):
        if edges[i] <= edges[i - 1]:
            out.append(
                Diagnostic(
                    "E105",
                    f"edges must be strictly increasing: {edges[i]:g} follows {edges[i - 1]:g}",
                    doc.value_pos((*here, "edges", i)),
                )
            )
            return out
        why = _too_fine(edges[i - 1], edges[i], 1)
        if why is not None:
            out.append(
                Diagnostic(
                    "E105",
                    f"bin [{edges[i - 1]:g}, {edges[i]:g}) unusable: {why}",
                    doc.value_pos((*here, "edges", i)),
                    "declare edges further apart (rescale or shift the column if needed)",
                )
            )
            return out
    span = col.max - col.min
    if (
        math.isfinite(span)
        and span > 0
        and (edges[0] < col.min - span or edges[-1] > col.max + span)
    ):
        i = 0 if edges[0] < col.min - span else len(edges) - 1
        out.append(
            Diagnostic(
                "E105",
                f"edge {edges[i]:g} lies far outside [min, max] = [{col.min:g}, {col.max:g}]: "
                "values are clipped to the bounds, so bins out there stay empty",
                doc.value_pos((*here, "edges", i)),
                "the outer edges may pass the bounds by at most max - min; use min and max",
            )
        )
    if edges[0] > col.min:
        out.append(
            Diagnostic(
                "E105",
                f"first edge {edges[0]:g} is above min {col.min:g}: values in "
                f"[{col.min:g}, {edges[0]:g}) would have no bin",
                doc.value_pos((*here, "edges", 0)),
            )
        )
    if edges[-1] < col.max:
        out.append(
            Diagnostic(
                "E105",
                f"last edge {edges[-1]:g} is below max {col.max:g}: values above it would "
                "have no bin",
                doc.value_pos((*here, "edges", len(edges) - 1)),
            )
        )
    return out


def _categorical_checks(col: CategoricalSpec, here: Path_, doc: YamlDoc) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    seen: set[str] = set()
    for i, value in enumerate(col.values):
        if value in seen:
            out.append(
                Diagnostic(
                    "E106",
                    f"category '{value}' is listed twice in '{dotted(here)}'",
                    doc.value_pos((*here, "values", i)),
                    "categories must be unique: their position is their code",
                )
            )
        seen.add(value)
    if col.other is not None and col.other not in seen:
        out.append(
            Diagnostic(
                "E109",
                f"other category '{col.other}' is not one of the values of '{here[-1]}'",
                doc.value_pos((*here, "other")),
                did_you_mean(col.other, col.values) or "add it to values",
            )
        )
    return out


_NO_ERROR_RULE = (
    "use missing: keep (missingness becomes a public null value, synthesized and written back "
    "as an empty cell), drop (the row is left out; data.rows stays the public count), fill (a "
    "public value) or, for a categorical column, other (its catch-all category); run "
    "'dpql validate SPEC' (curator-only) for the strict look at empty and undeclared cells"
)


def _error_rule_checks(spec: ReleaseSpec, doc: YamlDoc) -> list[Diagnostic]:
    """E109 for ``missing: error``: whether a release happens would depend on one record."""
    where: list[tuple[str | int, ...]] = []
    if "missing" in spec.model_fields_set and spec.missing == "error":
        where.append(("missing",))
    where += [("schema", n, "missing") for n, c in spec.columns.items() if c.missing == "error"]
    return [
        Diagnostic(
            "E109",
            "missing: error is not a rule: a release that fails on one empty or undeclared "
            "cell reveals that cell's row",
            doc.value_pos(path),
            _NO_ERROR_RULE,
        )
        for path in where
    ]


def _missing_checks(
    col: NumericSpec | CategoricalSpec, default: str, here: Path_, doc: YamlDoc
) -> list[Diagnostic]:
    rule = col.missing or default
    out: list[Diagnostic] = []
    if rule == "other" and (isinstance(col, NumericSpec) or col.other is None):
        out.append(
            Diagnostic(
                "E109",
                f"missing: other needs a categorical column with an 'other' category "
                f"('{here[-1]}' has none)",
                doc.value_pos((*here, "missing")),
                "declare 'other: <one of values>' or use missing: fill",
            )
        )
    if rule == "fill" and col.fill is None:
        out.append(
            Diagnostic(
                "E109",
                f"missing: fill needs a 'fill' value in '{dotted(here)}'",
                doc.value_pos((*here, "missing")),
                "add 'fill: <value>'",
            )
        )
    if col.fill is None:
        return out
    fill_pos = doc.value_pos((*here, "fill"))
    if rule != "fill":
        out.append(
            Diagnostic(
                "E109",
                f"'fill' is set but missing is '{rule}' in '{dotted(here)}'",
                fill_pos,
                "set 'missing: fill' or remove 'fill'",
            )
        )
    elif isinstance(col, CategoricalSpec) and col.fill not in col.values:
        out.append(
            Diagnostic(
                "E109",
                f"fill category '{col.fill}' is not one of the values of '{here[-1]}'",
                fill_pos,
                did_you_mean(col.fill, col.values),
            )
        )
    elif isinstance(col, NumericSpec) and not col.min <= col.fill <= col.max:
        out.append(
            Diagnostic("E109", f"fill {col.fill:g} is outside [{col.min:g}, {col.max:g}]", fill_pos)
        )
    elif isinstance(col, NumericSpec) and col.integer and not float(col.fill).is_integer():
        out.append(
            Diagnostic(
                "E109", f"fill {col.fill:g} is not a whole number (integer column)", fill_pos
            )
        )
    return out


def _missing_values_checks(
    col: NumericSpec | CategoricalSpec, here: Path_, doc: YamlDoc
) -> list[Diagnostic]:
    """E113: a declared missing value listed twice, or one that is also a value of the column
    (a category of ``values``, a number in ``[min, max]``): such a cell would be both a value
    and missing, and a released value could not be told from a missing one. A categorical one
    with surrounding whitespace never matches a (stripped) cell."""
    out: list[Diagnostic] = []
    seen: set[str | float] = set()
    if not col.missing_values:
        return out
    values = set(col.values or ()) if isinstance(col, CategoricalSpec) else set()
    for i, value in enumerate(col.missing_values):
        pos = doc.value_pos((*here, "missing_values", i))
        shown = f"'{value}'" if isinstance(value, str) else f"{value:g}"
        if value in seen:
            out.append(
                Diagnostic(
                    "E113",
                    f"missing value {shown} is listed twice in '{dotted(here)}'",
                    pos,
                    "list each missing value once",
                )
            )
        seen.add(value)
        if isinstance(col, CategoricalSpec):
            if value in values:
                out.append(
                    Diagnostic(
                        "E113",
                        f"missing value {shown} of '{here[-1]}' is also one of its values: a "
                        "cell holding it would be both a category and missing",
                        pos,
                        f"remove {shown} from values (or from missing_values)",
                    )
                )
            elif value != value.strip(" \t\r\n"):
                out.append(
                    Diagnostic(
                        "E113",
                        f"missing value {value!r} of '{here[-1]}' has surrounding whitespace: "
                        "cells are compared after stripping theirs, so it would never match",
                        pos,
                        f"write {value.strip()!r}",
                    )
                )
        elif col.min <= value <= col.max:
            out.append(
                Diagnostic(
                    "E113",
                    f"missing value {shown} of '{here[-1]}' lies inside its bounds "
                    f"[{col.min:g}, {col.max:g}]: the released table may hold {shown} as a "
                    "value, which a reader could not tell from a missing cell",
                    pos,
                    "move min or max so the missing value lies outside the bounds (values "
                    "beyond them are clipped), or remove it from missing_values",
                )
            )
    return out


def _privacy_checks(spec: ReleaseSpec, doc: YamlDoc) -> list[Diagnostic]:
    p, at = spec.privacy, ("privacy",)
    out: list[Diagnostic] = []
    if p.epsilon is not None and p.rho is not None:
        out.append(
            Diagnostic(
                "E107",
                "privacy gives both epsilon and rho",
                doc.key_pos((*at, "rho")),
                "give epsilon and delta, or rho (with an optional delta), not both",
            )
        )
    elif p.epsilon is not None and p.delta is None:
        out.append(
            Diagnostic(
                "E107",
                "epsilon needs a delta: dpql's mechanisms are Gaussian, (epsilon, delta)-DP",
                doc.key_pos((*at, "epsilon")),
                "add 'delta: ...' under privacy (commonly below 1/rows)",
            )
        )
    elif p.epsilon is None and p.rho is None:
        out.append(
            Diagnostic(
                "E107",
                "privacy needs a budget: epsilon and delta, or rho",
                doc.key_pos(at),
                "add 'epsilon: 1.0' and 'delta: 1e-9' under privacy",
            )
        )
    if p.delta is not None and p.delta >= 1.0 / spec.data.rows:
        out.append(
            Diagnostic(
                "W101",
                f"delta {p.delta:g} is not below 1/rows = {1.0 / spec.data.rows:.3g}: a "
                "mechanism could reveal a whole row with probability delta",
                doc.value_pos((*at, "delta")),
                "use delta well below 1/rows, e.g. 1/rows^2",
                "warning",
            )
        )
    if p.split is None:
        return out
    method = spec.synthesizer.method
    allowed = PHASES_OF_METHOD[method]
    for phase in p.split:
        if phase not in allowed:
            out.append(
                Diagnostic(
                    "E108",
                    f"phase '{phase}' is not a phase of the {method} synthesizer",
                    doc.key_pos((*at, "split", phase)),
                    f"{method} has phases: {', '.join(sorted(allowed))}"
                    if allowed
                    else f"{method} spends no budget of its own: remove split",
                )
            )
    total = sum(p.split.values())
    if not math.isclose(total, 1.0, rel_tol=0, abs_tol=1e-9):
        out.append(
            Diagnostic(
                "E108",
                f"split shares sum to {total:g}, not 1",
                doc.key_pos((*at, "split")),
            )
        )
    return out


# Names of integer columns that usually hold codes or calendar values rather than quantities:
# occupation / industry / area codes, identifiers, survey years and waves. Numeric bins over
# such a column put unrelated codes in one bin and synthesize codes that may not exist.
_CODE_NAME = re.compile(
    r"(^|_)(year|yr|code|codes|id|occ|occupation|industry|ind|naics|soc|isco|isic|fips|zip|"
    r"postcode|county|state|region|country|wave|round|cohort|class|type|status|cat|category)"
    r"($|_)|(code|year)$",
    re.IGNORECASE,
)


def _looks_like_codes(name: str, col: NumericSpec) -> bool:
    """An integer column whose name says codes or years, or whose bounds are calendar years,
    binned coarser than one integer per bin (so bins mix codes): a guess from the spec."""
    if not col.integer or col.min is None or col.max is None:
        return False
    integers = int(math.floor(col.max) - math.ceil(col.min)) + 1
    bins = len(col.edges) - 1 if col.edges is not None else (col.bins or 1)
    if bins >= integers:
        return False  # one integer per bin: no code is invented
    years = 1800 <= col.min < col.max <= 2100
    return years or bool(_CODE_NAME.search(name))


def _guidance(spec: ReleaseSpec, doc: YamlDoc) -> list[Diagnostic]:
    """Warnings from public facts about what the release will represent: ``W102`` a
    ``missing: drop`` column (the table describes the rows where it is present), ``W103`` an
    integer column that looks like codes or years binned numerically."""
    out: list[Diagnostic] = []
    dropped = [n for n, c in spec.columns.items() if (c.missing or spec.missing) == "drop"]
    if dropped:
        name = dropped[0]
        at = ("schema", name, "missing") if spec.columns[name].missing else ("missing",)
        if not doc.has(at):  # the default rule under method: gan
            at = ("synthesizer", "method")
        names = ", ".join(dropped)
        out.append(
            Diagnostic(
                "W102",
                f"missing: drop on {names}: the table describes the rows where "
                f"{names} {'is' if len(dropped) == 1 else 'are'} present (the complete cases), "
                "not every row; every statistic is over those rows",
                doc.value_pos(at),
                "use missing: keep to release every row with its empty cells (docs/missing.md)",
                "warning",
            )
        )
    for name, col in spec.columns.items():
        if isinstance(col, NumericSpec) and _looks_like_codes(name, col):
            out.append(
                Diagnostic(
                    "W103",
                    f"integer column '{name}' looks like codes or years: its numeric bins put "
                    "several values in one bin, and the release draws values inside a bin that "
                    "may not exist in the data",
                    doc.key_pos(("schema", name)),
                    f"declare '{name}' categorical with its codes as values (or a values_file "
                    "and a group file for many codes), or give it one bin per integer",
                    "warning",
                )
            )
    return out
