"""The DWARF expression evaluator: semantics per DWARF 5 §2.5, bounds, and readelf-style text."""

from __future__ import annotations

import struct
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from liveunwind.arch.x86_64 import X86_64
from liveunwind.errors import ExpressionError, MemoryReadError
from liveunwind.formats import leb128
from liveunwind.formats.unwind.dwarf_expr import ExpressionContext, describe, evaluate


class Frame:
    """An ExpressionContext over a register dict and one block of memory."""

    def __init__(self, registers: dict[int, int], base: int = 0, memory: bytes = b"") -> None:
        self.registers = registers
        self.base = base
        self.memory = memory
        self.reads: list[tuple[int, int]] = []

    def register(self, number: int) -> int:
        return self.registers[number]

    def read_memory(self, address: int, size: int) -> bytes:
        self.reads.append((address, size))
        offset = address - self.base
        if not 0 <= offset <= len(self.memory) - size:
            raise MemoryReadError(address, size)
        return self.memory[offset : offset + size]


def run(hex_expression: str, context: ExpressionContext | None = None, **options) -> int:
    return evaluate(bytes.fromhex(hex_expression), context or Frame({}), **options)


def sleb(value: int) -> str:
    return leb128.encode_signed(value).hex()


# ---------------------------------------------------------------------------------------------
# Expressions compilers really emit


def test_glibc_plt_cfa_expression() -> None:
    # CFA of a lazy-binding PLT entry: rsp + 8 + ((rip & 15) >= 11) * 8.
    expression = "7708" "8000" "3f" "1a" "3b" "2a" "33" "24" "22"  # fmt: skip
    for rip, extra in ((0x1000, 0), (0x100A, 0), (0x100B, 8), (0x100F, 8)):
        frame = Frame({7: 0x7FFF0000, 16: rip})
        assert run(expression, frame) == 0x7FFF0008 + extra


def test_signal_frame_expressions() -> None:
    # The kernel's rt_sigframe: CFA = [rsp + 160]; rip saved at rsp + 168.
    memory = bytearray(256)
    memory[160:168] = struct.pack("<Q", 0x7FFF1234)
    frame = Frame({7: 0x10000}, base=0x10000, memory=bytes(memory))
    assert run("77a00106", frame) == 0x7FFF1234
    assert frame.reads == [(0x100A0, 8)]
    assert run("77a801", frame) == 0x100A8


def test_initial_stack_holds_the_cfa() -> None:
    # DW_CFA_expression pushes the CFA first: "DW_OP_lit8; DW_OP_minus" is CFA-8.
    assert run("381c", initial_stack=(0x1000,)) == 0xFF8
    assert run("", initial_stack=(5, 7)) == 7


# ---------------------------------------------------------------------------------------------
# Operations


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("30", 0),
        ("4f", 31),
        ("08ff", 0xFF),
        ("09ff", 2**64 - 1),
        ("0a3412", 0x1234),
        ("0bfeff", 2**64 - 2),
        ("0c78563412", 0x12345678),
        ("0dffffffff", 2**64 - 1),
        ("0e0102030405060708", 0x0807060504030201),
        ("0fffffffffffffffff", 2**64 - 1),
        ("10e58e26", 624485),
        ("11" + sleb(-123456), 2**64 - 123456),
        ("030010000000000000", 0x1000),
        ("35 12 22", 10),
        ("35 36 13", 5),
        ("35 36 14 1c 22", 6),  # over: 5 6 5, minus: 5 1, plus: 6
        ("31 32 33 1502 1c", 2),  # pick 2: 1 2 3 1, minus: 1 2 2
        ("31 32 16 1c", 1),  # swap: 2 1, minus: 1
        ("31 32 33 17 1c 1c", 4),  # rot: 3 1 2, minus: 3 -1, minus: 4
        ("09fb 19", 5),
        ("3c 3a 1a", 8),
        ("09f9 32 1b", 2**64 - 3),  # -7 / 2 truncates toward zero
        ("37 09fe 1b", 2**64 - 3),
        ("37 32 1d", 1),
        ("09f9 32 1d", (2**64 - 7) % 2),  # unsigned remainder
        ("35 37 1e", 35),
        ("35 1f", 2**64 - 5),
        ("30 20", 2**64 - 1),
        ("3c 33 21", 15),
        ("35 23e807", 1005),
        ("31 3f 24", 1 << 15),
        ("31 0840 24", 0),  # shifting out every bit
        ("09f0 32 25", (2**64 - 16) >> 2),
        ("09f0 32 26", 2**64 - 4),  # arithmetic shift keeps the sign
        ("3c 3a 27", 6),
        ("35 35 29", 1),
        ("09ff 31 2a", 0),  # -1 >= 1 is false: comparisons are signed
        ("09ff 31 2b", 0),
        ("09ff 31 2c", 1),
        ("09ff 31 2d", 1),
        ("35 36 2e", 1),
        ("96 35 96", 5),
    ],
)
def test_operation(expression: str, value: int) -> None:
    assert run(expression.replace(" ", "")) == value


def test_pick_over_rot() -> None:
    assert run("313233 1502") == 1  # pick 2: the third from the top
    assert run("3132 14") == 1  # over
    assert run("313233 17") == 2  # rot: (1 2 3) -> (3 1 2)
    assert run("313233 17 13 13") == 3


def test_registers() -> None:
    frame = Frame({3: 100, 6: 0x2000, 17: 42, 40: 7})
    assert run("53", frame) == 100  # DW_OP_reg3 in CFI reads the value
    assert run("76" + sleb(-16), frame) == 0x1FF0
    assert run("9011", frame) == 42  # regx
    assert run("9228" + sleb(-8), frame) == 2**64 - 1  # bregx 40, -8
    assert run("7610", Frame({6: 2**64 - 8})) == 8  # wraps at the address size


