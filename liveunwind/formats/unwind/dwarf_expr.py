"""A bounded DWARF expression evaluator for call frame information (DWARF 5 §2.5, §6.4.2).

CFI rules may say "the CFA is what this expression computes" or "the register
is saved where this expression points".  The expressions come from untrusted
sections, so evaluation is bounded in steps and stack depth and every failure
is an :class:`~liveunwind.errors.ExpressionError`.  The evaluator never touches
a target: register values and memory come from an :class:`ExpressionContext`
that the stepper supplies (a read there may raise ``MemoryReadError``, which is
passed through unchanged — it is the target's failure, not the expression's).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Literal, Protocol

from liveunwind.errors import ExpressionError
from liveunwind.formats import leb128

ByteOrder = Literal["little", "big"]


class ExpressionContext(Protocol):
    """What an expression may look at: the registers of the frame and target memory."""

    def register(self, number: int) -> int:
        """The value of DWARF register ``number`` in the frame being unwound."""
        ...

    def read_memory(self, address: int, size: int) -> bytes:
        """``size`` bytes of target memory at ``address``."""
        ...


# Operand layouts: "" none, "u"/"s" LEB128, "1u".."8s" fixed-size, "a" address,
# "b" a 2-byte signed branch offset, "us" register (ULEB) then offset (SLEB).
_FIXED_OPERANDS: dict[str, tuple[int, bool]] = {
    "1u": (1, False),
    "1s": (1, True),
    "2u": (2, False),
    "2s": (2, True),
    "b": (2, True),
    "4u": (4, False),
    "4s": (4, True),
    "8u": (8, False),
    "8s": (8, True),
}

# opcode -> (name, operand layout) for every operation the decoder knows.
_OPERATIONS: dict[int, tuple[str, str]] = {
    0x03: ("DW_OP_addr", "a"),
    0x06: ("DW_OP_deref", ""),
    0x08: ("DW_OP_const1u", "1u"),
    0x09: ("DW_OP_const1s", "1s"),
    0x0A: ("DW_OP_const2u", "2u"),
    0x0B: ("DW_OP_const2s", "2s"),
    0x0C: ("DW_OP_const4u", "4u"),
    0x0D: ("DW_OP_const4s", "4s"),
    0x0E: ("DW_OP_const8u", "8u"),
    0x0F: ("DW_OP_const8s", "8s"),
    0x10: ("DW_OP_constu", "u"),
    0x11: ("DW_OP_consts", "s"),
    0x12: ("DW_OP_dup", ""),
    0x13: ("DW_OP_drop", ""),
    0x14: ("DW_OP_over", ""),
    0x15: ("DW_OP_pick", "1u"),
    0x16: ("DW_OP_swap", ""),
    0x17: ("DW_OP_rot", ""),
    0x18: ("DW_OP_xderef", ""),
    0x19: ("DW_OP_abs", ""),
    0x1A: ("DW_OP_and", ""),
    0x1B: ("DW_OP_div", ""),
    0x1C: ("DW_OP_minus", ""),
    0x1D: ("DW_OP_mod", ""),
    0x1E: ("DW_OP_mul", ""),
    0x1F: ("DW_OP_neg", ""),
    0x20: ("DW_OP_not", ""),
    0x21: ("DW_OP_or", ""),
    0x22: ("DW_OP_plus", ""),
    0x23: ("DW_OP_plus_uconst", "u"),
    0x24: ("DW_OP_shl", ""),
    0x25: ("DW_OP_shr", ""),
    0x26: ("DW_OP_shra", ""),
    0x27: ("DW_OP_xor", ""),
    0x28: ("DW_OP_bra", "b"),
    0x29: ("DW_OP_eq", ""),
    0x2A: ("DW_OP_ge", ""),
    0x2B: ("DW_OP_gt", ""),
    0x2C: ("DW_OP_le", ""),
    0x2D: ("DW_OP_lt", ""),
    0x2E: ("DW_OP_ne", ""),
    0x2F: ("DW_OP_skip", "b"),
    0x90: ("DW_OP_regx", "u"),
    0x91: ("DW_OP_fbreg", "s"),
    0x92: ("DW_OP_bregx", "us"),
    0x93: ("DW_OP_piece", "u"),
    0x94: ("DW_OP_deref_size", "1u"),
    0x95: ("DW_OP_xderef_size", "1u"),
    0x96: ("DW_OP_nop", ""),
    0x97: ("DW_OP_push_object_address", ""),
    0x98: ("DW_OP_call2", "2u"),
    0x99: ("DW_OP_call4", "4u"),
    0x9C: ("DW_OP_call_frame_cfa", ""),
    0x9F: ("DW_OP_stack_value", ""),
}
_OPERATIONS.update({0x30 + n: (f"DW_OP_lit{n}", "") for n in range(32)})
_OPERATIONS.update({0x50 + n: (f"DW_OP_reg{n}", "") for n in range(32)})
_OPERATIONS.update({0x70 + n: (f"DW_OP_breg{n}", "s") for n in range(32)})

#: Operations that exist but have no meaning in call frame information (DWARF 5
#: §6.4.2: no frame base, object address, calls or CFA inside CFI expressions).
_NOT_IN_CFI = frozenset({0x18, 0x91, 0x93, 0x95, 0x97, 0x98, 0x99, 0x9C, 0x9F})

#: LEB128 values longer than this are corrupt (a 64-bit value needs ten bytes).


def _leb128(data: bytes, pos: int, signed: bool) -> tuple[int, int]:
    """Decodes one (S/U)LEB128 value at ``pos``; returns it and the next position."""
    return leb128.decode(data, pos, len(data), signed, ExpressionError)


def _fixed(
    data: bytes, pos: int, size: int, signed: bool, byte_order: ByteOrder
) -> tuple[int, int]:
    """Reads a fixed-size integer operand, checking that it lies inside the expression."""
    end = pos + size
    if end > len(data):
        raise ExpressionError(f"operand truncated at expression offset {pos}")
    return int.from_bytes(data[pos:end], byte_order, signed=signed), end


def _operands(
    data: bytes, pos: int, layout: str, address_size: int, byte_order: ByteOrder
) -> tuple[tuple[int, ...], int]:
    """Decodes the operands of one operation laid out as ``layout``."""
    if not layout:
        return (), pos
    if layout == "u" or layout == "s":
        value, pos = _leb128(data, pos, layout == "s")
        return (value,), pos
    if layout == "us":
        register, pos = _leb128(data, pos, False)
        offset, pos = _leb128(data, pos, True)
        return (register, offset), pos
    if layout == "a":
        value, pos = _fixed(data, pos, address_size, False, byte_order)
        return (value,), pos
    size, signed = _FIXED_OPERANDS[layout]
    value, pos = _fixed(data, pos, size, signed, byte_order)
    return (value,), pos


def decode(
    expression: bytes, *, address_size: int = 8, byte_order: ByteOrder = "little"
) -> Iterator[tuple[int, int, tuple[int, ...]]]:
    """Yields ``(offset, opcode, operands)`` for each operation, in order."""
    pos = 0
    while pos < len(expression):
        opcode = expression[pos]
        if opcode not in _OPERATIONS:
            raise ExpressionError(f"unknown DWARF operation {opcode:#x} at offset {pos}")
        operands, after = _operands(
            expression, pos + 1, _OPERATIONS[opcode][1], address_size, byte_order
        )
        yield pos, opcode, operands
        pos = after


def describe(
    expression: bytes,
    register_name: Callable[[int], str] | None = None,
    *,
    address_size: int = 8,
    byte_order: ByteOrder = "little",
) -> str:
    """Renders an expression like ``readelf --debug-dump=frames``, for diagnostics.

    ``register_name`` (e.g. ``Arch.register_name``) adds register names in
    parentheses the way readelf does.  Undecodable bytes raise ExpressionError.
    """
    parts = []
    for _, opcode, operands in decode(expression, address_size=address_size, byte_order=byte_order):
        parts.append(_describe_one(opcode, operands, register_name))
    return "; ".join(parts)


def _describe_one(
    opcode: int, operands: tuple[int, ...], register_name: Callable[[int], str] | None
) -> str:
    """One operation in readelf's words."""
    name = _OPERATIONS[opcode][0]

    def named(register: int) -> str:
        return f" ({register_name(register)})" if register_name else ""

    if 0x50 <= opcode <= 0x6F:
        return f"{name}{named(opcode - 0x50)}"
    if 0x70 <= opcode <= 0x8F:
        return f"{name}{named(opcode - 0x70)}: {operands[0]}"
    if opcode == 0x90:
        return f"{name}: {operands[0]}{named(operands[0])}"
    if opcode == 0x92:
        return f"{name}: {operands[0]}{named(operands[0])} {operands[1]}"
    if opcode == 0x03:
        return f"{name}: {operands[0]:x}"
    if operands:
        return f"{name}: {operands[0]}"
    return name


