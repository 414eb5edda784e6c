"""The .gopclntab decoder on the installed Go's own binary: Go's function table and SP deltas.

The Go program of testprogs/go is checked against two outside oracles: its
symbol table (function entries and names) and readelf's reading of its
``.debug_frame``, which Go's linker writes from the same SP deltas.  Tables
of the other layouts are tests/unit/test_gopclntab.py.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest

from liveunwind.arch import arch_by_name
from liveunwind.formats.unwind.gopclntab import FLAG_SPWRITE, FLAG_TOPFRAME, GoPclnTab
from liveunwind.formats.unwind.rules import RegKind
from tests.support.go import go_table
from tests.support.paths import ROOT

X86_64 = arch_by_name("x86_64")


def _function_named(table: GoPclnTab, name: str):
    for index in range(len(table)):
        function = table.function(index)
        if table.name(function) == name:
            return function
    raise LookupError(name)


# -- the installed Go's own binary --------------------------------------------------


def test_functions_are_the_symbol_table_s(go_program) -> None:
    """Every function's entry carries a symbol of its name.

    Assembly functions' symbols add ``.abi0``; the table writes the lengths
    of array types in names as ``[...]``.
    """
    table, image = go_table(go_program)
    symbols: dict[int, set[str]] = {}
    for symbol in image.symbols():
        symbols.setdefault(symbol.value, set()).add(re.sub(r"\[\d+\]", "[...]", symbol.name))
    assert len(table) > 1000
    for index in range(len(table)):
        function = table.function(index)
        name = table.name(function)
        assert {name, name + ".abi0"} & symbols.get(function.entry, set()), (
            f"{name} at {function.entry:#x}: symbols there are {symbols.get(function.entry)}"
        )
        assert table.function_at(function.entry).entry == function.entry
        assert table.function_at(function.end - 1).entry == function.entry


_FDE = re.compile(r"FDE cie=\w+ pc=([0-9a-f]+)\.\.([0-9a-f]+)")
_ROW = re.compile(r"^([0-9a-f]{16}) +rsp\+(\d+) ")


def test_sp_deltas_are_those_of_go_s_debug_frame(go_program) -> None:
    """Each row readelf decodes from .debug_frame says CFA = rsp + delta + 8."""
    if shutil.which("readelf") is None:
        pytest.skip("readelf is not installed")
    table, _ = go_table(go_program)
    dump = subprocess.run(
        ["readelf", "--debug-dump=frames-interp", str(go_program)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    compared = 0
    end = 0
    for line in dump.splitlines():
        fde = _FDE.search(line)
        if fde:
            end = int(fde.group(2), 16)
            continue
        row = _ROW.match(line)
        if row is None:
            continue
        pc, cfa_offset = int(row.group(1), 16), int(row.group(2))
        if pc >= end:
            continue
        function = table.function_at(pc)
        assert function is not None, f"{pc:#x} has an FDE but no Go function"
        assert table.sp_delta(function, pc) == cfa_offset - 8, f"at {pc:#x}"
        rule = table.rule_for(pc)
        assert rule is not None
        if not table.ends_stack(function):
            assert (rule.cfa.register, rule.cfa.offset) == (X86_64.sp, cfa_offset)
        compared += 1
    assert compared > 2000


def test_walks_end_where_go_s_traceback_ends(go_program) -> None:
    table, _ = go_table(go_program)
    for name in ("runtime.goexit", "runtime.mstart", "runtime.rt0_go"):
        function = _function_named(table, name)
        assert function.flag & FLAG_TOPFRAME, name
        rule = table.rule_for(function.entry)
        assert rule is not None
        assert rule.rule_for(X86_64.return_address).kind is RegKind.UNDEFINED, name
    for name in ("runtime.mcall", "runtime.systemstack", "runtime.morestack"):
        function = _function_named(table, name)
        assert function.flag & FLAG_SPWRITE, name
        assert table.ends_stack(function), name
    for name in ("runtime.sigtramp", "main.busy", "runtime.schedule"):
        function = _function_named(table, name)
        assert not table.ends_stack(function), name
        rule = table.rule_for(function.entry)
        assert rule is not None
        assert rule.rule_for(X86_64.return_address).kind is RegKind.OFFSET, name


def test_padding_after_a_function_has_no_rule(go_program) -> None:
    """The int3 bytes after a function's code are in its range but not in its pcsp table."""
    table, image = go_table(go_program)
    function = _function_named(table, "runtime.cgoSigtramp")
    code = image.contents(image.sections[".text"])
    assert code is not None
    last = function.end - 1
    assert code[last - image.sections[".text"].address] == 0xCC  # int3
    assert table.function_at(last) is not None
    assert table.rule_for(last) is None


def test_unwind_info_lists_go_s_functions_and_where_walks_end(go_program) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "liveunwind", "unwind-info", str(go_program)],
        capture_output=True,
        text=True,
        check=False,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].endswith(": .gopclntab, .debug_frame")
    assert re.fullmatch(r"\.gopclntab \(Go 1\.\d+ layout\): \d+ functions", lines[2])
    goexit = lines.index(next(line for line in lines if line.startswith("runtime.goexit  ")))
    assert lines[goexit + 1].endswith("cfa=rsp+8 ra=u")
    busy = lines.index(next(line for line in lines if line.startswith("main.busy  ")))
    assert lines[busy + 1].endswith("cfa=rsp+8 ra=c-8")
