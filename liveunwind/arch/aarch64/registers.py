"""aarch64's register set and the layouts it is recorded in.

DWARF numbering (AAPCS64's DWARF supplement), the kernel's ``user_pt_regs``
(ptrace and ELF cores), GDB's ``g`` packet, and Mach-O's thread states.
"""

from __future__ import annotations

import struct

#: x0–x30 are DWARF 0–30, sp is 31.  The pc has no DWARF number; like
#: libunwind we keep it under 32 so register sets stay one flat dict.
PC = 32
SP, FP, LR = 31, 29, 30
REGISTER_NAMES = {number: f"x{number}" for number in range(31)}
REGISTER_NAMES.update({29: "fp", 30: "lr", 31: "sp", PC: "pc"})
#: DWARF 64–95 are the SIMD registers; unwind tables only save their low halves, d8–d15.
REGISTER_NAMES.update({64 + number: f"d{number}" for number in range(32)})

#: ``struct user_pt_regs`` (NT_PRSTATUS): x0–x30, sp, pc, pstate.
USER_REGS_SIZE = 34 * 8


def registers_from_user_regs(data: bytes) -> dict[int, int]:
    """Decodes a ``user_pt_regs`` (PTRACE_GETREGSET / NT_PRSTATUS)."""
    return registers_from_x0_sp_pc(data)


def registers_from_x0_sp_pc(data: bytes) -> dict[int, int]:
    """x0–x30, sp and pc as 33 words: as the kernel, a signal frame and Mach-O keep them."""
    values = struct.unpack_from("<33Q", data)
    registers = dict(enumerate(values[:31]))
    registers[SP] = values[31]
    registers[PC] = values[32]
    return registers


#: ``<architecture>`` of GDB's target descriptions for aarch64.
GDB_ARCHITECTURES = ("aarch64",)
#: Register names of a target description → DWARF numbers: GDB calls x29 and
#: x30 by their numbers, which our names call fp and lr; both are accepted.
GDB_REGISTERS = {name: number for number, name in REGISTER_NAMES.items() if number < 64}
GDB_REGISTERS.update({f"x{number}": number for number in range(31)})
#: The ``g`` block of a stub that sends no target description (GDB's built-in layout).
GDB_DEFAULT_LAYOUT: tuple[tuple[str, int], ...] = (
    *((f"x{number}", 64) for number in range(31)),
    ("sp", 64),
    ("pc", 64),
)

#: Mach-O ``CPU_TYPE_ARM64``.
MACHO_CPU_TYPE = 0x0100000C
#: ``ARM_THREAD_STATE``: a (flavor, count) header, then the state it names.
MACHO_UNIFIED_STATE = 1
#: ``ARM_THREAD_STATE64`` and ``ARM_NEON_STATE64``.
MACHO_THREAD_STATE64 = 6
MACHO_NEON_STATE64 = 17


def registers_from_thread_state64(data: bytes) -> dict[int, int]:
    """Decodes an ``arm_thread_state64_t`` (264 bytes or more): x0–x28, fp, lr, sp, pc."""
    return registers_from_x0_sp_pc(data)


def registers_from_neon_state64(data: bytes) -> dict[int, int]:
    """Decodes an ``arm_neon_state64_t`` (512 bytes or more): v0–v31 are DWARF 64–95.

    A register rule restores the low 64 bits (d0–d31), which is what is kept.
    """
    return {64 + number: struct.unpack_from("<Q", data, 16 * number)[0] for number in range(32)}


#: ``enum perf_event_arm64_regs`` (arch/arm64/include/uapi/asm/perf_regs.h) → DWARF
#: numbers: x0–x30 (29 the fp, 30 the lr), sp at 31 and pc at 32, as ours.
PERF_REGISTERS = {number: number for number in range(PC + 1)}
