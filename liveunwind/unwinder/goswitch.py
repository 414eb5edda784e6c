"""From Go's scheduler stack (g0) into the goroutine that switched to it.

A Go thread runs the scheduler and much of the runtime on its M's own stack,
g0, entered from a goroutine's stack by one of four switches:

- ``runtime.systemstack(fn)`` saves the goroutine's registers in its
  ``g.sched`` (pc: ``runtime.systemstack_switch``, a stand-in frame whose
  caller is systemstack's), runs ``fn`` on g0 and switches back;
- ``runtime.mcall(fn)`` saves the caller of mcall in ``g.sched`` and runs
  ``fn(g)`` on g0 for good: ``park_m``, ``gosched_m``, ``goexit0``…, which
  drop the goroutine from the M (``m.curg`` becomes nil) and schedule another;
- ``runtime.morestack`` saves the function that ran out of stack in
  ``g.sched`` and runs ``newstack`` on g0, which resumes it on a bigger stack;
- ``runtime.asmcgocall(fn)``, a cgo call, saves the goroutine's registers in
  ``g.sched`` as systemstack does (its caller ``runtime.cgocall``, the
  goroutine left as ``m.curg`` in its system call state) and runs the C
  function on g0, 64 bytes and an alignment below ``g0.sched.sp``.

``.gopclntab`` ends a g0 walk at these frames (the word above them is no
return address).  Go's own traceback then jumps to ``m.curg`` and its
``sched`` (``runtime/traceback.go``, ``_TraceJumpStack``); so does
:meth:`GoSwitch.resume`, with these checks, each of which stops the walk
where it is (still complete: g0's frames are all there) with a reason:

- the program's layout is known (``modules/goruntime.py``: DWARF and symbols);
- the thread's M is found among ``runtime.allm`` by its thread id
  (``m.procid``), else as the one whose g0 stack holds the frame, and the
  switch frame lies at the top of that g0 stack (within
  :data:`SWITCH_REACH` of ``g0.sched.sp``, where every switch puts it) —
  so a thread stopped in ``systemstack`` before it switched, or a switch
  function running on g0 without switching, is not taken for a switch;
- the goroutine is ``m.curg``, and its ``g.m`` is this M.  After ``mcall``
  (or ``morestack`` into a preemption) the M has usually dropped it
  (``m.curg`` nil: the thread is idle, the goroutine parked or queued and
  free to run elsewhere): then only a goroutine locked to the M
  (``m.lockedg`` whose ``lockedm`` is this M) is followed, as no other M
  can run it.  Once the M has picked the next goroutine
  (``runtime.execute`` among the walk's frames) ``m.curg`` is no longer the
  one that switched, and nothing is followed;
- the saved sp lies in the goroutine's stack and in mapped memory, and the
  saved pc in the program's Go code.

The resumed frame's registers are ``sched``'s pc, sp, bp (and lr where the
architecture has a link register); its pc is exact where it is a
function's entry (Go's traceback does the same), else a return address.

One more of Go's functions leaves its tables behind: a call into the vDSO
(``runtime.nanotime1``, ``runtime.walltime``, ``runtime.vgetrandom1``, and
on amd64 ``time.now``) moves
the stack pointer to g0's stack, or aligns it down, and the function's table
rule, written for the stack it was called on, reads garbage there.  Meanwhile
it keeps its caller's pc and sp in ``m.vdsoPC`` and ``m.vdsoSP`` (nonzero
only then: ``runtime/sys_linux_*.s``), where Go's profiler starts its own
traceback (``runtime.sigprof``); so does :meth:`GoSwitch.vdso_caller`.

A live snapshot is read after the process runs again, when the goroutine
may have moved on: :func:`capture` reads the Ms, their goroutines and those
goroutines' stacks while it is stopped (``read_frozen``), and the walk
reads them only that way.
"""

from __future__ import annotations

import struct

from liveunwind.errors import FormatError, MemoryReadError
from liveunwind.formats.unwind.gopclntab import VDSO_CALLERS

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from liveunwind.arch import Arch
    from liveunwind.formats.unwind.gopclntab import GoFunction, GoPclnTab
    from liveunwind.frames import Frame
    from liveunwind.modules.goruntime import GoRuntime
    from liveunwind.modules.module import Module
    from liveunwind.modules.modulemap import ModuleMap
    from liveunwind.modules.sources import GoTable
    from liveunwind.targets.base import AddressSpace

