"""YAML loading with positions: scalar typing, key/value positions, DSL-string offsets."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpql.diagnostics import DiagnosticError
from dpql.spec.yamlpos import load_yaml, plain_scalar


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1e-9", 1e-9),
        ("1.0e-6", 1e-6),
        ("-3", -3),
        ("0x1F", 31),
        ("0o17", 15),
        ("true", True),
        ("False", False),
        ("~", None),
        ("null", None),
        ("", None),
        ("yes", "yes"),  # YAML 1.1 booleans stay strings: a category may be called "no"
        ("no", "no"),
        ("2024-01-01", "2024-01-01"),
        ("017", 17),  # no YAML 1.1 octal
        ("Self-emp-inc", "Self-emp-inc"),
    ],
)
def test_plain_scalars_follow_the_yaml_1_2_core_schema(text: str, value: object) -> None:
    got = plain_scalar(text)
    assert got == value and type(got) is type(value)


def test_infinities_and_nan() -> None:
    assert plain_scalar("-.inf") == -math.inf and plain_scalar(".Inf") == math.inf
    assert math.isnan(plain_scalar(".nan"))


def test_quoted_scalars_and_keys_are_text() -> None:
    doc = load_yaml("1: \"2\"\nyes: ['3', 4]\n", "f.yaml")
    assert doc.data == {"1": "2", "yes": ["3", 4]}


def test_key_and_value_positions_are_one_based() -> None:
    doc = load_yaml("a:\n  b: [x, 'yy']\n  c: {d: 5}\n", "f.yaml")
    assert (doc.key_pos(("a", "b")).line, doc.key_pos(("a", "b")).col) == (2, 3)
    item = doc.value_pos(("a", "b", 1))
    assert (item.line, item.col, item.end_col) == (2, 10, 14)
    assert (doc.value_pos(("a", "c", "d")).line, doc.value_pos(("a", "c", "d")).col) == (3, 10)
    assert not doc.has(("a", "zz")) and doc.has(("a", "c"))


def test_duplicate_key_names_both_positions() -> None:
    with pytest.raises(DiagnosticError) as info:
        load_yaml("a: 1\nb:\n  c: 2\n  c: 3\n", "f.yaml")
    (d,) = info.value.diagnostics
    assert d.code == "E002" and (d.pos.line, d.pos.col) == (4, 3)
    assert "line 3, column 3" in d.message


def test_syntax_error_position_and_empty_document() -> None:
    with pytest.raises(DiagnosticError) as info:
        load_yaml("a: [1, 2\nb: 3\n", "f.yaml")
    (d,) = info.value.diagnostics
    assert d.code == "E001" and d.pos.line == 2
    with pytest.raises(DiagnosticError) as info:
        load_yaml("# only a comment\n", "f.yaml")
    assert info.value.codes == ["E003"]


def _char_at(source: str, line: int, col: int) -> str:
    return source.splitlines()[line - 1][col - 1]


DSL = (
    st.text(alphabet="abcxyz019_(), <>=.", min_size=1, max_size=40)
    .map(str.strip)
    .filter(lambda s: s and s[0].isalpha())
)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(value=DSL, style=st.sampled_from(["plain", "single", "double", "literal"]))
def test_every_offset_of_a_dsl_string_maps_back_to_its_source_character(
    value: str, style: str
) -> None:
    item = {
        "plain": value,
        "single": f"'{value}'",
        "double": f'"{value}"',
        "literal": f"|-\n      {value}",
    }[style]
    source = f"name: x\nworkload:\n  - marginals(2)\n  - {item}   # trailing comment\n"
    if style == "literal":
        source = source.replace("   # trailing comment", "")
    located = load_yaml(source, "f.yaml").located(("workload", 1))
    assert located.value == value
    for i, ch in enumerate(value):
        pos = located.pos_at(i)
        assert _char_at(source, pos.line, pos.col) == ch


def test_multi_line_plain_and_literal_scalars_map_offsets_to_their_lines() -> None:
    source = (
        "workload:\n"
        "  - count(age >= 65\n"
        "      and hours > 40)\n"
        "  - |\n"
        "    count(a > 1)\n"
        "      or b\n"
    )
    doc = load_yaml(source, "f.yaml")
    folded = doc.located(("workload", 0))
    assert folded.value == "count(age >= 65 and hours > 40)"
    at = folded.pos_at(folded.value.index("hours"))
    assert (at.line, at.col) == (3, 11)
    literal = doc.located(("workload", 1))
    assert literal.value == "count(a > 1)\n  or b\n"
    at = literal.pos_at(literal.value.index("b"))
    assert (at.line, at.col) == (6, 10)
    assert (literal.pos.line, literal.pos.col) == (5, 5)
