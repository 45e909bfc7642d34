"""The registry of every diagnostic code dpql reports: one :class:`DiagnosticCode` per code.

A code's range says which stage reports it (:data:`SECTIONS`): ``E0xx``/``E1xx``/``W1xx`` the
spec and policy loader, ``E15x``-``E19x``/``W15x``-``W19x`` planning, ``E2xx`` the DSL parser,
``E3xx``/``W3xx`` DSL semantics, ``E4xx`` the private data, ``E5xx``/``W5xx`` requirements and
post-processing, ``E6xx`` evaluation and release-time refusals, ``P0xx`` policy violations
(``dpql check``), ``V0xx`` record verification (``dpql verify``). ``W`` codes are warnings,
every other code is an error. Codes are stable: a code never changes meaning, and tests match on
them. A code no longer reported stays here marked ``reserved`` so that it is never reused.

Each entry says where the code is reported: the ``dpql`` commands that can print it and the
modules that raise it (``tests/test_diagnostics_registry.py`` reads the source and checks that
every code literal in ``dpql/`` is registered, that the modules listed are the ones that use it,
and that ``docs/diagnostics.md`` holds the tables this module renders).

The tables of ``docs/diagnostics.md`` are generated from here; after changing an entry run::

    python -m dpql.diagnostics_registry            # rewrites the tables in docs/diagnostics.md
    python -m dpql.diagnostics_registry --check    # exit 1 if they are stale

Views kept for their importers: :data:`dpql.spec.codes.CODES` (the loader and policy codes) and
:data:`dpql.codec.CODES` (the data codes), both ``{code: title}``.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Literal

Severity = Literal["error", "warning"]

CODE_PATTERN = re.compile(r"[EWPV]\d{3}")

# ``dpql`` commands that report a code (see README "The command line")
PLANS = ("plan", "check", "compile", "evaluate")  # every command that loads a spec and plans it
READS_DATA = ("compile", "evaluate")
CHECK = ("check",)
COMPILE = ("compile",)
EVALUATE = ("evaluate",)
VERIFY = ("verify",)


@dataclass(frozen=True)
class DiagnosticCode:
    """One stable diagnostic code.

    ``title`` is one line; ``details`` (when the docs need more) replaces it in the docs table.
    ``points`` is where the diagnostic's position points (``None``: no position, or the section
    does not say). ``commands`` are the ``dpql`` subcommands that can report it, ``modules``
    the modules (dotted names) that raise it. A ``reserved`` code is no longer reported (its
    ``modules`` are empty) and must never be reused for another meaning."""

    code: str
    severity: Severity
    title: str
    commands: tuple[str, ...]
    modules: tuple[str, ...]
    points: str | None = None
    details: str | None = None
    reserved: bool = False

    def __post_init__(self) -> None:
        if not CODE_PATTERN.fullmatch(self.code):
            raise ValueError(f"malformed diagnostic code {self.code!r}")
        expected = "warning" if self.code[0] == "W" else "error"
        if self.severity != expected:
            raise ValueError(f"{self.code}: {self.code[0]} codes are {expected}s")
        if self.reserved == bool(self.modules):
            raise ValueError(f"{self.code}: a code is either reported by modules or reserved")

    @property
    def section(self) -> str:
        return section_of(self.code)

    @property
    def meaning(self) -> str:
        """The docs table's text: ``details`` when given, else ``title``."""
        return self.details or self.title


@dataclass(frozen=True)
class Section:
    """A range of codes and the stage that reports them (one table of the docs)."""

    key: str
    ranges: str
    layer: str


SECTIONS: tuple[Section, ...] = (
    Section(
        "spec",
        "`E0xx`, `E1xx`, `W1xx`",
        "YAML and document structure; release-spec and policy fields (ranges, choices, bounds, "
        "bins, budget form); warnings about spec fields (loading succeeds)",
    ),
    Section(
        "planning",
        "`E15x`-`E19x`, `W15x`-`W19x`",
        "planning: budget conversion, backend options, estimated resources",
    ),
    Section("dsl", "`E2xx`, `E3xx`, `W3xx`", "DSL syntax; DSL semantics (unknown column, ...)"),
    Section("data", "`E4xx`", "data (values outside the declared domain, missing values, ...)"),
    Section("postprocess", "`E5xx`, `W5xx`", "requirements, post-processing, acceptance tests"),
    Section(
        "release",
        "`E6xx`",
        "evaluation input and release-time refusals (the privacy odometer, the curator file)",
    ),
    Section("policy", "`P0xx`", "policy violations reported by `dpql check --policy`"),
    Section("verify", "`V0xx`", "provenance-record problems reported by `dpql verify`"),
)


