"""The committed JSON Schemas match the models, and agree with the loader on examples."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dpql.schemas import SCHEMA_DIR, SCHEMAS, schema_text, write_schemas
from dpql.spec.yamlpos import load_yaml

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_committed_schema_is_up_to_date(name: str) -> None:
    committed = (SCHEMA_DIR / name).read_text(encoding="utf-8")
    assert committed == schema_text(SCHEMAS[name]), "run: python -m dpql.schemas"


def test_write_schemas_writes_every_schema(tmp_path: Path) -> None:
    paths = write_schemas(tmp_path)
    assert sorted(p.name for p in paths) == sorted(SCHEMAS)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(SCHEMAS)  # no temp files left
    for p in paths:
        assert p.read_text() == schema_text(SCHEMAS[p.name])


def test_examples_validate_against_the_schemas_and_an_unknown_key_does_not() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    for example, name in [("adult/adult.release.yaml", "release"), ("policy.yaml", "policy")]:
        schema = json.loads((SCHEMA_DIR / f"{name}.schema.json").read_text())
        data = load_yaml((EXAMPLES / example).read_text(), example).data
        jsonschema.validate(data, schema)
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({**data, "bogus": 1}, schema)
