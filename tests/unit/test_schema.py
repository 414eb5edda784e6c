"""The JSON Schema of ``--json`` against the code: its enums, its ties, its place in the package.

Real documents validated against it are tests/system/test_schema.py.
"""

from __future__ import annotations

import importlib
import pkgutil
import tomllib
from pathlib import Path

import jsonschema
import pytest

import liveunwind.arch
from liveunwind.arch import Arch
from liveunwind.cli.report import SCHEMA_ID, SCHEMA_VERSION
from liveunwind.frames import Method, StopReason, Trust
from tests.support.paths import ROOT
from tests.support.schema import SCHEMA, SCHEMA_FILE


def test_the_schema_is_valid_draft_2020_12() -> None:
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


def test_the_schema_id_and_version_are_the_ones_documents_carry() -> None:
    assert SCHEMA["$id"] == SCHEMA_ID
    assert SCHEMA["properties"]["$schema"] == {
        **SCHEMA["properties"]["$schema"],
        "const": SCHEMA_ID,
    }
    assert SCHEMA["properties"]["schema_version"]["const"] == SCHEMA_VERSION
    assert SCHEMA_ID.endswith(f":{SCHEMA_VERSION}")


def test_the_enums_are_the_codes() -> None:
    frame = SCHEMA["$defs"]["frame"]["properties"]
    assert frame["method"]["enum"] == [method.value for method in Method]
    assert frame["trust"]["enum"] == [trust.value for trust in Trust]
    thread = SCHEMA["$defs"]["thread"]["properties"]
    assert thread["stop_reason"]["enum"] == [reason.value for reason in StopReason]
    arches = set()
    for module in pkgutil.iter_modules(liveunwind.arch.__path__):
        loaded = importlib.import_module(f"liveunwind.arch.{module.name}")
        arches |= {value.name for value in vars(loaded).values() if isinstance(value, Arch)}
    assert set(SCHEMA["properties"]["arch"]["enum"]) == arches


@pytest.mark.parametrize("method", list(Method), ids=[method.value for method in Method])
def test_the_schema_ties_trust_to_method_as_the_code_does(method: Method) -> None:
    frame_schema = {"$defs": SCHEMA["$defs"], "$ref": "#/$defs/frame"}
    validator = jsonschema.Draft202012Validator(frame_schema)
    frame = {
        "index": 1, "pc": 0x1000, "sp": 0x2000, "cfa": None, "module": None,
        "module_offset": None, "function": None, "offset": None, "method": method.value,
        "signal_frame": False, "notes": [], "file": None, "line": None, "inlined": [],
        "python": [],
    }  # fmt: skip
    accepted = {trust for trust in Trust if validator.is_valid({**frame, "trust": trust.value})}
    assert accepted == {Trust.of(method)}


def test_the_package_data_ships_every_schema() -> None:
    """pyproject's package-data names the schema files, so ``pip install`` carries them."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    shipped = {
        path
        for package, patterns in setuptools["package-data"].items()
        for pattern in patterns
        for path in (ROOT / package.replace(".", "/")).glob(pattern)
    }
    assert shipped == set((ROOT / "liveunwind").rglob("*.schema.json"))
    assert Path(str(SCHEMA_FILE)) in shipped
