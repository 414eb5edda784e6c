"""x86_64's sigreturn trampoline and the signal frame the kernel builds."""

from __future__ import annotations

import struct

from liveunwind.arch.base import ReadMemory

#: ``mcontext_t.gregs`` order (REG_R8 … REG_RIP) as DWARF numbers.
_SIGCONTEXT_ORDER = (8, 9, 10, 11, 12, 13, 14, 15, 5, 4, 6, 3, 1, 0, 2, 7, 16)
#: Offset of ``uc_mcontext.gregs`` in ``struct ucontext`` (after flags, link, stack).
_UCONTEXT_GREGS = 40
#: ``mov $15, %rax; syscall``: glibc's and musl's ``__restore_rt``.
SIGRETURN_CODE = bytes.fromhex("48c7c00f0000000f05")


def read_signal_frame(read: ReadMemory, sp: int) -> dict[int, int]:
    """Registers saved by the kernel, for a pc at the sigreturn trampoline.

    When the handler returns into ``__restore_rt`` it has popped the
    trampoline address, so ``sp`` points at the ``struct ucontext`` of the
    kernel's ``rt_sigframe``.
    """
    raw = read(sp + _UCONTEXT_GREGS, 8 * len(_SIGCONTEXT_ORDER))
    values = struct.unpack("<17Q", raw)
    return dict(zip(_SIGCONTEXT_ORDER, values))
