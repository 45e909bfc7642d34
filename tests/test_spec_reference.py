"""docs/reference.md covers every field of the spec and policy models, with one line and one
example each, and is exactly what ``python -m dpql.spec.reference`` writes."""

from __future__ import annotations

from dpql.spec import reference


def test_every_model_has_a_section() -> None:
    listed = {model for _, model, _ in reference.SECTIONS}
    assert reference.reachable_models() <= listed


def test_every_field_has_a_line_and_an_example() -> None:
    missing = [
        key
        for _, model, _ in reference.SECTIONS
        for key, yaml_key, info in reference.fields(model)
        if not reference.meaning(key, info) or not reference.example(key, yaml_key, info)
    ]
    assert missing == []


def test_the_page_lists_every_key() -> None:
    page = reference.render()
    for _, model, prefix in reference.SECTIONS:
        for _, yaml_key, _ in reference.fields(model):
            assert f"| `{prefix}{yaml_key}` |" in page
    for key in ("type", "min", "max", "integer", "bins", "edges", "values", "values_file",
                "group", "other", "missing", "fill"):  # fmt: skip
        assert f"| `schema.COLUMN.{key}` |" in page


def test_the_committed_page_is_up_to_date() -> None:
    assert reference.DOC.read_text(encoding="utf-8") == reference.render(), (
        "docs/reference.md is stale: run python -m dpql.spec.reference"
    )


def test_a_field_without_an_entry_fails(monkeypatch) -> None:
    monkeypatch.delitem(reference.NOTES, "NumericSpec.integer")
    monkeypatch.delitem(reference.EXAMPLES, "NumericSpec.integer")
    info = reference.cols.NumericSpec.model_fields["integer"]
    assert reference.meaning("NumericSpec.integer", info) is None
    assert reference.example("NumericSpec.integer", "integer", info) == "integer: false"