def section_of(code: str) -> str:
    """The :data:`SECTIONS` key of ``code``, from its range."""
    kind, number = code[0], int(code[1:])
    if kind == "P":
        return "policy"
    if kind == "V":
        return "verify"
    hundreds = number // 100
    if hundreds == 1 and number >= 150:
        return "planning"
    return {0: "spec", 1: "spec", 2: "dsl", 3: "dsl", 4: "data", 5: "postprocess", 6: "release"}[
        hundreds
    ]


def _error(code: str, title: str, commands: tuple[str, ...], *modules: str, **kw: str) -> None:
    _add(DiagnosticCode(code, "error", title, commands, tuple(modules), **kw))


def _warning(code: str, title: str, commands: tuple[str, ...], *modules: str, **kw: str) -> None:
    _add(DiagnosticCode(code, "warning", title, commands, tuple(modules), **kw))


_REGISTRY: dict[str, DiagnosticCode] = {}


def _add(entry: DiagnosticCode) -> None:
    if entry.code in _REGISTRY:
        raise ValueError(f"{entry.code} registered twice")
    _REGISTRY[entry.code] = entry


# ------------------------------------------------------------------------------------------------
# spec and policy loading (E0xx, E1xx, W1xx)

LOAD, YAMLPOS = "dpql.spec.load", "dpql.spec.yamlpos"

