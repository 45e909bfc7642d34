"""The codes reported before any data is read: the spec and policy loader (``E0xx``, ``E1xx``,
``W1xx``), planning (``E15x``-``E19x``, ``W15x``-``W19x``), the DSL (``E2xx``, ``E3xx``,
``W3xx``) and policy violations (``P0xx``): everything ``dpql plan`` and ``dpql check`` report."""

from __future__ import annotations

from dpql.diagnostics_registry.base import CHECK, PLANS, DiagnosticCode, EntryList

ENTRIES = EntryList()

# ------------------------------------------------------------------------------------------------
# spec and policy loading (E0xx, E1xx, W1xx)

LOAD, YAMLPOS = "dpql.spec.load", "dpql.spec.yamlpos"
CHECKS = "dpql.spec.checks"

ENTRIES.error("E001", "YAML syntax error", PLANS, YAMLPOS, points="the character PyYAML stopped at")
ENTRIES.error(
    "E002",
    "duplicate mapping key",
    PLANS,
    YAMLPOS,
    details="duplicate mapping key; the message names the first definition's line and column",
    points="the second key",
)
ENTRIES.error(
    "E003",
    "empty document, or the document is not a mapping",
    PLANS,
    LOAD,
    YAMLPOS,
    points="1:1, or the start of the document",
)
ENTRIES.error(
    "E004",
    "mapping key that is not a plain scalar",
    PLANS,
    YAMLPOS,
    details="mapping key that is not a plain scalar (`? [a, b]`)",
    points="the key",
)
ENTRIES.error(
    "E005",
    "file cannot be read (missing, unreadable, not UTF-8)",
    (*PLANS, "ledger"),
    "dpql.release.lifetime",
    "dpql.release.ledger_report",
    LOAD,
    details="file cannot be read (missing, unreadable, not UTF-8): the spec, the policy or the "
    "lifetime ledger",
    points="the file",
)
ENTRIES.error(
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
ENTRIES.error(
    "E010",
    "unknown key",
    PLANS,
    LOAD,
    details="unknown key; the hint suggests the closest allowed key and lists them all",
    points="the key",
)
ENTRIES.error(
    "E011",
    "required field missing",
    PLANS,
    LOAD,
    details="required field missing (also a column without `type`, a synthesizer without "
    "`method`, an external `budget` without `neighbouring`: the hint explains `replace_one` and "
    "`add_remove`)",
    points="the parent key (top level: the first key)",
)
ENTRIES.error(
    "E012",
    "value has the wrong type",
    PLANS,
    LOAD,
    details='value has the wrong type (`rows: many`, `epsilon: "1.0"`, `integer: yes`)',
    points="the value",
)
ENTRIES.error(
    "E020",
    "malformed privacy-ledger line",
    ("check", "compile"),
    "dpql.release.lifetime",
    details="malformed privacy-ledger line (not JSON, or a bad record)",
    points="`ledger.jsonl:LINE`",
)
ENTRIES.error(
    "E030",
    "a TODO left in a draft spec of dpql init",
    PLANS,
    "dpql.spec.todo",
    details="a value is still `TODO`, a blank `dpql init` left for the curator (the public row "
    "count, a column's type, bounds or categories); the hint says what goes there",
    points="the TODO",
)
ENTRIES.error(
    "E031",
    "dpql init cannot write the draft (the output exists, or cannot be written)",
    ("init",),
    "dpql.init",
    details="`dpql init` cannot write the draft: the output path exists (it never overwrites a "
    "file) or cannot be written",
    points="the output file",
)
ENTRIES.error(
    "E032",
    "bad codebook for dpql init",
    ("init",),
    "dpql.init",
    details="`dpql init --codebook`: the codebook cannot be read, is not of the documented "
    "form (`docs/init.md`), or names a column the data file's header does not",
    points="the codebook, or the entry",
)
ENTRIES.error(
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
ENTRIES.error(
    "E102",
    "value not among the allowed choices (method, type, format, version, ...)",
    PLANS,
    LOAD,
    details="value not among the allowed choices (synthesizer `method`, column `type`, `engine`, "
    "`format`, `dpql` version, split phase name); the hint suggests the closest",
    points="the value",
)
ENTRIES.error(
    "E103",
    "empty list or string where at least one item is required",
    PLANS,
    LOAD,
    details="empty list or string where at least one item is required (`workload`, `schema`, "
    "`values`)",
    points="the value",
)
ENTRIES.error(
    "E104",
    "numeric bounds invalid (min >= max, or non-integral bounds on an integer column)",
    PLANS,
    CHECKS,
    details="numeric bounds invalid: `min >= max`, a fractional bound on an `integer: true` "
    "column, `max - min` not finite, or bins narrower than 1,024 representable doubles at the "
    "bounds' magnitude (`[0, 5e-324]`, `[1e15, 1e15 + 0.2]`)",
    points="the bound",
)
ENTRIES.error(
    "E105",
    "bin edges invalid (not strictly increasing or not covering [min, max]), or both bins and "
    "edges given",
    PLANS,
    CHECKS,
    details="bin edges invalid: not strictly increasing, `edges[0] > min`, `edges[-1] < max`, a "
    "bin narrower than float resolution, an outer edge more than `max - min` beyond the bounds, "
    "or both `bins` and `edges`",
    points="the edge (or `bins`)",
)
ENTRIES.error(
    "E106",
    "duplicate categorical value",
    PLANS,
    CHECKS,
    "dpql.spec.files",
    details="duplicate categorical value (a category's position is its code), inline or in a "
    "`values_file`",
    points="the second occurrence (the file's line for a `values_file`)",
)
ENTRIES.error(
    "E107",
    "privacy budget form invalid (need epsilon and delta, or rho)",
    PLANS,
    CHECKS,
    details="privacy budget form invalid: give `epsilon` and `delta`, or `rho` (optionally with "
    "`delta`)",
    points="the offending key",
)
ENTRIES.error(
    "E108",
    "privacy split invalid (unknown phase for the method, or shares not summing to 1)",
    PLANS,
    CHECKS,
    details="`privacy.split` invalid: a phase the synthesizer does not have, or shares not "
    "summing to 1",
    points="the phase / `split`",
)
ENTRIES.error(
    "E109",
    "missing-value rule invalid (fill/other value not declared or not in the domain)",
    PLANS,
    CHECKS,
    "dpql.synth.gan.plan",
    details="missing-value rule invalid: `missing: error` (refused: a release would depend on "
    "one record; use keep, drop, fill or other, and `dpql validate` for the strict look), "
    "`missing: other` without an `other` category, "
    "`missing: fill` without `fill`, a `fill`/`other` value outside the column's domain, "
    "`missing: keep` with the gan synthesizer (refused by its plan)",
    points="the rule or value",
)
ENTRIES.error(
    "E110",
    "a file's format cannot be inferred from its path (data.path, output.path)",
    PLANS,
    CHECKS,
    details="a file's format cannot be inferred from its extension: `data.path` without "
    "`data.format`, or `output.path`, which must end in .csv, .csv.gz or .parquet (the table is "
    "written in the format its name implies, and read back by that name)",
    points="`data.path` or `output.path`",
)
ENTRIES.error(
    "E111",
    "list or string longer than its limit (name, description, columns, workload items, "
    "requirements, one DSL string)",
    PLANS,
    LOAD,
    details="list or string longer than its limit (`spec/language.md` §9): `name` 200 "
    "characters, `description` 10,000, `schema` 1,000 columns, `workload` 1,000 items, "
    "`requirements` 200, one DSL string 10,000 characters, `edges` 1,000,001, a column's "
    "`missing_values` 100",
    points="the value",
)
ENTRIES.append(
    DiagnosticCode(
        "E112",
        "error",
        "requirement cannot be estimated under `missing: drop` (no longer reported: a release "
        "under drop describes the complete cases, and every requirement is estimated over them)",
        PLANS,
        (),
        reserved=True,
    )
)
ENTRIES.error(
    "E113",
    "declared missing value invalid (listed twice, or also a value of the column)",
    PLANS,
    CHECKS,
    details="a column's `missing_values` entry is listed twice, or is also a value of the "
    "column: a category of `values` (a cell would be both a category and missing), or a number "
    "inside `[min, max]` (a released value could not be told from a missing cell); or a "
    "categorical one has surrounding whitespace (cells are compared stripped). A numeric "
    "column's missing values are numbers (text there is `E012`: text that is not a number is "
    "missing in a numeric column already)",
    points="the missing value",
)
ENTRIES.error(
    "E120",
    "categorical values file unusable (unreadable, empty, no such CSV column) or given with "
    "inline values",
    PLANS,
    "dpql.spec.files",
    details="a categorical column's `values_file` cannot be read (missing, not UTF-8, over "
    "64 MiB), lists no values or more than 1,000,000, lacks its `values_column`, or comes "
    "with inline `values`; or a column has neither `values` nor `values_file`; or the values "
    "and groups read from files would make the provenance record's spec too large to verify "
    "(duplicates in the file are `E106` at its line)",
    points="`values_file` (or the column)",
)
ENTRIES.error(
    "E121",
    "categorical group file unusable (unreadable, a value unmapped, mapped twice or unknown)",
    PLANS,
    "dpql.spec.files",
    details="a categorical column's `group` cannot be used: its file is unreadable or lacks a "
    "header with the value and group columns, a line maps a value that is not among the "
    "column's values or maps one to two groups, a value has no group, or `levels` has the wrong "
    "length",
    points="`group.file`, or the file's line",
)
ENTRIES.error(
    "E122",
    "a public input file is the data file",
    PLANS,
    "dpql.spec.files",
    details="a `values_file`, `group.file` or the external synthesizer's `path` names the data "
    "file (`data.path`): the same path, after resolving links, or the same file (a hard link); "
    "refused before it is opened. A copy of the data file (the same bytes) is refused by "
    "`dpql compile`, which hashes the data file anyway, before anything is measured",
    points="the public file's path in the spec",
)
ENTRIES.error(
    "E123",
    "a public file does not have the sha256 the spec pins",
    PLANS,
    "dpql.spec.files",
    details="`values_sha256` (with `values_file`) or `group.sha256` (with `group.file`) is "
    "given in the spec, and the file read has another sha256",
    points="the pinned hash",
)
ENTRIES.warning(
    "W101",
    "delta is not below 1/rows (allowed in the spec; policies usually forbid it)",
    PLANS,
    CHECKS,
    details="`delta` is not below `1/rows` (allowed in the spec; policies usually forbid it, see "
    "`P006`)",
    points="`privacy.delta`",
)
ENTRIES.warning(
    "W102",
    "`missing: drop`: the table describes the rows where the column is present",
    PLANS,
    CHECKS,
    details="a column has `missing: drop`: the release describes the complete cases (the rows "
    "where every dropped column is present), not every row (`docs/missing.md`)",
    points="the column's `missing` (or the top-level one)",
)
ENTRIES.warning(
    "W103",
    "an integer column looks like codes or years but is binned numerically",
    PLANS,
    CHECKS,
    details="an integer column whose name says codes or years (occupation, industry, year, "
    "...), or whose bounds are calendar years, has bins wider than one integer: a bin mixes "
    "codes and the release draws values that may not exist; declare it categorical (or a "
    "`values_file` with a `group`)",
    points="the column",
)

# ------------------------------------------------------------------------------------------------
# planning (E15x-E19x, W15x-W19x)

ENTRIES.error(
    "E150",
    "an external table's declared budget leaves nothing of the release budget",
    PLANS,
    "dpql.plan.planner",
    points="the spec file",
)
ENTRIES.error(
    "E151",
    "the privacy budget cannot be converted to zCDP",
    PLANS,
    "dpql.plan.planner",
    details="the privacy budget cannot be converted to zCDP (e.g. an `add_remove` external "
    "epsilon whose charged delta overflows)",
    points="`privacy`",
)
ENTRIES.error(
    "E152",
    "the `gan` synthesizer's options cannot be planned",
    PLANS,
    "dpql.synth.gan.plan",
    details="the `gan` synthesizer's options cannot be planned (noise multipliers the accountant "
    "refuses, such as 1e-300)",
    points="`synthesizer.options`",
)
_RESOURCE_POINTS = (
    "the spec value behind the largest part (`workload`, `synthesizer.rows`, "
    "`synthesizer.options.relaxed_rows`, `synthesizer.options` of a gan, `data.rows`)"
)
ENTRIES.error(
    "E160",
    "the estimated peak memory of `dpql compile` is above the limit",
    PLANS,
    "dpql.plan.resources",
    details="the estimated peak memory of `dpql compile` is above the limit (8 GiB, or "
    "`$DPQL_MEMORY_LIMIT`); the message gives the estimate and its largest parts",
    points=_RESOURCE_POINTS,
)
ENTRIES.warning(
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
PREDICATES = "dpql.plan.resolve_predicates"  # columns and predicates, for workload and requirements
RESOLVED_IN = {
    "E301": (PREDICATES,),
    "E302": (RESOLVE, PREDICATES),
    "E303": (PREDICATES,),
    "E304": (PREDICATES,),
    "E306": (PREDICATES,),
}

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
    ENTRIES.error(_code, _title, PLANS, PARSER)

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
    ENTRIES.error(_code, _title, PLANS, *RESOLVED_IN.get(_code, (RESOLVE,)))

ENTRIES.warning(
    "W301",
    "numeric threshold outside the column's `[min, max]`: values are clipped, so the comparison "
    "is constant",
    PLANS,
    PREDICATES,
)
ENTRIES.warning(
    "W302", "marginal with more cells than `n`: most of its cells will be noise", PLANS, RESOLVE
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
    (
        "P009",
        "the compile is estimated to take longer than the policy's max_minutes",
        "the compile estimate's time (`dpql plan`, `dpql/plan/resources.py`) is above "
        "`max_minutes`: CI can refuse a spec that would run for hours",
    ),
]:
    _extra = {"details": _details} if _details else {}
    # compile --policy too
    ENTRIES.error(_code, _title, (*CHECK, "compile"), "dpql.release.policy", **_extra)


del _code, _title, _details, _extra
