"""The least a Python program pays to stop every thread of a process and let it go again.

Run by the benchmark's interpreter as ``python bench/stop_floor.py PID``:
it seizes every thread, interrupts each, waits for each to stop, reads each
one's registers and lets it go (ptrace through ctypes, as python-ptrace
does), and prints nothing: no walk, no symbols, no output.  bench/breakdown.py
times it beside ``python -c pass`` and the whole ``liveunwind pid``: what is
left between it and eu-stack's whole run is all any Python backtracer has for
its imports, its walk, its names and its text.
"""

import ctypes
import os
import sys

PTRACE_GETREGS, PTRACE_DETACH, PTRACE_SEIZE, PTRACE_INTERRUPT = 12, 17, 0x4206, 0x4207
WALL = 0x40000000
#: user_regs_struct's size on x86_64 and aarch64 (27 and 34 words), rounded up.
REGISTERS = 34 * 8


def main() -> None:
    pid = int(sys.argv[1])
    libc = ctypes.CDLL(None, use_errno=True)
    ptrace = libc.ptrace
    ptrace.restype = ctypes.c_long
    ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    tids = [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
    registers = ctypes.create_string_buffer(REGISTERS)
    for tid in tids:
        ptrace(PTRACE_SEIZE, tid, None, None)
    for tid in tids:
        ptrace(PTRACE_INTERRUPT, tid, None, None)
    for tid in tids:
        os.waitpid(tid, WALL)
    for tid in tids:
        ptrace(PTRACE_GETREGS, tid, None, registers)
    for tid in tids:
        ptrace(PTRACE_DETACH, tid, None, None)


if __name__ == "__main__":
    main()
