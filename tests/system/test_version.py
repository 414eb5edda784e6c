"""``liveunwind --version``: the version written once, in pyproject.toml."""

from __future__ import annotations

import tomllib
from importlib.metadata import version

import pytest

from tests.test_attach_errors import ROOT, run_cli


def test_installed_metadata_is_pyprojects_version() -> None:
    written = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert version("liveunwind") == written, "the installed metadata is stale: run make venv"


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version_prints_one_line_and_exits_0(flag: str) -> None:
    result = run_cli(flag)
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == f"liveunwind {version('liveunwind')}\n"


def test_version_is_listed_in_the_help() -> None:
    assert "-V, --version" in run_cli("--help").stdout
