"""The one rule executor and the target's cache: both stepper paths run the same plans.

The stepper has a cached fast path and a general path (``--verbose``, or a
rule that fails).  They once ran rules with two executors that drifted: the
general one read CFA + offset without the 64-bit mask.  Here a real ELF
object with hand-written CFI (tests/data/cfi/x86_64_wrap.s) is mapped into a
small address space made of byte buffers, with the stack at the top of the
address space so that its rules' addresses wrap past 2^64, and walked on
both paths.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import tracemalloc
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from liveunwind.arch.x86_64 import X86_64
from liveunwind.backtrace.backtracer import Backtracer
from liveunwind.backtrace.options import BacktraceOptions
from liveunwind.formats.elf import ElfImage
from liveunwind.formats.unwind.dwarf_cfi import CfiTable
from liveunwind.frames import Frame, Method, StopReason
from liveunwind.modules.modulemap import ModuleMap
from liveunwind.targets.base import Mapping
from liveunwind.targets.live.ptrace import PtraceProcess
from liveunwind.unwinder import cache as cache_module
from liveunwind.unwinder.cache import UnwindCache
from liveunwind.unwinder.stepper import AUTO_UNWINDERS, Stepper
from tests.support.paths import DATA
from tests.support.spaces import BufferSpace

CFI_DIR = DATA / "cfi"
TOP = 1 << 64
LOAD_ADDRESS = 0x7F0000000000
RIP, RSP = 16, 7
LIBC = "/lib/x86_64-linux-gnu/libc.so.6"


@pytest.fixture(scope="module")
def wrap_object(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/data/cfi/x86_64_wrap.s assembled and linked into a shared object."""
    if shutil.which("gcc") is None or "x86_64" not in _gcc_machine():
        pytest.skip("needs gcc for x86_64")
    out = tmp_path_factory.mktemp("wrap")
    subprocess.run(
        ["gcc", "-c", str(CFI_DIR / "x86_64_wrap.s"), "-o", str(out / "wrap.o")], check=True
    )
    subprocess.run(
        ["gcc", "-shared", "-nostdlib", "-o", str(out / "wrap.so"), str(out / "wrap.o")],
        check=True,
        capture_output=True,
    )
    return out / "wrap.so"


def _gcc_machine() -> str:
    return subprocess.run(["gcc", "-dumpmachine"], capture_output=True, text=True).stdout


def _symbol(path: Path, name: str) -> int:
    with path.open("rb") as stream:
        (symbol,) = ELFFile(stream).get_section_by_name(".symtab").get_symbol_by_name(name)
        return int(symbol["st_value"])


def _wrapping_space(wrap_object: Path) -> tuple[BufferSpace, int, int]:
    """The object mapped at LOAD_ADDRESS, stopped in ``wraps`` with sp 0x20 below 2^64.

    ``wraps`` finds its return address at (2^64 - 0x10) + 0x1010, that is
    at 0x1000; it returns into ``by_expression``, whose CFA is sp + 8 by
    expression and whose return address is at sp + 0x1018 by expression:
    0x1008, which holds 0, the end of the stack.
    """
    code = wrap_object.read_bytes()
    wraps = LOAD_ADDRESS + _symbol(wrap_object, "wraps")
    returns_to = LOAD_ADDRESS + _symbol(wrap_object, "by_expression") + 2
    text = Mapping(
        LOAD_ADDRESS,
        LOAD_ADDRESS + len(code),
        "r-xp",
        0,
        wrap_object.stat().st_ino,
        str(wrap_object),
    )
    stack = Mapping(TOP - 0x1000, TOP, "rw-p", 0, 0, "[stack]")
    low = Mapping(0x1000, 0x2000, "rw-p", 0, 0, "")
    saved = struct.pack("<QQ", returns_to, 0).ljust(0x1000, b"\0")
    space = BufferSpace(
        [(text, code), (stack, bytes(0x1000)), (low, saved)],
        {RIP: wraps + 1, RSP: TOP - 0x20},
    )
    return space, wraps + 1, returns_to


@pytest.mark.parametrize("verbose", [False, True], ids=["fast", "general"])
def test_rules_whose_addresses_wrap_past_2_64_run_alike_on_both_paths(
    wrap_object: Path, verbose: bool
) -> None:
    space, pc, returns_to = _wrapping_space(wrap_object)
    (thread,) = space.threads()
    walked = Stepper(space, ModuleMap(space), verbose=verbose).backtrace(thread)
    assert walked.stop_reason is StopReason.END_OF_STACK, walked.stop_detail
    assert [(f.pc, f.sp, f.cfa, f.method) for f in walked.frames] == [
        (pc, TOP - 0x20, TOP - 0x10, Method.CONTEXT),
        (returns_to, TOP - 0x10, TOP - 0x8, Method.CFI),
    ]
    # No source failed, and none that could not have had an entry is noted.
    assert [f.notes for f in walked.frames] == [[], []]


