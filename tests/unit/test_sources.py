"""The registry of unwind sources (liveunwind/sources.py) is the one place their names live.

Everything else that names sources is compared with it here: the JSON
Schema's method enums, the command line (``--unwinder``'s words, help and
mistakes, ``unwind-info --format``), the module tables' methods, the
stepper's tables and strategies, and the one signature every strategy has.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from importlib import import_module
from typing import get_type_hints

import pytest

from liveunwind.cli import commands
from liveunwind.cli.parse import Option
from liveunwind.errors import UsageError
from liveunwind.frames import Method, StopReason, Trust
from liveunwind.modules.modulemap import ModuleMap
from liveunwind.modules.sources import UnwindSource
from liveunwind.sources import (
    AUTO_UNWINDERS,
    SOURCES,
    SOURCES_BY_NAME,
    STRATEGY,
    TABLE,
    parse_unwinders,
    sources_named,
)
from liveunwind.targets.base import Mapping
from liveunwind.unwinder.stepper import Stepper
from liveunwind.unwinder.strategies import Walk
from tests.support.schema import SCHEMA
from tests.support.spaces import BufferSpace

#: The methods no ``--unwinder`` word turns on or off (the registry's docstring says why).
NOT_A_SOURCE = {Method.CONTEXT, Method.SIGNAL, Method.GOROUTINE, Method.LEAF}
#: The strategy no source names: the stepper runs it before the chosen ones.
LEAF = "leaf"


# -- the registry itself ----------------------------------------------------------------


def test_every_entry_is_whole_and_names_one_method() -> None:
    assert len(SOURCES_BY_NAME) == len(SOURCES)
    for source in SOURCES:
        assert source.kind in (TABLE, STRATEGY), source
        assert (source.strategy is not None) == (source.kind == STRATEGY), source
        assert not (source.run_time and source.kind == STRATEGY), source
        assert source.help and "\n" not in source.help, source
    assert len({source.method for source in SOURCES}) == len(SOURCES)


def test_every_method_is_a_sources_or_the_walks_own() -> None:
    methods = {source.method for source in SOURCES}
    assert methods | NOT_A_SOURCE == set(Method)
    assert not methods & NOT_A_SOURCE


def test_auto_is_every_source_tables_first() -> None:
    assert tuple(source.name for source in SOURCES) == AUTO_UNWINDERS
    kinds = [SOURCES_BY_NAME[name].kind for name in AUTO_UNWINDERS]
    assert kinds == sorted(kinds, key=[TABLE, STRATEGY].index)


def test_tables_are_trusted_more_than_strategies() -> None:
    for source in SOURCES:
        assert (Trust.of(source.method) is Trust.HIGH) == (source.kind == TABLE), source


# -- the schema ---------------------------------------------------------------------------


def test_the_schemas_method_enums_hold_the_registrys_methods() -> None:
    """The frame's ``method`` enum, and the methods the schema gives high trust."""
    frame = SCHEMA["$defs"]["frame"]
    assert {source.method.value for source in SOURCES} <= set(frame["properties"]["method"]["enum"])
    (high,) = [
        rule["if"]["properties"]["method"]["enum"]
        for rule in frame["allOf"]
        if rule["then"]["properties"]["trust"]["const"] == Trust.HIGH.value
    ]
    tables = {source.method.value for source in SOURCES if source.kind == TABLE}
    assert set(high) == {*tables, Method.SIGNAL.value, Method.GOROUTINE.value}


# -- the command line ---------------------------------------------------------------------


def test_unwinder_words_are_the_registrys() -> None:
    assert parse_unwinders("auto") == AUTO_UNWINDERS
    assert parse_unwinders(" sframe , cfi,") == ("sframe", "cfi")
    for text, named in [("bogus", "bogus"), ("cfi,bogus,fp", "bogus"), (",", "','")]:
        with pytest.raises(UsageError) as raised:
            parse_unwinders(text)
        assert str(raised.value) == (
            f"unknown unwinder {named}; choose from auto, {', '.join(AUTO_UNWINDERS)}"
        )


def _option(command: str, name: str) -> Option:
    return next(each for each in commands() if each.name == command).options[name]


def test_the_unwinder_help_explains_every_source() -> None:
    help = _option("pid", "--unwinder").help
    assert f"auto (= {','.join(AUTO_UNWINDERS)})" in help
    for source in SOURCES:
        assert f"{source.name}: {source.help}" in help


