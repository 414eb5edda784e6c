"""Crossing from Go's g0 into a goroutine, on synthetic Ms and goroutines: every check's refusal.

A Go program of byte buffers: ``runtime.allm`` and two Ms, their g0s and
goroutines, at offsets of a made-up layout (what the walk reads comes from
the layout, not from a Go release), and a ``.gopclntab`` built from the
layout facts.  The real thing (Go's own traceback as the oracle, live and
in x86_64 and arm64 cores) is tests/system/test_go_switch.py.
"""

from __future__ import annotations

import struct

import pytest

from liveunwind.arch.x86_64 import X86_64
from liveunwind.formats.unwind.gopclntab import FLAG_SPWRITE, MAGIC_GO120, GoPclnTab
from liveunwind.frames import Frame, Method
from liveunwind.modules.goruntime import GoRuntime
from liveunwind.modules.module import Module
from liveunwind.modules.sources import GoTable
from liveunwind.targets.base import Mapping
from liveunwind.unwinder.goswitch import SWITCH_REACH, GoSwitch, Resumed, calls_vdso
from tests.support.go import TEXT, build_pclntab
from tests.support.spaces import BufferSpace

FUNCTIONS = [
    (TEXT, TEXT + 0x40, "main.work", 0, [(0, 4), (40, 0x3C)]),
    (TEXT + 0x40, TEXT + 0x80, "runtime.gopark", 0, [(0, 4), (24, 0x3C)]),
    (TEXT + 0x80, TEXT + 0xA0, "runtime.mcall", FLAG_SPWRITE, [(0, 0x20)]),
    (TEXT + 0xA0, TEXT + 0xC0, "runtime.systemstack", FLAG_SPWRITE, [(0, 0x20)]),
    (TEXT + 0xC0, TEXT + 0xC8, "runtime.systemstack_switch", 0, [(0, 8)]),
    (TEXT + 0xC8, TEXT + 0x100, "runtime.execute", 0, [(0, 4), (16, 0x34)]),
    (TEXT + 0x100, TEXT + 0x140, "runtime.nanotime1", 0, [(0, 4), (24, 0x3C)]),
    (TEXT + 0x140, TEXT + 0x160, "runtime.asmcgocall", FLAG_SPWRITE, [(0, 0x20)]),
]
MCALL_RETURN = TEXT + 0x90  # after mcall's call of its function
SYSTEMSTACK_RETURN = TEXT + 0xB0

#: A layout unlike any Go release's: the walk must read it, not assume one.
M_SIZE, G_SIZE = 0x60, 0x90
M_FIELDS = {
    "m_g0": 0x08,
    "m_curg": 0x10,
    "m_lockedg": 0x18,
    "m_procid": 0x20,
    "m_alllink": 0x28,
    "m_vdso_pc": 0x38,
    "m_vdso_sp": 0x30,
}
G_FIELDS = {
    "g_stack_lo": 0x00,
    "g_stack_hi": 0x08,
    "g_m": 0x18,
    "g_lockedm": 0x20,
    "g_goid": 0x28,
    "g_sched_sp": 0x40,
    "g_sched_pc": 0x48,
    "g_sched_bp": 0x50,
    "g_sched_lr": 0x58,
}
DATA = 0x600000  # runtime.allm, then the Ms, then the gs
ALLM, M1, M2 = DATA, DATA + 0x100, DATA + 0x200
G0_1, G0_2, CURG, LOCKEDG = DATA + 0x300, DATA + 0x400, DATA + 0x500, DATA + 0x600
G0_STACK = (0xC000100000, 0xC000108000)
G_STACK = (0xC000200000, 0xC000202000)
G0_TOP = G0_STACK[1] - 0x40  # g0.sched.sp: where every switch puts the first frame on g0
SAVED_SP, SAVED_BP = G_STACK[1] - 0x100, G_STACK[1] - 0x40
TID = 42


def _layout() -> GoRuntime:
    return GoRuntime(ALLM, {"runtime.m": M_SIZE, "runtime.g": G_SIZE}, M_FIELDS | G_FIELDS)


