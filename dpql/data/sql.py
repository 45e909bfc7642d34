"""SQL text for the out-of-core engines: the codec's cell semantics as SQL (the queries over the
encoded rows: :mod:`dpql.data.query_sql`).

Pure string building, shared by DuckDB and Spark (the two dialects differ only in quoting,
trimming, regular expressions, lookups, integer division, row numbering and materialisation).
Relations, all derived from the raw ``source``:

* ``parsed`` (view): per declared column ``i``, ``r{i}`` the cleaned raw cell (NULL = empty, a
  declared missing value, and every cell of a malformed record) and ``v{i}`` its value
  (categorical code or DOUBLE; NULL when empty, declared missing or unreadable);
* ``staged`` (view): ``z{i}`` empty flag, ``m{i}`` treated-as-missing flag (empty, or unreadable
  without an ``other`` catch-all) and ``v{i}``;
* ``coded`` (view): per row the public codes ``c{i}``, for numeric columns the value clipped and
  scaled to [0, 1] ``u{i}`` (the same IEEE operations as :mod:`dpql.data.codec`, so every engine
  gives bit-identical codes and scaled values), the cell states ``st{g}`` and ``keep``;
* ``cube`` (materialised in the single scan of the source): distinct rows of ``coded`` without
  ``u`` and their counts ``w``. Validation counts (:func:`stats_sql`, turned into the codec's
  diagnostics and :class:`CuratorLog` by the engines) and marginals are sums over it;
* ``enc`` (materialised on the first non-marginal query): ``c{i}``, ``u{i}`` of kept rows.

The DuckDB engine adds the records its reader rejects as malformed as rows of empty cells
(views ``parsed_bad``, ``staged_bad``, ``coded_bad`` over ``source_bad``; see
:mod:`dpql.data.engines.duckdb`), so every relation name below is a parameter.

Float literals are written as ``CAST('<repr>' AS DOUBLE)``: decimal literals would be DECIMAL in
DuckDB, and a string cast parses to the correctly rounded double in both dialects.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from dpql.data.codec import NUMBER_PATTERN, WHITESPACE, Fill, MissingPolicy, default_policy
from dpql.domain import NULL_SCALED, CategoricalColumn, Domain, NumericColumn

Storage = Literal["text", "exact", "float", "other"]


@dataclass(frozen=True)
class Dialect:
    name: Literal["duckdb", "spark"]

    def ident(self, name: str) -> str:
        q = '"' if self.name == "duckdb" else "`"
        return q + name.replace(q, q + q) + q

    def string(self, value: str) -> str:
        if self.name == "duckdb":
            return "'" + value.replace("'", "''") + "'"
        escapes = {"\\": "\\\\", "'": "\\'", "\t": "\\t", "\n": "\\n", "\r": "\\r"}
        return "'" + "".join(escapes.get(ch, ch) for ch in value) + "'"

    def trim(self, expr: str) -> str:
        chars = self.string(WHITESPACE)
        if self.name == "duckdb":
            return f"trim({expr}, {chars})"
        return f"trim(BOTH {chars} FROM {expr})"

    def has_replacement(self, expr: str) -> str:
        """Whether text ``expr`` holds U+FFFD (what a reader makes of bytes that are not UTF-8)."""
        return f"(instr({expr}, {self.string(chr(0xFFFD))}) > 0)"

    def full_match(self, expr: str, pattern: str) -> str:
        if self.name == "duckdb":
            return f"regexp_full_match({expr}, {self.string(pattern)})"
        # Java regex: ``\z`` is the very end (``$`` would also match before a final line break)
        anchored = "^(?:" + pattern + r")\z"
        return f"({expr} RLIKE {self.string(anchored)})"

    @property
    def text_type(self) -> str:
        return "VARCHAR" if self.name == "duckdb" else "STRING"

    @property
    def row_number(self) -> str:
        """1-based data-row number in file order (engines run it single-threaded)."""
        if self.name == "duckdb":
            return "row_number() OVER ()"
        return "row_number() OVER (ORDER BY monotonically_increasing_id())"

    def category_code(self, expr: str, values: Sequence[str]) -> str:
        """0-based index of ``expr`` in ``values``; NULL when absent (a list lookup is ~10x
        faster than a CASE over strings in DuckDB)."""
        items = ", ".join(self.string(v) for v in values)
        if self.name == "duckdb":
            return f"(NULLIF(list_position([{items}], {expr}), 0) - 1)"
        return f"(NULLIF(array_position(array({items}), {expr}), 0) - 1)"

    def group_code(self, index: str, parent: Sequence[int]) -> str:
        """The group code of a grouped column's fine-value ``index`` (0-based; NULL stays NULL):
        one positional lookup in the public list of group codes."""
        items = ", ".join(str(int(p)) for p in parent)
        if self.name == "duckdb":
            return f"list_extract([{items}], {index} + 1)"
        return f"element_at(array({items}), CAST({index} AS INT) + 1)"

    def materialise(self, name: str, select: str) -> str:
        if self.name == "duckdb":
            return f"CREATE OR REPLACE TEMP TABLE {name} AS {select}"
        return f"CACHE TABLE {name} AS {select}"

    def drop(self, name: str) -> str:
        if self.name == "duckdb":
            return f"DROP TABLE IF EXISTS {name}"
        return f"UNCACHE TABLE IF EXISTS {name}"


DUCKDB = Dialect("duckdb")
SPARK = Dialect("spark")


def double(x: float) -> str:
    """``x`` as an SQL DOUBLE literal that parses to exactly ``x`` in both dialects."""
    return f"CAST('{float(x)!r}' AS DOUBLE)"


def storage_of(type_name: str) -> Storage:
    """Classify an engine's column type the way :mod:`dpql.data.codec` classifies pandas dtypes."""
    t = type_name.upper()
    if t.startswith(("VARCHAR", "STRING", "CHAR", "TEXT")):
        return "text"
    if t.startswith(("FLOAT", "DOUBLE", "REAL")):
        return "float"
    if re.fullmatch(r"U?(TINY|SMALL|BIG|HUGE)?INT(EGER)?|DECIMAL.*|NUMERIC.*", t):
        return "exact"
    return "other"


