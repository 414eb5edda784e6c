"""The per-frame loop: choose an unwind source for each pc, execute its rule, guard the walk.

The stepper never parses a section: modules hand it ``rule_for`` callables,
it compiles the :class:`~liveunwind.formats.unwind.rules.UnwindRule` they return
into a :class:`~liveunwind.unwinder.plan.Plan` and runs that against the
current registers and the target's memory.  A frame whose pc was seen before
costs one lookup in the :class:`~liveunwind.unwinder.cache.UnwindCache`
(the fast path); a new pc, a failing rule or ``--verbose`` takes the general
path, which tries the sources in order and notes why each one failed.  Both
run the same plans and the same plausibility check.
"""

from __future__ import annotations

from time import perf_counter

from liveunwind.errors import FormatError, LiveUnwindError, MemoryReadError
from liveunwind.frames import Frame, Method, StopReason, ThreadBacktrace
from liveunwind.sources import AUTO_UNWINDERS, TABLE, sources_named
from liveunwind.unwinder import DEFAULT_MAX_FRAMES
from liveunwind.unwinder.cache import UnwindCache
from liveunwind.unwinder.remembered import (
    AT_ENTRY,
    EVERY_REGISTER,
    RememberedWalk,
    SuffixRecord,
    SuffixTrail,
)
from liveunwind.unwinder.strategies import Walk

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from liveunwind.modules.module import Module
    from liveunwind.modules.modulemap import ModuleMap
    from liveunwind.sources import Source
    from liveunwind.targets.base import AddressSpace, ThreadState
    from liveunwind.unwinder.goswitch import GoSwitch, Resumed
    from liveunwind.unwinder.plan import Plan
    from liveunwind.unwinder.remembered import FrameFacts

    #: A strategy: ``step(walk)`` of a module in liveunwind/unwinder/strategies/.
    Strategy = Callable[[Walk], dict[int, int] | None]


#: Bytes of the entry function taken for it where no symbol gives its size:
#: ``_start`` is 38 bytes in glibc's x86_64 crt1.o, 48 on aarch64 and riscv64,
#: and the return address of its one call lies inside them.
ENTRY_SPAN = 64
#: Frames farther than this from the entry point are not asked whether they run it.
_ENTRY_NEAR = 1 << 16


#: The methods of checked guesses (the strategies and the leaf check).
_GUESSES = frozenset((Method.PROLOGUE, Method.FRAMEPOINTER, Method.LEAF, Method.SCAN))
#: Walks whose suffixes are not remembered: a limit or a frame seen before ended them.
_NO_SUFFIXES = frozenset((StopReason.FRAME_LIMIT, StopReason.REPEATED_FRAME))
#: The methods of unwind tables' rules.
_TABLES = frozenset((Method.CFI, Method.SFRAME, Method.COMPACT, Method.DYNAMIC))


def _on(stack: tuple[int, int] | None, sp: int) -> bool:
    """Whether ``sp`` lies on ``stack`` (its end included: an empty stack's sp); True if unknown."""
    return stack is None or stack[0] <= sp <= stack[1]


class _Stop(Exception):
    """Ends one thread's walk with a reason."""

    def __init__(self, reason: StopReason, detail: str = "") -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


class _Step:
    """One step's result: the caller's registers, the CFA, and how they were found."""

    __slots__ = ("caller", "caller_interrupted", "cfa", "method")

    def __init__(
        self, caller: dict[int, int], cfa: int, method: Method, caller_interrupted: bool = False
    ) -> None:
        self.caller = caller
        self.cfa = cfa
        self.method = method
        #: The caller was interrupted by a signal: its pc is exact, not a return address.
        self.caller_interrupted = caller_interrupted


