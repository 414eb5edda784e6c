"""aarch64's sigreturn trampoline and the signal frame the kernel builds."""

from __future__ import annotations

from liveunwind.arch.aarch64.registers import registers_from_x0_sp_pc
from liveunwind.arch.base import ReadMemory

#: ``mov x8, #139; svc #0``: the vDSO's ``__kernel_rt_sigreturn``.
SIGRETURN_CODE = bytes.fromhex("681180d2010000d4")
#: Offset of ``uc_mcontext.regs[0]`` from the sp at the trampoline: the
#: ``rt_sigframe`` holds a 128-byte siginfo, then the ucontext whose
#: 16-aligned mcontext starts at 176 and has an 8-byte fault address first.
_SIGFRAME_X0 = 128 + 176 + 8


def read_signal_frame(read: ReadMemory, sp: int) -> dict[int, int]:
    """Registers the kernel saved in the ``rt_sigframe`` at ``sp``."""
    return registers_from_x0_sp_pc(read(sp + _SIGFRAME_X0, 33 * 8))
