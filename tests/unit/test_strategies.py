"""Fallback strategies on crafted memory: call decoding, frame-pointer, leaf and scan steps.

The call decoder on instructions written here, byte by byte; the
frame-pointer, leaf and scan steps on crafted memory.  The call decoder
against objdump's view of real binaries is tests/system/test_strategies.py;
the end-to-end tests against live processes live with the stepper.
"""

from __future__ import annotations

import copy
import re

import pytest

from liveunwind.arch import Arch
from liveunwind.arch.aarch64 import AARCH64
from liveunwind.arch.base import FrameRecord
from liveunwind.arch.x86_64 import X86_64
from liveunwind.unwinder.strategies import ReadMemory, ScanBudget, Walk, framepointer, leaf, scan
from liveunwind.unwinder.strategies.scan import calls_before
from tests.support.sparse import SparseMemory

_PF_X = 1
_LINE = re.compile(r"^\s*([0-9a-f]+):\t((?:[0-9a-f]{2} )+)\s*\t(.*)$")
_HEADER = re.compile(r"^([0-9a-f]+) <[^>]+>:$", re.MULTILINE)
_A64_LINE = re.compile(r"^\s*([0-9a-f]+):\t([0-9a-f]{8}) \t(\S+)\s*(.*)$")


# -- call decoding on bytes written here (real binaries: tests/system) ------------


@pytest.mark.parametrize(
    ("code", "length"),
    [
        ("e8 00 00 00 00", 5),
        ("ff d0", 2),  # call *%rax
        ("41 ff d3", 2),  # call *%r11 (REX.B)
        ("ff 10", 2),  # call *(%rax)
        ("ff 50 08", 3),  # call *0x8(%rax)
        ("ff 90 00 01 00 00", 6),  # call *0x100(%rax)
        ("ff 14 24", 3),  # call *(%rsp) — SIB
        ("ff 54 24 08", 4),  # call *0x8(%rsp)
        ("ff 94 24 00 01 00 00", 7),  # call *0x100(%rsp)
        ("ff 14 c5 00 10 00 00", 7),  # call *0x1000(,%rax,8) — SIB without base
        ("ff 15 00 10 00 00", 6),  # call *0x1000(%rip)
        ("41 ff 55 00", 3),  # call *0x0(%r13) — r13 needs a disp8 even without offset
        ("3e ff d0", 2),  # notrack call *%rax
        ("67 e8 00 00 00 00", 5),  # addr32 call: the linker's GOTPCRELX relaxation
    ],
)
def test_x86_64_call_forms(code: str, length: int) -> None:
    raw = bytes.fromhex(code)
    end = 0x1000 + len(raw)
    sites = calls_before(X86_64, end, b"\x90" * 8 + raw)
    assert [end - site.address for site in sites] == [length]


@pytest.mark.parametrize(
    "code",
    [
        "ff e0",  # jmp *%rax (FF /4)
        "ff 18",  # lcall *(%rax) (FF /3): far calls do not return here
        "e9 00 00 00 00",  # jmp rel32
        "ff 15 00 10 00",  # RIP-relative call cut one byte short
        "48 89 c7",  # mov %rax,%rdi
    ],
)
def test_x86_64_non_calls(code: str) -> None:
    raw = bytes.fromhex(code)
    assert calls_before(X86_64, 0x1000 + len(raw), b"\x90" * 8 + raw) == []


# -- aarch64 -------------------------------------------------------------------


def test_aarch64_unaligned_return_address_is_rejected() -> None:
    assert calls_before(AARCH64, 0x1002, bytes.fromhex("00000094")) == []


# -- crafted code and stacks (tests.support.sparse) ----------------------------


TEXT = (0x400000, 0x401000)
STACK = (0x7FF000, 0x800000)


def _is_code(address: int) -> bool:
    return TEXT[0] <= address < TEXT[1]


def _x86_code() -> SparseMemory:
    """Code with a direct call ending at 0x400105 and an indirect one ending at 0x400202."""
    code = SparseMemory()
    code.put(0x400000, b"\x90" * 0x300)
    code.put(0x400100, b"\xe8" + (0x400080 - 0x400105).to_bytes(4, "little", signed=True))
    code.put(0x400200, bytes.fromhex("ffd0"))
    code.put(0x400280, b"\xe8" + (0x900000 - 0x400285).to_bytes(4, "little", signed=True))
    return code