class _Machine:
    """The evaluation state: a bounded stack of unsigned address-sized values."""

    __slots__ = ("stack", "mask", "bits", "max_depth", "context", "address_size", "byte_order")

    def __init__(
        self,
        context: ExpressionContext,
        address_size: int,
        max_depth: int,
        byte_order: ByteOrder,
    ) -> None:
        self.context = context
        self.address_size = address_size
        self.bits = address_size * 8
        self.mask = (1 << self.bits) - 1
        self.max_depth = max_depth
        self.byte_order = byte_order
        self.stack: list[int] = []

    def push(self, value: int) -> None:
        if len(self.stack) >= self.max_depth:
            raise ExpressionError(f"expression stack deeper than {self.max_depth}")
        self.stack.append(value & self.mask)

    def pop(self) -> int:
        if not self.stack:
            raise ExpressionError("expression stack underflow")
        return self.stack.pop()

    def peek(self, index: int) -> int:
        """The entry ``index`` places below the top (0 is the top)."""
        if index >= len(self.stack):
            raise ExpressionError(f"expression stack underflow (pick {index})")
        return self.stack[-1 - index]

    def signed(self, value: int) -> int:
        return value - (1 << self.bits) if value >> (self.bits - 1) else value

    def deref(self, address: int, size: int) -> int:
        if not 1 <= size <= self.address_size:
            raise ExpressionError(f"DW_OP_deref_size of {size} bytes")
        data = self.context.read_memory(address, size)
        if len(data) != size:
            raise ExpressionError(f"read of {size} bytes at {address:#x} returned {len(data)}")
        return int.from_bytes(data, self.byte_order)