def test_deref_size_and_byte_order() -> None:
    memory = bytes(range(16))
    frame = Frame({}, base=0x100, memory=memory)
    assert run("0a0001 06", frame) == int.from_bytes(memory[0:8], "little")
    assert run("0a0201 9402", frame) == 0x0302
    assert run("0a0102 9402", frame, byte_order="big") == 0x0203  # operands too
    with pytest.raises(ExpressionError, match="deref_size"):
        run("0a0001 9409", frame)
    with pytest.raises(ExpressionError, match="deref_size"):
        run("0a0001 9400", frame)
    with pytest.raises(MemoryReadError):
        run("30 06", frame)  # the target's failure passes through as it is


def test_short_read_is_an_error() -> None:
    class Short(Frame):
        def read_memory(self, address: int, size: int) -> bytes:
            return b"\0"

    with pytest.raises(ExpressionError, match="returned 1"):
        run("30 06", Short({}))


def test_address_size_4() -> None:
    assert run("09ff", address_size=4) == 0xFFFFFFFF
    assert run("0cffffffff 31 22", address_size=4) == 0
    assert run("09f0 32 26", address_size=4) == 0xFFFFFFFC
    assert run("03 78563412", address_size=4) == 0x12345678


def test_branches() -> None:
    # if (5 == 5) 1 else 2
    assert run("3535 29 280400 32 2f0100 31") == 1
    assert run("3536 29 280400 32 2f0100 31") == 2
    # a countdown loop from 10: while (top) top -= 1
    assert run("3a 12 280300 2f0500 31 1c 2ff4ff") == 0
    with pytest.raises(ExpressionError, match="steps"):
        run("3a 12 280300 2f0500 31 1c 2ff4ff", max_steps=40)
    assert run("2f0000 35") == 5
    assert run("35 2f0000") == 5  # a skip to the very end


# ---------------------------------------------------------------------------------------------
# Bounds and errors


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("", "underflow"),
        ("13", "underflow"),
        ("22", "underflow"),
        ("3116", "underflow"),
        ("313217", "underflow"),
        ("311505", "underflow"),
        ("35301b", "division by zero"),
        ("35301d", "modulo by zero"),
        ("2f0500", "outside"),
        ("2ff0ff", "outside"),
        ("31280500", "outside"),
        ("9c", "not allowed"),
        ("9100", "not allowed"),
        ("9f", "not allowed"),
        ("9302", "not allowed"),
        ("ff", "unknown"),
        ("0c1234", "truncated"),
        ("10ffffffff", "LEB128"),
        ("10" + "80" * 12 + "01", "LEB128"),
        ("2f00", "truncated"),
    ],
)
def test_errors(expression: str, message: str) -> None:
    with pytest.raises(ExpressionError, match=message):
        run(expression)


def test_endless_loop_is_bounded() -> None:
    started = time.process_time()  # CPU seconds: the work is bounded, however busy the machine
    with pytest.raises(ExpressionError, match="100 steps"):
        run("30 2ffdff", max_steps=100)
    with pytest.raises(ExpressionError, match="10000 steps"):
        run("2ffdff")
    assert time.process_time() - started < 1


def test_stack_depth_is_bounded() -> None:
    with pytest.raises(ExpressionError, match="deeper than 4"):
        run("3031323334", max_depth=4)
    with pytest.raises(ExpressionError, match="deeper than 256"):
        run("30 12 2ffcff")
    with pytest.raises(ExpressionError, match="deeper than 1"):
        run("", initial_stack=(1, 2), max_depth=1)


class Anything:
    """A context with every register and all memory defined (zeros)."""

    def register(self, number: int) -> int:
        return number * 0x1000

    def read_memory(self, address: int, size: int) -> bytes:
        return bytes(size)


@settings(max_examples=500, deadline=1000)
@given(expression=st.binary(max_size=64), size=st.sampled_from([4, 8]))
def test_random_expressions(expression: bytes, size: int) -> None:
    try:
        value = evaluate(expression, Anything(), address_size=size, max_steps=2000)
    except ExpressionError:
        return
    assert 0 <= value < 1 << (8 * size)


# ---------------------------------------------------------------------------------------------
# Text


def test_describe_like_readelf() -> None:
    name = X86_64.register_name
    plt = bytes.fromhex("7708" "8000" "3f1a3b2a332422")  # fmt: skip
    assert describe(plt, name) == (
        "DW_OP_breg7 (rsp): 8; DW_OP_breg16 (rip): 0; DW_OP_lit15; DW_OP_and; "
        "DW_OP_lit11; DW_OP_ge; DW_OP_lit3; DW_OP_shl; DW_OP_plus"
    )
    assert describe(bytes.fromhex("770806")) == "DW_OP_breg7: 8; DW_OP_deref"
    assert describe(bytes.fromhex("9203" + sleb(-8) + "9006" + "56"), name) == (
        "DW_OP_bregx: 3 (rbx) -8; DW_OP_regx: 6 (rbp); DW_OP_reg6 (rbp)"
    )
    assert describe(bytes.fromhex("0300100000000000002304 9404 28feff 09ff 96")) == (
        "DW_OP_addr: 1000; DW_OP_plus_uconst: 4; DW_OP_deref_size: 4; DW_OP_bra: -2; "
        "DW_OP_const1s: -1; DW_OP_nop"
    )
    assert describe(b"") == ""
    with pytest.raises(ExpressionError):
        describe(b"\xff")
