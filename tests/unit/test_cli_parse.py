"""The command line: every accepted form, every mistake named in one line, help on request."""

from __future__ import annotations

import pytest

from liveunwind.cli import commands
from liveunwind.cli.parse import HelpRequested, parse
from liveunwind.errors import UsageError


def parsed(*argv: str):
    return parse("liveunwind", "test", commands(), argv)


def test_defaults_of_pid() -> None:
    values = parsed("pid", "42")
    assert values.command == "pid" and values.pid == [42]
    assert values.all is False and values.name is None and values.exe is None
    assert values.repeat == 1 and values.interval == 0.0 and values.max_frames == 256
    assert values.unwinder == "auto" and values.debug_dir == [] and values.threads is None
    assert values.json is False and values.no_snapshot is False and values.stack_cap is None


def test_values_in_both_spellings_anywhere_after_the_command() -> None:
    values = parsed(
        "pid", "--repeat=3", "42", "--interval", "0.5", "--threads", "1,2", "--json",
        "--debug-dir", "/a", "--debug-dir=/b", "--max-frames", "0x10", "--stack-cap", "4096",
    )  # fmt: skip
    assert (values.pid, values.repeat, values.interval) == ([42], 3, 0.5)
    assert values.threads == [1, 2] and values.json is True
    assert values.debug_dir == ["/a", "/b"]
    assert values.max_frames == 16 and values.stack_cap == 4096


def test_pid_takes_many_process_ids_and_the_selectors() -> None:
    assert parsed("pid", "1", "2", "--json", "3").pid == [1, 2, 3]
    values = parsed("pid", "--all", "--name", "^post", "--exe", "/bin/x", "--per-process")
    assert values.pid == [] and values.all and values.per_process
    assert (values.name, values.exe) == ("^post", "/bin/x")


def test_core_takes_cores_folders_and_the_executable() -> None:
    """The words after ``core`` are all cores here; cli.cores.core_arguments tells an
    executable apart by its ELF header (tests/system/test_core_many.py)."""
    assert parsed("core", "c.core").core == ["c.core"]
    values = parsed("core", "c.core", "prog", "--sysroot", "/r", "--search-path", "/x:/y")
    assert (values.core, values.sysroot) == (["c.core", "prog"], "/r")
    assert values.search_path == "/x:/y"
    values = parsed("core", "/var/lib/systemd/coredump", "--group", "--group-frames", "5")
    assert values.group and values.group_frames == 5 and not values.collapsed
    assert parsed("core", "a", "b").group_frames == 3


def test_double_dash_ends_the_options() -> None:
    assert parsed("unwind-info", "--", "--odd-file-name").file == "--odd-file-name"


def test_a_negative_number_is_a_value_not_an_option() -> None:
    with pytest.raises(UsageError, match="must not be negative"):
        parsed("pid", "1", "--max-frames", "-3")


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        ((), ["command is required"]),
        (("frob",), ["unknown command", "frob"]),
        (("pid", "0"), ["not a process id"]),
        (("pid", "1", "2", "x"), ["pid", "not a process id: 'x'"]),
        (("unwind-info", "f", "x"), ["unexpected argument", "'x'"]),
        (("pid", "1", "--bogus"), ["unknown option --bogus"]),
        (("pid", "1", "--json=yes"), ["--json takes no value"]),
        (("pid", "1", "--repeat"), ["--repeat needs a value"]),
        (("pid", "1", "--interval", "soon"), ["--interval", "not a number of seconds"]),
        (("pid", "1", "--threads", "1,x"), ["--threads", "not a process id"]),
        (("pid", "1", "--stack-cap", "0"), ["--stack-cap", "at least 1 byte"]),
        (("unwind-info", "f", "--format", "dwarf"), ["--format", "'dwarf'", "cfi"]),
        (("unwind-info", "f", "--pc", "zz"), ["--pc", "not an address"]),
    ],
)
def test_mistakes_are_usage_errors_naming_the_argument(argv, words) -> None:
    with pytest.raises(UsageError) as caught:
        parsed(*argv)
    for word in words:
        assert word in str(caught.value)


def test_help_lists_commands_and_every_option() -> None:
    with pytest.raises(HelpRequested) as top:
        parsed("--help")
    for command in commands():
        assert command.name in top.value.text
        with pytest.raises(HelpRequested) as one:
            parsed(command.name, "1", "-h")
        for option in command.options:
            assert option in one.value.text
        for positional in command.positionals:
            assert positional.name in one.value.text


def test_pid_needs_process_ids_or_a_selector_but_not_both() -> None:
    from liveunwind.cli.targets import choose

    with pytest.raises(UsageError, match="missing pid"):
        choose([], every=False, name=None, exe=None)
    with pytest.raises(UsageError, match="not both"):
        choose([1], every=False, name="x", exe=None)
    repeated = choose([3, 3, 4], every=False, name=None, exe=None)
    assert repeated.pids == [3, 4] and not repeated.single
    assert choose([5], every=False, name=None, exe=None).single
    with pytest.raises(UsageError, match="not both"):
        choose([1], every=False, name=None, exe=None, container="abc")
    with pytest.raises(UsageError, match="--cgroup or --container, not both"):
        choose([], every=False, name=None, exe=None, cgroup="/a", container="abc")
    values = parsed("pid", "--cgroup", "/system.slice/x.service", "--container", "4f2a")
    assert values.cgroup == "/system.slice/x.service" and values.container == "4f2a"


def test_a_literal_name_pattern_matches_as_re_search_does_without_importing_re() -> None:
    """``--name`` with a literal, perhaps anchored, is matched without ``re`` (4.4 ms of a
    100-process run to import with ``enum``), as ``re.search`` matches: ``$`` before a
    final newline too; anything else is ``re``'s.  That the run then imports no ``re``:
    system/test_many.py."""
    import re

    from liveunwind.cli.targets import _literal_search

    patterns = ["^a$", "^a", "a$", "a", "^", "$", "^$", "", "ab", "^ab$", "é", "a b", "-a"]
    texts = ["", "a", "a\n", "ab", "ab\n", "\n", "xa", "xa\n", "a\nb", "abab", "a\n\n", "é\n"]
    for pattern in patterns:
        search = _literal_search(pattern)
        assert search is not None, pattern
        for text in texts:
            assert bool(search(text)) == bool(re.search(pattern, text)), (pattern, text)
    for pattern in ["a.b", "a\\b", "$a", "a^", "^^a", "a$$", "a*", "(?i)a", "[a]", "a|b", "a{2}"]:
        assert _literal_search(pattern) is None, pattern
