"""The version is written once, in pyproject.toml: the installed metadata carries it.

``liveunwind --version`` itself is tests/system/test_version.py.
"""

from __future__ import annotations

import tomllib
from importlib.metadata import version

from tests.support.paths import ROOT


def test_installed_metadata_is_pyprojects_version() -> None:
    written = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert version("liveunwind") == written, "the installed metadata is stale: run make venv"
