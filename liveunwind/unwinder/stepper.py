"""The per-frame loop: choose an unwind source for each pc, execute its rule, guard the walk.

The stepper never parses a section: modules hand it ``rule_for`` callables,
and it executes the :class:`~liveunwind.formats.rules.UnwindRule` they
return against the current registers and the target's memory.
"""

from __future__ import annotations

import struct

from liveunwind.errors import FormatError, LiveUnwindError, MemoryReadError, UsageError
from liveunwind.formats.rules import RegKind, UnwindRule
from liveunwind.frames import Frame, Method, StopReason, ThreadBacktrace
from liveunwind.unwinder.strategies.scan import ScanBudget

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from liveunwind.arch import Arch
    from liveunwind.modules.module import Module
    from liveunwind.modules.modulemap import ModuleMap
    from liveunwind.targets.base import AddressSpace, ThreadState
    from liveunwind.unwinder.strategies.scan import CallSite

#: Every unwind source the stepper knows.
ALL_UNWINDERS = ("dynamic", "compact", "cfi", "sframe", "fp", "scan")
#: Sources that are tables (per module); the rest are strategies (guesses).
TABLE_UNWINDERS = ("dynamic", "compact", "cfi", "sframe")
#: What ``auto`` means, in order.  Run-time registrations come first: a JIT
#: compiler that registers code knows it best, and only JIT code has them.
#: Compact unwind exists only in Mach-O images, where it is the primary
#: table (with its own escape to DWARF).  CFI comes before SFrame: both cost the same
#: per lookup (about 22 µs cold, measured on testprogs/sframe-O2), but CFI
#: restores every callee-saved register, which later frames' rules may use
#: (e.g. a CFA based on rbx), while SFrame knows only the CFA, FP and RA.
#: SFrame then covers code whose CFI is missing.  The strategies come last:
#: they are guesses, checked but guesses.
AUTO_UNWINDERS = ("dynamic", "compact", "cfi", "sframe", "fp", "scan")
DEFAULT_MAX_FRAMES = 256
_WORD = struct.Struct("<Q")
_MASK = 0xFFFFFFFFFFFFFFFF


def parse_unwinders(text: str) -> tuple[str, ...]:
    """Parses ``--unwinder`` (``auto`` or a comma-separated list of source names)."""
    if text == "auto":
        return AUTO_UNWINDERS
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in ALL_UNWINDERS]
    if unknown or not names:
        raise UsageError(
            f"unknown unwinder {', '.join(unknown) or repr(text)}; "
            f"choose from auto, {', '.join(ALL_UNWINDERS)}"
        )
    return names


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


class _Walk:
    """Per-thread state the strategies need."""

    __slots__ = ("budget", "notes", "stack_range")

    def __init__(
        self, stack_range: tuple[int, int] | None, budget: ScanBudget, notes: list[str] | None
    ) -> None:
        #: The thread's stack mapping (low, high), for frame-pointer checks.
        self.stack_range = stack_range
        self.budget = budget
        self.notes = notes


