"""SQL text for the out-of-core engines: the codec's cell semantics and the query IR as SQL.

Pure string building, shared by DuckDB and Spark (the two dialects differ only in quoting,
trimming, regular expressions, lookups, integer division, row numbering and materialisation).
Relations, all derived from the raw ``source``:

* ``parsed`` (view): per declared column ``i``, ``r{i}`` the cleaned raw cell (NULL = empty, and
  every cell of a malformed record) and ``v{i}`` its value (categorical code or DOUBLE; NULL when
  empty or unreadable);
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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from dpql.data.codec import NUMBER_PATTERN, WHITESPACE, Fill, MissingPolicy, default_policy
from dpql.domain import NULL_SCALED, CategoricalColumn, Domain, NumericColumn
from dpql.ir.queries import (
    REAL_GRID,
    And,
    CatIn,
    CentredProduct,
    Count,
    Factor,
    Halfspace,
    Marginal,
    ModelAccuracy,
    Moment,
    Not,
    NumCmp,
    Or,
    Pred,
    Prefix,
    Query,
    TruePred,
    dispatch,
)

Storage = Literal["text", "exact", "float", "other"]
AGGREGATES_PER_SELECT = 200  # keeps statements short; one scan of ``enc`` each


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
    return f"SELECT {outer} FROM (SELECT {inner} FROM {source}) AS cleaned"


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


# ---------------------------------------------------------------------------------------------
# Queries over ``enc``


def _true_sql(p: TruePred, domain: Domain) -> str:
    return "TRUE"


def _num_cmp_sql(p: NumCmp, domain: Domain) -> str:
    return f"u{domain.names.index(p.column)} {p.op} {double(p.threshold)}"


def _cat_in_sql(p: CatIn, domain: Domain) -> str:
    if not p.codes:
        return "FALSE"
    codes = ", ".join(str(c) for c in sorted(p.codes))
    return f"c{domain.names.index(p.column)} IN ({codes})"


def _joined_sql(op: str, empty: str) -> Callable[[And | Or, Domain], str]:
    """A conjunction's or disjunction's condition: its items joined by ``op`` (``empty`` when it
    has none, the identity of ``op``)."""

    def condition(p: And | Or, domain: Domain) -> str:
        if not p.items:
            return empty
        return "(" + f" {op} ".join(pred_sql(i, domain) for i in p.items) + ")"

    return condition


def _not_sql(p: Not, domain: Domain) -> str:
    return f"(NOT {pred_sql(p.item, domain)})"


PRED_SQL: dict[type, Callable[[Any, Domain], str]] = {
    TruePred: _true_sql,
    NumCmp: _num_cmp_sql,
    CatIn: _cat_in_sql,
    And: _joined_sql("AND", "TRUE"),
    Or: _joined_sql("OR", "FALSE"),
    Not: _not_sql,
}
"""The SQL evaluator's predicate table: node class -> condition over ``enc``'s columns."""


def pred_sql(p: Pred, domain: Domain) -> str:
    """An SQL condition over ``enc`` (``c{i}`` codes, ``u{i}`` scaled values) that holds on
    exactly the rows satisfying ``p``."""
    return dispatch(PRED_SQL, p)(p, domain)


@dataclass(frozen=True)
class MarginalSQL:
    """``SELECT cell, count``: cells in row-major order of the columns' codes."""

    index: int
    cells: int
    sql: str


@dataclass(frozen=True)
class AggregateSQL:
    """One scan for several scalar sums, split by the codes of ``by`` when it is set: rows
    ``(by code, sum_1, ..., sum_m)`` or one row ``(sum_1, ..., sum_m)``."""

    indices: tuple[int, ...]
    by_card: int | None
    sql: str


def marginal_sql(index: int, q: Marginal, domain: Domain) -> MarginalSQL:
    """One GROUP BY on the row-major cell index over the kept tuples of ``cube``."""
    if not q.columns:
        return MarginalSQL(index, 1, "SELECT 0, SUM(w) FROM cube WHERE keep")
    key, stride = [], 1
    for name in reversed(q.columns):
        key.append(f"CAST(c{domain.names.index(name)} AS BIGINT) * {stride}")
        stride *= domain.card(name)
    return MarginalSQL(
        index, stride, f"SELECT {' + '.join(key)}, SUM(w) FROM cube WHERE keep GROUP BY 1"
    )


