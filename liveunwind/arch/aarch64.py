"""aarch64: DWARF register numbers (AAPCS64 DWARF), signal frame, pointer auth."""

from __future__ import annotations

import struct

from liveunwind.arch.base import Arch, ReadMemory

#: x0–x30 are DWARF 0–30, sp is 31.  The pc has no DWARF number; like
#: libunwind we keep it under 32 so register sets stay one flat dict.
PC = 32
REGISTER_NAMES = {number: f"x{number}" for number in range(31)}
REGISTER_NAMES.update({29: "fp", 30: "lr", 31: "sp", PC: "pc"})
#: DWARF 64–95 are the SIMD registers; unwind tables only save their low halves, d8–d15.
REGISTER_NAMES.update({64 + number: f"d{number}" for number in range(32)})

#: ``struct user_pt_regs`` (NT_PRSTATUS): x0–x30, sp, pc, pstate.
USER_REGS_SIZE = 34 * 8

#: ``mov x8, #139; svc #0``: the vDSO's ``__kernel_rt_sigreturn``.
SIGRETURN_CODE = bytes.fromhex("681180d2010000d4")
#: Offset of ``uc_mcontext.regs[0]`` from the sp at the trampoline: the
#: ``rt_sigframe`` holds a 128-byte siginfo, then the ucontext whose
#: 16-aligned mcontext starts at 176 and has an 8-byte fault address first.
_SIGFRAME_X0 = 128 + 176 + 8
#: User-space addresses have at most 52 significant bits; anything above
#: them in a return address is a pointer-authentication code or a tag.
_ADDRESS_MASK = (1 << 48) - 1


def registers_from_user_regs(data: bytes) -> dict[int, int]:
    """Decodes a ``user_pt_regs`` (PTRACE_GETREGSET / NT_PRSTATUS)."""
    values = struct.unpack_from("<33Q", data)
    registers = dict(enumerate(values[:31]))
    registers[31] = values[31]
    registers[PC] = values[32]
    return registers


def read_signal_frame(read: ReadMemory, sp: int) -> dict[int, int]:
    """Registers the kernel saved in the ``rt_sigframe`` at ``sp``."""
    values = struct.unpack("<33Q", read(sp + _SIGFRAME_X0, 33 * 8))
    registers = dict(enumerate(values[:31]))
    registers[31] = values[31]
    registers[PC] = values[32]
    return registers


def strip_pointer_auth(value: int) -> int:
    """Drops the PAC bits of a signed return address (48-bit user address space)."""
    return value & _ADDRESS_MASK


AARCH64 = Arch(
    name="aarch64",
    elf_machine=183,
    pc=PC,
    sp=31,
    fp=29,
    return_address=30,
    register_names=REGISTER_NAMES,
    red_zone=0,
    sigreturn_code=SIGRETURN_CODE,
    signal_frame_reader=read_signal_frame,
    link_register=30,
    strip_pointer_auth=strip_pointer_auth,
)
