"""The one rule executor: an UnwindRule compiled into a Plan, run against registers and memory.

Every rule from every source (DWARF CFI, SFrame, compact unwind, a JIT's
registration) is compiled once into a :class:`Plan`; the stepper's cached
fast path and its general path both run :meth:`Plan.run`, so address
arithmetic is masked to 64 bits, and failures are reported, in this one
place.  DWARF expressions (a CFA given by an expression, registers with
EXPRESSION or VAL_EXPRESSION rules) have their own slots in the plan and are
evaluated by :mod:`liveunwind.formats.unwind.dwarf_expr`, which bounds their steps
and stack depth.
"""

from __future__ import annotations

from liveunwind.arch.base import WORD_MASK
from liveunwind.errors import FormatError
from liveunwind.formats.unwind.rules import RegKind

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from liveunwind.arch import Arch, ReadMemory
    from liveunwind.formats.unwind.rules import UnwindRule
    from liveunwind.frames import Method

    #: Reads one little-endian word of target memory; raises MemoryReadError.
    ReadWord = Callable[[int], int]


class Plan:
    """An UnwindRule laid out for the per-frame loop, with the method that found it.

    Registers are grouped by rule kind, so running a plan is a few short
    loops with no dispatch on the kind; the expression slots are empty for
    the rules of nearly every frame and then cost one test each.
    """

    __slots__ = (
        "_arch",
        "cfa_expression",
        "cfa_offset",
        "cfa_register",
        "copies",
        "expressions",
        "loads",
        "method",
        "ra_signed",
        "return_address",
        "sets_sp",
        "signal_frame",
        "undefined",
        "values",
    )

    def __init__(self, rule: UnwindRule, method: Method, arch: Arch) -> None:
        self._arch = arch
        self.method = method
        self.cfa_register = rule.cfa.register
        self.cfa_offset = rule.cfa.offset
        #: The CFA is what this DWARF expression computes (empty: register + offset).
        self.cfa_expression: bytes = rule.cfa.expression
        loads, values, copies, undefined, expressions = [], [], [], [], []
        for number, register_rule in rule.registers:
            kind = register_rule.kind
            if kind is RegKind.OFFSET:
                loads.append((number, register_rule.offset))
            elif kind is RegKind.VAL_OFFSET:
                values.append((number, register_rule.offset))
            elif kind is RegKind.REGISTER:
                copies.append((number, register_rule.register))
            elif kind is RegKind.UNDEFINED:
                undefined.append(number)
            elif kind is RegKind.EXPRESSION or kind is RegKind.VAL_EXPRESSION:
                is_value = kind is RegKind.VAL_EXPRESSION
                expressions.append((number, register_rule.expression, is_value))
        #: Saved at CFA + offset; the value is CFA + offset; copied from another register.
        self.loads: tuple[tuple[int, int], ...] = tuple(loads)
        self.values: tuple[tuple[int, int], ...] = tuple(values)
        self.copies: tuple[tuple[int, int], ...] = tuple(copies)
        self.undefined: tuple[int, ...] = tuple(undefined)
        #: (register, expression, is the value itself): the expression computes the
        #: address the register is saved at, or (VAL_EXPRESSION) its value.
        self.expressions: tuple[tuple[int, bytes, bool], ...] = tuple(expressions)
        self.sets_sp = any(number == arch.sp for number, _ in rule.registers)
        self.return_address = rule.return_address_register
        self.ra_signed = rule.ra_signed
        #: The frame is a signal frame: its caller was interrupted, its pc is exact.
        self.signal_frame = rule.signal_frame

    def run(
        self, registers: dict[int, int], read_word: ReadWord, read: ReadMemory
    ) -> tuple[dict[int, int], int]:
        """The caller's registers and the CFA, computed from the frame's ``registers``.

        The caller's sp is the CFA unless a rule sets it; its pc is the
        return address (pointer authentication stripped), absent where the
        return address is undefined: the end of the stack.  Raises
        MemoryReadError where a rule reads unreadable memory and FormatError
        where it cannot be computed (a register it needs is unknown, an
        expression is malformed or exceeds its bounds).
        """
        if self.cfa_expression:
            cfa = _evaluate(self.cfa_expression, registers, read, ()) & WORD_MASK
        else:
            base = registers.get(self.cfa_register)
            if base is None:
                name = self._arch.register_name(self.cfa_register)
                raise FormatError(f"CFA register {name} unknown")
            cfa = (base + self.cfa_offset) & WORD_MASK
        caller = registers.copy()
        for number, offset in self.loads:
            caller[number] = read_word((cfa + offset) & WORD_MASK)
        for number, offset in self.values:
            caller[number] = (cfa + offset) & WORD_MASK
        for number, source in self.copies:
            value = registers.get(source)
            if value is None:
                caller.pop(number, None)
            else:
                caller[number] = value
        for number in self.undefined:
            caller.pop(number, None)
        for number, expression, is_value in self.expressions:
            result = _evaluate(expression, registers, read, (cfa,)) & WORD_MASK
            caller[number] = result if is_value else read_word(result)
        arch = self._arch
        if not self.sets_sp:
            caller[arch.sp] = cfa
        return_address = caller.get(self.return_address)
        if return_address is None:
            caller.pop(arch.pc, None)
        else:
            if self.ra_signed:
                return_address = arch.strip_pointer_auth(return_address)
            caller[arch.pc] = return_address
        return caller, cfa


class _Context:
    """Register and memory access for DWARF expressions evaluated in one frame."""

    __slots__ = ("_registers", "read_memory")

    def __init__(self, registers: dict[int, int], read: ReadMemory) -> None:
        self._registers = registers
        self.read_memory = read

    def register(self, number: int) -> int:
        try:
            return self._registers[number]
        except KeyError:
            raise FormatError(f"expression uses register {number}, which is unknown") from None


def _evaluate(
    expression: bytes, registers: dict[int, int], read: ReadMemory, stack: tuple[int, ...]
) -> int:
    """What a DWARF expression computes in the frame of ``registers``, ``stack`` pushed first."""
    from liveunwind.formats.unwind.dwarf_expr import (
        evaluate,  # only frames with expressions pay for it
    )

    return evaluate(expression, _Context(registers, read), initial_stack=stack)