#: The switch functions, and what saved the goroutine's registers.
SWITCHES = {
    "runtime.mcall": "runtime.mcall",
    "runtime.systemstack": "runtime.systemstack",
    "runtime.morestack": "runtime.morestack",
    # A cgo call: the C function runs on g0, the goroutine's registers saved in g.sched
    # (gosave_systemstack_switch: pc runtime.systemstack_switch, whose caller is cgocall).
    "runtime.asmcgocall": "runtime.asmcgocall",
}
#: Frames of a g0 walk after which ``m.curg`` is the M's next goroutine, not the one that switched.
_NEXT_GOROUTINE = frozenset(("runtime.execute", "runtime.gogo"))
#: How far below ``g0.sched.sp`` the first frame on g0 may lie (a switch pushes at most
#: an argument slot, a return address and an alignment: amd64 mcall 8 bytes, arm64 16).
SWITCH_REACH = 64
#: asmcgocall reserves 64 bytes below g0.sched.sp for the C call, then aligns (amd64).
_REACHES = {"runtime.asmcgocall": 96}
#: Ms followed along ``runtime.allm`` at most.
MAX_MS = 4096
#: Bytes of one goroutine's stack copied while a live process is stopped (from its saved sp).
GOROUTINE_STACK_CAP = 256 << 10
#: Bytes of goroutine stacks copied in one stop at most.
TOTAL_STACK_CAP = 16 << 20
_WORD = struct.Struct("<Q")
#: What a walk that cannot follow a call into the vDSO says first.
_VDSO_STACKS = "Go's call into the vDSO may run on another stack"


class Resumed:
    """The goroutine's registers where the switch left it, and what to say of it."""

    __slots__ = ("exact_pc", "note", "registers")

    def __init__(self, registers: dict[int, int], exact_pc: bool, note: str) -> None:
        self.registers = registers
        self.exact_pc = exact_pc
        self.note = note


class _M:
    """What is read of one ``runtime.m`` and its g0."""

    __slots__ = (
        "address",
        "curg",
        "g0_hi",
        "g0_lo",
        "g0_sched_sp",
        "lockedg",
        "procid",
        "vdso_pc",
        "vdso_sp",
    )

    def __init__(self, address: int, raw: bytes, layout: GoRuntime) -> None:
        self.address = address
        self.procid = _word(raw, layout.m_procid)
        self.curg = _word(raw, layout.m_curg)
        self.lockedg = _word(raw, layout.m_lockedg)
        self.vdso_pc = _word(raw, layout.m_vdso_pc)
        self.vdso_sp = _word(raw, layout.m_vdso_sp)
        self.g0_lo = self.g0_hi = self.g0_sched_sp = 0