class Stepper:
    """Walks the stacks of one target's threads."""

    def __init__(
        self,
        space: AddressSpace,
        modules: ModuleMap,
        *,
        unwinders: Sequence[str] = AUTO_UNWINDERS,
        max_frames: int = DEFAULT_MAX_FRAMES,
        should_stop: Callable[[], bool] = lambda: False,
        verbose: bool = False,
        cache: UnwindCache | None = None,
    ) -> None:
        """``cache`` is the target's, kept by its owner across backtraces (see UnwindCache).

        ``unwinders`` are names of the registry (liveunwind/sources.py); an
        unknown one is a UsageError.
        """
        self.space = space
        self.arch = space.arch
        self.modules = modules
        self.unwinders = tuple(unwinders)
        tables: list[Source] = []
        strategies: list[Source] = []
        for source in sources_named(self.unwinders):
            (tables if source.kind == TABLE else strategies).append(source)
        self._tables, self._strategies = tuple(tables), tuple(strategies)
        self.max_frames = max_frames
        self._should_stop = should_stop
        self.verbose = verbose
        self._cache = UnwindCache() if cache is None else cache
        self._read_word = space.read_word
        self._read = space.read
        #: Whether walks are remembered for the next backtrace (UnwindCache.walks): the
        #: target tallies its reads, nothing registered code, no --verbose notes.
        self._remembers = (
            not verbose and modules.registry is None and space.other_reads() is not None
        )
        self._walk = Walk(
            self.arch,
            {},
            space.read,
            self._is_code,
            space.read,
            function_at=self._function_at,
            module_at=modules.find,
            stack_at=self._stack_at,
        )
        #: The function holding the program's entry point: the outermost frame; where
        #: that function lies, found the first time a frame comes near it.  Both are
        #: the target's, kept in the cache (reading auxv was 26 µs a backtrace).
        known = self._cache.entry
        if known is None:
            known = self._cache.entry = (space.entry_point(), None)
        self._entry: int | None = known[0]
        self._entry_range: tuple[int, int] | None = known[1]
        #: Set by a caller that needs only what a remembered walk's frames are made of
        #: (``liveunwind perf`` names a stack by its pcs): a walk taken whole from a
        #: remembered suffix then comes without its frames, and :attr:`remembered` says
        #: what they are made of (:func:`add_remembered_frames`).  Making them was a
        #: seventh of that command's CPU (10,700 samples of 33 frames: 0.085 of 0.58 s).
        self.frameless = False
        #: The last walk made frameless, with the facts and first index of its frames.
        self.remembered: tuple[ThreadBacktrace, tuple[FrameFacts, ...], int] | None = None
        #: Go's switches from g0 into goroutines, made the first time a walk ends at one;
        #: whether the walk under way asked it.
        self._go_switch: GoSwitch | None = None
        self._asked_go = False

    def close(self) -> None:
        """Drops the walk, which holds this stepper's methods; the stepper walks no more.

        The cycle kept each backtrace's stepper, and through it the snapshot with its
        stack copies and the module map, until the garbage collector's next pass: in a
        wall-clock profile of 9 threads, 77 objects a sample, 3.5 ms a pass.
        """
        del self._walk

    # -- the walk -------------------------------------------------------------

    def backtrace(self, thread: ThreadState) -> ThreadBacktrace:
        """The thread's walk; a thread walked from the same registers and stack bytes as in
        the last backtrace gets that walk's frames again, without walking (UnwindCache.walks),
        and a walk that comes to a frame from which a remembered walk went on over the same
        words takes that walk's frames from there (UnwindCache.suffixes)."""
        if not self._remembers:
            return self._walk_thread(thread)
        choice = self._cache.choice
        began = perf_counter()
        if choice.remembering:
            walked = self._remembering_backtrace(thread)
        else:
            walked = self._walk_thread(thread)
        choice.walked(perf_counter() - began)
        return walked

    def _remembering_backtrace(self, thread: ThreadState) -> ThreadBacktrace:
        """:meth:`backtrace` by remembered walks and suffixes where they hold, recording it."""
        arch = self.arch
        block = self.space.stack_copy(thread.registers.get(arch.sp, 0))
        if block is None:
            return self._walk_thread(thread)
        cache = self._cache
        known = cache.walks.get(thread.tid)
        if known is not None and known.holds_for(thread.registers, block, self.max_frames):
            cache.remember_walk(thread.tid, known, replayed=True)
            return _replayed(thread, known, self._cache.stacks_counted)
        registers = thread.registers
        key = (registers.get(arch.pc, 0), registers.get(arch.sp, 0))
        found = cache.suffixes.get(key)
        if found is not None:
            # A whole walk from the first frame: most samples of a busy thread (perf).
            stack = self.modules.mapping_at(key[1])
            state = _first_state(None if stack is None else (stack.start, stack.end))
            record, index = found
            if record.holds_at(index, registers, state, set(), 0, self.max_frames, block):
                cache.took_suffix(key, found)
                return self._suffixed(thread, block, record, index)
            cache.missed_suffix(key)
        trail = SuffixTrail(arch.pc, arch.sp)
        addresses, values = trail.addresses, trail.values
        read_word = self._read_word

        def recorded(address: int) -> int:
            value = read_word(address)
            addresses.append(address)
            values.append(value)
            return value

        before = self.space.other_reads()
        self._read_word, self._asked_go = recorded, False
        try:
            walked = self._walk_thread(thread, trail, block)
        finally:
            self._read_word = read_word
        trail.others_end = self.space.other_reads()
        reason = walked.stop_reason
        if self._asked_go or reason is StopReason.INTERRUPTED:
            return walked
        frames = walked.frames
        facts: tuple[FrameFacts, ...] = tuple(
            (f.pc, f.sp, f.method, f.cfa, f.signal_frame, f.exact_pc, f.module, f.module_offset)
            for f in frames[: len(trail.registers)]
        )
        if trail.tail is not None:
            facts += trail.tail[0].facts[trail.tail[1] :]
        record = SuffixRecord.of(
            facts,
            trail,
            block,
            reason,
            walked.stop_detail,
            lambda plan: cache.uses_of(plan, arch.pc, arch.sp),
        )
        if trail.others_end == before:
            # Every word was read with read_word (the count of other reads did not move),
            # from this copy or another of the same instant; the picker is made, and a
            # word outside the next copy found, when the thread comes back unmoved.
            remembered = RememberedWalk(
                thread.registers,
                block[0],
                record.addresses,
                record.values,
                self.max_frames,
                facts,
                reason,
                walked.stop_detail,
            )
            remembered.given, remembered.source = walked, (record, 0)
            cache.remember_walk(thread.tid, remembered)
        if reason in _NO_SUFFIXES:
            return walked  # how they end depends on the frames before, or on the limit
        for index in range(record.pure_from, len(trail.registers)):
            cache.remember_suffix(facts[index][:2], record, index)
        return walked

    def _suffixed(
        self,
        thread: ThreadState,
        block: tuple[int, bytes | bytearray],
        record: SuffixRecord,
        index: int,
    ) -> ThreadBacktrace:
        """The walk of ``thread`` that is ``record``'s from its frame ``index`` on; remembered
        for the thread as a walk of its own is."""
        first = record.marks[index]
        facts, addresses, values = record.facts, record.addresses, record.values
        if index:
            facts, addresses, values = facts[index:], addresses[first:], values[first:]
        remembered = RememberedWalk(
            thread.registers,
            block[0],
            addresses,
            values,
            self.max_frames,
            facts,
            record.reason,
            record.detail,
        )
        self._cache.remember_walk(thread.tid, remembered)
        walked = remembered.given = ThreadBacktrace(
            tid=thread.tid,
            name=thread.name,
            frames=[],
            stop_reason=record.reason,
            stop_detail=record.detail,
            state=thread.state,
        )
        remembered.source = (record, index)
        remembered.stack = record.stacks.get(index)
        if remembered.stack is not None and self._cache.stacks_counted:
            return walked  # its consumer counts the stack kept (RememberedWalk.stack)
        return self._with_frames(walked, record.facts, index)

    def _with_frames(
        self, walked: ThreadBacktrace, facts: tuple[FrameFacts, ...], start: int
    ) -> ThreadBacktrace:
        """``walked`` with its frames made of ``facts`` from ``start`` on; left without them,
        and kept in :attr:`remembered`, when :attr:`frameless`."""
        if self.frameless:
            self.remembered = (walked, facts, start)
        else:
            _append_remembered(walked.frames, facts, start)
        return walked

    def _walk_thread(
        self,
        thread: ThreadState,
        trail: SuffixTrail | None = None,
        block: tuple[int, bytes | bytearray] = (0, b""),
    ) -> ThreadBacktrace:
        """The walk; with a ``trail``, what it read and used is recorded there, frame by
        frame, and a frame from which a remembered walk went on over the same words of
        ``block`` (the thread's stack copy) ends it with that walk's frames."""
        arch = self.arch
        at, verbose = self._cache.at, self.verbose
        read_word, read = self._read_word, self._read
        registers = dict(thread.registers)
        stack = self.modules.mapping_at(registers.get(arch.sp, 0))
        walk = self._walk
        walk.begin(
            registers,
            (stack.start, stack.end) if stack is not None else None,
            [] if self.verbose else None,
        )
        own_stack = walk.stack_range
        frames: list[Frame] = []
        method = Method.CONTEXT
        exact_pc = True
        guessed = False
        previous_cfa: int | None = None
        seen: set[tuple[int, int]] = set()
        reason, detail = StopReason.END_OF_STACK, ""
        # Looked up once per walk, not per frame (a warm frame costs a few µs in all).
        limit, should_stop, code = self.max_frames, self._should_stop, self._cache.code
        entry = self._entry
        near_entry = (-1, -1) if entry is None else (entry - _ENTRY_NEAR, entry + _ENTRY_NEAR)
        suffixes, other_reads = self._cache.suffixes, self.space.other_reads
        while True:
            if limit and len(frames) >= limit:
                reason, detail = StopReason.FRAME_LIMIT, f"{limit} frames"
                break
            if should_stop():
                reason = StopReason.INTERRUPTED
                break
            pc, sp = registers.get(arch.pc, 0), registers.get(arch.sp, 0)
            if trail is not None:
                state = (
                    exact_pc,
                    method,
                    previous_cfa,
                    guessed,
                    walk.stack_range,
                    walk.foreign_stack,
                )
                found = suffixes.get((pc, sp))
                if found is not None:
                    if found[0].holds_at(
                        found[1], registers, state, seen, len(frames), limit, block
                    ):
                        self._cache.took_suffix((pc, sp), found)
                        trail.tail = found
                        _append_remembered(frames, found[0].facts, found[1])
                        reason, detail = found[0].reason, found[0].detail
                        break
                    self._cache.missed_suffix((pc, sp))
                trail.registers.append(registers)
                trail.states.append(state)
                trail.marks.append(len(trail.addresses))
                trail.others.append(other_reads())
                trail.used.append(EVERY_REGISTER)
            frame = Frame(len(frames), pc, sp, method, exact_pc=exact_pc)
            if walk.notes:
                frame.notes, walk.notes = walk.notes, []
            frames.append(frame)
            lookup = pc if exact_pc else pc - 1
            known = at.get(lookup)
            if known is None:
                known = self._resolve(frame)
            module, plan = known
            if module is not None:
                frame.module = module.path
                frame.module_offset = pc - module.load_bias
            if near_entry[0] <= lookup < near_entry[1] and self._is_entry_function(frame):
                detail = f"the program's entry function, at {entry:#x}"
                if trail is not None:
                    trail.used[-1] = AT_ENTRY
                break  # outermost, whatever a table or a guess would make of its stack
            caller = None
            switched = False
            if plan is None and module is not None:
                vdso = self._go_vdso(frame, module, thread.tid)
                if isinstance(vdso, str):
                    reason, detail = StopReason.NO_UNWIND_INFO, vdso
                    break
                if vdso is not None:
                    # Go's call into the vDSO: its caller as the M keeps it, on its own stack.
                    _note(walk, vdso.note)
                    caller, cfa, interrupted = vdso.registers, vdso.registers[arch.sp], False
                    method, switched = Method.GOROUTINE, True
            if plan is not None and not verbose:
                # The fast path: the first table's plan, taken when it works and is plausible.
                try:
                    caller, cfa = plan.run(registers, read_word, read)
                except (MemoryReadError, FormatError):
                    pass  # the general path tries the next source and says why
                else:
                    return_address = caller.get(arch.pc)
                    signal_frame = plan.signal_frame
                    # A return address already known as code, a CFA not below sp: plausible,
                    # as _implausible would find, without the call.
                    if (
                        return_address not in code or (cfa < sp and not signal_frame)
                    ) and self._implausible(return_address, cfa, sp, signal_frame):
                        caller = None
                    else:
                        frame.signal_frame = interrupted = plan.signal_frame
                        method = plan.method
                        if trail is not None:
                            trail.used[-1] = plan
            if caller is None:
                try:
                    step = self.step(registers, frame, module, walk)
                except _Stop as stop:
                    reason, detail = stop.reason, stop.detail
                    break
                caller, cfa = step.caller, step.cfa
                method, interrupted = step.method, step.caller_interrupted
                guessed = guessed or method in _GUESSES
            frame.cfa = cfa
            caller_pc = caller.get(arch.pc)
            if caller_pc is None or caller_pc == 0:
                # The end of the stack: the return address is undefined or zero; unless
                # the frame is Go's switch to its scheduler stack, which leads on into
                # the goroutine that switched (unwinder/goswitch.py).
                resumed = self._go_resume(frame, module, thread.tid, frames)
                if resumed is None or isinstance(resumed, str):
                    detail = resumed or ""
                    if resumed is None and caller_pc == 0 and guessed:
                        # Read off a stack a guess placed: a zero there proves nothing.
                        reason = StopReason.NO_OUTERMOST_FRAME
                        detail = f"return address 0 at pc {pc:#x}, after a guessed frame"
                    elif resumed is None and caller_pc is None:
                        unrecorded = self._go_unrecorded(frame, module)
                        if unrecorded is not None:
                            reason, detail = StopReason.NO_UNWIND_INFO, unrecorded
                    break
                _note(walk, resumed.note)
                caller, interrupted = resumed.registers, resumed.exact_pc
                method, caller_pc, switched = Method.GOROUTINE, caller[arch.pc], True
            caller_sp = caller.get(arch.sp, 0)
            if switched or (method in _GUESSES and not _on(walk.stack_range, caller_sp)):
                # A goroutine's own stack, or a checked guess that moved to another stack
                # (a runtime's own): walk on it; a guess may scan only a goroutine's.
                walk.stack_range = self._stack_at(caller_sp)
                walk.foreign_stack = not switched and walk.stack_range != own_stack
                previous_cfa = None
            elif frame.signal_frame:
                # The interrupted code may run on another stack (Go's signal handlers
                # run on a signal stack of their own): its CFA may lie anywhere.
                previous_cfa = None
            elif (previous_cfa is not None and cfa <= previous_cfa) or caller_sp < sp:
                reason, detail = StopReason.CFA_NOT_GROWING, f"cfa {cfa:#x} at pc {pc:#x}"
                break
            else:
                previous_cfa = cfa
            key = (caller_pc, caller_sp)
            if key in seen:
                reason, detail = StopReason.REPEATED_FRAME, f"pc {caller_pc:#x} sp {caller_sp:#x}"
                break
            seen.add(key)
            registers, exact_pc = caller, interrupted
        return ThreadBacktrace(
            tid=thread.tid,
            name=thread.name,
            frames=frames,
            stop_reason=reason,
            stop_detail=detail,
            state=thread.state,
            stop_notes=walk.notes or [],
        )

    def _go_resume(
        self, frame: Frame, module: Module | None, tid: int, frames: list[Frame]
    ) -> Resumed | str | None:
        """Where a walk ending at ``frame`` goes on: a goroutine, why not (Go), or None.

        Only a Go program's walks are asked (a module with ``.gopclntab``):
        no other backtrace imports the crossing.
        """
        if module is None or not _is_go(module):
            return None
        return self._go_crossings().resume(frame, module, tid, frames)

    def _go_unrecorded(self, frame: Frame, module: Module | None) -> str | None:
        """Why a walk ending at ``frame`` is not whole, where it is a Go function that moves
        its stack pointer unrecorded (``unwinder/goswitch.py``); None for any other end."""
        if module is None or not _is_go(module):
            return None
        from liveunwind.unwinder.goswitch import unrecorded_switch

        return unrecorded_switch(frame, module)

    def _go_vdso(self, frame: Frame, module: Module, tid: int) -> Resumed | str | None:
        """The caller of a frame in Go's call into the vDSO (m.vdsoPC/SP), why not, or None.

        None for every other frame: its tables hold.  Asked only of frames
        without a remembered plan, which :meth:`_resolve` leaves such frames.
        """
        if not _is_go(module) or not _calls_vdso(module, frame.lookup_pc):
            return None
        return self._go_crossings().vdso_caller(frame, module, tid)

    def _go_crossings(self) -> GoSwitch:
        """This backtrace's reader of Go's Ms (for the crossings: ``unwinder/goswitch.py``)."""
        # What the crossings read of the Ms may have been read for another thread: a
        # walk that asked is not remembered (its input is more than its own stack).
        self._asked_go = True
        if self._go_switch is None:
            from liveunwind.unwinder.goswitch import GoSwitch

            self._go_switch = GoSwitch(self.space, self.modules)
        return self._go_switch

    def step(
        self, registers: dict[int, int], frame: Frame, module: Module | None, walk: Walk
    ) -> _Step:
        """Computes the caller's registers of ``frame``; raises _Stop when nothing can.

        Sources are tried in the configured order; the kernel's sigreturn
        trampoline, recognised by its code, before them where the frame
        stopped on it (a table may cover its pc with an ordinary rule: Go's
        ``.gopclntab`` does), after them where the handler returned to it
        (its pc - 1 is covered only by a signal-frame rule, glibc's, which
        the fast path runs too).  A table's rule whose
        result is implausible (return address not code, CFA below the stack
        pointer) counts as a failure of that table, and the next source is
        tried; so does a rule that reads unreadable memory.
        """
        if frame.exact_pc:
            signal_step = self._sigreturn(frame)
            if signal_step is not None:
                return signal_step
        failure: _Stop | None = None
        for source in self._tables:
            step, failure = self._table_step(source, registers, frame, module, walk, failure)
            if step is not None:
                return step
        if not frame.exact_pc:
            signal_step = self._sigreturn(frame)
            if signal_step is not None:
                return signal_step
        if self._strategies:
            step = self._strategy_step(registers, frame, walk)
            if step is not None:
                return step
        if failure is not None:
            raise failure
        if module is None and self.modules.mapping_at(frame.pc) is None:
            raise _Stop(StopReason.PC_NOT_MAPPED, f"pc {frame.pc:#x}")
        where = module.name if module is not None else "anonymous memory"
        raise _Stop(StopReason.NO_UNWIND_INFO, f"pc {frame.pc:#x} in {where}")

    def _table_step(
        self,
        source: Source,
        registers: dict[int, int],
        frame: Frame,
        module: Module | None,
        walk: Walk,
        failure: _Stop | None,
    ) -> tuple[_Step | None, _Stop | None]:
        """One table source's step, or (None, the failure to report if nothing else works)."""
        name = source.name
        plan = self._plan(source, frame, module)
        if plan is None:
            if walk.notes is not None and self._miss_worth_a_note(source, module):
                _note(walk, f"no {name} entry for pc {frame.lookup_pc:#x}")
            return None, failure
        try:
            caller, cfa = plan.run(registers, self._read_word, self._read)
        except MemoryReadError as error:
            _note(walk, f"{name} rule reads unreadable memory at {error.address:#x}")
            return None, failure or _Stop(StopReason.UNREADABLE_MEMORY, f"{error.address:#x}")
        except FormatError as error:
            _note(walk, f"{name} rule unusable: {error}")
            return None, failure or _Stop(StopReason.BAD_RULE, f"pc {frame.pc:#x}: {error}")
        problem = self._implausible(caller.get(self.arch.pc), cfa, frame.sp, plan.signal_frame)
        if problem is not None:
            _note(walk, f"{name} rule gives {problem}")
            return None, failure or _Stop(StopReason.BAD_RULE, f"pc {frame.pc:#x}: {problem}")
        frame.signal_frame = plan.signal_frame
        return _Step(caller, cfa, plan.method, plan.signal_frame), failure

    def _miss_worth_a_note(self, source: Source, module: Module | None) -> bool:
        """Whether ``--verbose`` says that ``source`` had no rule for a pc of ``module``.

        With ``--unwinder auto``, only where the source might have had one:
        an ELF module never has compact tables, a module without .sframe no
        SFrame entries, and a target without JIT code has no registry.  A
        source the user named in ``--unwinder`` is always accounted for.
        """
        if self.unwinders != AUTO_UNWINDERS:
            return True
        if source.run_time:
            return self.modules.registry is not None
        return module is not None and bool(module.unwind_sources.get(source.name))

    def _implausible(
        self, return_address: int | None, cfa: int, sp: int, signal_frame: bool
    ) -> str | None:
        """Why a caller computed by a table's rule cannot be right, or None if it may be.

        The return address must be code, and the CFA may not lie below the
        frame's sp unless the frame is a signal frame (whose caller was
        interrupted anywhere).  Code addresses found in file-backed
        executable mappings are remembered: deep stacks repeat them.  A
        signal handler returns to the sigreturn trampoline, which may lie in
        memory no mapping the target lists describes (QEMU user mode's
        trampoline page, seen through its GDB stub): its code says it is one.
        """
        if not return_address:
            return None  # the end of the stack: nothing to check
        if (
            return_address not in self._cache.code
            and not self._is_new_code(return_address)
            and not self._at_sigreturn(return_address)
        ):
            return f"return address {return_address:#x}, which is not code"
        if cfa < sp and not signal_frame:
            return f"CFA {cfa:#x} below sp {sp:#x}"
        return None

    def _is_new_code(self, address: int) -> bool:
        """``_is_code`` for an address not yet in the cache; remembers file-backed code."""
        mapping = self.modules.mapping_at(address)
        if mapping is not None and mapping.executable and mapping.is_file:
            self._cache.remember_code(address)
            return True
        return self._is_code(address)

    def _strategy_step(self, registers: dict[int, int], frame: Frame, walk: Walk) -> _Step | None:
        """The first of the chosen strategies that finds a caller: checked guesses.

        A frame whose pc is exact gets the leaf check (a function that has
        not built its frame yet) before the strategies that would not see it:
        in such a function the frame pointer still belongs to the caller, so
        following it would skip the caller.  A strategy that reads the
        function's own code (``before_leaf``) sees it, and comes before.
        """
        walk.registers = registers
        walk.exact_pc = leaf_pending = frame.exact_pc
        walk.found_by_frame_pointer = frame.method is Method.FRAMEPOINTER
        walk.found_by_table = frame.method in _TABLES
        for source in self._strategies:
            if leaf_pending and not source.before_leaf:
                leaf_pending = False
                step = self._leaf_step(walk)
                if step is not None:
                    return step
            caller = _strategy(source)(walk)
            if caller is not None:
                return self._guess(caller, source.method)
        return self._leaf_step(walk) if leaf_pending else None

    def _leaf_step(self, walk: Walk) -> _Step | None:
        from liveunwind.unwinder.strategies import leaf

        caller = leaf.step(walk)
        return None if caller is None else self._guess(caller, Method.LEAF)

    def _stack_at(self, address: int) -> tuple[int, int] | None:
        """The writable, not executable mapping holding ``address``: a stack the walk may be on."""
        mapping = self.modules.mapping_at(address)
        if mapping is None or not mapping.writable or mapping.executable:
            return None
        return mapping.start, mapping.end

    def _is_entry_function(self, frame: Frame) -> bool:
        """Whether the frame runs the function holding the program's entry point (``_start``).

        Where no sized symbol says how far that function reaches, its first
        :data:`ENTRY_SPAN` bytes are taken for it.
        """
        entry = self._entry
        pc = frame.lookup_pc
        if entry is None or not entry - _ENTRY_NEAR <= pc < entry + _ENTRY_NEAR:
            return False
        if self._entry_range is None:
            # Once per walker, not per frame: a symbol lookup for every frame of a small
            # program (all within _ENTRY_NEAR of its entry) cost a third of a warm walk.
            found = self._function_at(entry)
            if found is not None and found[1] is not None and found[0] <= entry < found[1]:
                self._entry_range = (found[0], found[1])
            else:
                self._entry_range = (entry, entry + ENTRY_SPAN)
            self._cache.entry = (entry, self._entry_range)
        start, end = self._entry_range
        return start <= pc < end

    def _function_at(self, address: int) -> tuple[int, int | None] | None:
        """The function holding ``address``: start and end (None: no size) by its symbol.

        Code no module holds is asked of what JIT compilers registered.  An address
        outside executable memory (a call target a guess decoded, a GOT slot's word)
        holds no function: its file is not opened to look (a locale archive is no ELF).
        """
        if not self._is_code(address):
            return None
        module = self.modules.find(address)
        if module is not None:
            match = module.symbolize(address, checked=True)
            if match is None:
                return None
            start = address - match.offset
            return start, (start + match.size if match.size else None)
        registry = self.modules.registry
        found = None if registry is None else registry.range_for(address)
        return None if found is None else (found.start, found.end)

    def _guess(self, caller: dict[int, int], method: Method) -> _Step:
        """A strategy's caller registers (pc, sp and what else it knows); the CFA is the sp."""
        return _Step(caller=caller, cfa=caller[self.arch.sp], method=method)

    def _is_code(self, address: int) -> bool:
        return self.modules.is_executable(address)

    # -- finding a rule -------------------------------------------------------

    def _resolve(self, frame: Frame) -> tuple[Module | None, Plan | None]:
        """The module of the frame's pc and the plan of the first table with a rule there.

        Remembered for the fast path.  The plan is None when no table covers
        the pc; the frame then takes the general path, which also tries the
        next sources whenever a plan fails, and reads a signal frame at the
        sigreturn trampoline.  A frame stopped at the trampoline itself (an
        exact pc) goes there too, though a table may cover its pc (Go's
        ``.gopclntab`` does, with an ordinary rule); a return address there
        is looked up at pc - 1, which only a signal-frame rule covers
        (glibc's and musl's CFI start one byte before the trampoline; Go's
        functions end before their padding), so only exact pcs pay for
        reading the code.  So does a frame in Go's call into the vDSO, whose
        tables may not hold (:meth:`_go_vdso`).
        """
        module = self.modules.find(frame.lookup_pc)
        found: tuple[Module | None, Plan | None] = (module, None)
        if (frame.exact_pc and self._at_sigreturn(frame.pc)) or (
            module is not None and _is_go(module) and _calls_vdso(module, frame.lookup_pc)
        ):
            self._cache.remember_at(frame.lookup_pc, found)  # the general path reads it
            return found
        for source in self._tables:
            plan = self._plan(source, frame, module)
            if plan is not None:
                found = (module, plan)
                break
        self._cache.remember_at(frame.lookup_pc, found)
        return found

    def _plan(self, source: Source, frame: Frame, module: Module | None) -> Plan | None:
        """The plan of ``source``'s tables at the frame's pc (a module's: cached)."""
        if source.run_time:
            return self._registered_plan(source, frame)
        if module is None:
            return None
        relative = frame.lookup_pc - module.load_bias
        key = (source.name, module.file_key, relative)
        plans = self._cache.plans
        if key in plans:
            return plans[key]
        plan = None
        for table in module.unwind_sources.get(source.name, ()):
            try:
                rule = table.rule_for(relative)
            except FormatError as error:
                module.problems.append(f"{module.name}: {table.label}: {error}")
                continue
            if rule is not None:
                plan = self._cache.plan(rule, table.method, self.arch)
                break
        self._cache.remember_plan(key, plan)
        return plan

    def _registered_plan(self, source: Source, frame: Frame) -> Plan | None:
        """What a JIT compiler registered for the pc (rules in absolute addresses).

        Not remembered by pc here: the registry keeps its rules for as long
        as it lives (one backtrace), and the fast path remembers the plan of
        each pc for as long.
        """
        registry = self.modules.registry
        if registry is None:
            return None
        try:
            rule = registry.rule_for(frame.lookup_pc)
        except FormatError:
            return None  # the registry notes what was wrong in its problems
        return None if rule is None else self._cache.plan(rule, source.method, self.arch)

    # -- signal frames without unwind info ------------------------------------

    def _sigreturn(self, frame: Frame) -> _Step | None:
        """The caller of the kernel's sigreturn trampoline: the registers its signal frame saved.

        The trampoline is recognised by its code (glibc's ``__restore_rt``,
        musl's, Go's ``runtime.sigreturn`` and the aarch64 vDSO's are the
        same instructions), not by a name or an unwind table.  Its pc is
        where the signal handler returned to, not the return address of a
        call: the frame is named by its pc, not pc - 1.
        """
        if not self._at_sigreturn(frame.pc):
            return None
        try:
            caller = self.arch.signal_frame_reader(self.space.read, frame.sp)
        except MemoryReadError:
            return None
        frame.signal_frame = frame.exact_pc = True
        return _Step(caller=caller, cfa=frame.sp, method=Method.SIGNAL, caller_interrupted=True)

    def _at_sigreturn(self, pc: int) -> bool:
        """Whether the code at ``pc`` is the sigreturn trampoline."""
        code = self.arch.sigreturn_code
        try:
            return self.space.read(pc, len(code)) == code
        except MemoryReadError:
            return False


