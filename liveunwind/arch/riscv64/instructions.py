"""riscv64 machine code liveunwind reads: calls, an address-returning function, PLT entries.

Calls through ra (the RISC-V unprivileged ISA): ``jal ra, offset``,
``jalr ra, offset(rs1)`` (after ``auipc ra, hi20`` it is the unrelaxed
``call``, a direct call) and the compressed ``c.jalr rs1``.  RVC mixes 16-
and 32-bit instructions, and where the instruction before a return address
starts cannot be known backwards: a ``c.jalr`` at R-2 and a 32-bit call at
R-4 both end at R, so both readings are tried.  ``jal t0`` (the alternate
link register of gcc's -msave-restore millicode) is not a call through ra.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from liveunwind.arch.base import ACCESSOR_CODE_SIZE, WORD_MASK, CallSite

#: ``auipc ra, hi20; jalr ra, lo12(ra)``: eight bytes.
LONGEST_CALL = 8

_JAL_RA_MASK, _JAL_RA = 0xFFF, 0x0EF  # opcode 0x6f, rd = x1
_JALR_RA_MASK, _JALR_RA = 0x7FFF, 0x00E7  # opcode 0x67, rd = x1, funct3 0
_AUIPC_RA_MASK, _AUIPC_RA = 0xFFF, 0x097  # opcode 0x17, rd = x1
_C_JALR_MASK, _C_JALR = 0xF07F, 0x9002  # funct4 1001, rs2 0, op 10; rs1 0 is c.ebreak

_AUIPC_A0_MASK, _AUIPC_A0 = 0xFFF, 0x517  # auipc a0, hi20
_ADDI_A0_A0_MASK, _ADDI_A0_A0 = 0xFFFFF, 0x50513  # addi a0, a0, lo12
_RET = 0x00008067  # jalr zero, 0(ra)
_C_RET = 0x8082  # c.jr ra

# A PLT entry (binutils' elfnn-riscv.c): auipc t3, hi20; ld t3, lo12(t3); jalr t1, t3; nop.
_AUIPC_T3_MASK, _AUIPC_T3 = 0xFFF, 0xE17
_LD_T3_T3_MASK, _LD_T3_T3 = 0xFFFFF, 0xE3E03
_JALR_T1_T3 = 0x000E0367


def _signed(value: int, bits: int) -> int:
    return value - (1 << bits) if value & (1 << (bits - 1)) else value


def _jal_offset(word: int) -> int:
    """The J-immediate: imm[20|10:1|11|19:12] in bits 31|30:21|20|19:12."""
    offset = (
        ((word >> 31) & 1) << 20
        | ((word >> 21) & 0x3FF) << 1
        | ((word >> 20) & 1) << 11
        | ((word >> 12) & 0xFF) << 12
    )
    return _signed(offset, 21)


def call_sites(return_address: int, code: bytes) -> Iterator[CallSite]:
    """Calls through ra whose last byte is the last byte of ``code``: both readings."""
    if return_address % 2:
        return
    if len(code) >= 2:
        (half,) = struct.unpack("<H", code[-2:])
        if half & _C_JALR_MASK == _C_JALR and (half >> 7) & 0x1F:
            yield CallSite(return_address - 2, None)
    if len(code) < 4:
        return
    (word,) = struct.unpack("<I", code[-4:])
    site = return_address - 4
    if word & _JAL_RA_MASK == _JAL_RA:
        yield CallSite(site, (site + _jal_offset(word)) & WORD_MASK)
    elif word & _JALR_RA_MASK == _JALR_RA:
        target = None
        if len(code) >= 8 and (word >> 15) & 0x1F == 1:  # jalr ra, lo12(ra)
            (auipc,) = struct.unpack("<I", code[-8:-4])
            if auipc & _AUIPC_RA_MASK == _AUIPC_RA:
                high = _signed(auipc & 0xFFFFF000, 32)
                target = (site - 4 + high + _signed(word >> 20, 12)) & WORD_MASK
        yield CallSite(site, target)


def address_returned(code: bytes, address: int) -> int | None:
    """The address ``auipc a0, hi20; addi a0, a0, lo12; ret`` returns, or None.

    That is all of libunwind's ``_U_dyn_info_list_addr()`` (``lla a0, sym``);
    the ``ret`` may be compressed.
    """
    if len(code) < ACCESSOR_CODE_SIZE:
        return None
    auipc, addi = struct.unpack_from("<2I", code)
    (ret,) = struct.unpack_from("<I", code, 8)
    if (
        auipc & _AUIPC_A0_MASK == _AUIPC_A0
        and addi & _ADDI_A0_A0_MASK == _ADDI_A0_A0
        and (ret == _RET or ret & 0xFFFF == _C_RET)
    ):
        high = _signed(auipc & 0xFFFFF000, 32)
        return (address + high + _signed(addi >> 20, 12)) & WORD_MASK
    return None


def plt_slot(code: bytes, address: int) -> int | None:
    """The GOT slot a PLT entry, ``auipc t3, hi; ld t3, lo(t3); jalr t1, t3``, reads; or None."""
    if len(code) < 12:
        return None
    auipc, load, jump = struct.unpack_from("<3I", code)
    if (
        auipc & _AUIPC_T3_MASK != _AUIPC_T3
        or load & _LD_T3_T3_MASK != _LD_T3_T3
        or jump != _JALR_T1_T3
    ):
        return None
    return (address + _signed(auipc & 0xFFFFF000, 32) + _signed(load >> 20, 12)) & WORD_MASK