def _walk(
    arch: Arch,
    registers: dict[int, int],
    read: ReadMemory,
    code_reader: ReadMemory | None = None,
    *,
    stack_range: tuple[int, int] | None = STACK,
    notes: list[str] | None = None,
) -> Walk:
    """A walk of a fake thread: ``read`` is its stack, ``code_reader`` its code (else ``read``)."""
    return Walk(
        arch,
        registers,
        read,
        _is_code,
        read if code_reader is None else code_reader,
        stack_range=stack_range,
        notes=notes,
    )


def _stack(words: dict[int, int]) -> SparseMemory:
    memory = SparseMemory({address: 0 for address in range(STACK[0], STACK[1], 8)})
    for address, value in words.items():
        memory.word(address, value)
    return memory


def _aarch64_code() -> SparseMemory:
    """nops, with ``bl 0x400000`` at 0x400100 (returning to 0x400104)."""
    code = SparseMemory()
    code.put(0x400000, b"\x1f\x20\x03\xd5" * 0x100)
    code.word(0x400100, 0x94000000 | ((0x400000 - 0x400100) >> 2) & 0x03FFFFFF, 4)
    return code


class TestFramePointer:
    def test_x86_64_chain(self) -> None:
        stack = _stack({0x7FF100: 0x7FF200, 0x7FF108: 0x400105, 0x7FF200: 0, 0x7FF208: 0x400202})
        # The pc lies in the function the call before 0x400105 enters (at 0x400080).
        registers = {X86_64.pc: 0x400090, X86_64.sp: 0x7FF0F0, X86_64.fp: 0x7FF100}
        code = _x86_code().read
        caller = framepointer.step(_walk(X86_64, registers, stack.read, code))
        assert caller == {X86_64.pc: 0x400105, X86_64.sp: 0x7FF110, X86_64.fp: 0x7FF200}
        outer = framepointer.step(_walk(X86_64, caller, stack.read, code))
        assert outer == {X86_64.pc: 0x400202, X86_64.sp: 0x7FF210, X86_64.fp: 0}
        notes: list[str] = []
        assert framepointer.step(_walk(X86_64, outer, stack.read, notes=notes)) is None
        assert "zero" in notes[0]

    @pytest.mark.parametrize(
        ("fp", "saved_fp", "return_address", "reason"),
        [
            (0x7FF104, 0x7FF200, 0x400105, "fp 0x7ff104 is not aligned"),
            (0x7FF100, 0x7FF204, 0x400105, "next fp 0x7ff204 is not aligned"),
            (0x7FF100, 0x7FF0F8, 0x400105, "is not above"),
            (0x7FF100, 0x7FF108, 0x400105, "is not above"),  # overlaps this record
            (0x7FF100, 0x900000, 0x400105, "next fp 0x900000 is outside the stack"),
            (0x7FF100, 0x7FF200, 0x500000, "return address 0x500000 is not code"),
            (0x7FF0E0, 0x7FF200, 0x400105, "below sp"),
        ],
    )
    def test_x86_64_checks(self, fp: int, saved_fp: int, return_address: int, reason: str) -> None:
        stack = _stack({fp: saved_fp, fp + 8: return_address})
        registers = {X86_64.sp: 0x7FF0F0, X86_64.fp: fp}
        notes: list[str] = []
        assert framepointer.step(_walk(X86_64, registers, stack.read, notes=notes)) is None
        assert reason in notes[0]

    def test_outside_stack_and_unreadable(self) -> None:
        registers = {X86_64.sp: 0x7FF0F0, X86_64.fp: 0x7FFFF8}
        notes: list[str] = []
        stack = _stack({})
        assert framepointer.step(_walk(X86_64, registers, stack.read, notes=notes)) is None
        assert "outside the stack" in notes[0]
        # Without a known stack range, the failed read is what stops the step.
        assert (
            framepointer.step(_walk(X86_64, registers, stack.read, stack_range=None, notes=notes))
            is None
        )
        assert "cannot read the frame record at 0x7ffff8" in notes[1]

    def test_aarch64_frame_record_with_pointer_auth(self) -> None:
        signed = 0x002A_0000_0040_0104  # a PAC in the top bits
        stack = _stack({0x7FF100: 0x7FF180, 0x7FF108: signed})
        registers = {AARCH64.pc: 0x400010, AARCH64.sp: 0x7FF100, AARCH64.fp: 0x7FF100}
        caller = framepointer.step(_walk(AARCH64, registers, stack.read, _aarch64_code().read))
        assert caller == {AARCH64.pc: 0x400104, AARCH64.sp: 0x7FF110, AARCH64.fp: 0x7FF180}

    def test_a_frame_record_below_fp_where_the_arch_keeps_it(self) -> None:
        """RISC-V's layout: fp is the CFA, the caller's fp at fp-16, the return address at fp-8."""
        below = copy.copy(AARCH64)
        below.frame_record = FrameRecord(saved_fp=-16, return_address=-8, caller_sp=0)
        stack = _stack({0x7FF100: 0x7FF180, 0x7FF108: 0x400104})
        registers = {below.pc: 0x400010, below.sp: 0x7FF0F0, below.fp: 0x7FF110}
        caller = framepointer.step(_walk(below, registers, stack.read, _aarch64_code().read))
        assert caller == {below.pc: 0x400104, below.sp: 0x7FF110, below.fp: 0x7FF180}