_error("E001", "YAML syntax error", PLANS, YAMLPOS, points="the character PyYAML stopped at")
_error(
    "E002",
    "duplicate mapping key",
    PLANS,
    YAMLPOS,
    details="duplicate mapping key; the message names the first definition's line and column",
    points="the second key",
)
_error(
    "E003",
    "empty document, or the document is not a mapping",
    PLANS,
    LOAD,
    YAMLPOS,
    points="1:1, or the start of the document",
)
_error(
    "E004",
    "mapping key that is not a plain scalar",
    PLANS,
    YAMLPOS,
    details="mapping key that is not a plain scalar (`? [a, b]`)",
    points="the key",
)
_error(
    "E005",
    "file cannot be read (missing, unreadable, not UTF-8)",
    PLANS,
    "dpql.check",
    LOAD,
    details="file cannot be read (missing, unreadable, not UTF-8): the spec, the policy or the "
    "lifetime ledger",
    points="the file",
)
_error(
    "E006",
    "document over the size limits (characters, nesting depth, values once aliases are "
    "expanded) or with a recursive alias",
    PLANS,
    LOAD,
    YAMLPOS,
    details="document over the limits of `spec/language.md` §9: more than 1,048,576 characters, "
    "nested more than 64 levels (aliases counted where used), more than 1,000,000 values once "
    'aliases are expanded (an "alias bomb" is refused while it is read, not expanded), or an '
    "alias inside the node it names",
    points="1:1, the first value too deep, the alias, or the value that grows too large",
)
_error(
    "E010",
    "unknown key",
    PLANS,
    LOAD,
    details="unknown key; the hint suggests the closest allowed key and lists them all",
    points="the key",
)
_error(
    "E011",
    "required field missing",
    PLANS,
    LOAD,
    details="required field missing (also a column without `type`, a synthesizer without "
    "`method`, an external `budget` without `neighbouring`: the hint explains `replace_one` and "
    "`add_remove`)",
    points="the parent key (top level: the first key)",
)
_error(
    "E012",
    "value has the wrong type",
    PLANS,
    LOAD,
    details='value has the wrong type (`rows: many`, `epsilon: "1.0"`, `integer: yes`)',
    points="the value",
)
_error(
    "E020",
    "malformed privacy-ledger line",
    ("check", "compile"),
    "dpql.check",
    details="malformed privacy-ledger line (not JSON, or a bad record)",
    points="`ledger.jsonl:LINE`",
)
_error(
    "E101",
    "number out of range (epsilon <= 0, delta outside (0, 1), rows <= 0, ...)",
    PLANS,
    LOAD,
    YAMLPOS,
    details="number out of range: `epsilon` outside [1e-6, 1e6], `delta` outside [1e-100, 0.5], "
    "`rows` outside [1, 10^10], `bins` outside [1, 1,000,000], `share` outside [0.001, 0.999], "
    "infinite bounds, an integer literal of more than 100 digits (all ranges: "
    "`spec/language.md` §9)",
    points="the value",
)
_error(
    "E102",
    "value not among the allowed choices (method, type, format, version, ...)",
    PLANS,
    LOAD,
    details="value not among the allowed choices (synthesizer `method`, column `type`, `engine`, "
    "`format`, `dpql` version, split phase name); the hint suggests the closest",
    points="the value",
)
_error(
    "E103",
    "empty list or string where at least one item is required",
    PLANS,
    LOAD,
    details="empty list or string where at least one item is required (`workload`, `schema`, "
    "`values`)",
    points="the value",
)
_error(
    "E104",
    "numeric bounds invalid (min >= max, or non-integral bounds on an integer column)",
    PLANS,
    LOAD,
    details="numeric bounds invalid: `min >= max`, a fractional bound on an `integer: true` "
    "column, `max - min` not finite, or bins narrower than 1,024 representable doubles at the "
    "bounds' magnitude (`[0, 5e-324]`, `[1e15, 1e15 + 0.2]`)",
    points="the bound",
)
_error(
    "E105",
    "bin edges invalid (not strictly increasing or not covering [min, max]), or both bins and "
    "edges given",
    PLANS,
    LOAD,
    details="bin edges invalid: not strictly increasing, `edges[0] > min`, `edges[-1] < max`, a "
    "bin narrower than float resolution, an outer edge more than `max - min` beyond the bounds, "
    "or both `bins` and `edges`",
    points="the edge (or `bins`)",
)
_error(
    "E106",
    "duplicate categorical value",
    PLANS,
    LOAD,
    details="duplicate categorical value (a category's position is its code)",
    points="the second occurrence",
)
_error(
    "E107",
    "privacy budget form invalid (need epsilon and delta, or rho)",
    PLANS,
    LOAD,
    details="privacy budget form invalid: give `epsilon` and `delta`, or `rho` (optionally with "
    "`delta`)",
    points="the offending key",
)
_error(
    "E108",
    "privacy split invalid (unknown phase for the method, or shares not summing to 1)",
    PLANS,
    LOAD,
    details="`privacy.split` invalid: a phase the synthesizer does not have, or shares not "
    "summing to 1",
    points="the phase / `split`",
)
_error(
    "E109",
    "missing-value rule invalid (fill/other value not declared or not in the domain)",
    PLANS,
    LOAD,
    details="missing-value rule invalid: `missing: other` without an `other` category, "
    "`missing: fill` without `fill`, a `fill`/`other` value outside the column's domain",
    points="the rule or value",
)
_error(
    "E110",
    "data format cannot be inferred from the path; set data.format",
    PLANS,
    LOAD,
    details="data format cannot be inferred from the path's extension; set `data.format`",
    points="`data.path`",
)
_error(
    "E111",
    "list or string longer than its limit (name, description, columns, workload items, "
    "requirements, one DSL string)",
    PLANS,
    LOAD,
    details="list or string longer than its limit (`spec/language.md` §9): `name` 200 "
    "characters, `description` 10,000, `schema` 1,000 columns, `workload` 1,000 items, "
    "`requirements` 200, one DSL string 10,000 characters, `edges` 1,000,001",
    points="the value",
)
_warning(
    "W101",
    "delta is not below 1/rows (allowed in the spec; policies usually forbid it)",
    PLANS,
    LOAD,
    details="`delta` is not below `1/rows` (allowed in the spec; policies usually forbid it, see "
    "`P006`)",
    points="`privacy.delta`",
)

# ------------------------------------------------------------------------------------------------
# planning (E15x-E19x, W15x-W19x)

