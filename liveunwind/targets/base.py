"""The AddressSpace protocol and the plain records targets hand out.

An AddressSpace is everything the rest of liveunwind may know about a target:
its architecture, its memory, its mappings and its threads' registers.  Live
targets are context managers: the process is stopped inside ``with`` and
exactly as it was found after it.
"""

from __future__ import annotations

import struct

from liveunwind.errors import MemoryReadError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections import namedtuple

    from liveunwind.arch import Arch
    from liveunwind.formats.elf import ElfImage
    from liveunwind.targets.files import RegularFile
else:
    # the standard library's, cheaper to import (liveunwind/classes.py says why)
    from liveunwind.classes import namedtuple


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

    def __contains__(self, address: object) -> bool:
        """``address in mapping``: the address lies in [start, end) (not a field test)."""
        return isinstance(address, int) and self.start <= address < self.end


class ThreadState:
    """A thread as seen when the target was stopped."""

    __slots__ = ("name", "pending_signal", "registers", "state", "stopped", "tid")

    def __init__(
        self,
        tid: int,
        name: str,
        registers: dict[int, int],
        state: str = "",
        pending_signal: int = 0,
        stopped: bool = True,
    ) -> None:
        self.tid = tid
        self.name = name
        #: DWARF register number → value.
        self.registers = registers
        #: Scheduler state letter and word from /proc (``S (sleeping)``), if known.
        self.state = state
        #: Signal pending delivery when we stopped it, re-injected on detach.
        self.pending_signal = pending_signal
        #: False for a live thread that did not stop in time: it has no
        #: registers, and ``state`` says where the kernel held it.
        self.stopped = stopped

    def __repr__(self) -> str:
        return f"<ThreadState {self.tid} {self.name!r} {self.state}>"


class CoreImage:
    """An image a Mach-O core names: where it was loaded, which (UUID), and the matching file."""

    __slots__ = ("load_address", "name", "path", "segments", "uuid")

    def __init__(
        self,
        name: str,
        uuid: bytes | None,
        load_address: int,
        segments: list[tuple[str, int, int]] | None = None,
        path: str = "",
    ) -> None:
        #: The path the process knew the image by ("" when only its header was found).
        self.name = name
        self.uuid = uuid
        #: Runtime address of the image's Mach-O header.
        self.load_address = load_address
        #: Runtime (segment name, start, end) of the image's segments, when known.
        self.segments = [] if segments is None else segments
        #: A file with this image's UUID, found on disk or along the search path; "" if none.
        self.path = path


_WORD = struct.Struct("<Q")


class AddressSpace:
    """What the module map, the stepper and the report may ask of a target.

    Every target (a live process, its snapshot, an ELF or Mach-O core)
    derives from this class.  The four methods above the line are what a
    target must provide; the capabilities below it are optional, each with a
    default that is right for a target without it, so callers use them
    directly instead of probing with ``getattr``:

    - ``read_word``: one little-endian word; a snapshot reads saved registers
      straight from its stack copy.
    - ``read_frozen``: memory as it was while the process was stopped (a
      snapshot copies the run-time unwind registries then); elsewhere ``read``.
    - ``read_frozen_many``: several ranges of that memory at once, for
      walks that read a whole level of pointers (Python's frames) together;
      a snapshot fetches them with one system call while the process is stopped.
    - ``mapped_image``: a core hands over the ELF file it already opened and
      checked for a mapping, so no module file is opened twice.
    - ``images``: a Mach-O core names its images and their segments itself;
      None means the module map groups mappings by file.
    - ``entry_point``: the program's entry point from its auxiliary vector,
      where the target has one.
    - ``stack_copy`` and ``other_reads``: a snapshot's copy of the stack
      holding an address, and a count of the reads other than ``read_word``
      it answered: the stepper remembers a walk that read words of one copy
      only, and walks it again only when one of those words changed.

    A plain class, not a ``typing.Protocol`` or an ABC: importing ``typing``
    or ``abc`` costs start-up time on the hot path.
    """

    #: The target's architecture.
    arch: Arch
    #: Process id, or None when the target is not a process (nor a core of one).
    pid: int | None = None

    def read(self, address: int, size: int) -> bytes:
        """``size`` bytes at ``address``; raises MemoryReadError naming the address."""
        raise NotImplementedError

    def mappings(self) -> list[Mapping]:
        """Memory mappings sorted by start address."""
        raise NotImplementedError

    def threads(self) -> list[ThreadState]:
        """Every thread with the registers it had when the target was stopped."""
        raise NotImplementedError

    def open_mapped_file(self, mapping: Mapping) -> RegularFile | None:
        """The file behind a file-backed mapping, as the target sees it, or None."""
        raise NotImplementedError

    # -- optional capabilities, with their defaults ------------------------------

    def read_word(self, address: int) -> int:
        """The little-endian 64-bit word at ``address``."""
        return int(_WORD.unpack(self.read(address, 8))[0])

    def read_many(self, ranges: list[tuple[int, int]]) -> list[bytes | None]:
        """``read`` of each ``(address, size)`` range: its bytes, or None if unreadable.

        A live process reads them all in one call (``PtraceProcess``).
        """
        results: list[bytes | None] = []
        for address, size in ranges:
            try:
                results.append(self.read(address, size))
            except MemoryReadError:
                results.append(None)
        return results

    def read_frozen(self, address: int, size: int) -> bytes:
        """Memory as it was while the target was stopped; the same as ``read`` by default."""
        return self.read(address, size)

    def read_frozen_many(self, ranges: list[tuple[int, int]]) -> list[bytes | None]:
        """``read_frozen`` of each ``(address, size)`` range: its bytes, or None if unreadable."""
        results: list[bytes | None] = []
        for address, size in ranges:
            try:
                results.append(self.read_frozen(address, size))
            except MemoryReadError:
                results.append(None)
        return results

    def mapped_image(self, mapping: Mapping) -> ElfImage | None:
        """The ELF image the target already opened for ``mapping``, if it did."""
        return None

    def images(self) -> list[CoreImage] | None:
        """The images a Mach-O core lists (path, load address, segments), else None."""
        return None

    def entry_point(self) -> int | None:
        """The program's entry point (``AT_ENTRY``) where the target says, else None.

        The stepper takes the function holding it (``_start``) for the outermost frame.
        """
        return None

    def stack_copy(self, address: int) -> tuple[int, bytes | bytearray] | None:
        """The start and bytes of the stack copy holding ``address``; None: none holds it."""
        return None

    def other_reads(self) -> int | None:
        """How many reads other than ``read_word`` were made so far (two counts around a walk
        tell whether it read anything but words); None where the target keeps no count,
        and then no walk of it is remembered."""
        return None
