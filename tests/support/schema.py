"""The JSON Schema of ``--json`` documents, as the package ships it, and a validator for it."""

from __future__ import annotations

import json
from importlib.resources import files

import jsonschema

SCHEMA_FILE = files("liveunwind.cli") / "schemas" / "backtrace.schema.json"
SCHEMA = json.loads(SCHEMA_FILE.read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