_error(
    "E150",
    "an external table's declared budget leaves nothing of the release budget",
    PLANS,
    "dpql.plan.planner",
    points="the spec file",
)
_error(
    "E151",
    "the privacy budget cannot be converted to zCDP",
    PLANS,
    "dpql.plan.planner",
    details="the privacy budget cannot be converted to zCDP (e.g. an `add_remove` external "
    "epsilon whose charged delta overflows)",
    points="`privacy`",
)
_error(
    "E152",
    "the `gan` synthesizer's options cannot be planned",
    PLANS,
    "dpql.synth.gan.backend",
    details="the `gan` synthesizer's options cannot be planned (noise multipliers the accountant "
    "refuses, such as 1e-300)",
    points="`synthesizer.options`",
)
_RESOURCE_POINTS = (
    "the spec value behind the largest part (`workload`, `synthesizer.rows`, "
    "`synthesizer.options.relaxed_rows`, `synthesizer.options` of a gan, `data.rows`)"
)
_error(
    "E160",
    "the estimated peak memory of `dpql compile` is above the limit",
    PLANS,
    "dpql.plan.resources",
    details="the estimated peak memory of `dpql compile` is above the limit (8 GiB, or "
    "`$DPQL_MEMORY_LIMIT`); the message gives the estimate and its largest parts",
    points=_RESOURCE_POINTS,
)
_warning(
    "W160",
    "the estimated memory is above half the limit, or compile is expected to take over an hour",
    PLANS,
    "dpql.plan.resources",
    details="the estimate is above half the memory limit, or compile is expected to take more "
    "than an hour (figures in the message)",
    points="as `E160`",
)

# ------------------------------------------------------------------------------------------------
# the DSL (E2xx syntax, E3xx/W3xx semantics); the same rows are in spec/language.md §7

PARSER, RESOLVE = "dpql.lang.parser", "dpql.plan.resolve"

for _code, _title in [
    ("E201", "unexpected token (the message lists what was expected)"),
    ("E202", "unexpected end of input (the message lists what was expected)"),
    (
        "E203",
        'unknown workload item or requirement, or one used in the other list (with "did you mean")',
    ),
    ("E204", "character that starts no token"),
    ("E205", "unterminated string or backquoted name"),
    ("E206", "empty item"),
    ("E207", "a whole number was expected (`marginals(2.5)`)"),
    ("E208", "number out of range (`1e999`, or a whole number of more than 18 digits)"),
    ("E209", "expression nested more than 50 levels deep (`not not not ...`)"),
]:
    _error(_code, _title, PLANS, PARSER)

for _code, _title in [
    ("E301", 'unknown column (with "did you mean")'),
    (
        "E302",
        "column of the wrong kind for the construct (`range`, `halfspaces`, `mean`, `corr` need "
        "numeric columns; `by` and `logistic` labels categorical; `linear` labels numeric)",
    ),
    (
        "E303",
        "comparison invalid for the column kind (`in` or a string on a numeric column; `<`, "
        "`<=`, `>`, `>=` on a categorical one)",
    ),
    ("E304", 'value not among the column\'s declared categories (with "did you mean")'),
    ("E305", "marginal with more than 1,000,000 cells (names the largest; use coarser bins)"),
    ("E306", "column repeated in one construct"),
    ("E307", "`k` of `marginals(k)` not between 1 and the number of columns"),
    ("E308", "`logistic` label without exactly 2 values"),
    ("E309", "`halfspaces(m)` or `thresholds m` with `m < 1`"),
    ("E310", "item expanding to more than 1,000,000 queries"),
    (
        "E311",
        "metric unknown for the requirement, or a metric bound on a non-model requirement",
    ),
    ("E312", "`within t` with `t <= 0`"),
    ("E313", "`weight w` with `w <= 0`"),
    ("E314", "some requirements have a `weight` and others do not"),
    (
        "E315",
        "the whole workload expands to more than 1,000,000 queries or 100,000,000 answer cells",
    ),
]:
    _error(_code, _title, PLANS, RESOLVE)

_warning(
    "W301",
    "numeric threshold outside the column's `[min, max]`: values are clipped, so the comparison "
    "is constant",
    PLANS,
    RESOLVE,
)
_warning(
    "W302", "marginal with more cells than `n`: most of its cells will be noise", PLANS, RESOLVE
)

# ------------------------------------------------------------------------------------------------
# the private data (E4xx)

DATA_LOAD, CODEC = "dpql.data.load", "dpql.codec"
SQL_ENGINE = "dpql.data.engines.sql_engine"
DUCKDB, SPARK = "dpql.data.engines.duckdb", "dpql.data.engines.spark"