class GoSwitch:
    """One backtrace's crossings from g0: the Ms of each Go program, read on first need."""

    def __init__(self, space: AddressSpace, modules: ModuleMap) -> None:
        self.space = space
        self.arch: Arch = space.arch
        self.modules = modules
        self._ms: dict[int, list[_M] | str] = {}

    def resume(
        self, frame: Frame, module: Module, tid: int, frames: Sequence[Frame]
    ) -> Resumed | str | None:
        """The goroutine to continue in after ``frame``, a reason to stop, or None.

        None: ``frame`` is not a Go switch frame (the walk ends as it would).
        A string: it is one, and the walk ends there for that reason.
        """
        found = go_function(module, frame.lookup_pc)
        if found is None or found[2] not in SWITCHES:
            return None
        source, switch = found[0], SWITCHES[found[2]]
        layout = source.runtime(lambda: module.lines)
        if isinstance(layout, str):
            return f"{switch}: goroutine not followed: {layout}"
        try:
            return self._resume(frame, module, source, layout, tid, frames, switch)
        except (MemoryReadError, FormatError) as error:
            return f"{switch}: goroutine not followed: {error}"

    def vdso_caller(self, frame: Frame, module: Module, tid: int) -> Resumed | str | None:
        """The caller of ``frame``, in Go's call into the vDSO, from the thread's M; or None.

        None: the M's ``vdsoSP`` is 0 (the function runs on the stack it was
        called on: its table rule holds).  A string: why the caller cannot be
        had (the rule may not hold: the walk stops).
        """
        source = go_table(module)
        if source is None:
            return None
        layout = source.runtime(lambda: module.lines)
        if isinstance(layout, str):
            return f"{_VDSO_STACKS}, and m.vdsoSP cannot be read: {layout}"
        try:
            ms = self._ms_of(module, layout)
            if isinstance(ms, str):
                return f"{_VDSO_STACKS}, and m.vdsoSP cannot be read: {ms}"
            m = _the_m(ms, tid, frame.sp)
            if m is None:
                return f"{_VDSO_STACKS}: no M of runtime.allm runs thread {tid}"
            if not m.vdso_sp:
                return None
            pc, sp = m.vdso_pc, m.vdso_sp
            function = source.go.function_at(pc - module.load_bias)
        except (MemoryReadError, FormatError) as error:
            return f"{_VDSO_STACKS}, and m.vdsoSP cannot be read: {error}"
        if function is None:
            return f"{_VDSO_STACKS}: m.vdsoPC {pc:#x} is not Go code"
        if self.modules.mapping_at(sp) is None:
            return f"{_VDSO_STACKS}: m.vdsoSP {sp:#x} is not mapped"
        arch = self.arch
        return Resumed({arch.pc: pc, arch.sp: sp}, False, "caller from m.vdsoPC and m.vdsoSP")

    def _ms_of(self, module: Module, layout: GoRuntime) -> list[_M] | str:
        """The Ms of the Go program ``module``, read once per backtrace."""
        ms = self._ms.get(module.start)
        if ms is None:
            ms = self._ms[module.start] = read_ms(self.space, layout, module.load_bias)
        return ms

    def _resume(
        self,
        frame: Frame,
        module: Module,
        source: GoTable,
        layout: GoRuntime,
        tid: int,
        frames: Sequence[Frame],
        switch: str,
    ) -> Resumed | str:
        ms = self._ms_of(module, layout)
        if isinstance(ms, str):
            return f"{switch}: goroutine not followed: {ms}"
        m = _the_m(ms, tid, frame.sp)
        if m is None:
            return f"{switch}: no M of runtime.allm runs thread {tid} on this stack"
        if not m.g0_sched_sp - _REACHES.get(switch, SWITCH_REACH) <= frame.sp <= m.g0_sched_sp:
            return (
                f"{switch}: sp {frame.sp:#x} is not at the top of the M's g0 stack "
                f"({m.g0_sched_sp:#x}): no switch from a goroutine"
            )
        table = source.go
        bias = module.load_bias
        g, how = m.curg, "m.curg"
        if _names(table, bias, frames) & _NEXT_GOROUTINE:
            return f"{switch}: the M is starting its next goroutine: the one that switched is gone"
        if not g and m.lockedg:
            g, how = m.lockedg, "m.lockedg"
        if not g:
            return f"{switch}: the M runs no goroutine (m.curg is nil): it was descheduled"
        raw = self.space.read_frozen(g, layout.g_size)
        owner = _word(raw, layout.g_m if how == "m.curg" else layout.g_lockedm)
        if owner != m.address:
            return f"{switch}: goroutine {g:#x} ({how}) belongs to another M"
        sp, pc = _word(raw, layout.g_sched_sp), _word(raw, layout.g_sched_pc)
        low, high = _word(raw, layout.g_stack_lo), _word(raw, layout.g_stack_hi)
        if not low <= sp < high or self.modules.mapping_at(sp) is None:
            return f"{switch}: the goroutine's saved sp {sp:#x} is not on its stack"
        function = table.function_at(pc - bias)
        if function is None:
            return f"{switch}: the goroutine's saved pc {pc:#x} is not Go code"
        arch = self.arch
        registers = {arch.pc: pc, arch.sp: sp, arch.fp: _word(raw, layout.g_sched_bp)}
        if arch.link_register is not None:
            registers[arch.link_register] = _word(raw, layout.g_sched_lr)
        goid = _word(raw, layout.g_goid)
        note = f"goroutine {goid} ({how}), saved by {switch}"
        return Resumed(registers, pc - bias == function.entry, note)


def calls_vdso(module: Module, lookup_pc: int) -> bool:
    """Whether ``lookup_pc`` lies in one of Go's calls into the vDSO (:data:`VDSO_CALLERS`)."""
    found = go_function(module, lookup_pc)
    return found is not None and found[2] in VDSO_CALLERS


def unrecorded_switch(frame: Frame, module: Module) -> str | None:
    """Why a walk that ends at ``frame`` (its return address undefined) is not whole, or None.

    So it is where the frame is a Go function that moves the stack pointer
    where ``.gopclntab`` does not record it (``runtime.gogo``, cgo's
    ``runtime.callCgoMmap``, ``runtime.sigfwd``…) and that the walk does not
    cross (:data:`SWITCHES`): its caller is not known, to Go's own traceback
    either, and the thread's stack goes on above it.
    """
    found = go_function(module, frame.lookup_pc)
    if found is None:
        return None
    source, function, name = found
    if name in SWITCHES or not source.go.writes_sp_unrecorded(function):
        return None
    return (
        f"{name} moves the stack pointer where .gopclntab does not record it (SPWRITE): "
        "its caller is not known, to Go's own traceback either"
    )


