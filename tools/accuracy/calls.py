"""Which return addresses follow a call instruction: a judge of every side that needs no oracle.

A caller's frame holds the address after the call that made the callee; a
pc reported as a return address whose bytes before it end no call
instruction cannot be one (a stale word read as one, or a frame pointer
followed into data). Where the three tools disagree, or agree on a guess,
this tells the frames that are certainly wrong. It is checked on the
stopped process's own code, with the call decoder of liveunwind's
architecture (``Arch.call_sites``: every form of call that can end at an
address), the one the stepper checks its guesses with.

Not a return address, so not checked: frame 0, the signal trampoline's
frame and the frame a signal interrupted (its exact pc).
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from liveunwind.arch import host_arch

MOST_PCS = 50_000
"""Return addresses checked in one process at one instant at most (the rest: unknown)."""


def follow_calls(pid: int, pcs: Iterable[int]) -> dict[int, bool]:
    """pc → whether a call instruction ends right before it in stopped process ``pid``.

    A pc whose bytes cannot be read (not mapped, not readable) follows no call.
    """
    arch = host_arch()
    found: dict[int, bool] = {}
    with open(f"/proc/{pid}/mem", "rb", buffering=0) as memory:
        for pc in pcs:
            if pc in found or len(found) >= MOST_PCS:
                continue
            try:
                code = os.pread(memory.fileno(), arch.longest_call, pc - arch.longest_call)
            except (OSError, OverflowError, ValueError):
                found[pc] = False
                continue
            found[pc] = any(True for _ in arch.call_sites(pc, code))
    return found


def return_address_indexes(kinds: list[str | None]) -> list[int]:
    """The indexes of the frames whose pc is a return address, from each frame's kind.

    ``kinds`` says, per frame, ``"signal"`` for the signal trampoline's frame
    and anything else for a plain one: frame 0, a trampoline and the frame
    after a trampoline hold exact pcs.
    """
    return [
        index
        for index in range(1, len(kinds))
        if kinds[index] != "signal" and kinds[index - 1] != "signal"
    ]
