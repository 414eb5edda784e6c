"""riscv64's register set and the layouts it is recorded in.

DWARF numbering (the RISC-V psABI's DWARF chapter), the kernel's
``user_regs_struct`` (ptrace, ELF cores and signal frames alike) and GDB's
``g`` packet.
"""

from __future__ import annotations

import struct

#: x0–x31 are DWARF 0–31 and f0–f31 are 32–63, so the pc (which has no DWARF
#: number) cannot sit at 32 as on aarch64.  64 is the psABI's "alternate frame
#: return column", where libgcc's riscv signal-frame unwinder keeps the pc too.
PC = 64
RA, SP, FP = 1, 2, 8
#: ABI names; x8 is "fp" as GDB's and QEMU's target descriptions call it (also s0).
_X_NAMES = (
    "zero", "ra", "sp", "gp", "tp", "t0", "t1", "t2",
    "fp", "s1", "a0", "a1", "a2", "a3", "a4", "a5",
    "a6", "a7", "s2", "s3", "s4", "s5", "s6", "s7",
    "s8", "s9", "s10", "s11", "t3", "t4", "t5", "t6",
)  # fmt: skip
_F_NAMES = (
    "ft0", "ft1", "ft2", "ft3", "ft4", "ft5", "ft6", "ft7",
    "fs0", "fs1", "fa0", "fa1", "fa2", "fa3", "fa4", "fa5",
    "fa6", "fa7", "fs2", "fs3", "fs4", "fs5", "fs6", "fs7",
    "fs8", "fs9", "fs10", "fs11", "ft8", "ft9", "ft10", "ft11",
)  # fmt: skip
REGISTER_NAMES = dict(enumerate(_X_NAMES))
REGISTER_NAMES.update({32 + number: name for number, name in enumerate(_F_NAMES)})
REGISTER_NAMES[PC] = "pc"

#: ``struct user_regs_struct`` (arch/riscv/include/uapi/asm/ptrace.h): the pc,
#: then x1–x31 (x0 is always zero and not stored).  NT_PRSTATUS's pr_reg.
USER_REGS_SIZE = 32 * 8


def registers_from_user_regs(data: bytes) -> dict[int, int]:
    """Decodes a ``user_regs_struct`` (PTRACE_GETREGSET, NT_PRSTATUS, a signal frame's sc_regs)."""
    values = struct.unpack_from("<32Q", data)
    registers = dict(enumerate(values))
    registers[0] = 0
    registers[PC] = values[0]
    return registers


#: ``<architecture>`` of GDB's target descriptions for riscv64 (QEMU 7.2 sends "riscv:rv64").
GDB_ARCHITECTURES = ("riscv:rv64",)
#: Register names of a target description → DWARF numbers: ABI names as GDB
#: and QEMU send them, and the ISA names x0–x31 and s0 as other stubs may.
GDB_REGISTERS = {name: number for number, name in enumerate(_X_NAMES)}
GDB_REGISTERS.update({f"x{number}": number for number in range(32)})
GDB_REGISTERS.update({"s0": FP, "pc": PC})
#: The ``g`` block of a stub that sends no target description (GDB's riscv64
#: layout, and QEMU's): x0–x31, then the pc; the FP registers are not in it.
GDB_DEFAULT_LAYOUT: tuple[tuple[str, int], ...] = (*((name, 64) for name in _X_NAMES), ("pc", 64))
#: What a ``g`` layout must place for a walk: the integer registers and the pc.
GDB_GENERAL_REGISTERS = (*range(32), PC)


#: ``enum perf_event_riscv_regs`` (arch/riscv/include/uapi/asm/perf_regs.h) → DWARF
#: numbers: the pc at 0, then x1–x31 (ra sp gp tp t0–t2 s0 s1 a0–a7 s2–s11 t3–t6) at 1–31.
PERF_REGISTERS = {0: PC, **{number: number for number in range(1, 32)}}