_error(
    "E401",
    "data file cannot be opened (missing, a directory, no permission)",
    READS_DATA,
    DATA_LOAD,
    points="the file",
)
_error(
    "E402",
    "data format cannot be inferred from the file name",
    READS_DATA,
    DATA_LOAD,
    points="the file",
)
_error(
    "E403",
    "data file is empty, or no rows are left after dropping missing values",
    READS_DATA,
    DATA_LOAD,
    SQL_ENGINE,
    details="data file is empty, has no rows, or no rows are left after `missing: drop`",
    points="the file",
)
_error(
    "E404",
    "a column declared in the schema is absent from the data",
    READS_DATA,
    CODEC,
    details="a column declared in the schema is absent from the data (the data's other column "
    "names are shown only with `--show-values`)",
    points="the header line",
)
_error(
    "E405",
    "categorical cells with values not declared in the schema (and no 'other' catch-all)",
    READS_DATA,
    CODEC,
    details="a categorical column has cells whose value is not among its `values` and no "
    "`other` catch-all: the number of such rows and a row; the hint suggests "
    "`schema.COLUMN.other` (a catch-all chosen without looking at the data), never adding the "
    "value",
    points="that row",
)
_error(
    "E406",
    "a numeric cell is not a finite number, or a column's storage type cannot hold it",
    READS_DATA,
    CODEC,
    details="a numeric cell is not a finite number (the number of such rows and a row, not the "
    "cell), or a column's storage type cannot hold the column",
    points="that row, or the file",
)
_error(
    "E407",
    "missing values in a column whose missing-value rule is 'error'",
    READS_DATA,
    CODEC,
    details="missing cells in a column whose missing-value rule is `error`: their number and the "
    "first row; the hint gives `drop` (n stays the public `data.rows`), `fill` and, for "
    "categorical columns, `other`",
    points="the first such row",
)
_error(
    "E408",
    "missing-value rule names an unknown column or a value outside the domain",
    READS_DATA,
    CODEC,
    details="a missing-value rule names an unknown column, or a `fill`/`other` value outside the "
    "domain (public spec values; the spec loader's `E109` catches these first)",
    points="-",
)
_error(
    "E409",
    "data file is malformed (CSV syntax, gzip, Parquet, text encoding)",
    READS_DATA,
    DATA_LOAD,
    DUCKDB,
    SPARK,
    details="the file is malformed (CSV syntax such as a row with the wrong number of fields, "
    "gzip, Parquet, text encoding); the reader's own message only with `--show-values`",
    points="the line, when known",
)
_error(
    "E410",
    "the measurement engine failed on the data (message from the engine)",
    COMPILE,
    DUCKDB,
    SPARK,
    details="the measurement engine failed on the data (DuckDB or Spark; out of memory or disk, "
    "mostly), or cannot run (Spark without pyspark or Java): the error's class, its message only "
    "with `--show-values`",
    points="the file",
)

# ------------------------------------------------------------------------------------------------
# requirements and post-processing (E5xx, W5xx)

REQUIREMENTS, ACCEPTANCE = "dpql.plan.requirements", "dpql.plan.acceptance"
IPROJ = "dpql.postprocess.iproj"

_error(
    "E501",
    "a requirement names an unknown column, or a column of the wrong kind",
    PLANS,
    REQUIREMENTS,
)
_error(
    "E502",
    "a requirement's value is undefined on the noisy answers (constant column, empty condition)",
    COMPILE,
    REQUIREMENTS,
)
_error(
    "E503",
    "no synthetic row has finite values for the post-processing measures",
    COMPILE,
    IPROJ,
)
_error(
    "E505",
    "a model requirement's metric cannot be DP-tested (`auc`: no public sensitivity)",
    PLANS,
    ACCEPTANCE,
)
_warning(
    "W501",
    "the synthetic table has one distinct row on the measures: post-processing cannot change it",
    COMPILE,
    IPROJ,
)
_warning("W502", "some measures are constant on the synthetic rows and cannot move", COMPILE, IPROJ)
_warning("W503", "synthetic rows with NaN measures get weight 0", COMPILE, IPROJ)
_warning(
    "W504",
    "the measured statistics lie outside what reweighting the synthetic rows can reach",
    COMPILE,
    IPROJ,
)
_warning("W505", "the I-projection solver stopped short of the KKT conditions", COMPILE, IPROJ)
_warning(
    "W506",
    "a tolerance the budget cannot decide, or a bound no table meets",
    PLANS,
    ACCEPTANCE,
    details="a tolerance the budget cannot decide (the hint gives the smallest epsilon that can), "
    "or a bound no table meets",
)
_warning(
    "W507",
    "requirements in a spec without `postprocess`: they are never tested",
    PLANS,
    ACCEPTANCE,
)