def _divide(machine: _Machine, dividend: int, divisor: int) -> int:
    """DW_OP_div: signed division truncating toward zero, as in C."""
    if divisor == 0:
        raise ExpressionError("division by zero")
    a, b = machine.signed(dividend), machine.signed(divisor)
    quotient = abs(a) // abs(b)
    return quotient if (a < 0) == (b < 0) else -quotient


def _modulo(machine: _Machine, dividend: int, divisor: int) -> int:
    """DW_OP_mod: unsigned remainder (libgcc and GDB treat the operands as unsigned)."""
    if divisor == 0:
        raise ExpressionError("modulo by zero")
    return dividend % divisor


def _shift_right_arithmetic(machine: _Machine, value: int, amount: int) -> int:
    return machine.signed(value) >> min(amount, machine.bits)


def _shift_left(machine: _Machine, value: int, amount: int) -> int:
    return value << amount if amount < machine.bits else 0


# Binary operations: f(machine, second, top) -> result; the result is pushed.
_BINARY: dict[int, Callable[[_Machine, int, int], int]] = {
    0x1A: lambda m, a, b: a & b,
    0x1B: _divide,
    0x1C: lambda m, a, b: a - b,
    0x1D: _modulo,
    0x1E: lambda m, a, b: a * b,
    0x21: lambda m, a, b: a | b,
    0x22: lambda m, a, b: a + b,
    0x24: _shift_left,
    0x25: lambda m, a, b: a >> b if b < m.bits else 0,
    0x26: _shift_right_arithmetic,
    0x27: lambda m, a, b: a ^ b,
    # Comparisons are signed (DWARF 5 §2.5.1.5).
    0x29: lambda m, a, b: int(a == b),
    0x2A: lambda m, a, b: int(m.signed(a) >= m.signed(b)),
    0x2B: lambda m, a, b: int(m.signed(a) > m.signed(b)),
    0x2C: lambda m, a, b: int(m.signed(a) <= m.signed(b)),
    0x2D: lambda m, a, b: int(m.signed(a) < m.signed(b)),
    0x2E: lambda m, a, b: int(a != b),
}

# Unary operations: f(machine, top) -> result.
_UNARY: dict[int, Callable[[_Machine, int], int]] = {
    0x06: lambda m, a: m.deref(a, m.address_size),
    0x19: lambda m, a: abs(m.signed(a)),
    0x1F: lambda m, a: -a,
    0x20: lambda m, a: ~a,
}

