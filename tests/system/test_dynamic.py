"""Run-time registered unwind info in real processes: the programs of testprogs/jit/, libunwind.

The programs generate the same two functions and describe them three ways
(libunwind's DYNAMIC and REMOTE_TABLE lists, the GDB JIT interface); the
registry read from their memory must be what they registered (and,
independently, wrote to their perf map), and its rules must unwind the
stopped thread to the return addresses the frame layout implies.  The
installed libunwind's accessor and symbol tables are read too.  The same
structures built as bytes are tests/unit/test_dynamic.py.
"""

from __future__ import annotations

import ctypes
import os
import platform
import shutil
import struct
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from liveunwind.formats.elf import ElfImage
from liveunwind.formats.unwind.perfmap import parse_perf_map
from liveunwind.formats.unwind.rules import RegKind, UnwindRule
from liveunwind.modules.jit import DynamicRegistry, find_roots
from tests.support.programs import RunningProgram, start_program

RBP, RSP, RIP = 6, 7, 16


@pytest.mark.skipif(platform.machine() != "x86_64", reason="Debian x86_64 libunwind")
def test_accessor_decoding_agrees_with_calling_it() -> None:
    """Our decoding of the installed libunwind's _U_dyn_info_list_addr() equals its result."""
    path = Path("/usr/lib/x86_64-linux-gnu/libunwind.so.8")
    if not path.exists():
        pytest.skip("libunwind8 is not installed")
    library = ctypes.CDLL(str(path))
    library._U_dyn_info_list_addr.restype = ctypes.c_void_p
    actual = library._U_dyn_info_list_addr()
    real = path.resolve()
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split()
        if len(fields) >= 6 and Path(fields[5]) == real and int(fields[2], 16) == 0:
            bias = int(fields[0].split("-")[0], 16)
            break
    else:
        pytest.fail("libunwind is not mapped")
    image = ElfImage(real.read_bytes(), origin=str(real))
    bias -= image.vaddr_for_offset(0) or 0
    assert find_roots(image, bias).libunwind_lists == (actual,)


# ---------------------------------------------------------------------------------------------
# Live: the programs of testprogs/jit


@dataclass
class JitProgram:
    pid: int
    lines: list[str]

    def line(self, prefix: str) -> list[str]:
        return next(line for line in self.lines if line.startswith(prefix)).split()[1:]


@pytest.fixture
def run_jit(jit_build: Path) -> Iterator[Callable[[str], JitProgram]]:
    """Starts a JIT program, returns once it printed "ready" and sleeps; kills it after."""
    started: list[RunningProgram] = []

    def run(name: str) -> JitProgram:
        program = start_program(jit_build, name)
        started.append(program)
        return JitProgram(program.pid, program.output.decode().splitlines())

    yield run
    for program in started:
        program.stop()
        Path(f"/tmp/perf-{program.pid}.map").unlink(missing_ok=True)


def live_registry(space, modules) -> DynamicRegistry:  # type: ignore[no-untyped-def]
    """The registry as the stepper will build it: roots from every module's symbols."""
    lists: list[int] = []
    descriptors: list[int] = []
    for module in modules.modules:
        if module.image is None:
            continue
        roots = find_roots(module.image, module.load_bias)
        lists.extend(roots.libunwind_lists)
        descriptors.extend(roots.jit_descriptors)
    perf = parse_perf_map(Path(f"/proc/{space.pid}/root/tmp/perf-{space.pid}.map").read_text())
    return DynamicRegistry(
        space.read, space.arch, libunwind_lists=lists, jit_descriptors=descriptors, perf_map=perf
    )


def apply(
    rule: UnwindRule, registers: dict[int, int], read: Callable[[int, int], bytes]
) -> dict[int, int]:
    """The caller's registers: what the stepper does with a rule (no expressions needed here)."""
    cfa = registers[rule.cfa.register] + rule.cfa.offset
    caller = dict(registers)
    for number, register_rule in rule.registers:
        if register_rule.kind is RegKind.SAME:
            continue
        if register_rule.kind is RegKind.UNDEFINED:
            caller.pop(number, None)
        elif register_rule.kind is RegKind.OFFSET:
            caller[number] = struct.unpack("<Q", read(cfa + register_rule.offset, 8))[0]
        elif register_rule.kind is RegKind.REGISTER:
            caller[number] = registers[register_rule.register]
        else:
            raise AssertionError(f"unexpected rule {register_rule}")
    caller[RSP] = cfa
    caller[RIP] = caller[rule.return_address_register]
    return caller