_new_object = object.__new__


def _first_state(stack_range: tuple[int, int] | None) -> tuple[object, ...]:
    """A walk's loop state at its first frame (as ``_walk_thread`` keeps it for each frame):
    the pc exact, the registers the thread's own, no CFA before it, no guess, on its stack."""
    return (True, Method.CONTEXT, None, False, stack_range, False)


def _replayed(thread: ThreadState, known: RememberedWalk, stacks_counted: bool) -> ThreadBacktrace:
    """The frames of a remembered walk, new objects (callers name and annotate them); none
    when the consumer counts stacks and keeps this walk's (:attr:`RememberedWalk.stack`)."""
    frames: list[Frame] = []
    if known.stack is None or not stacks_counted:
        _append_remembered(frames, known.frames, 0)
    walked = known.given = ThreadBacktrace(
        tid=thread.tid,
        name=thread.name,
        frames=frames,
        stop_reason=known.reason,
        stop_detail=known.detail,
        state=thread.state,
    )
    return walked


def add_remembered_frames(
    walked: ThreadBacktrace, facts: tuple[FrameFacts, ...], start: int
) -> None:
    """Makes the frames a frameless walk came without (:attr:`Stepper.remembered`)."""
    _append_remembered(walked.frames, facts, start)


def _append_remembered(frames: list[Frame], facts: tuple[FrameFacts, ...], start: int) -> None:
    """Appends to ``frames`` new frames made of ``facts`` from ``start`` on, numbered on.

    Each is made as ``Frame.__init__`` makes one, every slot set here without
    the call: 0.23 µs a frame against 0.81 (measured), for most of the ~300
    frames of every sample.  tests/system/test_session.py checks that a
    replayed frame has every slot of Frame set.
    """
    new = _new_object
    append = frames.append
    for index, (pc, sp, method, cfa, signal, exact, path, offset) in enumerate(
        facts[start:], len(frames)
    ):
        frame = new(Frame)
        frame.index, frame.pc, frame.sp, frame.method, frame.cfa = index, pc, sp, method, cfa
        frame.module, frame.module_offset, frame.function, frame.offset = path, offset, None, None
        frame.signal_frame, frame.exact_pc, frame.notes = signal, exact, []
        frame.file, frame.line, frame.inlined, frame.python = None, None, (), ()
        append(frame)


