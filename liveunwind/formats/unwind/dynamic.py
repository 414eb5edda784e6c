"""libunwind's dynamic unwind info (``libunwind-dynamic.h``): its records and the DYNAMIC ops.

A program that generates code describes it to libunwind with
``unw_dyn_info_t`` records; :mod:`liveunwind.modules.jit` finds and reads them
in a target.  This module holds what is pure about them: their layouts and
bounds, the procedure/region/op records, and the interpreter that turns the
ops of a ``UNW_INFO_FORMAT_DYNAMIC`` procedure into an
:class:`~liveunwind.formats.unwind.rules.UnwindRule` for a pc.

Conventions for ``UNW_INFO_FORMAT_DYNAMIC`` — libunwind interprets this format
only on IA-64; elsewhere liveunwind defines it as follows (:func:`conventions_for`):

* An *instruction* (the unit of ``insn_count`` and ``when``) is the
  architecture's code alignment: one byte on x86_64 (variable-length code:
  ``when`` is the byte offset of the instruction's first byte within its
  region), one 4-byte word on aarch64.
* Register numbers (``reg``, and ``val`` of SAVE_REG) are libunwind's, which
  are the DWARF numbers.
* At procedure entry the frame is the ABI's: x86_64 CFA = rsp+8 with the return
  address at CFA-8; aarch64 CFA = sp with the return address in x30.
* An op at ``when`` = *t* takes effect once instruction *t* has executed: for
  pcs past region start + min(t, length-1) (IA-64's rule; ``when`` = -1 or an
  empty region: from the region's start).  Ops are applied by ``when``; within
  one ``when``, COPY_STATE first, then frame changes (ADD, SAVE_REG of sp,
  POP_FRAMES), then register saves, then LABEL_STATE, each group in array order.
* ADD sp, v: sp += v (two's complement).  The CFA - sp distance is tracked
  through every ADD, so while the CFA is sp-based its offset follows.  ADD fp, v
  adjusts an established frame pointer the same way; ADD to any other register
  is not supported (FormatError).
* SAVE_REG reg=sp, val=fp establishes the frame pointer (``mov rbp,rsp`` /
  ``mov x29,sp``): the CFA becomes fp + (CFA - sp at that point).  SAVE_REG of
  any other register: the caller's value is in register ``val``.
* SPILL_SP_REL reg, off: saved at sp + off, sp being its value *after* the
  instruction (so ``push rbx`` is ADD sp,-8 and SPILL_SP_REL rbx,0 at the same
  ``when``).  SPILL_FP_REL reg, off: saved at fp + off; needs an established
  frame pointer.  Both become CFA-relative rules at once, so later sp changes do
  not move them.
* POP_FRAMES (any count ≥ 1): the instruction restored sp to its entry value;
  the entry frame holds from then on (this flat model has no nested frames).
* LABEL_STATE / COPY_STATE val: name the current state / make it current.
* ALIAS has no effect on the frame state (as in libunwind); STOP ends the
  region's op list; ``qp`` is ignored (no predication on either architecture).
* ``insn_count`` < 0 is allowed only in the last region, which then covers
  the procedure's last -insn_count instructions, up to ``end_ip``.

``UNW_INFO_FORMAT_TABLE`` and ``UNW_INFO_FORMAT_REMOTE_TABLE`` are read alike:
``table_data`` is the target address of ``table_len`` words of sorted
{int32 start_ip_offset, int32 fde_offset} pairs relative to ``segbase``
(``UNW_INFO_FORMAT_IP_OFFSET``: start offsets relative to ``start_ip``); the
FDE at segbase + fde_offset is ``.eh_frame``-style and decoded by
:class:`~liveunwind.formats.unwind.dwarf_cfi.CfiTable` from bytes read around it,
``gp`` being the datarel base.  (libunwind's local TABLE format points at its
own private .debug_frame index; a program registering TABLE in a target has
only the documented layout, which is the remote one.)
"""

from __future__ import annotations

import struct

