"""UnwindRule: the one currency between unwind-format decoders and the stepper.

Every format (DWARF CFI, SFrame, compact unwind, dynamic registration)
compiles what it knows about one pc into an :class:`UnwindRule`.  The stepper
executes rules without knowing where they came from.  Register numbers are the
architecture's DWARF numbers (see :mod:`liveunwind.arch`).  Rules are
immutable so they can be cached by (module, module-relative pc): named
tuples, which cost less to define at start-up than dataclasses and hash at C
speed in the stepper's plan cache.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections import namedtuple
    from collections.abc import Callable
    from typing import ClassVar

    #: Renders a register number, and a DWARF expression, for diagnostics.
    RegisterNamer = Callable[[int], str]
    ExpressionNamer = Callable[[bytes], str]
else:
    # the standard library's, cheaper to import (liveunwind/classes.py says why)
    from liveunwind.classes import namedtuple


def _opaque(expression: bytes) -> str:
    return "exp"


class RegKind:
    """How a register of the caller is recovered (DWARF §6.4.1 register rules).

    Its seven members are its only instances, compared by identity, as an
    enum's would be.  Not an ``Enum``: defining one cost 125 µs of every cold
    start, and an enum member hashes through a Python call, which the
    stepper's plan cache made for every rule of every frame it looked up.
    """

    __slots__ = ("name", "value")
    SAME: ClassVar[RegKind]  # the callee did not change it
    UNDEFINED: ClassVar[RegKind]  # not recoverable; for the return address: end of stack
    OFFSET: ClassVar[RegKind]  # saved in memory at CFA + offset
    VAL_OFFSET: ClassVar[RegKind]  # the value is CFA + offset
    REGISTER: ClassVar[RegKind]  # the value is in register ``register``
    EXPRESSION: ClassVar[RegKind]  # saved in memory at the address the expression computes
    VAL_EXPRESSION: ClassVar[RegKind]  # the value is what the expression computes

    def __init__(self, name: str, value: str) -> None:
        self.name = name
        self.value = value

    def __repr__(self) -> str:
        return f"<RegKind.{self.name}: {self.value!r}>"


RegKind.SAME = RegKind("SAME", "same")
RegKind.UNDEFINED = RegKind("UNDEFINED", "undefined")
RegKind.OFFSET = RegKind("OFFSET", "offset")
RegKind.VAL_OFFSET = RegKind("VAL_OFFSET", "val_offset")
RegKind.REGISTER = RegKind("REGISTER", "register")
RegKind.EXPRESSION = RegKind("EXPRESSION", "expression")
RegKind.VAL_EXPRESSION = RegKind("VAL_EXPRESSION", "val_expression")


class RegisterRule(
    namedtuple("RegisterRule", "kind offset register expression", defaults=(0, -1, b""))
):
    """One register's recovery rule: a :class:`RegKind`, with its offset, register or expression."""

    __slots__ = ()
    kind: RegKind
    offset: int
    register: int
    expression: bytes

    def describe(
        self, register_name: RegisterNamer = str, expression_text: ExpressionNamer = _opaque
    ) -> str:
        """Short text in the style of ``readelf --debug-dump=frames-interp``."""
        kind = self.kind
        if kind is RegKind.SAME:
            return "s"
        if kind is RegKind.UNDEFINED:
            return "u"
        if kind is RegKind.OFFSET:
            return f"c{self.offset:+d}"
        if kind is RegKind.VAL_OFFSET:
            return f"v{self.offset:+d}"
        if kind is RegKind.REGISTER:
            return register_name(self.register)
        prefix = "exp" if kind is RegKind.EXPRESSION else "vexp"
        text = expression_text(self.expression)
        return prefix if text == "exp" else f"{prefix}({text})"


SAME_VALUE = RegisterRule(RegKind.SAME)
UNDEFINED = RegisterRule(RegKind.UNDEFINED)


class CfaRule(namedtuple("CfaRule", "register offset expression", defaults=(-1, 0, b""))):
    """How to compute the canonical frame address: register + offset, or an expression."""

    __slots__ = ()
    register: int
    offset: int
    expression: bytes

    @property
    def is_expression(self) -> bool:
        return bool(self.expression)

    def describe(
        self, register_name: RegisterNamer = str, expression_text: ExpressionNamer = _opaque
    ) -> str:
        if self.expression:
            text = expression_text(self.expression)
            return text if text == "exp" else f"exp({text})"
        return f"{register_name(self.register)}{self.offset:+d}"


class UnwindRule(
    namedtuple(
        "UnwindRule",
        "cfa registers return_address_register signal_frame ra_signed args_size start end",
        defaults=(False, False, 0, 0, 0),
    )
):
    """Everything needed to step from one frame to its caller at one pc.

    ``registers`` lists only registers with an explicit rule, as sorted
    ``(dwarf_number, RegisterRule)`` pairs; every other register keeps its
    value (:data:`SAME_VALUE`), which is what callee-saved conventions and
    libgcc assume.  The caller's stack pointer is the CFA unless a rule says
    otherwise.
    """

    __slots__ = ()
    cfa: CfaRule
    registers: tuple[tuple[int, RegisterRule], ...]
    return_address_register: int
    signal_frame: bool
    #: aarch64: the return address is signed with pointer authentication.
    ra_signed: bool
    #: DW_CFA_GNU_args_size in effect (bytes pushed for outgoing arguments).
    args_size: int
    #: Where the covering entry starts and ends (module-relative), for reports.
    start: int
    end: int

    def rule_for(self, register: int) -> RegisterRule:
        for number, rule in self.registers:
            if number == register:
                return rule
        return SAME_VALUE

    def describe(
        self, register_name: RegisterNamer = str, expression_text: ExpressionNamer = _opaque
    ) -> str:
        """One line: ``cfa=rsp+16 rbp=c-16 ra=c-8``, for diagnostics."""
        parts = [f"cfa={self.cfa.describe(register_name, expression_text)}"]
        for number, rule in self.registers:
            label = "ra" if number == self.return_address_register else register_name(number)
            parts.append(f"{label}={rule.describe(register_name, expression_text)}")
        if self.signal_frame:
            parts.append("signal-frame")
        if self.ra_signed:
            parts.append("ra-signed")
        return " ".join(parts)