def go_function(module: Module, lookup_pc: int) -> tuple[GoTable, GoFunction, str] | None:
    """The Go function at ``lookup_pc`` of the Go program ``module``: its table, record and
    name; None outside Go's code, or where the table cannot say."""
    source = go_table(module)
    if source is None:
        return None
    table = source.go
    try:
        function = table.function_at(lookup_pc - module.load_bias)
        return None if function is None else (source, function, table.name(function))
    except FormatError:
        return None


def go_table(module: Module) -> GoTable | None:
    """The module's ``.gopclntab`` source, if it is a Go program."""
    from liveunwind.modules.sources import GoTable

    for source in module.unwind_sources.get("cfi", ()):
        if isinstance(source, GoTable):
            return source
    return None


def read_ms(space: AddressSpace, layout: GoRuntime, bias: int) -> list[_M] | str:
    """The Ms along ``runtime.allm``, each with its g0's stack and saved sp; or why not.

    Read with ``read_frozen``: as the target was while stopped.
    """
    head = _word(space.read_frozen(layout.allm + bias, 8), 0)
    ms: list[_M] = []
    seen: set[int] = set()
    address = head
    while address:
        if address in seen or len(ms) >= MAX_MS:
            return f"runtime.allm does not end within {len(ms)} Ms"
        seen.add(address)
        raw = space.read_frozen(address, layout.m_size)
        m = _M(address, raw, layout)
        g0 = _word(raw, layout.m_g0)
        if g0:
            g0_raw = space.read_frozen(g0, layout.g_size)
            m.g0_lo = _word(g0_raw, layout.g_stack_lo)
            m.g0_hi = _word(g0_raw, layout.g_stack_hi)
            m.g0_sched_sp = _word(g0_raw, layout.g_sched_sp)
        ms.append(m)
        address = _word(raw, layout.m_alllink)
    return ms


def capture(space: AddressSpace, module: Module) -> None:
    """While a live process is stopped: reads what :meth:`GoSwitch.resume` will read of it.

    The Ms, their g0s, their goroutines (``curg``, ``lockedg``) and each of
    those goroutines' stacks from its saved sp (up to
    :data:`GOROUTINE_STACK_CAP`), through ``read_frozen``, which keeps
    them.  ``module`` is the Go program; its layout was read before the
    stop.  A read that fails leaves the walk to say so.
    """
    source = go_table(module)
    if source is None:
        return
    layout = source.runtime(lambda: module.lines)
    if isinstance(layout, str):
        return
    try:
        ms = read_ms(space, layout, module.load_bias)
    except MemoryReadError:
        return
    if isinstance(ms, str):
        return
    goroutines = [g for m in ms for g in (m.curg, m.lockedg) if g]
    records = space.read_frozen_many([(g, layout.g_size) for g in goroutines])
    stacks = []
    budget = TOTAL_STACK_CAP
    for raw in records:
        if raw is None:
            continue
        sp, high = _word(raw, layout.g_sched_sp), _word(raw, layout.g_stack_hi)
        size = min(high - sp, GOROUTINE_STACK_CAP, budget) if 0 < sp < high else 0
        if size > 0:
            stacks.append((sp, size))
            budget -= size
    space.read_frozen_many(stacks)


def prepare(module: Module) -> Module | None:
    """Before a live stop: ``module``, the program, with its scheduler's layout read; or None.

    The caller found ``.gopclntab`` among the program's sections (a process
    that is not Go pays for that lookup alone: ``backtrace/session.py``).
    """
    source = go_table(module)
    if source is None or isinstance(source.runtime(lambda: module.lines), str):
        return None
    return module


def _the_m(ms: list[_M], tid: int, sp: int) -> _M | None:
    """The M of thread ``tid`` (its ``procid``), else the one whose g0 stack holds ``sp``."""
    for m in ms:
        if m.procid == tid:
            return m
    holding = [m for m in ms if m.g0_lo <= sp < m.g0_hi]
    return holding[0] if len(holding) == 1 else None


def _names(table: GoPclnTab, bias: int, frames: Sequence[Frame]) -> set[str]:
    """The Go functions of ``frames``, by the table."""
    names = set()
    for frame in frames:
        try:
            function = table.function_at(frame.lookup_pc - bias)
            if function is not None:
                names.add(table.name(function))
        except FormatError:
            continue
    return names


def _word(raw: bytes, offset: int) -> int:
    value: int = _WORD.unpack_from(raw, offset)[0]
    return value