# ------------------------------------------------------------------------------------------------
# evaluation and release-time refusals (E6xx)

_error(
    "E601",
    "`dpql evaluate --label` does not name a categorical column of the schema",
    EVALUATE,
    "dpql.evaluate.report",
    details="`dpql evaluate --label` does not name a categorical column of the schema (with a "
    "did-you-mean)",
)
_error(
    "E602",
    "`dpql evaluate` needs scikit-learn and matplotlib, which are not importable",
    EVALUATE,
    "dpql.evaluate.cli",
)
_error(
    "E611",
    "privacy budget exceeded: the run would spend more than the plan allocated (a bug in dpql)",
    COMPILE,
    "dpql.pipeline",
    details="privacy budget exceeded: a mechanism call would have taken the composed spend over "
    "the plan's budget (the ledger is an odometer and refuses it before drawing noise), or the "
    "spend recomputed from the ledger by the accountant exceeds the budget before writing. The "
    "run spent more than the plan allocated, a bug in dpql: report it",
)
_error(
    "E612",
    "the curator file or its HMAC key is unusable",
    READS_DATA,
    "dpql.curator",
    details="the curator file or its HMAC key is unusable: `output.curator` is the path of a "
    "published output, `$DPQL_CURATOR_KEY` is not at least 32 bytes of hex, or the key file "
    "`dpql-curator.key` is not a regular file of mode 0600 (or is malformed)",
)

# ------------------------------------------------------------------------------------------------
# policy violations (P0xx)

for _code, _title, _details in [
    ("P001", "epsilon exceeds the policy's max_epsilon", None),
    ("P002", "delta exceeds the policy's max_delta", "the release's delta exceeds `max_delta`"),
    (
        "P003",
        "the schema has a column the policy forbids",
        "the schema has a column listed in `forbidden_columns` (compared case-insensitively)",
    ),
    (
        "P004",
        "synthesizer or post-processing method not allowed by the policy",
        "the synthesizer or post-processing method is not in `allowed_methods`",
    ),
    ("P005", "a column lacks public bounds (numeric min/max, categorical values)", None),
    (
        "P006",
        "delta is not below 1/rows",
        "delta is not below `1/rows` (`require.delta_below_inverse_rows`)",
    ),
    (
        "P007",
        "lifetime privacy budget would be exceeded",
        "the lifetime epsilon would exceed `lifetime.epsilon`: recorded releases plus this one, by "
        "RDP composition of the releases' curves (basic composition for releases without one and "
        "for external tables) or basic composition, whichever is smaller within the caps; the "
        "message gives both",
    ),
    (
        "P008",
        "lifetime delta (the policy's lifetime.delta) would be exceeded",
        "the lifetime delta would exceed `lifetime.delta` (deltas add under basic composition; "
        "RDP-composed releases count the delta they are converted at once)",
    ),
]:
    _error(_code, _title, CHECK, "dpql.check", **({"details": _details} if _details else {}))

# ------------------------------------------------------------------------------------------------
# record verification (V0xx)

PROVENANCE = "dpql.provenance"

_error("V000", "the record file cannot be read or is not JSON", VERIFY, "dpql.cli")
_error("V001", "not a provenance record of the current version", VERIFY, PROVENANCE)
_error(
    "V002",
    "an event is malformed",
    VERIFY,
    PROVENANCE,
    details="an event is malformed (e.g. an external event whose charged (epsilon, delta) is not "
    "the replace-one conversion of its declared budget)",
)
_error(
    "V003",
    "the record does not validate against `spec/provenance.schema.json`",
    VERIFY,
    PROVENANCE,
)
_error(
    "V004",
    "a value of the record is out of range: nested too deep, a number that is not finite, an "
    "integer too long or above 2^63, or a delta outside the range of a spec's delta",
    VERIFY,
    PROVENANCE,
)
_error(
    "V010",
    "the epsilon recomputed from the events differs from `spent.epsilon`",
    VERIFY,
    PROVENANCE,
)
_error("V011", "the spent epsilon exceeds the budget", VERIFY, PROVENANCE)
_error("V012", "the spent delta exceeds the budget", VERIFY, PROVENANCE)
_error(
    "V013",
    "`spent.rho` is not the recomputed rho (it must be null unless every event is zCDP)",
    VERIFY,
    PROVENANCE,
)
_error(
    "V014",
    "the stored RDP curve (`privacy.rdp`) is not the one the events give, or does not convert "
    "to `spent.epsilon`",
    VERIFY,
    PROVENANCE,
)
_error("V020", "the spec in the record does not match `spec_sha256`", VERIFY, PROVENANCE)
_error("V030", "the synthetic table does not match the record's output hash", VERIFY, PROVENANCE)
_error(
    "V031",
    "the synthetic table given with `--synthetic` cannot be read (missing, not a regular file)",
    VERIFY,
    PROVENANCE,
)