class _Program(GoTable):
    """The table of a built .gopclntab, whose runtime layout is the made-up one."""

    def __init__(self, layout: GoRuntime | str) -> None:
        data = build_pclntab(MAGIC_GO120, FUNCTIONS)
        super().__init__(GoPclnTab(data, X86_64), image=None)  # type: ignore[arg-type]
        self._layout = layout

    def runtime(self, lines: object) -> GoRuntime | str:
        return self._layout


class _Module(Module):
    def __init__(self, sources: list[GoTable]) -> None:
        super().__init__("/go/program", TEXT, TEXT + 0x1000, [])
        self._sources = {"cfi": sources}

    @property
    def load_bias(self) -> int:
        return 0

    @property
    def unwind_sources(self) -> dict[str, list]:
        return self._sources  # type: ignore[return-value]


class _Modules:
    """What the crossing asks of the module map: the mapping holding an address."""

    def __init__(self, space: BufferSpace) -> None:
        self._mappings = space.mappings()

    def mapping_at(self, address: int) -> Mapping | None:
        return next((m for m in self._mappings if m.start <= address < m.end), None)


def _put(memory: bytearray, at: int, fields: dict[str, int], offsets: dict[str, int]) -> None:
    for name, value in fields.items():
        struct.pack_into("<Q", memory, at - DATA + offsets[name], value)


def _space(**changes: int) -> BufferSpace:
    """The program's memory: M1 runs thread TID with curg CURG, M2 another thread."""
    values = {
        "allm": M2,
        "m1_curg": CURG,
        "m1_lockedg": 0,
        "curg_m": M1,
        "lockedg_lockedm": M1,
        "saved_sp": SAVED_SP,
        "saved_pc": TEXT + 0xC0,
        "m2_alllink": M1,
        "m1_alllink": 0,
        "m1_vdso_pc": 0,
        "m1_vdso_sp": 0,
    } | changes
    memory = bytearray(0x800)
    struct.pack_into("<Q", memory, 0, values["allm"])
    m1 = {
        "m_g0": G0_1,
        "m_curg": values["m1_curg"],
        "m_lockedg": values["m1_lockedg"],
        "m_vdso_pc": values["m1_vdso_pc"],
        "m_vdso_sp": values["m1_vdso_sp"],
    }
    _put(memory, M1, m1 | {"m_procid": TID, "m_alllink": values["m1_alllink"]}, M_FIELDS)
    m2 = {"m_g0": G0_2, "m_curg": 0, "m_lockedg": 0, "m_procid": 7}
    _put(memory, M2, m2 | {"m_alllink": values["m2_alllink"]}, M_FIELDS)
    g0 = {"g_stack_lo": G0_STACK[0], "g_stack_hi": G0_STACK[1], "g_sched_sp": G0_TOP}
    _put(memory, G0_1, g0, G_FIELDS)
    _put(memory, G0_2, {"g_stack_lo": 1, "g_stack_hi": 2, "g_sched_sp": 2}, G_FIELDS)
    goroutine = {
        "g_stack_lo": G_STACK[0],
        "g_stack_hi": G_STACK[1],
        "g_sched_sp": values["saved_sp"],
        "g_sched_pc": values["saved_pc"],
        "g_sched_bp": SAVED_BP,
        "g_goid": 17,
    }
    _put(memory, CURG, goroutine | {"g_m": values["curg_m"]}, G_FIELDS)
    parked = goroutine | {"g_sched_pc": TEXT + 0x50, "g_goid": 18}
    _put(memory, LOCKEDG, parked | {"g_lockedm": values["lockedg_lockedm"]}, G_FIELDS)
    regions = [
        (Mapping(DATA, DATA + len(memory), "rw-p", 0, 0, "[heap]"), bytes(memory)),
        (Mapping(*G0_STACK, "rw-p", 0, 0, ""), bytes(G0_STACK[1] - G0_STACK[0])),
        (Mapping(*G_STACK, "rw-p", 0, 0, ""), bytes(G_STACK[1] - G_STACK[0])),
    ]
    return BufferSpace(regions, {})