class TestLeaf:
    def test_x86_64_return_address_at_sp(self) -> None:
        code = _x86_code()
        memory = _stack({0x7FF0F0: 0x400105})
        registers = {X86_64.pc: 0x400080, X86_64.sp: 0x7FF0F0, X86_64.fp: 0x7FF200}
        caller = leaf.step(_walk(X86_64, registers, memory.read, code.read))
        assert caller == {X86_64.pc: 0x400105, X86_64.sp: 0x7FF0F8, X86_64.fp: 0x7FF200}

    @pytest.mark.parametrize(
        ("value", "reason"),
        [(0x400104, "does not follow a call"), (0x7FF100, "is not code")],
    )
    def test_x86_64_rejects(self, value: int, reason: str) -> None:
        memory = _stack({0x7FF0F0: value})
        registers = {X86_64.sp: 0x7FF0F0}
        notes: list[str] = []
        assert (
            leaf.step(_walk(X86_64, registers, memory.read, _x86_code().read, notes=notes)) is None
        )
        assert reason in notes[0]

    def test_aarch64_link_register(self) -> None:
        code = SparseMemory()
        code.put(0x400000, b"\x1f\x20\x03\xd5" * 0x100)  # nop
        code.word(0x400100, 0xD63F0000, 4)  # blr x0
        registers = {AARCH64.sp: 0x7FF100, AARCH64.fp: 0x7FF180, 30: 0x0055_0000_0040_0104}
        caller = leaf.step(_walk(AARCH64, registers, SparseMemory().read, code.read))
        assert caller == {AARCH64.pc: 0x400104, AARCH64.sp: 0x7FF100, AARCH64.fp: 0x7FF180}
        registers[30] = 0x400108  # follows a nop
        assert leaf.step(_walk(AARCH64, registers, SparseMemory().read, code.read)) is None