class _Context:
    """Register and memory access for DWARF expressions evaluated in one frame."""

    def __init__(self, registers: dict[int, int], read: Callable[[int, int], bytes]) -> None:
        self._registers = registers
        self.read_memory = read

    def register(self, number: int) -> int:
        try:
            return self._registers[number]
        except KeyError:
            raise FormatError(f"expression uses register {number}, which is unknown") from None


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
        rule_cache: dict[tuple[str, int, int], tuple[UnwindRule, Method] | None] | None = None,
        pc_cache: PcCache | None = None,
    ) -> None:
        self.space = space
        self.arch = space.arch
        self.modules = modules
        self.unwinders = tuple(unwinders)
        self.max_frames = max_frames
        self._should_stop = should_stop
        self.verbose = verbose
        #: (source, module start, relative pc) → (rule, method), shared by all threads
        #: (and by later backtraces of the same process, while its modules stay put).
        self._rules = {} if rule_cache is None else rule_cache
        #: Absolute pc → (rule, method) from the run-time registry: of this walk only, as
        #: a JIT may register other code at the same address before the next backtrace.
        self._dynamic_rules: dict[int, tuple[UnwindRule, Method] | None] = {}
        # For the same reason, with a registry the per-pc cache lives for this walk only.
        if pc_cache is None or modules.registry is not None:
            pc_cache = PcCache()
        self._pcs = pc_cache
        self._read_word = space.read_word

    # -- the walk -------------------------------------------------------------

    def backtrace(self, thread: ThreadState) -> ThreadBacktrace:
        arch = self.arch
        pcs, verbose = self._pcs, self.verbose
        registers = dict(thread.registers)
        stack = self.modules.mapping_at(registers.get(arch.sp, 0))
        walk = _Walk(
            stack_range=(stack.start, stack.end) if stack is not None else None,
            budget=ScanBudget(),
            notes=[] if self.verbose else None,
        )
        frames: list[Frame] = []
        method = Method.CONTEXT
        exact_pc = True
        previous_cfa: int | None = None
        seen: set[tuple[int, int]] = set()
        reason, detail = StopReason.END_OF_STACK, ""
        while True:
            if self.max_frames and len(frames) >= self.max_frames:
                reason, detail = StopReason.FRAME_LIMIT, f"{self.max_frames} frames"
                break
            if self._should_stop():
                reason = StopReason.INTERRUPTED
                break
            pc, sp = registers.get(arch.pc, 0), registers.get(arch.sp, 0)
            frame = Frame(len(frames), pc, sp, method, exact_pc=exact_pc)
            if walk.notes:
                frame.notes, walk.notes = walk.notes, []
            frames.append(frame)
            lookup = pc if exact_pc else pc - 1
            known = pcs.at.get(lookup)
            if known is None:
                known = pcs.at[lookup] = self._resolve(frame)
            module, plan, rule = known
            if module is not None:
                frame.module = module.path
                frame.module_offset = pc - module.load_bias
            step = None if plan is None or verbose else self._run_plan(plan, registers, frame)
            if step is None:
                try:
                    step = self.step(registers, frame, module, walk)
                except _Stop as stop:
                    reason, detail = stop.reason, stop.detail
                    break
            else:
                frame.signal_frame = rule.signal_frame
            frame.cfa = step.cfa
            caller_pc = step.caller.get(arch.pc)
            if caller_pc is None or caller_pc == 0:
                break  # end of stack: the return address is undefined or zero
            caller_sp = step.caller.get(arch.sp, 0)
            if not frame.signal_frame and (
                (previous_cfa is not None and step.cfa <= previous_cfa) or caller_sp < sp
            ):
                reason, detail = StopReason.CFA_NOT_GROWING, f"cfa {step.cfa:#x} at pc {pc:#x}"
                break
            key = (caller_pc, caller_sp)
            if key in seen:
                reason, detail = StopReason.REPEATED_FRAME, f"pc {caller_pc:#x} sp {caller_sp:#x}"
                break
            seen.add(key)
            previous_cfa = step.cfa
            registers, method, exact_pc = step.caller, step.method, step.caller_interrupted
        return ThreadBacktrace(
            tid=thread.tid,
            name=thread.name,
            frames=frames,
            stop_reason=reason,
            stop_detail=detail,
            state=thread.state,
            stop_notes=walk.notes or [],
        )

    def step(
        self, registers: dict[int, int], frame: Frame, module: Module | None, walk: _Walk
    ) -> _Step:
        """Computes the caller's registers of ``frame``; raises _Stop when nothing can.

        Sources are tried in the configured order.  A table's rule whose
        result is implausible (return address not code, CFA below the stack
        pointer) counts as a failure of that table, and the next source is
        tried; so does a rule that reads unreadable memory.
        """
        failure: _Stop | None = None
        for name in self.unwinders:
            if name in TABLE_UNWINDERS:
                step, failure = self._table_step(name, registers, frame, module, walk, failure)
                if step is not None:
                    return step
        signal_step = self._sigreturn(registers, frame)
        if signal_step is not None:
            return signal_step
        strategies = [name for name in self.unwinders if name not in TABLE_UNWINDERS]
        if strategies and frame.exact_pc:
            step = self._leaf_step(registers, walk)
            if step is not None:
                return step
        for name in strategies:
            step = self._strategy_step(name, registers, walk)
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
        name: str,
        registers: dict[int, int],
        frame: Frame,
        module: Module | None,
        walk: _Walk,
        failure: _Stop | None,
    ) -> tuple[_Step | None, _Stop | None]:
        """One table source's step, or (None, the failure to report if nothing else works)."""
        found = self._rule(name, frame, module)
        if found is None:
            _note(walk, f"no {name} entry for pc {frame.lookup_pc:#x}")
            return None, failure
        rule, method = found
        try:
            step = self._execute(rule, registers, method)
        except MemoryReadError as error:
            _note(walk, f"{name} rule reads unreadable memory at {error.address:#x}")
            return None, failure or _Stop(StopReason.UNREADABLE_MEMORY, f"{error.address:#x}")
        except FormatError as error:
            _note(walk, f"{name} rule unusable: {error}")
            return None, failure or _Stop(StopReason.BAD_RULE, f"pc {frame.pc:#x}: {error}")
        problem = self._implausible(step, frame)
        if problem is not None:
            _note(walk, f"{name} rule gives {problem}")
            return None, failure or _Stop(StopReason.BAD_RULE, f"pc {frame.pc:#x}: {problem}")
        frame.signal_frame = rule.signal_frame
        return step, failure

    def _implausible(self, step: _Step, frame: Frame) -> str | None:
        """Why a computed caller cannot be right, or None if it may be."""
        caller_pc = step.caller.get(self.arch.pc)
        if caller_pc is None or caller_pc == 0:
            return None  # the end of the stack: nothing to check
        if not self._is_code(caller_pc):
            return f"return address {caller_pc:#x}, which is not code"
        if step.cfa < frame.sp and not step.caller_interrupted:
            return f"CFA {step.cfa:#x} below sp {frame.sp:#x}"
        return None

    def _leaf_step(self, registers: dict[int, int], walk: _Walk) -> _Step | None:
        """A frame stopped before building its frame: return address at [sp] or in LR.

        Tried before the frame pointer for frames whose pc is exact: in such a
        function the frame pointer still belongs to the caller, so following
        it would skip the caller.
        """
        from liveunwind.unwinder.strategies import leaf

        read = self.space.read
        caller = leaf.step(self.arch, registers, read, self._is_code, read, walk.notes)
        return None if caller is None else self._guess(caller, Method.LEAF)

    def _strategy_step(self, name: str, registers: dict[int, int], walk: _Walk) -> _Step | None:
        """Frame pointers or stack scanning: checked guesses."""
        from liveunwind.unwinder.strategies import framepointer, scan

        arch, read = self.arch, self.space.read
        if name == "fp":
            caller = framepointer.step(
                arch, registers, read, self._is_code, walk.stack_range, walk.notes
            )
            return None if caller is None else self._guess(caller, Method.FRAMEPOINTER)
        sp = registers.get(arch.sp)
        if sp is None:
            return None
        found = scan.find_return_address(
            arch,
            sp,
            read,
            self._is_code,
            read,
            budget=walk.budget,
            stack_end=walk.stack_range[1] if walk.stack_range else None,
            confirm=self._call_target_is_function_start,
            notes=walk.notes,
        )
        if found is None:
            return None
        slot, return_address = found
        caller = scan.caller_registers(arch, registers, slot, return_address, read)
        return self._guess(caller, Method.SCAN)

    def _call_target_is_function_start(self, call: CallSite) -> bool:
        """The symbol-table check of a scanned return address's call instruction.

        A direct call lands on a function's first instruction; a target in the
        middle of a known function means the "call" is really data that
        happens to decode as one.  Targets without a symbol (PLT stubs, JIT
        code) are not refused.
        """
        if call.target is None:
            return True
        module = self.modules.find(call.target)
        match = None if module is None else module.symbolize(call.target)
        return match is None or match.offset == 0

    def _guess(self, caller: dict[int, int], method: Method) -> _Step:
        """A strategy's caller registers: only pc, sp and fp are known after a guess."""
        return _Step(caller=caller, cfa=caller[self.arch.sp], method=method)

    def _is_code(self, address: int) -> bool:
        return self.modules.is_executable(address)

    # -- the fast path: one dictionary lookup per frame ------------------------

    def _resolve(self, frame: Frame) -> tuple[Module | None, _Plan | None, UnwindRule | None]:
        """The module of the frame's pc and the first table rule for it, compiled.

        The plan is None when no table covers the pc or its rule needs a DWARF
        expression; the frame then takes the general path, which also tries
        the next sources when a rule fails.
        """
        module = self.modules.find(frame.lookup_pc)
        for name in self.unwinders:
            if name in TABLE_UNWINDERS:
                found = self._rule(name, frame, module)
                if found is not None:
                    rule, method = found
                    return module, _compile(rule, method, self.arch), rule
        return module, None, None

    def _run_plan(self, plan: _Plan, registers: dict[int, int], frame: Frame) -> _Step | None:
        """Executes a compiled rule; None when it fails or its result is implausible.

        Implausible means what :meth:`_implausible` says; the general path
        then retries the frame and reports why.
        """
        base = registers.get(plan.cfa_register)
        if base is None:
            return None
        cfa = (base + plan.cfa_offset) & _MASK
        caller = registers.copy()
        read_word = self._read_word
        try:
            for number, offset in plan.loads:
                caller[number] = read_word((cfa + offset) & _MASK)
        except MemoryReadError:
            return None
        for number, offset in plan.values:
            caller[number] = (cfa + offset) & _MASK
        for number, source in plan.copies:
            value = registers.get(source)
            if value is None:
                caller.pop(number, None)
            else:
                caller[number] = value
        for number in plan.undefined:
            caller.pop(number, None)
        return_address = self._set_sp_and_pc(
            caller, cfa, plan.sets_sp, plan.return_address, plan.ra_signed
        )
        if return_address and (
            (cfa < frame.sp and not plan.signal_frame) or not self._is_known_code(return_address)
        ):
            return None
        return _Step(caller, cfa, plan.method, plan.signal_frame)

    def _is_known_code(self, address: int) -> bool:
        """``_is_code`` remembered for addresses in file-backed executable mappings."""
        code = self._pcs.code
        if address in code:
            return True
        mapping = self.modules.mapping_at(address)
        if mapping is not None and mapping.executable and mapping.is_file:
            code.add(address)
            return True
        return self._is_code(address)

    # -- finding a rule -------------------------------------------------------

    def _rule(
        self, name: str, frame: Frame, module: Module | None
    ) -> tuple[UnwindRule, Method] | None:
        """The rule of the ``name`` tables of ``module`` at the frame's pc (cached)."""
        if name == "dynamic":
            return self._dynamic_rule(frame)
        if module is None:
            return None
        relative = frame.lookup_pc - module.load_bias
        key = (name, module.start, relative)
        if key in self._rules:
            return self._rules[key]
        found = None
        for source in module.unwind_sources.get(name, ()):
            try:
                rule = source.rule_for(relative)
            except FormatError as error:
                module.problems.append(f"{module.name}: {source.label}: {error}")
                continue
            if rule is not None:
                found = (rule, Method(source.method))
                break
        self._rules[key] = found
        return found

    def _dynamic_rule(self, frame: Frame) -> tuple[UnwindRule, Method] | None:
        """What a JIT compiler registered for the pc; rules are in absolute addresses."""
        registry = self.modules.registry
        if registry is None:
            return None
        pc = frame.lookup_pc
        if pc not in self._dynamic_rules:
            try:
                rule = registry.rule_for(pc)
            except FormatError:
                rule = None  # the registry notes what was wrong in its problems
            self._dynamic_rules[pc] = None if rule is None else (rule, Method.DYNAMIC)
        return self._dynamic_rules[pc]

    # -- executing a rule -----------------------------------------------------

    def _execute(self, rule: UnwindRule, registers: dict[int, int], method: Method) -> _Step:
        arch = self.arch
        context = _Context(registers, self.space.read)
        if rule.cfa.expression:
            cfa = self._evaluate(rule.cfa.expression, context, ())
        else:
            base = registers.get(rule.cfa.register)
            if base is None:
                raise FormatError(f"CFA register {arch.register_name(rule.cfa.register)} unknown")
            cfa = (base + rule.cfa.offset) & 0xFFFFFFFFFFFFFFFF
        caller = dict(registers)
        for number, register_rule in rule.registers:
            kind = register_rule.kind
            if kind is RegKind.SAME:
                continue
            if kind is RegKind.UNDEFINED:
                caller.pop(number, None)
            elif kind is RegKind.OFFSET:
                caller[number] = self._read_word(cfa + register_rule.offset)
            elif kind is RegKind.VAL_OFFSET:
                caller[number] = (cfa + register_rule.offset) & 0xFFFFFFFFFFFFFFFF
            elif kind is RegKind.REGISTER:
                value = registers.get(register_rule.register)
                if value is None:
                    caller.pop(number, None)
                else:
                    caller[number] = value
            elif kind is RegKind.EXPRESSION:
                address = self._evaluate(register_rule.expression, context, (cfa,))
                caller[number] = self._read_word(address)
            else:
                caller[number] = self._evaluate(register_rule.expression, context, (cfa,))
        has_sp_rule = any(number == arch.sp for number, _ in rule.registers)
        self._set_sp_and_pc(caller, cfa, has_sp_rule, rule.return_address_register, rule.ra_signed)
        return _Step(caller=caller, cfa=cfa, method=method, caller_interrupted=rule.signal_frame)

    def _set_sp_and_pc(
        self, caller: dict[int, int], cfa: int, sets_sp: bool, ra_register: int, ra_signed: bool
    ) -> int | None:
        """Completes a caller: sp is the CFA unless a rule set it, pc the return address.

        Returns the return address (pointer authentication stripped), or None
        where it is undefined: the end of the stack.
        """
        arch = self.arch
        if not sets_sp:
            caller[arch.sp] = cfa
        return_address = caller.get(ra_register)
        if return_address is None:
            caller.pop(arch.pc, None)
            return None
        if ra_signed:
            return_address = arch.strip_pointer_auth(return_address)
        caller[arch.pc] = return_address
        return return_address

    def _read_word(self, address: int) -> int:
        return _WORD.unpack(self.space.read(address & 0xFFFFFFFFFFFFFFFF, 8))[0]

    @staticmethod
    def _evaluate(expression: bytes, context: _Context, stack: tuple[int, ...]) -> int:
        from liveunwind.formats.dwarf_expr import evaluate

        return evaluate(expression, context, initial_stack=stack)

    # -- signal frames without unwind info ------------------------------------

    def _sigreturn(self, registers: dict[int, int], frame: Frame) -> _Step | None:
        """Recognises the kernel's sigreturn trampoline by its code and reads the signal frame."""
        code = self.arch.sigreturn_code
        try:
            if self.space.read(frame.pc, len(code)) != code:
                return None
            caller = self.arch.signal_frame_reader(self.space.read, frame.sp)
        except MemoryReadError:
            return None
        frame.signal_frame = True
        return _Step(caller=caller, cfa=frame.sp, method=Method.SIGNAL, caller_interrupted=True)


