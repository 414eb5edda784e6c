"""The AddressSpace protocol and the plain records targets hand out.

An AddressSpace is everything the rest of liveunwind may know about a target:
its architecture, its memory, its mappings and its threads' registers.  Live
targets are context managers: the process is stopped inside ``with`` and
exactly as it was found after it.
"""

from __future__ import annotations

from collections import namedtuple

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import BinaryIO, Protocol

    from liveunwind.arch import Arch


class Mapping(
    namedtuple("Mapping", "start end perms offset inode path device", defaults=("00:00",))
):
    """One line of ``/proc/PID/maps`` (or its equivalent in a core)."""

    __slots__ = ()
    start: int
    end: int
    perms: str
    offset: int
    inode: int
    path: str
    device: str

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


class ThreadState:
    """A thread as seen when the target was stopped."""

    __slots__ = ("name", "pending_signal", "registers", "state", "tid")

    def __init__(
        self,
        tid: int,
        name: str,
        registers: dict[int, int],
        state: str = "",
        pending_signal: int = 0,
    ) -> None:
        self.tid = tid
        self.name = name
        #: DWARF register number → value.
        self.registers = registers
        #: Scheduler state letter and word from /proc (``S (sleeping)``), if known.
        self.state = state
        #: Signal pending delivery when we stopped it, re-injected on detach.
        self.pending_signal = pending_signal

    def __repr__(self) -> str:
        return f"<ThreadState {self.tid} {self.name!r} {self.state}>"


if TYPE_CHECKING:

    class AddressSpace(Protocol):
        """What the module map, the stepper and the report may ask of a target.

        A protocol for type checkers only: targets do not inherit from it, and
        defining it at run time would cost the ``typing`` import at start-up.
        Two optional methods, looked up with ``getattr``, save work where a
        target can: ``read_word(address) -> int`` (the snapshot reads saved
        registers straight from its stack copy) and ``mapped_image(mapping)
        -> ElfImage | None`` (a core hands over the file it already opened and
        checked, so no module file is opened twice).
        """

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
