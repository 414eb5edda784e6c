"""The address space of one sample: a thread's registers and the copy of its stack.

The kernel copied, at the instant of the sample, the thread's user
registers and ``dyn_size`` bytes of its stack from the stack pointer up
(``PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER``).  Reads inside that
copy are answered from it; every other read goes to the process the
sample belongs to (:class:`~liveunwind.targets.sample.process.SampledProcess`:
the files' unchanging bytes, else "not in the sample").  Mappings and files
are the process's: the module map built over the process holds for every
sample of it.
"""

from __future__ import annotations

import struct

from liveunwind.targets.base import AddressSpace, ThreadState

TYPE_CHECKING = False
if TYPE_CHECKING:
    from liveunwind.formats.elf import ElfImage
    from liveunwind.targets.base import Mapping
    from liveunwind.targets.files import RegularFile
    from liveunwind.targets.sample.process import SampledProcess

_WORD = struct.Struct("<Q")
#: The state a sampled thread is reported in: it was on a CPU.
RUNNING = "running"  # as /proc says it (procfs.state_word("R")): the profile counts it running


class SampleSpace(AddressSpace):
    """One thread at the instant of one sample: its registers, its stack copy, its process."""

    def __init__(
        self,
        process: SampledProcess,
        tid: int,
        name: str,
        registers: dict[int, int],
        stack: bytes | memoryview,
    ) -> None:
        """``registers`` by DWARF number; ``stack`` the copy from the registers' sp up."""
        self.arch = process.arch
        self.pid = process.pid
        self.process = process
        #: Reads made other than by ``read_word`` from the copy (see :meth:`other_reads`).
        self._other_reads = 0
        self.load(tid, name, registers, stack)

    def load(
        self, tid: int, name: str, registers: dict[int, int], stack: bytes | memoryview
    ) -> None:
        """Becomes the space of the next sample of the same process.

        A stepper built over this space (its reads bound to it) then walks
        that sample: one stepper per process, not one per sample.
        """
        self._thread = ThreadState(tid, name, registers, RUNNING)
        self._low = registers.get(self.arch.sp, 0)
        self._stack = stack
        self._high = self._low + len(stack)
        #: The copy as words, for the aligned reads that are nearly all of a walk's.
        self._words = memoryview(stack)[: len(stack) & ~7].cast("B").cast("Q")

    @property
    def stack_range(self) -> tuple[int, int]:
        """The addresses the stack copy holds: [sp, sp + dyn_size)."""
        return self._low, self._high

    def read(self, address: int, size: int) -> bytes:
        self._other_reads += 1
        at = address - self._low
        if at >= 0 and address + size <= self._high and size >= 0:
            return bytes(self._stack[at : at + size])
        return self.process.read(address, size)

    def read_word(self, address: int) -> int:
        at = address - self._low
        if not at & 7 and 0 <= at < len(self._words) << 3:
            return int(self._words[at >> 3])
        self._other_reads += 1
        if at >= 0 and address + 8 <= self._high:
            return int(_WORD.unpack_from(self._stack, at)[0])
        return int(_WORD.unpack(self.process.read(address, 8))[0])

    def stack_copy(self, address: int) -> tuple[int, bytes | bytearray] | None:
        """The sample's stack copy, if it holds ``address``: the stepper remembers walks and
        their suffixes that read aligned words of it only (UnwindCache.suffixes)."""
        if not self._low <= address < self._high:
            return None
        stack = self._stack
        return self._low, stack if isinstance(stack, bytes) else bytes(stack)

    def other_reads(self) -> int:
        """Reads of every kind but ``read_word``'s aligned answers from the copy, so far."""
        return self._other_reads

    def mappings(self) -> list[Mapping]:
        return self.process.mappings()

    def threads(self) -> list[ThreadState]:
        return [self._thread]

    def mapped_image(self, mapping: Mapping) -> ElfImage | None:
        return self.process.mapped_image(mapping)

    def open_mapped_file(self, mapping: Mapping) -> RegularFile | None:
        return self.process.open_mapped_file(mapping)
