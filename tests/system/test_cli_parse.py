"""The command line as the command reads it: exit 64 on a mistake, 0 on help.

Every form the parser accepts, and every mistake it names, is
tests/unit/test_cli_parse.py.
"""

from __future__ import annotations

from tests.support.assertions import assert_one_line_error
from tests.support.cli import run_cli


def test_the_command_line_tool_exits_64_on_a_mistake_and_0_on_help() -> None:
    assert_one_line_error(run_cli("pid", "1", "--bogus"), 64, "--bogus")
    shown = run_cli("core", "--help")
    assert shown.returncode == 0 and "--search-path" in shown.stdout and shown.stderr == ""