# ---------------------------------------------------------------------------------------------
# Encoding


def _raw(src: str, storage: Storage, col: NumericColumn | CategoricalColumn, d: Dialect) -> str:
    """The cleaned cell: NULL when missing; text for categorical columns."""
    if storage == "text":
        return f"NULLIF({d.trim(src)}, '')"
    if isinstance(col, CategoricalColumn):
        return f"CAST({src} AS {d.text_type})"
    if storage == "float":
        return f"CASE WHEN isnan({src}) THEN NULL ELSE {src} END"
    return src


def _value(r: str, storage: Storage, col: NumericColumn | CategoricalColumn, d: Dialect) -> str:
    """The cell's code or DOUBLE value from the cleaned cell ``r``; NULL when invalid."""
    if isinstance(col, CategoricalColumn):
        code = d.category_code(r, col.labels)
        if col.parent is None:
            return code
        # a grouped column: the fine value's index, then its group's code by list indexing
        return d.group_code(code, col.parent)
    if storage == "text":
        # a decimal that overflows a double (1e400) is invalid, like "inf" (the codec's rule);
        # the cast runs only on cells that matched the pattern (CASE evaluates lazily)
        value = f"CAST({r} AS DOUBLE)"
        finite = f"CASE WHEN abs({value}) < {double(math.inf)} THEN {value} END"
        return f"CASE WHEN {d.full_match(r, NUMBER_PATTERN)} THEN {finite} END"
    if storage == "float":
        return f"CASE WHEN abs({r}) = {double(math.inf)} THEN NULL ELSE CAST({r} AS DOUBLE) END"
    return f"CAST({r} AS DOUBLE)"


def malformed_sql(raw_names: Sequence[str], d: Dialect, flag: str | None = None) -> str:
    """Whether a CSV record (all cells text) is malformed beyond what the reader flags
    (``flag``, a column of the reader): a cell, declared or not, holding U+FFFD."""
    tests = [d.has_replacement(d.ident(name)) for name in raw_names]
    if flag is not None:
        tests.append(f"({d.ident(flag)} IS NOT NULL)")
    return " OR ".join(f"COALESCE({t}, FALSE)" for t in tests) or "FALSE"


