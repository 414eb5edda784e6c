"""x86_64: DWARF register numbers (System V psABI §3.6.2) and the signal frame."""

from __future__ import annotations

import struct

from liveunwind.arch.base import Arch, ReadMemory

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

#: ``mcontext_t.gregs`` order (REG_R8 … REG_RIP) as DWARF numbers.
_SIGCONTEXT_ORDER = (8, 9, 10, 11, 12, 13, 14, 15, 5, 4, 6, 3, 1, 0, 2, 7, 16)
#: Offset of ``uc_mcontext.gregs`` in ``struct ucontext`` (after flags, link, stack).
_UCONTEXT_GREGS = 40
#: ``mov $15, %rax; syscall``: glibc's and musl's ``__restore_rt``.
SIGRETURN_CODE = bytes.fromhex("48c7c00f0000000f05")


def registers_from_user_regs(data: bytes) -> dict[int, int]:
    """Decodes a ``user_regs_struct`` (PTRACE_GETREGSET / NT_PRSTATUS)."""
    values = struct.unpack_from("<27Q", data)
    return {dwarf: value for dwarf, value in zip(USER_REGS_ORDER, values) if dwarf is not None}


def read_signal_frame(read: ReadMemory, sp: int) -> dict[int, int]:
    """Registers saved by the kernel, for a pc at the sigreturn trampoline.

    When the handler returns into ``__restore_rt`` it has popped the
    trampoline address, so ``sp`` points at the ``struct ucontext`` of the
    kernel's ``rt_sigframe``.
    """
    raw = read(sp + _UCONTEXT_GREGS, 8 * len(_SIGCONTEXT_ORDER))
    values = struct.unpack("<17Q", raw)
    return dict(zip(_SIGCONTEXT_ORDER, values))


X86_64 = Arch(
    name="x86_64",
    elf_machine=62,
    pc=16,
    sp=7,
    fp=6,
    return_address=16,
    register_names=REGISTER_NAMES,
    red_zone=128,
    sigreturn_code=SIGRETURN_CODE,
    signal_frame_reader=read_signal_frame,
)