def _resume(
    space: BufferSpace,
    pc: int = SYSTEMSTACK_RETURN,
    sp: int = G0_TOP,
    layout: GoRuntime | str | None = None,
    frames: tuple[str, ...] = (),
) -> Resumed | str | None:
    """What a walk ending at a frame (pc a return address, sp) of thread TID goes on to."""
    module = _Module([_Program(_layout() if layout is None else layout)])
    crossing = GoSwitch(space, _Modules(space))  # type: ignore[arg-type]
    frame = Frame(len(frames), pc, sp, Method.CFI)
    entries = {name: entry for entry, _end, name, _flag, _rows in FUNCTIONS}
    walked = [Frame(i, entries[name] + 1, sp, Method.CFI) for i, name in enumerate(frames)]
    return crossing.resume(frame, module, TID, [*walked, frame])


def test_systemstack_resumes_at_the_goroutines_saved_registers() -> None:
    resumed = _resume(_space())
    assert isinstance(resumed, Resumed), resumed
    assert resumed.registers == {X86_64.pc: TEXT + 0xC0, X86_64.sp: SAVED_SP, X86_64.fp: SAVED_BP}
    assert resumed.exact_pc  # systemstack_switch's entry: no call returns there
    assert resumed.note == "goroutine 17 (m.curg), saved by runtime.systemstack"


def test_a_saved_return_address_is_looked_up_before_itself() -> None:
    resumed = _resume(_space(saved_pc=TEXT + 0x50), pc=MCALL_RETURN)
    assert isinstance(resumed, Resumed) and not resumed.exact_pc


def test_after_mcall_an_idle_m_is_not_followed() -> None:
    reason = _resume(_space(m1_curg=0), pc=MCALL_RETURN)
    assert reason == "runtime.mcall: the M runs no goroutine (m.curg is nil): it was descheduled"


def test_a_goroutine_locked_to_the_m_is_followed_once_dropped() -> None:
    resumed = _resume(_space(m1_curg=0, m1_lockedg=LOCKEDG), pc=MCALL_RETURN)
    assert isinstance(resumed, Resumed), resumed
    assert resumed.note == "goroutine 18 (m.lockedg), saved by runtime.mcall"
    assert resumed.registers[X86_64.pc] == TEXT + 0x50
    other = _resume(_space(m1_curg=0, m1_lockedg=LOCKEDG, lockedg_lockedm=M2), pc=MCALL_RETURN)
    assert other == f"runtime.mcall: goroutine {LOCKEDG:#x} (m.lockedg) belongs to another M"


@pytest.mark.parametrize(
    ("changes", "frame", "reason"),
    [
        (
            {"curg_m": M2},
            {},
            f"runtime.systemstack: goroutine {CURG:#x} (m.curg) belongs to another M",
        ),
        (
            {"saved_sp": G_STACK[1]},
            {},
            f"runtime.systemstack: the goroutine's saved sp {G_STACK[1]:#x} is not on its stack",
        ),
        (
            {"saved_pc": TEXT + 0x1000},
            {},
            f"runtime.systemstack: the goroutine's saved pc {TEXT + 0x1000:#x} is not Go code",
        ),
        (
            {},
            {"sp": G0_TOP - SWITCH_REACH - 8},
            f"runtime.systemstack: sp {G0_TOP - SWITCH_REACH - 8:#x} is not at the top of the "
            f"M's g0 stack ({G0_TOP:#x}): no switch from a goroutine",
        ),
        (
            {},
            {"frames": ("runtime.execute",)},
            "runtime.systemstack: the M is starting its next goroutine: the one that switched "
            "is gone",
        ),
        (
            {"m2_alllink": M2},
            {},
            "runtime.systemstack: goroutine not followed: runtime.allm does not end within 1 Ms",
        ),
        (
            {"allm": DATA + 0x7F0},
            {},
            "runtime.systemstack: goroutine not followed: cannot read",
        ),
    ],
)
def test_each_check_stops_the_walk_with_its_reason(changes, frame, reason) -> None:
    got = _resume(_space(**changes), **frame)
    assert isinstance(got, str) and got.startswith(reason), got


def test_no_layout_no_crossing_and_other_frames_are_not_switches() -> None:
    reason = _resume(_space(), layout="no symbol runtime.allm (stripped)")
    assert (
        reason == "runtime.systemstack: goroutine not followed: no symbol runtime.allm (stripped)"
    )
    assert _resume(_space(), pc=TEXT + 0x10) is None  # main.work: an ordinary end
    crossing = GoSwitch(_space(), _Modules(_space()))  # type: ignore[arg-type]
    frame = Frame(0, SYSTEMSTACK_RETURN, G0_TOP, Method.CFI)
    assert crossing.resume(frame, _Module([]), TID, [frame]) is None  # not a Go program


