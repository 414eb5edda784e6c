"""What a plan uses of a frame's registers (unwinder/cache.py ``plan_uses``), against Plan.run.

A remembered walk suffix is taken when the registers its steps used are
equal (UnwindCache.suffixes): that is sound only if every register
``plan_uses`` leaves out of what a plan reads changes nothing the plan gives
but its own value passed on.  Each rule here is run with every register
changed in turn.
"""

from __future__ import annotations

import pytest

from liveunwind.arch import arch_by_name
from liveunwind.errors import FormatError
from liveunwind.formats.unwind.rules import CfaRule, RegisterRule, RegKind, UnwindRule
from liveunwind.frames import Method
from liveunwind.unwinder.plan import Plan
from liveunwind.unwinder.remembered import plan_uses

ARCH = arch_by_name("x86_64")
RBX, RBP, RSP, R12, RA = 3, 6, 7, 12, 16
SAVED = RegisterRule(RegKind.OFFSET, offset=-16)
RETURN = RegisterRule(RegKind.OFFSET, offset=-8)

RULES = {
    "rsp-based, rbp and the return address saved": UnwindRule(
        CfaRule(RSP, 16), ((RBP, SAVED), (RA, RETURN)), RA
    ),
    "rbp-based (-O0 body)": UnwindRule(CfaRule(RBP, 16), ((RBP, SAVED), (RA, RETURN)), RA),
    "a register copied, one undefined": UnwindRule(
        CfaRule(RSP, 8),
        (
            (RBX, RegisterRule(RegKind.REGISTER, register=R12)),
            (13, RegisterRule(RegKind.UNDEFINED)),
            (RA, RETURN),
        ),
        RA,
    ),
    "the return address in a register it does not load": UnwindRule(CfaRule(RSP, 8), (), R12),
}


def _run(plan: Plan, registers: dict[int, int]) -> tuple[dict[int, int], int] | None:
    memory = {address: address * 3 + 1 for address in range(0, 1 << 16, 8)}
    try:
        return plan.run(registers, lambda address: memory[address], lambda a, n: b"\0" * n)
    except (FormatError, KeyError):
        return None


@pytest.mark.parametrize("name", list(RULES))
def test_a_register_left_out_of_what_a_plan_reads_only_passes_on(name: str) -> None:
    plan = Plan(RULES[name], Method.CFI, ARCH)
    uses = plan_uses(plan, ARCH.pc, ARCH.sp)
    assert uses is not None
    read, written = uses
    registers = {number: 0x1000 + 0x40 * number for number in range(17)}
    caller, cfa = _run(plan, registers) or ({}, 0)
    assert caller
    for number in registers:
        changed = dict(registers)
        changed[number] += 0x100
        result = _run(plan, changed)
        if number in read:
            continue
        assert result is not None
        other, other_cfa = result
        assert other_cfa == cfa
        for register in set(caller) | set(other):
            if register == number and register not in written:
                assert other[register] == changed[register]  # passed on unread
            else:
                assert other.get(register) == caller.get(register), (name, number, register)


def test_a_plan_with_an_expression_may_read_any_register() -> None:
    rule = UnwindRule(CfaRule(expression=b"\x77\x08"), ((RA, RETURN),), RA)  # DW_OP_breg7 8
    assert plan_uses(Plan(rule, Method.CFI, ARCH), ARCH.pc, ARCH.sp) is None