# Operations pushing their (single) operand or a register-derived value.
_CONSTANTS = frozenset({0x03, 0x08, 0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x0E, 0x0F, 0x10, 0x11})


def _stack_operation(machine: _Machine, opcode: int, operands: tuple[int, ...]) -> None:
    """dup, drop, over, pick, swap, rot."""
    stack = machine.stack
    if opcode == 0x12:
        machine.push(machine.peek(0))
    elif opcode == 0x13:
        machine.pop()
    elif opcode == 0x14:
        machine.push(machine.peek(1))
    elif opcode == 0x15:
        machine.push(machine.peek(operands[0]))
    elif opcode == 0x16:
        machine.peek(1)
        stack[-1], stack[-2] = stack[-2], stack[-1]
    else:  # rot: the top moves to third place, the second and third move up.
        machine.peek(2)
        stack[-1], stack[-2], stack[-3] = stack[-2], stack[-3], stack[-1]


_STACK_OPERATIONS = frozenset({0x12, 0x13, 0x14, 0x15, 0x16, 0x17})


def _execute(machine: _Machine, opcode: int, operands: tuple[int, ...]) -> None:
    """Runs one non-branch operation."""
    if opcode in _BINARY:
        top = machine.pop()
        machine.push(_BINARY[opcode](machine, machine.pop(), top))
    elif opcode in _UNARY:
        machine.push(_UNARY[opcode](machine, machine.pop()))
    elif 0x30 <= opcode <= 0x4F:
        machine.push(opcode - 0x30)
    elif opcode in _CONSTANTS:
        machine.push(operands[0])
    elif 0x70 <= opcode <= 0x8F:
        machine.push(machine.context.register(opcode - 0x70) + operands[0])
    elif opcode == 0x92:
        machine.push(machine.context.register(operands[0]) + operands[1])
    elif 0x50 <= opcode <= 0x6F:
        # In CFI a register "location" can only mean its value (libgcc reads it so).
        machine.push(machine.context.register(opcode - 0x50))
    elif opcode == 0x90:
        machine.push(machine.context.register(operands[0]))
    elif opcode in _STACK_OPERATIONS:
        _stack_operation(machine, opcode, operands)
    elif opcode == 0x23:
        machine.push(machine.pop() + operands[0])
    elif opcode == 0x94:
        machine.push(machine.deref(machine.pop(), operands[0]))
    # 0x96 DW_OP_nop: nothing to do.


def evaluate(
    expression: bytes,
    context: ExpressionContext,
    *,
    initial_stack: tuple[int, ...] = (),
    address_size: int = 8,
    max_steps: int = 10000,
    max_depth: int = 256,
    byte_order: ByteOrder = "little",
) -> int:
    """Evaluates a CFI expression and returns the value on top of the stack.

    ``initial_stack`` is pushed first, bottom to top: for DW_CFA_expression
    and DW_CFA_val_expression the stepper passes ``(cfa,)`` as DWARF requires.
    Arithmetic wraps at ``address_size`` bytes; the result is unsigned.
    """
    if address_size not in (1, 2, 4, 8):
        raise ExpressionError(f"unsupported address size {address_size}")
    machine = _Machine(context, address_size, max_depth, byte_order)
    for value in initial_stack:
        machine.push(value)
    pos = 0
    steps = 0
    while pos < len(expression):
        steps += 1
        if steps > max_steps:
            raise ExpressionError(f"expression exceeded {max_steps} steps")
        opcode = expression[pos]
        if opcode not in _OPERATIONS:
            raise ExpressionError(f"unknown DWARF operation {opcode:#x} at offset {pos}")
        name, layout = _OPERATIONS[opcode]
        if opcode in _NOT_IN_CFI:
            raise ExpressionError(f"{name} is not allowed in call frame information")
        operands, after = _operands(expression, pos + 1, layout, address_size, byte_order)
        if opcode == 0x2F or (opcode == 0x28 and machine.pop() != 0):
            pos = _branch_target(expression, after, operands[0])
        else:
            _execute(machine, opcode, operands)
            pos = after
    return machine.pop()


def _branch_target(expression: bytes, after: int, offset: int) -> int:
    """DW_OP_skip/bra jump relative to the end of the branch; must stay inside."""
    target = after + offset
    if not 0 <= target <= len(expression):
        raise ExpressionError(f"branch to {target} outside the {len(expression)}-byte expression")
    return target