PROGRAMS = {
    # program: (sources of the unwind info, names registered with unwind info)
    "jit-dynamic": ("libunwind", {"jit_outer", "jit_inner", "jit_idle"}),
    "jit-table": ("libunwind-table", {"jit-table"}),
    "jit-gdb": ("gdb-jit", {"jit_outer", "jit_inner"}),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_live_registry_unwinds_the_jit_frames(
    name: str, run_jit: Callable[[str], JitProgram]
) -> None:
    from liveunwind.modules.modulemap import ModuleMap
    from liveunwind.targets.live.ptrace import PtraceProcess

    program = run_jit(name)
    assert program.line("chain:") == ["blocker", "jit_inner", "jit_outer", "main"]
    returns = dict(item.split("=") for item in program.line("returns:"))
    source, names = PROGRAMS[name]
    with PtraceProcess(program.pid) as space:
        modules = ModuleMap(space)
        dynamic = live_registry(space, modules)
        ranges = dynamic.ranges()
        assert dynamic.problems == []
        perf = {r.name: r for r in ranges if r.source == "perf-map"}
        registered = [r for r in ranges if r.source == source]
        assert {r.name for r in registered} == names
        for entry in registered:
            if entry.name in perf:  # the program's two channels agree
                assert (entry.start, entry.end) == (perf[entry.name].start, perf[entry.name].end)
        if name == "jit-table":
            (table,) = registered
            assert (table.start, table.end) == (perf["jit_outer"].start, perf["jit_inner"].end)
        outer, inner = perf["jit_outer"], perf["jit_inner"]

        # Walk with the files' CFI from the blocked thread to the first JIT frame.
        (thread,) = space.threads()
        registers = dict(thread.registers)
        lookup = registers[RIP]
        for _ in range(16):
            if dynamic.covers(registers[RIP]):
                break
            module = modules.find(lookup)
            assert module is not None, f"pc {lookup:#x} outside every file before the JIT frames"
            relative = lookup - module.load_bias
            rule = next(
                found
                for source in module.unwind_sources.get("cfi", [])
                if (found := source.rule_for(relative)) is not None
            )
            registers = apply(rule, registers, space.read)
            lookup = registers[RIP] - 1
        assert registers[RIP] == inner.start + int(returns["jit_inner"], 16)
        assert dynamic.name_for(registers[RIP] - 1) == "jit_inner"  # perf's, for jit-table

        inner_rule = dynamic.rule_for(registers[RIP] - 1)
        assert inner_rule is not None
        caller = apply(inner_rule, registers, space.read)
        assert caller[RIP] == outer.start + int(returns["jit_outer"], 16)
        assert caller[RBP] == 0xDEADBEEF  # the junk jit_outer put in rbp, saved by jit_inner

        outer_rule = dynamic.rule_for(caller[RIP] - 1)
        assert outer_rule is not None
        in_main = apply(outer_rule, caller, space.read)
        module = modules.find(in_main[RIP])
        assert module is not None and module.path.endswith(name)
        symbol = module.symbolize(in_main[RIP])
        assert symbol is not None and symbol.name == "main"
        assert in_main[RBP] != 0xDEADBEEF and in_main[RSP] > caller[RSP] > registers[RSP]

        copied = dynamic.read_all()
        assert copied and all(size > 0 for _, size in copied)


@pytest.mark.parametrize(
    "path",
    [
        "/usr/lib/x86_64-linux-gnu/libunwind.so.8",
        "/usr/lib/x86_64-linux-gnu/libc.so.6",
        "/usr/lib/x86_64-linux-gnu/libstdc++.so.6",
    ],
)
def test_symbol_lookup_by_name_agrees_with_readelf(path: str) -> None:
    """Roots are found by name without decoding every symbol; readelf lists them all.

    Every defined symbol readelf shows (in .symtab when there is one, else
    .dynsym) is looked up by name, tail-shared strings included.
    """
    if not os.path.exists(path) or shutil.which("readelf") is None:
        pytest.skip(f"needs {path} and readelf")
    listing = subprocess.run(
        ["readelf", "-sW", path], capture_output=True, text=True, check=True
    ).stdout
    image = ElfImage(Path(path).read_bytes(), origin=path)
    # A versioned name can be defined more than once (pthread_cond_init@GLIBC_2.2.5
    # and @@GLIBC_2.3.2): any of its definitions will do.
    expected: dict[str, set[int]] = {}
    for line in listing.splitlines():
        fields = line.split()
        if len(fields) == 8 and fields[0][:-1].isdigit() and fields[6] != "UND":
            expected.setdefault(fields[7].partition("@")[0], set()).add(int(fields[1], 16))
    names = sorted(expected)[:: max(1, len(expected) // 400)]
    assert len(names) > 20
    for name in names:
        found = image.find_symbol(name)
        assert found is not None and found.value in expected[name], name
    assert image.find_symbol("no_such_symbol_anywhere") is None