def test_unwind_info_formats_are_the_tables_a_file_carries() -> None:
    in_files = [source.name for source in SOURCES if source.kind == TABLE and not source.run_time]
    assert _option("unwind-info", "--format").choices == tuple(in_files)
    assert {"compact", "cfi", "sframe"} <= set(in_files)


def test_a_module_table_reports_its_sources_method() -> None:
    class NoRules:
        def rule_for(self, pc: int) -> None:
            return None

    for name in ("compact", "cfi", "sframe"):
        table = UnwindSource(name, ".section", NoRules())
        assert (table.name, table.method) == (name, SOURCES_BY_NAME[name].method)
    with pytest.raises(KeyError):
        UnwindSource("eh_frame", ".eh_frame", NoRules())


# -- strategies ---------------------------------------------------------------------------


def signature_problems(step: Callable[..., object]) -> list[str]:
    """How ``step`` differs from ``step(walk: Walk) -> dict[int, int] | None``."""
    problems = []
    parameters = list(inspect.signature(step).parameters.values())
    if [(parameter.name, parameter.kind) for parameter in parameters] != [
        ("walk", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]:
        problems.append(f"takes {inspect.signature(step)}, not (walk)")
    hints = get_type_hints(step)
    if hints.get("walk") is not Walk:
        problems.append(f"walk is {hints.get('walk')}, not Walk")
    if hints.get("return") != dict[int, int] | None:
        problems.append(f"returns {hints.get('return')}, not dict[int, int] | None")
    return problems


@pytest.mark.parametrize(
    "module", [source.strategy for source in SOURCES if source.kind == STRATEGY] + [LEAF]
)
def test_every_strategy_has_the_one_signature(module: str) -> None:
    step = import_module(f"liveunwind.unwinder.strategies.{module}").step
    assert signature_problems(step) == []


def test_the_signature_check_refuses_other_shapes() -> None:
    def two_arguments(walk: Walk, notes: list[str]) -> dict[int, int] | None:
        return None

    def other_type(walk: dict[int, int]) -> dict[int, int] | None:
        return None

    def other_result(walk: Walk) -> tuple[int, int] | None:
        return None

    for step in (two_arguments, other_type, other_result):
        assert len(signature_problems(step)) == 1, step.__name__


# -- the stepper --------------------------------------------------------------------------

CODE = Mapping(0x400000, 0x401000, "r-xp", 0, 0, "")
STACK = Mapping(0x7FF000, 0x800000, "rw-p", 0, 0, "[stack]")


def _space_without_tables() -> BufferSpace:
    """Anonymous code that no table covers, stopped in a function whose caller called it.

    The call at 0x400100 (to 0x400000) returns to 0x400105; the frame record at
    rbp 0x7FF200 holds that return address and a caller rbp of 0.
    """
    code = bytearray(0x1000)
    code[0x100:0x105] = b"\xe8" + (0x400000 - 0x400105).to_bytes(4, "little", signed=True)
    stack = bytearray(0x1000)
    stack[0x208:0x210] = (0x400105).to_bytes(8, "little")
    arch = BufferSpace.arch
    registers = {arch.pc: 0x400010, arch.sp: 0x7FF100, arch.fp: 0x7FF200}
    return BufferSpace([(CODE, bytes(code)), (STACK, bytes(stack))], registers)


@pytest.mark.parametrize(
    ("unwinders", "method"),
    [
        (("fp",), Method.FRAMEPOINTER),
        (("scan",), Method.SCAN),
        (("cfi", "scan", "fp"), Method.SCAN),  # the order given, not the registry's
    ],
)
def test_the_stepper_runs_the_strategies_it_was_given(
    unwinders: tuple[str, ...], method: Method
) -> None:
    space = _space_without_tables()
    (thread,) = space.threads()
    walked = Stepper(space, ModuleMap(space), unwinders=unwinders).backtrace(thread)
    assert [(frame.pc, frame.method) for frame in walked.frames] == [
        (0x400010, Method.CONTEXT),
        (0x400105, method),
    ]
    assert walked.frames[1].sp == 0x7FF210
    assert walked.stop_reason is StopReason.NO_UNWIND_INFO


def test_the_stepper_refuses_a_name_the_registry_does_not_know() -> None:
    space = _space_without_tables()
    with pytest.raises(UsageError, match="unknown unwinder leaf; choose from auto, dynamic"):
        Stepper(space, ModuleMap(space), unwinders=("cfi", "leaf"))
    assert sources_named(()) == ()