from liveunwind.errors import FormatError
from liveunwind.formats.unwind.rules import CfaRule, RegisterRule, RegKind, UnwindRule

TYPE_CHECKING = False
if TYPE_CHECKING:
    from liveunwind.arch import Arch

# unw_dyn_info_t.format
UNW_INFO_FORMAT_DYNAMIC = 0
UNW_INFO_FORMAT_TABLE = 1
UNW_INFO_FORMAT_REMOTE_TABLE = 2
UNW_INFO_FORMAT_ARM_EXIDX = 3
UNW_INFO_FORMAT_IP_OFFSET = 4
#: The formats whose unwind info is a table of FDEs.
TABLE_FORMATS = (UNW_INFO_FORMAT_TABLE, UNW_INFO_FORMAT_REMOTE_TABLE, UNW_INFO_FORMAT_IP_OFFSET)

# unw_dyn_operation_t
UNW_DYN_STOP = 0
UNW_DYN_SAVE_REG = 1
UNW_DYN_SPILL_FP_REL = 2
UNW_DYN_SPILL_SP_REL = 3
UNW_DYN_ADD = 4
UNW_DYN_POP_FRAMES = 5
UNW_DYN_LABEL_STATE = 6
UNW_DYN_COPY_STATE = 7
UNW_DYN_ALIAS = 8

# Layouts (LP64, little-endian targets; libunwind pads for 8-byte words).
#: unw_dyn_info_list_t: version, generation, first.
DYN_INFO_LIST = struct.Struct("<IIQ")
#: unw_dyn_info_t: next, prev, start_ip, end_ip, gp, int32 format, int32 pad,
#: load_offset, then the 32-byte union — pi {name_ptr, handler, u32 flags,
#: i32 pad0, regions} or ti/rti {name_ptr, segbase, table_len, table_data}.
DYN_INFO = struct.Struct("<QQQQQiiQQQIIQ")
#: unw_dyn_region_info_t up to its ops: next, insn_count, op_count.
DYN_REGION = struct.Struct("<QiI")
#: unw_dyn_op_t: tag, qp, reg, when, val.
DYN_OP = struct.Struct("<bbhiQ")
#: One entry of a TABLE format's table: start_ip_offset, fde_offset.
TABLE_ENTRY = struct.Struct("<ii")

#: Bounds on untrusted counts and sizes.
MAX_REGIONS = 256
MAX_OPS = 4096
MAX_LABELS = 64
MAX_PROCEDURE_SIZE = 1 << 30
MAX_TABLE_ENTRIES = 1 << 20


class DynamicConventions:
    """The DYNAMIC-format conventions of one architecture (see the module docstring).

    Register numbers are DWARF's.  This module's records are plain classes
    rather than named tuples: it is imported by every backtrace of a process
    with JIT code, and a named tuple's class costs 70 µs to make.
    """

    __slots__ = ("entry_cfa_offset", "entry_ra_offset", "fp", "insn_size", "return_address", "sp")

    def __init__(
        self,
        *,
        insn_size: int,
        sp: int,
        fp: int,
        return_address: int,
        entry_cfa_offset: int,
        entry_ra_offset: int | None,
    ) -> None:
        #: Bytes per instruction, the unit of ``insn_count`` and ``when``.
        self.insn_size = insn_size
        self.sp = sp
        self.fp = fp
        self.return_address = return_address
        #: CFA - sp at procedure entry.
        self.entry_cfa_offset = entry_cfa_offset
        #: Where the return address is at entry: CFA-relative offset, or None (in its register).
        self.entry_ra_offset = entry_ra_offset


def conventions_for(arch: Arch) -> DynamicConventions:
    """The conventions on ``arch``: its instruction unit, and the frame a call leaves.

    A call pushes the return address (CFA = sp + one word, the address at
    CFA - one word) where the architecture has no link register; otherwise
    the CFA is the sp and the address stays in the link register.
    """
    pushed = arch.link_register is None
    return DynamicConventions(
        insn_size=arch.code_alignment,
        sp=arch.sp,
        fp=arch.fp,
        return_address=arch.return_address,
        entry_cfa_offset=arch.word_size if pushed else 0,
        entry_ra_offset=-arch.word_size if pushed else None,
    )


