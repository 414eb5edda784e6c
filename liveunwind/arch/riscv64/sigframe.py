"""riscv64's sigreturn trampoline and the signal frame the kernel builds."""

from __future__ import annotations

from liveunwind.arch.base import ReadMemory
from liveunwind.arch.riscv64.registers import USER_REGS_SIZE, registers_from_user_regs

#: ``li a7, 139 (__NR_rt_sigreturn); ecall``: the vDSO's ``__vdso_rt_sigreturn``
#: (arch/riscv/kernel/vdso/rt_sigreturn.S; the handler returns there through
#: ra, riscv has no SA_RESTORER), and QEMU user mode's trampoline, which 7.2
#: writes at the start of an anonymous page of its own.  The vDSO's FDE says
#: only ``.cfi_signal_frame``: the code is what tells, as gdb recognises it.
SIGRETURN_CODE = bytes.fromhex("9308b00873000000")
#: Offset of ``uc_mcontext.sc_regs`` from the sp at the trampoline: the
#: ``rt_sigframe`` holds a 128-byte siginfo, then the ucontext, whose
#: 16-aligned mcontext starts at 176 with a ``user_regs_struct`` (pc first).
#: The same under QEMU 7.2's user mode (seen on testprogs/riscv64/sigframe.c).
_SIGFRAME_REGS = 128 + 176


def read_signal_frame(read: ReadMemory, sp: int) -> dict[int, int]:
    """Registers the kernel saved in the ``rt_sigframe`` at ``sp``."""
    return registers_from_user_regs(read(sp + _SIGFRAME_REGS, USER_REGS_SIZE))
