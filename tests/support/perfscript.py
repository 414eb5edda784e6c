"""Each sample of a perf.data walked by liveunwind against ``perf script``'s walk of it.

Shared by tests/system/test_perf_data.py and bench/perfdata.py.  Compared by
address (perf prints a caller's return address minus one), with
``--no-inline``: a line per real frame, as liveunwind without ``--lines``.  Classified:

- equal;
- perf shorter: perf's walk is a beginning of ours, and ours reached the end
  of the stack (``complete``);
- perf left the program: the walks part where perf's frame is in no
  function (``[unknown]``) and ours is complete;
- unexplained: anything else.
"""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

from liveunwind.backtrace.options import BacktraceOptions
from liveunwind.cli.perf import replay
from liveunwind.targets.sample.perfdata import PerfDataFile

#: User addresses end below this (perf script lists kernel frames too).
KERNEL = 0xFFFF800000000000


def perf_script(path: Path) -> dict[tuple[int, int], list[tuple[int, str]]]:
    """(tid, time in ns) → the user frames perf script gives: (address, name)."""
    result = subprocess.run(
        ["perf", "script", "-i", str(path), "-F", "tid,time,ip,sym", "--ns", "--no-inline"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    stacks = {}
    for block in result.stdout.split("\n\n"):
        lines = [line for line in block.splitlines() if line.strip()]
        if not lines:
            continue
        tid, time = lines[0].split()[:2]
        seconds, nanoseconds = time.rstrip(":").split(".")
        frames: list[tuple[int, str]] = []
        for line in lines[1:]:
            address, _, name = line.strip().partition(" ")
            value = int(address, 16)
            if value < KERNEL:
                frames.append((value, name))
        stacks[(int(tid), int(seconds) * 10**9 + int(nanoseconds))] = frames
    return stacks


class Compared:
    """Each sample's walk against perf script's, classified."""

    def __init__(self, path: Path, threads: set[str]) -> None:
        """``threads``: the names of the threads compared strictly (the others: ``startup``)."""
        theirs = perf_script(path)
        self.kinds: Counter[str] = Counter()
        self.startup: Counter[str] = Counter()
        self.stacks: Counter[tuple[str, ...]] = Counter()
        self.unexplained: list[str] = []
        arguments = SimpleNamespace(pid=None, threads=None, sysroot=None, search_path="")
        with PerfDataFile(str(path)) as recording:
            _samples, unwound = replay(recording, arguments, BacktraceOptions())
            for each in unwound:
                sample, thread = each.sample, each.backtrace.threads[0]
                perf = theirs.pop((sample.tid, sample.time))
                # Perf names a caller by its return address minus one; a frame in
                # no file (JIT code) by its address.
                ours = [
                    (frame.pc if frame.module_offset is None else frame.module_offset) - (index > 0)
                    for index, frame in enumerate(thread.frames)
                ]
                addresses = [address for address, _name in perf]
                kind = self._kind(ours, addresses, perf, thread.complete)
                if each.name in threads:
                    self.kinds[kind] += 1
                    self.stacks[tuple(frame.function or "?" for frame in thread.frames)] += 1
                    if kind == "unexplained":
                        self.unexplained.append(
                            f"{sample.tid} ours {[hex(a) for a in ours]} "
                            f"{thread.stop_reason.value} perf {perf}"
                        )
                else:  # the main thread, and timeout: the loader's start-up among them
                    self.startup[kind] += 1
        self.missing = len(theirs)

    @staticmethod
    def _kind(
        ours: list[int], addresses: list[int], perf: list[tuple[int, str]], complete: bool
    ) -> str:
        if ours == addresses:
            return "equal"
        if ours[: len(addresses)] == addresses:
            return "perf shorter" if complete else "unexplained"
        common = next(
            (index for index, (a, b) in enumerate(zip(ours, addresses)) if a != b),
            min(len(ours), len(addresses)),
        )
        if complete and common < len(perf) and perf[common][1] == "[unknown]":
            return "perf left the program"
        return "unexplained"