class Op:
    """One libunwind ``unw_dyn_op_t`` (its ``qp`` dropped: no predication here)."""

    __slots__ = ("reg", "tag", "val", "when")

    def __init__(self, tag: int, reg: int, when: int, val: int) -> None:
        self.tag = tag
        self.reg = reg
        self.when = when
        self.val = val


class Region:
    """One ``unw_dyn_region_info_t``: its length in instructions and its ops."""

    __slots__ = ("insn_count", "ops")

    def __init__(self, insn_count: int, ops: tuple[Op, ...]) -> None:
        self.insn_count = insn_count
        self.ops = ops


class Procedure:
    """One ``unw_dyn_info_t``: a DYNAMIC procedure or a table of FDEs."""

    __slots__ = (
        "end",
        "error",
        "format",
        "gp",
        "name",
        "regions",
        "segbase",
        "start",
        "table",
        "table_entries",
    )

    def __init__(self, start: int, end: int, name: str, format: int, gp: int = 0) -> None:
        self.start = start
        self.end = end
        self.name = name
        self.format = format
        self.gp = gp
        self.regions: tuple[Region, ...] = ()
        self.segbase = 0
        self.table = 0
        self.table_entries = 0
        #: Why its unwind info cannot be used (its range and name still can).
        self.error = ""


def decode_ops(raw: bytes) -> tuple[Op, ...]:
    """The ops of a region from their bytes (whole ``unw_dyn_op_t`` records), up to STOP."""
    ops = []
    for tag, _qp, reg, when, val in DYN_OP.iter_unpack(raw):
        if tag == UNW_DYN_STOP:
            break
        ops.append(Op(tag, reg, when, val))
    return tuple(ops)


# -- interpreting UNW_INFO_FORMAT_DYNAMIC ---------------------------------------------------


class _FrameState:
    """The frame at one point of a procedure, relative to the CFA (entry sp + entry offset)."""

    __slots__ = ("cfa_on_fp", "fp_depth", "registers", "sp_depth")

    def __init__(
        self,
        sp_depth: int,
        fp_depth: int | None,
        cfa_on_fp: bool,
        registers: dict[int, RegisterRule],
    ) -> None:
        self.sp_depth = sp_depth  # CFA - sp
        self.fp_depth = fp_depth  # CFA - fp, once the frame pointer is established
        self.cfa_on_fp = cfa_on_fp
        self.registers = registers

    def copy(self) -> _FrameState:
        return _FrameState(self.sp_depth, self.fp_depth, self.cfa_on_fp, dict(self.registers))


def _entry_state(conventions: DynamicConventions) -> _FrameState:
    registers = {}
    if conventions.entry_ra_offset is not None:
        registers[conventions.return_address] = RegisterRule(
            RegKind.OFFSET, conventions.entry_ra_offset
        )
    return _FrameState(conventions.entry_cfa_offset, None, False, registers)


#: Order of ops that share a ``when``: COPY_STATE, frame changes, saves, LABEL_STATE.
_PHASE = {
    UNW_DYN_COPY_STATE: 0,
    UNW_DYN_ADD: 1,
    UNW_DYN_POP_FRAMES: 1,
    UNW_DYN_SAVE_REG: 2,
    UNW_DYN_SPILL_FP_REL: 2,
    UNW_DYN_SPILL_SP_REL: 2,
    UNW_DYN_ALIAS: 2,
    UNW_DYN_LABEL_STATE: 3,
}


def _signed(value: int) -> int:
    return value - (1 << 64) if value & (1 << 63) else value


