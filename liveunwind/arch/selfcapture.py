"""The contract between local capture's signal handler and its machine code, per architecture.

:mod:`liveunwind.targets.local.capture` installs a handler, written in each
architecture's machine code (``arch/<name>/selfcapture.py``), that copies a
thread's ucontext and stack when the thread takes a signal.  Both sides
meet in one page, the *slot*, laid out here:

====== ===== ==========================================================
offset size  field
====== ===== ==========================================================
0      u32   state: :data:`IDLE`, :data:`ARMED`, :data:`COPYING`, :data:`DONE`
4      u32   the thread id asked for
8      u64   the buffer's address
16     u64   the buffer's capacity
24     u64   the end of the thread's stack
32     u64   where the copy starts (the ucontext), written by the handler
40     u64   how many bytes were copied, written by the handler
48     u64   the start of the thread's stack
====== ===== ==========================================================

The handler finds the slot through an 8-byte constant in its code,
:data:`PLACEHOLDER`, which is replaced by the slot's address when it is
installed.  It also exports ``cas(int *word, int expected, int desired)``,
an atomic compare-and-swap the waiting side disarms a request with.
"""

from __future__ import annotations

# The state word at the start of the slot.
IDLE, ARMED, COPYING, DONE = 0, 1, 2, 3
# The fields after it (u32 tid, then u64 each), at these offsets.
TID, BUFFER, CAPACITY, STACK_END, START, LENGTH, STACK_START = 4, 8, 16, 24, 32, 40, 48
#: Stands in the code for the slot's address; replaced when the code is installed.
PLACEHOLDER = bytes.fromhex("8877665544332211")


class SelfCapture:
    """One architecture's handler: its code, where ``cas`` starts, and what it needs around it."""

    __slots__ = ("cas_offset", "code", "source", "tgkill", "ucontext_offset")

    def __init__(
        self, *, source: str, code: bytes, cas_offset: int, ucontext_offset: int, tgkill: int
    ) -> None:
        #: The assembly the code was assembled from (tests/system/test_local.py assembles it again).
        self.source = source
        self.code = code
        #: Offset of ``cas`` in the code.
        self.cas_offset = cas_offset
        #: Offset of the ucontext in the kernel's signal frame, where
        #: ``Arch.signal_frame_reader`` starts reading.
        self.ucontext_offset = ucontext_offset
        #: The ``tgkill`` system call's number.
        self.tgkill = tgkill