class TestScan:
    def test_skips_garbage_and_stale_code_pointers(self) -> None:
        code = _x86_code()
        stack = _stack(
            {
                0x7FF100: 0x400104,  # code, but not after a call
                0x7FF108: 0x400285,  # after a call whose target is not code
                0x7FF110: 0x12345678,
                0x7FF118: 0x400202,  # after call *%rax
                0x7FF120: 0x400105,
            }
        )
        budget = ScanBudget(100)
        found = scan.find_return_address(
            X86_64, 0x7FF100, stack.read, _is_code, code.read, budget=budget
        )
        assert found == (0x7FF118, 0x400202)
        again = scan.find_return_address(
            X86_64, 0x7FF120, stack.read, _is_code, code.read, budget=budget
        )
        assert again == (0x7FF120, 0x400105)

    def test_target_check_and_refusal(self) -> None:
        code = _x86_code()
        stack = _stack({0x7FF108: 0x400285, 0x7FF110: 0x400105})
        found = scan.find_return_address(
            X86_64, 0x7FF100, stack.read, _is_code, code.read, budget=ScanBudget(), window=2
        )
        assert found is None
        unchecked = scan.find_return_address(
            X86_64,
            0x7FF100,
            stack.read,
            _is_code,
            code.read,
            budget=ScanBudget(),
            window=2,
            check_target=False,
        )
        assert unchecked == (0x7FF108, 0x400285)
        # A step refuses what did not enter the callee's function, and says why.
        notes: list[str] = []
        refused = scan.find_return_address(
            X86_64,
            0x7FF100,
            stack.read,
            _is_code,
            code.read,
            budget=ScanBudget(),
            check_target=False,
            refuse=lambda address: "stale" if address == 0x400285 else None,
            notes=notes,
        )
        assert refused == (0x7FF110, 0x400105)
        assert notes == ["scan: [0x7ff108] = 0x400285 stale"]

    def test_budget_is_shared_and_bounds_the_work(self) -> None:
        code = _x86_code()
        stack = _stack({0x7FFF00: 0x400105})
        budget = ScanBudget(64)
        notes: list[str] = []
        assert (
            scan.find_return_address(
                X86_64, STACK[0], stack.read, _is_code, code.read, budget=budget, notes=notes
            )
            is None
        )
        assert budget.exhausted and "budget exhausted" in notes[-1]
        # A later scan of the same thread gets nothing, even where an answer is.
        assert (
            scan.find_return_address(
                X86_64, 0x7FFF00, stack.read, _is_code, code.read, budget=budget
            )
            is None
        )

    def test_window_stack_end_and_unreadable_stack(self) -> None:
        code = _x86_code()
        stack = _stack({0x7FF200: 0x400105})
        notes: list[str] = []
        args = (X86_64, 0x7FF100, stack.read, _is_code, code.read)
        assert scan.find_return_address(*args, budget=ScanBudget(), window=32) is None
        assert scan.find_return_address(*args, budget=ScanBudget(), window=33) is not None
        assert scan.find_return_address(*args, budget=ScanBudget(), stack_end=0x7FF200) is None
        # Past the end of the stack mapping the scan stops on the failed read.
        assert (
            scan.find_return_address(
                X86_64, 0x7FFF00, stack.read, _is_code, code.read, budget=ScanBudget(), notes=notes
            )
            is None
        )
        assert "stack unreadable at 0x800000" in notes[-1]

    def test_reads_are_chunked(self) -> None:
        stack = _stack({})
        scan.find_return_address(
            X86_64, STACK[0], stack.read, _is_code, _x86_code().read, budget=ScanBudget()
        )
        assert stack.reads <= 2  # one page, then the failed read past the stack

    def test_aarch64_signed_return_address(self) -> None:
        code = SparseMemory()
        code.put(0x400000, b"\x1f\x20\x03\xd5" * 0x100)
        code.word(0x400100, 0x94000000 | ((0x400080 - 0x400100) >> 2) & 0x03FFFFFF, 4)  # bl
        stack = _stack({0x7FF100: 0x7FF200, 0x7FF108: 0x0012_0000_0040_0104})
        found = scan.find_return_address(
            AARCH64, 0x7FF100, stack.read, _is_code, code.read, budget=ScanBudget()
        )
        assert found == (0x7FF108, 0x400104)
        caller = scan.caller_registers(AARCH64, {AARCH64.fp: 0x7FF100}, *found, stack.read)
        assert caller == {AARCH64.pc: 0x400104, AARCH64.sp: 0x7FF110, AARCH64.fp: 0x7FF200}

    def test_caller_fp_guess(self) -> None:
        stack = _stack({0x7FF100: 0x7FF300, 0x7FF108: 0x400105, 0x7FF180: 0x1234})
        registers = {X86_64.fp: 0x7FF400}
        saved = scan.caller_registers(X86_64, registers, 0x7FF108, 0x400105, stack.read)
        assert saved == {X86_64.pc: 0x400105, X86_64.sp: 0x7FF110, X86_64.fp: 0x7FF300}
        kept = scan.caller_registers(X86_64, registers, 0x7FF188, 0x400105, stack.read)
        assert kept[X86_64.fp] == 0x7FF400

    def test_step_scans_above_sp_within_the_stack(self) -> None:
        """``scan.step``: the first return address above sp and the caller it gives."""
        stack = _stack({0x7FF100: 0x7FF300, 0x7FF108: 0x400105})
        registers = {X86_64.pc: 0x400090, X86_64.sp: 0x7FF100, X86_64.fp: 0x7FF400}
        notes: list[str] = []
        walk = _walk(X86_64, registers, stack.read, _x86_code().read, notes=notes)
        assert scan.step(walk) == {X86_64.pc: 0x400105, X86_64.sp: 0x7FF110, X86_64.fp: 0x7FF300}
        # The call before 0x400105 enters 0x400080: refused where symbols say the pc's
        # function starts elsewhere, and the refusal is noted with its slot.
        walk.function_at = lambda address: (0x400000, 0x400100) if address < 0x400100 else None
        assert scan.step(walk) is None
        assert "scan: [0x7ff108] = 0x400105 follows a call to 0x400080, not to" in notes[-2]
        assert "no return address within" in notes[-1]
        walk.function_at = None
        walk.stack_range = (STACK[0], 0x7FF108)  # the stack ends below the return address
        assert scan.step(walk) is None
        walk.registers = {X86_64.pc: 0x400010}
        assert scan.step(walk) is None  # no sp, nothing to scan from
