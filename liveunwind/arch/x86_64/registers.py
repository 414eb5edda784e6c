"""x86_64's register set and the layouts it is recorded in.

DWARF numbering (System V psABI §3.6.2), the kernel's ``user_regs_struct``
(ptrace and ELF cores), GDB's ``g`` packet, and Mach-O's thread state.
"""

from __future__ import annotations

import struct

PC, SP, FP = 16, 7, 6
REGISTER_NAMES = {
    0: "rax", 1: "rdx", 2: "rcx", 3: "rbx", 4: "rsi", 5: "rdi", 6: "rbp", 7: "rsp",
    8: "r8", 9: "r9", 10: "r10", 11: "r11", 12: "r12", 13: "r13", 14: "r14", 15: "r15",
    16: "rip",
}  # fmt: skip

#: Order of the general registers in the kernel's ``user_regs_struct`` (and in
#: NT_PRSTATUS), mapped to DWARF numbers; ``None`` marks fields we do not need.
USER_REGS_ORDER: tuple[int | None, ...] = (
    15, 14, 13, 12, 6, 3, 11, 10, 9, 8, 0, 2, 1, 4, 5,  # r15 … rdi
    None,  # orig_rax
    16,  # rip
    None,  # cs
    None,  # eflags
    7,  # rsp
    None, None, None, None, None, None, None,  # ss fs_base gs_base ds es fs gs
)  # fmt: skip
USER_REGS_SIZE = 27 * 8


def registers_from_user_regs(data: bytes) -> dict[int, int]:
    """Decodes a ``user_regs_struct`` (PTRACE_GETREGSET / NT_PRSTATUS)."""
    values = struct.unpack_from("<27Q", data)
    return {dwarf: value for dwarf, value in zip(USER_REGS_ORDER, values) if dwarf is not None}


#: ``<architecture>`` of GDB's target descriptions for x86_64.
GDB_ARCHITECTURES = ("i386:x86-64",)
#: Register names of a target description → DWARF numbers (GDB calls them as we do).
GDB_REGISTERS = {name: number for number, name in REGISTER_NAMES.items()}
#: The ``g`` block of a stub that sends no target description (GDB's built-in layout).
GDB_DEFAULT_LAYOUT: tuple[tuple[str, int], ...] = (
    *((name, 64) for name in ("rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp")),
    *((f"r{number}", 64) for number in range(8, 16)),
    ("rip", 64),
    ("eflags", 32),
)

#: Mach-O ``CPU_TYPE_X86_64``.
MACHO_CPU_TYPE = 0x01000007
#: ``x86_THREAD_STATE``: a (flavor, count) header, then the state it names.
MACHO_UNIFIED_STATE = 7
#: ``x86_THREAD_STATE64``.
MACHO_THREAD_STATE64 = 4
#: x86_thread_state64_t: rax rbx rcx rdx rdi rsi rbp rsp r8–r15 rip (then rflags cs fs gs).
_THREAD_STATE64_ORDER = (0, 3, 2, 1, 5, 4, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16)


def registers_from_thread_state64(data: bytes) -> dict[int, int]:
    """Decodes an ``x86_thread_state64_t`` (136 bytes or more)."""
    return dict(zip(_THREAD_STATE64_ORDER, struct.unpack_from("<17Q", data)))


#: ``enum perf_event_x86_regs`` (arch/x86/include/uapi/asm/perf_regs.h) → DWARF
#: numbers: ax bx cx dx si di bp sp ip, then (after flags and the six segment
#: registers, 9–15, which unwinding never reads) r8–r15 at 16–23.
PERF_REGISTERS = {
    0: 0, 1: 3, 2: 2, 3: 1, 4: 4, 5: 5, 6: 6, 7: 7, 8: PC,
    **{16 + number: 8 + number for number in range(8)},
}  # fmt: skip