def parsed_sql(
    domain: Domain,
    sources: Mapping[str, tuple[str, Storage]],
    d: Dialect,
    source: str,
    malformed: str | None = None,
) -> str:
    """``SELECT r{i}, v{i} FROM source``; ``sources`` maps a column to its raw name and storage
    (no column may have storage ``other``); every cell of a row where ``malformed`` (an SQL
    condition over ``source``) holds is empty."""
    items = []
    for i, col in enumerate(domain):
        raw_name, storage = sources[col.name]
        cell = _raw(d.ident(raw_name), storage, col, d)
        if malformed is not None:
            cell = f"CASE WHEN {malformed} THEN NULL ELSE {cell} END"
        items.append(f"{cell} AS r{i}")
    inner = ", ".join(items)
    outer = ", ".join(
        f"r{i}, {_value(f'r{i}', sources[c.name][1], c, d)} AS v{i}" for i, c in enumerate(domain)
    )
    valued = f"SELECT {outer} FROM (SELECT {inner} FROM {source}) AS cleaned"
    if not any(c.missing_values for c in domain):
        return valued
    # a declared missing value is a missing cell: both the cell and its value become NULL
    declared = [_declared(i, c, d) for i, c in enumerate(domain)]
    final = ", ".join(
        f"r{i}, v{i}"
        if test is None
        else f"CASE WHEN {test} THEN NULL ELSE r{i} END AS r{i}, "
        f"CASE WHEN {test} THEN NULL ELSE v{i} END AS v{i}"
        for i, test in enumerate(declared)
    )
    return f"SELECT {final} FROM ({valued}) AS valued"


def _declared(i: int, col: NumericColumn | CategoricalColumn, d: Dialect) -> str | None:
    """Whether cell ``i`` holds one of the column's ``missing_values`` (the codec's rule: a
    numeric cell's value equal as a double, a categorical cell's cleaned text equal); NULL (not
    true) for an empty cell; None when the column declares none."""
    if not col.missing_values:
        return None
    if isinstance(col, NumericColumn):
        return f"(v{i} IN ({', '.join(double(x) for x in col.missing_values)}))"
    return f"(r{i} IN ({', '.join(d.string(x) for x in col.missing_values)}))"


def staged_sql(domain: Domain, other: Mapping[str, str], parsed: str = "parsed") -> str:
    """``SELECT z{i}, m{i}, v{i} FROM parsed``: every cell's empty flag, whether the missing
    rule applies to it (empty, or unreadable where no catch-all takes it) and its value."""
    items = []
    for i, col in enumerate(domain):
        rule_applies = f"r{i} IS NULL" if col.name in other else f"v{i} IS NULL"
        items.append(f"(r{i} IS NULL) AS z{i}, ({rule_applies}) AS m{i}, v{i}")
    return f"SELECT {', '.join(items)} FROM {parsed}"


def _effective(
    i: int, col: NumericColumn | CategoricalColumn, policy: MissingPolicy, other: str | None
) -> str:
    """The value after the missing/other policies (NULL on rows that are dropped, and on a
    numeric cell of a ``keep`` column that the rule applies to)."""
    if isinstance(col, CategoricalColumn):
        fill = str(col.code_of_label(str(policy.value))) if isinstance(policy, Fill) else "NULL"
        if policy == "keep" and col.null_code is not None:
            fill = str(col.null_code)  # missing: keep, the null category
        catch = str(col.code_of_label(other)) if other is not None else "NULL"
        return f"COALESCE(v{i}, CASE WHEN m{i} THEN {fill} ELSE {catch} END)"
    if isinstance(policy, Fill):
        return f"COALESCE(v{i}, {double(float(policy.value))})"
    return f"v{i}"


# Each cell's state is one base-5 digit (ok, missing, invalid, below lo, above hi) of a BIGINT
# ``st{g}`` holding :data:`STATE_DIGITS` columns, so the cube's key stays narrow.
STATE_DIGITS = 27  # 5**27 < 2**63


def _state(i: int, col: NumericColumn | CategoricalColumn) -> str:
    arms = f"WHEN z{i} THEN 1 WHEN v{i} IS NULL THEN 2"
    if isinstance(col, NumericColumn):
        arms += f" WHEN v{i} < {double(col.lo)} THEN 3 WHEN v{i} > {double(col.hi)} THEN 4"
    return f"CASE {arms} ELSE 0 END"


def _state_groups(domain: Domain) -> range:
    return range(0, len(domain), STATE_DIGITS)


def state_digit(i: int, d: Dialect) -> str:
    """The state of column ``i`` from the ``st`` columns (``div``: integer division)."""
    div = "//" if d.name == "duckdb" else "div"
    return f"((st{i // STATE_DIGITS} {div} {5 ** (i % STATE_DIGITS)}) % 5)"


