"""The AddressSpace protocol and the plain records targets hand out.

An AddressSpace is everything the rest of liveunwind may know about a target:
its architecture, its memory, its mappings and its threads' registers.  Live
targets are context managers: the process is stopped inside ``with`` and
exactly as it was found after it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import BinaryIO, Protocol

from liveunwind.arch import Arch


@dataclass(frozen=True, slots=True)
class Mapping:
    """One line of ``/proc/PID/maps`` (or its equivalent in a core)."""

    start: int
    end: int
    perms: str
    offset: int
    inode: int
    path: str
    device: str = "00:00"

    @property
    def readable(self) -> bool:
        return self.perms[:1] == "r"

    @property
    def writable(self) -> bool:
        return self.perms[1:2] == "w"

    @property
    def executable(self) -> bool:
        return self.perms[2:3] == "x"

    @property
    def is_file(self) -> bool:
        """Backed by a file (not anonymous, not ``[stack]``, ``[vdso]``…)."""
        return self.inode != 0 and self.path.startswith("/")

    def __contains__(self, address: int) -> bool:
        return self.start <= address < self.end


@dataclass(slots=True)
class ThreadState:
    """A thread as seen when the target was stopped."""

    tid: int
    name: str
    registers: dict[int, int]
    #: Scheduler state letter and word from /proc (``S (sleeping)``), if known.
    state: str = ""
    #: Signal pending delivery when we stopped it, re-injected on detach.
    pending_signal: int = 0
    extra: dict[str, object] = field(default_factory=dict)


class AddressSpace(Protocol):
    """What the module map, the stepper and the report may ask of a target."""

    arch: Arch
    #: Process id, or None when the target is not a process (nor a core of one).
    pid: int | None

    def read(self, address: int, size: int) -> bytes:
        """``size`` bytes at ``address``; raises MemoryReadError naming the address."""
        ...

    def mappings(self) -> list[Mapping]:
        """Memory mappings sorted by start address."""
        ...

    def threads(self) -> list[ThreadState]:
        """Every thread with the registers it had when the target was stopped."""
        ...

    def open_mapped_file(self, mapping: Mapping) -> BinaryIO | None:
        """The file behind a file-backed mapping, as the target sees it, or None."""
        ...