def dynamic_rule(procedure: Procedure, pc: int, conventions: DynamicConventions) -> UnwindRule:
    """Runs the procedure's regions up to ``pc`` and freezes the state into a rule."""
    if not procedure.start <= pc < procedure.end:
        raise FormatError(f"pc {pc:#x} outside {procedure.name}")
    target = (pc - procedure.start) // conventions.insn_size
    total = (procedure.end - procedure.start) // conventions.insn_size
    state = _entry_state(conventions)
    labels: dict[int, _FrameState] = {}
    region_start = 0
    for index, region in enumerate(procedure.regions):
        length = region.insn_count
        if length < 0:
            if index != len(procedure.regions) - 1:
                raise FormatError(f"{procedure.name}: negative insn_count before the last region")
            length = -length
            if total - length < region_start:
                raise FormatError(
                    f"{procedure.name}: last region of {length} instructions overlaps "
                    f"the {region_start} before it"
                )
            region_start = total - length
        if target < region_start:
            break
        if region_start + length > total:
            raise FormatError(f"{procedure.name}: regions are longer than the procedure")
        ordered = sorted(region.ops, key=lambda op: (op.when, _PHASE.get(op.tag, 2)))
        for op in ordered:
            if target <= region_start + min(op.when, length - 1):
                continue  # the instruction at `when` has not executed yet
            state = _apply(op, state, labels, conventions, procedure.name)
        region_start += length
    return _freeze(state, conventions, procedure)


def _apply(
    op: Op,
    state: _FrameState,
    labels: dict[int, _FrameState],
    conventions: DynamicConventions,
    name: str,
) -> _FrameState:
    tag, reg = op.tag, op.reg
    value = _signed(op.val)
    if tag == UNW_DYN_ADD:
        if reg == conventions.sp:
            state.sp_depth -= value
        elif reg == conventions.fp and state.fp_depth is not None:
            state.fp_depth -= value
        else:
            raise FormatError(f"{name}: ADD to register {reg} is not supported")
    elif tag == UNW_DYN_SAVE_REG:
        if reg == conventions.sp:
            if op.val != conventions.fp:
                raise FormatError(f"{name}: sp saved to register {op.val}, not the frame pointer")
            state.fp_depth, state.cfa_on_fp = state.sp_depth, True
        else:
            state.registers[reg] = RegisterRule(RegKind.REGISTER, register=op.val)
    elif tag == UNW_DYN_SPILL_SP_REL:
        state.registers[reg] = RegisterRule(RegKind.OFFSET, value - state.sp_depth)
    elif tag == UNW_DYN_SPILL_FP_REL:
        if state.fp_depth is None:
            raise FormatError(f"{name}: fp-relative spill before the frame pointer is set")
        state.registers[reg] = RegisterRule(RegKind.OFFSET, value - state.fp_depth)
    elif tag == UNW_DYN_POP_FRAMES:
        if value < 1:
            raise FormatError(f"{name}: POP_FRAMES of {value} frames")
        return _entry_state(conventions)
    elif tag == UNW_DYN_LABEL_STATE:
        if op.val not in labels and len(labels) >= MAX_LABELS:
            raise FormatError(f"{name}: more than {MAX_LABELS} labels")
        labels[op.val] = state.copy()
    elif tag == UNW_DYN_COPY_STATE:
        if op.val not in labels:
            raise FormatError(f"{name}: COPY_STATE of unknown label {op.val}")
        return labels[op.val].copy()
    elif tag != UNW_DYN_ALIAS:
        raise FormatError(f"{name}: unknown op tag {tag}")
    return state


def _freeze(
    state: _FrameState, conventions: DynamicConventions, procedure: Procedure
) -> UnwindRule:
    if state.cfa_on_fp:
        assert state.fp_depth is not None
        cfa = CfaRule(conventions.fp, state.fp_depth)
    else:
        cfa = CfaRule(conventions.sp, state.sp_depth)
    return UnwindRule(
        cfa=cfa,
        registers=tuple(sorted(state.registers.items())),
        return_address_register=conventions.return_address,
        start=procedure.start,
        end=procedure.end,
    )
