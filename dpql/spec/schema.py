"""JSON Schemas of the release spec and the policy, generated from the pydantic models.

``python -m dpql.spec.schema`` rewrites ``spec/release.schema.json`` and
``spec/policy.schema.json``; a test fails when the committed files are out of date.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from pydantic import BaseModel

from dpql.spec.models import Policy, ReleaseSpec

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "spec"
SCHEMAS: dict[str, type[BaseModel]] = {
    "release.schema.json": ReleaseSpec,
    "policy.schema.json": Policy,
}


def schema_text(model: type[BaseModel]) -> str:
    """The JSON Schema (draft 2020-12) of ``model`` as the committed file's text."""
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        **model.model_json_schema(by_alias=True, mode="validation"),
    }
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def write_schemas(folder: Path = SCHEMA_DIR) -> list[Path]:
    """Write every schema into ``folder`` atomically (temp file + rename); return the paths."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, model in SCHEMAS.items():
        target = folder / name
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=folder)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(schema_text(model))
        os.replace(tmp, target)
        written.append(target)
    return written


if __name__ == "__main__":
    for path in write_schemas():
        print(path)
