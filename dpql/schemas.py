"""JSON Schemas of the release spec, the policy and the provenance record.

``python -m dpql.schemas`` rewrites ``spec/release.schema.json``, ``spec/policy.schema.json``
(generated from the pydantic models) and ``spec/provenance.schema.json`` (from
:func:`dpql.release.provenance.record_schema`, versioned by
``dpql.release.provenance.RECORD_VERSION``); a test fails when the committed files are out of date.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from dpql.io import atomic_path
from dpql.release.provenance import record_schema
from dpql.spec.models import Policy, ReleaseSpec

SCHEMA_DIR = Path(__file__).resolve().parents[1] / "spec"
Source = type[BaseModel] | Callable[[], dict[str, Any]]
SCHEMAS: dict[str, Source] = {
    "release.schema.json": ReleaseSpec,
    "policy.schema.json": Policy,
    "provenance.schema.json": record_schema,
}


def schema_text(source: Source) -> str:
    """The JSON Schema (draft 2020-12) of a pydantic model, or the schema a function builds,
    as the committed file's text."""
    if isinstance(source, type) and issubclass(source, BaseModel):
        schema = {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            **source.model_json_schema(by_alias=True, mode="validation"),
        }
    else:
        schema = source()
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def write_schemas(folder: Path = SCHEMA_DIR) -> list[Path]:
    """Write every schema into ``folder`` atomically (temp file + rename); return the paths."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, source in SCHEMAS.items():
        target = folder / name
        with atomic_path(target, 0o644) as tmp:
            tmp.write_text(schema_text(source), encoding="utf-8")
        written.append(target)
    return written


if __name__ == "__main__":
    for path in write_schemas():
        print(path)
