"""``liveunwind --version``: the version written once, in pyproject.toml."""

from __future__ import annotations

from importlib.metadata import version

import pytest

from tests.support.cli import run_cli


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version_prints_one_line_and_exits_0(flag: str) -> None:
    result = run_cli(flag)
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == f"liveunwind {version('liveunwind')}\n"


def test_version_is_listed_in_the_help() -> None:
    assert "-V, --version" in run_cli("--help").stdout