def _note(walk: Walk, text: str) -> None:
    if walk.notes is not None:
        walk.notes.append(text)


#: The ``step`` of each strategy source, by name, imported the first time it is needed.
_STRATEGY_STEPS: dict[str, Strategy] = {}


def _strategy(source: Source) -> Strategy:
    """``step`` of ``source``'s module in liveunwind/unwinder/strategies/."""
    step = _STRATEGY_STEPS.get(source.name)
    if step is None:
        from importlib import import_module

        module = import_module(f"liveunwind.unwinder.strategies.{source.strategy}")
        step = _STRATEGY_STEPS[source.name] = module.step
    return step


def unwind_all(
    space: AddressSpace, threads: Sequence[ThreadState], stepper: Stepper
) -> list[ThreadBacktrace]:
    """Backtraces of ``threads``; a failure in one thread never hides the others.

    A thread that did not stop has no registers: it gets no frames (rather
    than a walk from pc 0), and what the kernel said of it as its detail.
    """
    results = []
    for thread in threads:
        if not thread.stopped:
            results.append(
                ThreadBacktrace(
                    tid=thread.tid,
                    name=thread.name,
                    frames=[],
                    stop_reason=StopReason.NOT_STOPPED,
                    stop_detail=thread.state,
                    state=thread.state,
                )
            )
            continue
        try:
            results.append(stepper.backtrace(thread))
        except LiveUnwindError as error:
            results.append(
                ThreadBacktrace(
                    tid=thread.tid,
                    name=thread.name,
                    frames=[],
                    stop_reason=StopReason.BAD_RULE,
                    stop_detail=str(error),
                    state=thread.state,
                )
            )
    return results


def _is_go(module: Module) -> bool:
    """Whether ``module`` is a Go program (it has a ``.gopclntab`` source)."""
    return any(source.label == ".gopclntab" for source in module.unwind_sources.get("cfi", ()))


def _calls_vdso(module: Module, lookup_pc: int) -> bool:
    """Whether the Go program ``module`` is calling into the vDSO at ``lookup_pc``."""
    from liveunwind.unwinder.goswitch import calls_vdso

    return calls_vdso(module, lookup_pc)