def _factor_sql(f: Factor, domain: Domain) -> str:
    """A factor's per-record value: the scaled column, or the indicator of its code."""
    column, code = f
    i = domain.names.index(column)
    if code is None:
        return f"u{i}"
    return f"CASE WHEN c{i} = {code} THEN {double(1.0)} ELSE {double(0.0)} END"


@dataclass(frozen=True)
class BatchedSum:
    """One aggregate over ``enc`` (``SUM(...)``), batched with the others split by the codes of
    the same ``by`` column (None: not split) into one scan."""

    expr: str
    by: str | None


def _count_sum(cond: str) -> str:
    return f"SUM(CASE WHEN {cond} THEN 1 ELSE 0 END)"


def _prefix_sql(index: int, q: Prefix, domain: Domain) -> BatchedSum:
    pairs = zip(q.columns, q.thresholds, strict=True)
    cond = " AND ".join(f"u{domain.names.index(c)} <= {double(t)}" for c, t in pairs)
    return BatchedSum(_count_sum(cond or "TRUE"), q.by)


def _halfspace_sql(index: int, q: Halfspace, domain: Domain) -> BatchedSum:
    dot = " + ".join(
        f"{double(w)} * u{domain.names.index(c)}" for c, w in zip(q.columns, q.theta, strict=True)
    )
    return BatchedSum(_count_sum(f"{dot} > {double(q.tau)}"), q.by)


def _count_sql(index: int, q: Count, domain: Domain) -> BatchedSum:
    return BatchedSum(_count_sum(pred_sql(q.predicate, domain)), None)


def _moment_sql(index: int, q: Moment, domain: Domain) -> BatchedSum:
    if not q.columns:
        return BatchedSum(_count_sum(pred_sql(q.given, domain)), None)
    prod = " * ".join(f"u{domain.names.index(c)}" for c in q.columns)
    if q.centre is not None:
        prod = f"({prod} - {double(q.centre)})"
    value = f"CASE WHEN {pred_sql(q.given, domain)} THEN {prod} ELSE 0.0 END"
    return BatchedSum(_grid_sum(value), None)


def _centred_sql(index: int, q: CentredProduct, domain: Domain) -> BatchedSum:
    left, right = (_factor_sql(f, domain) for f in (q.left, q.right))
    c, d = (double(x) for x in q.centres)
    value = f"({left} - {c}) * ({right} - {d})"
    if not isinstance(q.given, TruePred):
        value = f"CASE WHEN {pred_sql(q.given, domain)} THEN {value} ELSE 0.0 END"
    return BatchedSum(_grid_sum(value), None)


def _model_sql(index: int, q: ModelAccuracy, domain: Domain) -> AggregateSQL:
    return AggregateSQL((index,), None, model_accuracy_sql(q, domain))


def _grid_sum(value: str) -> str:
    """``SUM(round(v / 2^-k))`` of a real per-record value on the public grid of
    :data:`dpql.ir.queries.REAL_GRID`, rounded half up per record like
    :func:`dpql.ir.exact.to_grid` (the scaling by a power of two is exact)."""
    return f"SUM(FLOOR(({value}) * {double(1.0 / REAL_GRID)} + {double(0.5)}))"


def _linear_score(
    coef: Sequence[float], intercept: float, features: Sequence[str], d: Domain
) -> str:
    """``coef . z(x) + intercept`` for the design row ``z`` of :func:`dpql.ir.exact.design_matrix`
    (per feature the scaled value, or one-hot indicators of every value of a categorical one),
    summed left to right as the matrix product does; a one-hot block contributes the weight of
    the row's value (the others multiply 0)."""
    terms, j = [], 0
    for f in features:
        col = d[f]
        i = d.names.index(f)
        if isinstance(col, NumericColumn):
            terms.append(f"{double(coef[j])} * u{i}")
            j += 1
        else:
            arms = " ".join(f"WHEN {v} THEN {double(coef[j + v])}" for v in range(col.card))
            terms.append(f"(CASE c{i} {arms} END)")
            j += col.card
    if j != len(coef):
        raise ValueError(f"model has {len(coef)} coefficients, its design row {j}")
    return f"({' + '.join(terms or [double(0.0)])}) + {double(intercept)}"