def coded_sql(
    domain: Domain,
    missing: Mapping[str, MissingPolicy],
    other: Mapping[str, str],
    staged: str = "staged",
) -> str:
    """``SELECT c{i}[, u{i}], st{g}, keep FROM staged``: every row's public codes and scaled
    values computed as the codec does, its cell states and whether it is kept (not dropped)."""
    rules = {c.name: missing.get(c.name, default_policy(c)) for c in domain}
    effective = [
        f"{_effective(i, c, rules[c.name], other.get(c.name))} AS e{i}"
        for i, c in enumerate(domain)
    ]
    states = [
        " + ".join(
            f"CAST({_state(i, domain.columns[i])} AS BIGINT) * {5 ** (i - g)}"
            for i in range(g, min(g + STATE_DIGITS, len(domain)))
        )
        + f" AS st{g // STATE_DIGITS}"
        for g in _state_groups(domain)
    ]
    dropped = [f"NOT m{i}" for i, c in enumerate(domain) if rules[c.name] == "drop"]
    flags = [f"st{g}" for g in range(len(states))] + ["keep"]
    clipped, items = [], []
    for i, col in enumerate(domain):
        if isinstance(col, CategoricalColumn):
            clipped.append(f"e{i}")
            items.append(f"CAST(e{i} AS INTEGER) AS c{i}")
            continue
        x = f"LEAST(GREATEST(e{i}, {double(col.lo)}), {double(col.hi)})"
        if col.null_code is not None:  # GREATEST skips NULLs: keep a missing cell NULL
            x = f"CASE WHEN e{i} IS NULL THEN NULL ELSE {x} END"
        clipped.append(f"{x} AS x{i}")
        # bin_of = searchsorted(edges, x, "right") - 1 clipped to [0, card) = #inner edges <= x
        arms = " ".join(
            f"WHEN x{i} >= {double(col.edges[b])} THEN {b}" for b in range(col.bins - 1, 0, -1)
        )
        u = f"(x{i} - {double(col.lo)}) / {double(col.span)}"
        if col.null_code is not None:  # missing: keep, the null bin (x is NULL exactly where
            # the rule applies) with scaled value NULL_SCALED
            arms = f"WHEN x{i} IS NULL THEN {col.null_code} {arms}"
            u = f"COALESCE({u}, {double(NULL_SCALED)})"
        items.append(f"CAST(CASE {arms} ELSE 0 END AS INTEGER) AS c{i}" if arms else f"0 AS c{i}")
        items.append(f"{u} AS u{i}")
    first = ", ".join([*effective, *states, f"({' AND '.join(dropped) or 'TRUE'}) AS keep"])
    return (
        f"SELECT {', '.join(items + flags)} FROM (SELECT {', '.join(clipped + flags)} FROM "
        f"(SELECT {first} FROM {staged}) AS eff) AS cl"
    )


def cube_sql(domain: Domain, coded: str = "coded") -> str:
    """The distinct (codes, states, keep) tuples of ``coded`` with their multiplicity ``w``.
    Validation counts and every marginal are sums over it, and real tables repeat tuples a lot,
    so it is built in the one scan of the source and marginals read far fewer rows."""
    key = ", ".join(
        [f"c{i}" for i in range(len(domain))]
        + [f"st{g}" for g in range(len(_state_groups(domain)))]
        + ["keep"]
    )
    return f"SELECT {key}, COUNT(*) AS w FROM {coded} GROUP BY {key}"


def encoded_sql(domain: Domain) -> str:
    """``SELECT c{i}[, u{i}] FROM coded WHERE keep``: the kept rows, for non-marginal queries."""
    items = [
        f"c{i}, u{i}" if isinstance(c, NumericColumn) else f"c{i}" for i, c in enumerate(domain)
    ]
    return f"SELECT {', '.join(items)} FROM coded WHERE keep"


def _wsum(cond: str) -> str:
    return f"COALESCE(SUM(CASE WHEN {cond} THEN w ELSE 0 END), 0)"


STATS_PER_COLUMN = 4  # missing, invalid, below, above


def stats_sql(domain: Domain, d: Dialect) -> str:
    """One row over ``cube``: rows read, rows kept, then per column the missing, invalid, below
    and above counts (as the codec: clip counts over kept rows only)."""
    items = ["COALESCE(SUM(w), 0)", _wsum("keep")]
    for i in range(len(domain)):
        digit = state_digit(i, d)
        items += [_wsum(f"{digit} = 1"), _wsum(f"{digit} = 2")]
        items += [_wsum(f"keep AND {digit} = 3"), _wsum(f"keep AND {digit} = 4")]
    return f"SELECT {', '.join(items)} FROM cube"