def test_a_cache_starts_a_new_generation_when_the_modules_change(run_program) -> None:
    first, second = run_program("threads-O2"), run_program("plt")
    cache = UnwindCache()
    with PtraceProcess(first.pid) as process:
        modules = ModuleMap(process)
        cache.begin(modules)
        Stepper(process, modules, cache=cache).backtrace(process.threads()[0])
        assert cache.generation == 1 and cache.at and cache.plans and cache.code
        cache.begin(ModuleMap(process, previous=modules))
        assert cache.generation == 1 and cache.at and cache.plans and cache.code
    with PtraceProcess(second.pid) as process:
        cache.begin(ModuleMap(process))
    assert cache.generation == 2
    # What is keyed by address goes; plans by file and link-time pc stay (FileFacts).
    assert not (cache.at or cache.code or cache.names) and cache.plans


def test_a_full_cache_is_emptied_and_walks_the_same(
    run_program, monkeypatch: pytest.MonkeyPatch
) -> None:
    program = run_program("threads-O2")
    with PtraceProcess(program.pid) as process:
        unbounded = Backtracer(BacktraceOptions()).backtrace(process, {})
        monkeypatch.setattr(cache_module, "MAX_ENTRIES", 8)
        backtracer = Backtracer(BacktraceOptions())
        bounded = backtracer.backtrace(process, {})
    cache = backtracer.cache
    assert 0 < len(cache.at) <= 8 and 0 < len(cache.plans) <= 8 and 0 < len(cache.names) <= 8
    assert len({f.lookup_pc for thread in unbounded.threads for f in thread.frames}) > 8 * 2
    assert [[_key(f) for f in t.frames] for t in bounded.threads] == [
        [_key(f) for f in t.frames] for t in unbounded.threads
    ]


def test_a_full_cache_costs_what_cache_py_says_per_pc() -> None:
    """Under 500 bytes a pc over all tables, because the pcs of a module share their plans."""
    if not Path(LIBC).exists():
        pytest.skip(f"{LIBC} not found")
    image = ElfImage(Path(LIBC).read_bytes(), origin=LIBC)
    eh_frame = image.sections[".eh_frame"]
    table = CfiTable(image.contents(eh_frame), eh_frame.address, kind="eh_frame")
    text = image.sections[".text"]
    found = []
    for pc in range(text.address, text.address + text.size, 3):
        rule = table.rule_for(pc)
        if rule is not None:
            found.append((pc, rule))
        if len(found) == 20_000:
            break
    module = object()
    tracemalloc.start()
    try:
        cache = UnwindCache()
        for pc, rule in found:
            plan = cache.plan(rule, Method.CFI, X86_64)
            cache.remember_plan(("cfi", LOAD_ADDRESS, pc), plan)
            cache.remember_at(LOAD_ADDRESS + pc, (module, plan))
            cache.remember_code(LOAD_ADDRESS + pc + 5)
            cache.remember_name(LOAD_ADDRESS + pc, ("a_function", pc & 0xFF))
        size = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert len(found) == 20_000 and len(cache.shared) < 1000
    assert size / len(found) < 500


@pytest.mark.parametrize(
    ("unwinders", "noted"),
    [(AUTO_UNWINDERS, set()), (("dynamic", "compact", "sframe", "cfi"), {"dynamic", "compact"})],
    ids=["auto", "named"],
)
def test_verbose_notes_a_miss_only_where_the_source_could_have_had_an_entry(
    run_program, unwinders: tuple[str, ...], noted: set[str]
) -> None:
    """ELF modules have no compact tables, a process without JIT code no registry.

    Sources the user names in --unwinder are accounted for all the same.
    """
    program = run_program("threads-O2")
    options = BacktraceOptions(unwinders=unwinders, verbose=True)
    with PtraceProcess(program.pid) as process:
        backtrace = Backtracer(options).backtrace(process, {})
    notes = [note for thread in backtrace.threads for f in thread.frames for note in f.notes]
    assert {name for name in ("dynamic", "compact") if f"no {name} entry" in str(notes)} == noted
    assert all(thread.complete for thread in backtrace.threads)


def _key(frame: Frame) -> tuple[object, ...]:
    return (frame.pc, frame.sp, frame.cfa, frame.method, frame.function)