def _note(walk: _Walk, text: str) -> None:
    if walk.notes is not None:
        walk.notes.append(text)


def unwind_all(
    space: AddressSpace, threads: Sequence[ThreadState], stepper: Stepper
) -> list[ThreadBacktrace]:
    """Backtraces of ``threads``; a failure in one thread never hides the others."""
    results = []
    for thread in threads:
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


class PcCache:
    """What the stepper learned per pc, kept across backtraces while the modules stay put.

    ``at`` maps a lookup pc to (module, compiled plan, rule); ``code`` holds
    return addresses already found to lie in file-backed executable mappings;
    ``names`` maps a lookup pc to its function and offset (the symbolizer's).
    All are keyed by absolute address, so a remapped module voids them.
    """

    __slots__ = ("at", "code", "names")

    def __init__(self) -> None:
        self.at: dict[int, tuple[Module | None, _Plan | None, UnwindRule | None]] = {}
        self.code: set[int] = set()
        self.names: dict[int, tuple[str, int] | None] = {}


class _Plan:
    """An UnwindRule without DWARF expressions, laid out for the per-frame loop.

    Registers are grouped by rule kind so executing the plan is four short
    loops with no dispatch on the kind.
    """

    __slots__ = (
        "cfa_offset",
        "cfa_register",
        "copies",
        "loads",
        "method",
        "ra_signed",
        "return_address",
        "sets_sp",
        "signal_frame",
        "undefined",
        "values",
    )

    def __init__(self, rule: UnwindRule, method: Method, sp: int) -> None:
        self.cfa_register = rule.cfa.register
        self.cfa_offset = rule.cfa.offset
        kinds: dict[RegKind, list] = {kind: [] for kind in RegKind}
        for number, register_rule in rule.registers:
            kind = register_rule.kind
            if kind is RegKind.OFFSET or kind is RegKind.VAL_OFFSET:
                kinds[kind].append((number, register_rule.offset))
            elif kind is RegKind.REGISTER:
                kinds[kind].append((number, register_rule.register))
            else:
                kinds[kind].append(number)
        #: Saved at CFA + offset; the value is CFA + offset; copied from a register.
        self.loads = tuple(kinds[RegKind.OFFSET])
        self.values = tuple(kinds[RegKind.VAL_OFFSET])
        self.copies = tuple(kinds[RegKind.REGISTER])
        self.undefined = tuple(kinds[RegKind.UNDEFINED])
        self.sets_sp = any(number == sp for number, _ in rule.registers)
        self.return_address = rule.return_address_register
        self.ra_signed = rule.ra_signed
        self.signal_frame = rule.signal_frame
        self.method = method


def _compile(rule: UnwindRule, method: Method, arch: Arch) -> _Plan | None:
    """The fast-path plan of ``rule``, or None if it needs the expression evaluator."""
    if rule.cfa.expression or any(
        register_rule.kind is RegKind.EXPRESSION or register_rule.kind is RegKind.VAL_EXPRESSION
        for _, register_rule in rule.registers
    ):
        return None
    return _Plan(rule, method, arch.sp)