def test_the_m_is_found_by_its_g0_stack_where_no_thread_id_matches() -> None:
    space = _space()
    module = _Module([_Program(_layout())])
    crossing = GoSwitch(space, _Modules(space))  # type: ignore[arg-type]
    frame = Frame(0, SYSTEMSTACK_RETURN, G0_TOP, Method.CFI)
    resumed = crossing.resume(frame, module, 999, [frame])
    assert isinstance(resumed, Resumed) and resumed.registers[X86_64.sp] == SAVED_SP


NANOTIME = TEXT + 0x110  # a pc in runtime.nanotime1, on g0's stack while it calls the vDSO
VDSO_PC, VDSO_SP = TEXT + 0x20, SAVED_SP  # its caller (main.work) and the caller's sp


def _vdso_caller(space: BufferSpace, layout: GoRuntime | str | None = None) -> Resumed | str | None:
    module = _Module([_Program(_layout() if layout is None else layout)])
    crossing = GoSwitch(space, _Modules(space))  # type: ignore[arg-type]
    return crossing.vdso_caller(Frame(0, NANOTIME, G0_TOP - 0x20, Method.CONTEXT), module, TID)


def test_a_call_into_the_vdso_resumes_at_the_ms_vdso_pc_and_sp() -> None:
    resumed = _vdso_caller(_space(m1_vdso_pc=VDSO_PC, m1_vdso_sp=VDSO_SP))
    assert isinstance(resumed, Resumed), resumed
    assert resumed.registers == {X86_64.pc: VDSO_PC, X86_64.sp: VDSO_SP}
    assert not resumed.exact_pc  # the return address of the call of nanotime1
    assert resumed.note == "caller from m.vdsoPC and m.vdsoSP"


def test_only_gos_vdso_callers_are_asked() -> None:
    module = _Module([_Program(_layout())])
    assert calls_vdso(module, NANOTIME)
    assert not calls_vdso(module, TEXT + 0x10)  # main.work
    assert not calls_vdso(_Module([]), NANOTIME)  # not a Go program


@pytest.mark.parametrize(
    ("changes", "layout", "reason"),
    [
        ({}, None, None),  # vdsoSP 0: on the stack it was called on, its table holds
        (
            {"m1_vdso_pc": TEXT + 0x1000, "m1_vdso_sp": VDSO_SP},
            None,
            f"Go's call into the vDSO may run on another stack: m.vdsoPC {TEXT + 0x1000:#x} "
            "is not Go code",
        ),
        (
            {"m1_vdso_pc": VDSO_PC, "m1_vdso_sp": 0x10},
            None,
            "Go's call into the vDSO may run on another stack: m.vdsoSP 0x10 is not mapped",
        ),
        (
            {"m1_vdso_pc": VDSO_PC, "m1_vdso_sp": VDSO_SP},
            "no symbol runtime.allm (stripped)",
            "Go's call into the vDSO may run on another stack, and m.vdsoSP cannot be read: "
            "no symbol runtime.allm (stripped)",
        ),
        (
            {"allm": DATA + 0x7F0},
            None,
            "Go's call into the vDSO may run on another stack, and m.vdsoSP cannot be read: "
            "cannot read",
        ),
    ],
)
def test_a_vdso_caller_that_cannot_be_had_stops_the_walk(changes, layout, reason) -> None:
    got = _vdso_caller(_space(**changes), layout)
    if reason is None:
        assert got is None
    else:
        assert isinstance(got, str) and got.startswith(reason), got


def test_a_cgo_call_resumes_from_further_below_g0s_top() -> None:
    """asmcgocall reserves 64 bytes and aligns before calling C: its frame lies deeper."""
    resumed = _resume(_space(), pc=TEXT + 0x150, sp=G0_TOP - 80)
    assert isinstance(resumed, Resumed), resumed
    assert resumed.note == "goroutine 17 (m.curg), saved by runtime.asmcgocall"
    too_deep = _resume(_space(), pc=TEXT + 0x150, sp=G0_TOP - 104)
    assert isinstance(too_deep, str) and "is not at the top of the M's g0 stack" in too_deep
