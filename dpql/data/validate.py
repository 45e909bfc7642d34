"""``dpql validate``: the curator's strict look at the private table, outside the DP guarantee.

Part of the privacy boundary (``dpql.data``). ``dpql compile`` treats every cell and record by
the spec's public rules and never says what it met (design invariant 6); this command says it:
per declared column the empty cells, the cells holding a declared missing value
(``missing_values``), the cells that are not a finite number or not a declared category, the
numbers outside the bounds, and the malformed records, with their row numbers
(1-based data rows) and, only on request, the values. Its output and its exit status depend on
single records: they are for the curator's own terminal, never for a shared log, CI or a
release. It reads the table in memory with the in-memory engine's reader and parser
(:mod:`dpql.data.load`, :func:`dpql.data.codec.inspect_frame`), which every engine agrees with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dpql.data.codec import MAX_EXAMPLES, ColumnIssues, Fill, MissingPolicy, inspect_frame
from dpql.data.load import data_format, read_records
from dpql.data.private import DataSource
from dpql.domain import CategoricalColumn, Domain
from dpql.spec.load import LoadedSpec


@dataclass(frozen=True)
class Validation:
    """What ``dpql validate`` found (CURATOR-ONLY)."""

    source: str
    public_rows: int
    rows: int  # records read
    malformed: tuple[int, ...]  # first row numbers of malformed records
    malformed_count: int
    columns: tuple[ColumnIssues, ...]
    rules: dict[str, str]  # what the release does with a missing cell, per column
    other: dict[str, str]

    @property
    def clean(self) -> bool:
        return not self.malformed_count and not any(
            c.empty or c.declared or c.unreadable or c.below or c.above for c in self.columns
        )

    def to_json(self, show_values: bool = False) -> dict[str, Any]:
        columns = {}
        for c in self.columns:
            found: dict[str, Any] = {}
            for kind in ("empty", "declared", "unreadable", "below", "above"):
                count = getattr(c, kind)
                if count:
                    found[kind] = {"count": count, "rows": list(c.rows.get(kind, ()))}
            if c.unreadable and show_values:
                found["unreadable"]["values"] = [
                    {"value": v, "rows": n, "first_row": r} for v, n, r in c.examples
                ]
                found["unreadable"]["distinct"] = c.distinct
            if found:
                columns[c.column] = found
        return {
            "curator_only": True,
            "outside_the_dp_guarantee": True,
            "source": self.source,
            "public_rows": self.public_rows,
            "rows": self.rows,
            "malformed": {"count": self.malformed_count, "rows": list(self.malformed)},
            "columns": columns,
            "rules": self.rules,
            "other": self.other,
            "clean": self.clean,
        }


def _rule(policy: MissingPolicy | None) -> str:
    if isinstance(policy, Fill):
        return f"fill {policy.value!r}"
    return str(policy or "keep")


def validate(spec: LoadedSpec) -> Validation:
    """Read the spec's data file and inspect every cell (raises what reading the file raises:
    E401-E411, the file-level refusals of ``dpql compile``)."""
    source = DataSource.from_spec(spec)
    fmt = data_format(source.path, source.fmt)  # type: ignore[arg-type]
    frame, malformed = read_records(source.path, fmt, max_rows=source.rows)
    issues = inspect_frame(
        frame, source.domain, source.missing, source.other, source=str(source.path)
    )
    return Validation(
        str(source.path),
        source.rows,
        len(frame),
        tuple(int(r) for r in malformed[:MAX_EXAMPLES]),
        len(malformed),
        tuple(issues),
        {c.name: _rule(source.missing.get(c.name)) for c in source.domain},
        dict(source.other),
    )


def render(found: Validation, domain: Domain, show_values: bool = False) -> str:
    """The text report: one line per kind of finding and column."""
    lines = [
        "CURATOR-ONLY: a look at the private data outside the DP guarantee; do not share.",
        f"{found.source}: {found.rows} rows read (data.rows = {found.public_rows}); rows are "
        "numbered from 1 after the header",
    ]
    # a malformed row's cells are empty cells of every column too
    empty = "empty cell(s) (malformed rows included)" if found.malformed_count else "empty cell(s)"
    if found.malformed_count:
        lines.append(
            f"  {found.malformed_count} malformed row(s) (wrong number of fields or not UTF-8), "
            f"rows {_list(found.malformed, found.malformed_count)}: every cell is missing"
        )
    for c in found.columns:
        col = domain[c.column]
        rule = found.rules[c.column]
        if c.empty:
            lines.append(
                f"  {c.column}: {c.empty} {empty}, rows "
                f"{_list(c.rows['empty'], c.empty)} -> missing: {rule}"
            )
        if c.declared:
            lines.append(
                f"  {c.column}: {c.declared} cell(s) holding a declared missing value, rows "
                f"{_list(c.rows['declared'], c.declared)} -> missing: {rule}"
            )
        if c.unreadable:
            if isinstance(col, CategoricalColumn):
                what = "value(s) not among its declared values"
                then = (
                    f"other category {found.other[c.column]!r}"
                    if c.column in found.other
                    else f"missing: {rule}"
                )
            else:
                what, then = "cell(s) that are not a finite number", f"missing: {rule}"
            lines.append(
                f"  {c.column}: {c.unreadable} {what}, rows "
                f"{_list(c.rows['unreadable'], c.unreadable)} -> {then}"
            )
            if show_values:
                listed = ", ".join(
                    f"{v!r} ({n} row(s), first at row {r})" for v, n, r in c.examples
                )
                more = c.distinct - len(c.examples)
                lines.append(f"    values: {listed}" + (f" and {more} more" if more > 0 else ""))
        for kind, bound in (("below", "min"), ("above", "max")):
            count = getattr(c, kind)
            if count:
                lines.append(
                    f"  {c.column}: {count} number(s) {kind} its {bound}, rows "
                    f"{_list(c.rows[kind], count)} -> clipped to the {bound}"
                )
    if found.clean:
        lines.append("  every cell is a declared value or a number within the bounds")
    elif not show_values:
        lines.append("  (--show-values lists the unreadable values)")
    return "\n".join(lines)


def _list(rows: tuple[int, ...], count: int) -> str:
    text = ", ".join(str(r) for r in rows)
    return text + (", ..." if count > len(rows) else "")