del _code, _title, _details

#: Every registered code, by code.
REGISTRY: Mapping[str, DiagnosticCode] = MappingProxyType(dict(sorted(_REGISTRY.items())))


def lookup(code: str) -> DiagnosticCode:
    """The registry entry of ``code`` (KeyError if it is not registered)."""
    return REGISTRY[code]


def titles(sections: Iterable[str]) -> dict[str, str]:
    """``{code: title}`` of the codes in ``sections`` (the legacy ``CODES`` views)."""
    wanted = set(sections)
    return {c.code: c.title for c in REGISTRY.values() if c.section in wanted}


# ------------------------------------------------------------------------------------------------
# docs/diagnostics.md

DOC = Path(__file__).resolve().parents[1] / "docs" / "diagnostics.md"
_BEGIN = "<!-- diagnostics-table: {} (generated by python -m dpql.diagnostics_registry) -->"
_END = "<!-- end diagnostics-table -->"
_BLOCK = re.compile(
    r"<!-- diagnostics-table: (\w+) \(generated by python -m dpql\.diagnostics_registry\) -->\n"
    r".*?<!-- end diagnostics-table -->",
    re.DOTALL,
)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _modules(modules: Iterable[str]) -> str:
    return ", ".join(f"`{m}`" for m in modules) or "-"


def section_table(key: str) -> str:
    """The markdown table of one section: code, meaning, where it points (when the section
    says), the commands that report it and the modules that raise it."""
    if key == "ranges":
        return ranges_table()
    entries = [c for c in REGISTRY.values() if c.section == key]
    if not entries:
        raise KeyError(f"no codes in section {key!r}")
    with_points = any(c.points for c in entries)
    head = ["code", "meaning", *(["where it points"] if with_points else []), "reported by"]
    head.append("raised in")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c in entries:
        meaning = c.meaning + (" (reserved: no longer reported)" if c.reserved else "")
        row = [f"`{c.code}`", _cell(meaning)]
        if with_points:
            row.append(_cell(c.points or "-"))
        row.append(", ".join(f"`{cmd}`" for cmd in c.commands))
        row.append(_modules(c.modules))
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def ranges_table() -> str:
    """One row per section: its code ranges, the stage and the modules that report them."""
    lines = ["| range | layer | raised in |", "|---|---|---|"]
    for s in SECTIONS:
        modules = sorted({m for c in REGISTRY.values() if c.section == s.key for m in c.modules})
        lines.append(f"| {s.ranges} | {_cell(s.layer)} | {_modules(modules)} |")
    return "\n".join(lines)


def render_doc(text: str) -> str:
    """``text`` (docs/diagnostics.md) with every generated table replaced by the current one;
    the prose around the tables is kept as it is."""

    def block(match: re.Match[str]) -> str:
        key = match.group(1)
        return f"{_BEGIN.format(key)}\n{section_table(key)}\n{_END}"

    return _BLOCK.sub(block, text)


def doc_sections(text: str) -> list[str]:
    """The section keys of the generated tables in ``text``, in order."""
    return [m.group(1) for m in _BLOCK.finditer(text)]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    text = DOC.read_text(encoding="utf-8")
    new = render_doc(text)
    if "--check" in args:
        if new != text:
            print(f"{DOC} is stale: run python -m dpql.diagnostics_registry", file=sys.stderr)
            return 1
        return 0
    if new != text:
        DOC.write_text(new, encoding="utf-8")
        print(f"updated {DOC}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