def model_accuracy_sql(q: ModelAccuracy, domain: Domain) -> str:
    """``SELECT SUM(score) FROM enc``: the per-record score of
    :func:`dpql.ir.exact.model_scores` in SQL. Logistic: 1 when the first class of largest
    ``coef[c] . z + intercept[c]`` (``np.argmax`` order) is the label's code; linear:
    ``(u(label) - clip(coef[0] . z + intercept[0], 0, 1))**2``."""
    scores = [
        _linear_score(w, b, q.features, domain) for w, b in zip(q.coef, q.intercept, strict=True)
    ]
    y = domain.names.index(q.label)
    # the rows outside ``given`` score 0: they are left out of the sum
    enc = "enc" if isinstance(q.given, TruePred) else f"enc WHERE {pred_sql(q.given, domain)}"
    if q.model == "linear":
        clip = f"LEAST(GREATEST({scores[0]}, {double(0.0)}), {double(1.0)})"
        errors = f"(SELECT u{y} - {clip} AS e FROM {enc}) AS err"
        return f"SELECT COALESCE({_grid_sum('e * e')}, 0) FROM {errors}"
    items = ", ".join(f"{s} AS s{c}" for c, s in enumerate(scores))
    if len(scores) == 1:
        best = "0"
    else:
        arms = " ".join(f"WHEN s{c} = m THEN {c}" for c in range(len(scores)))
        best = f"CASE {arms} END"
    top = "GREATEST(" + ", ".join(f"s{c}" for c in range(len(scores))) + ")"
    return (
        f"SELECT COALESCE(SUM(CASE WHEN y = {best} THEN 1 ELSE 0 END), 0) FROM (SELECT y, "
        f"{', '.join(f's{c}' for c in range(len(scores)))}, {top} AS m FROM "
        f"(SELECT c{y} AS y, {items} FROM {enc}) AS scored) AS ranked"
    )


QUERY_SQL: dict[type, Callable[[int, Any, Domain], MarginalSQL | AggregateSQL | BatchedSum]] = {
    Marginal: marginal_sql,
    Prefix: _prefix_sql,
    Halfspace: _halfspace_sql,
    Count: _count_sql,
    Moment: _moment_sql,
    CentredProduct: _centred_sql,
    ModelAccuracy: _model_sql,
}
"""The SQL evaluator's query table: node class -> ``handler(index, query, domain)``, a statement
of its own or a :class:`BatchedSum` that :func:`query_sql` batches with others."""


def query_sql(queries: Sequence[Query], domain: Domain) -> list[MarginalSQL | AggregateSQL]:
    """Statements answering ``queries`` (exact sums): one GROUP BY per marginal and one statement
    per model score, the others batched per ``by`` column, at most
    :data:`AGGREGATES_PER_SELECT` sums per statement."""
    out: list[MarginalSQL | AggregateSQL] = []
    groups: dict[str | None, list[tuple[int, str]]] = {}
    for i, q in enumerate(queries):
        stmt = dispatch(QUERY_SQL, q)(i, q, domain)
        if isinstance(stmt, BatchedSum):
            groups.setdefault(stmt.by, []).append((i, stmt.expr))
        else:
            out.append(stmt)
    for by, items in groups.items():
        for s in range(0, len(items), AGGREGATES_PER_SELECT):
            part = items[s : s + AGGREGATES_PER_SELECT]
            sums = ", ".join(e for _, e in part)
            indices = tuple(i for i, _ in part)
            if by is None:
                out.append(AggregateSQL(indices, None, f"SELECT {sums} FROM enc"))
            else:
                c = f"c{domain.names.index(by)}"
                sql = f"SELECT {c}, {sums} FROM enc GROUP BY {c}"
                out.append(AggregateSQL(indices, domain.card(by), sql))
    return out
