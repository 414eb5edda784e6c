"""A frozen copy of a live process: registers, the live part of every stack, and its JIT registries.

The process only has to stay stopped while this copy is taken and runs
again while liveunwind does the slow part, the unwinding.  The copy holds
what the unwind needs from writable memory: the stacks, copied with one
batch of reads, and — in a process that can have JIT code — the run-time
registries (libunwind's dynamic list, the GDB JIT interface) and, with
``--python``, the interpreter's thread states, frames and code objects,
which the session reads through :meth:`Snapshot.read_frozen` (or
``read_frozen_many``, a whole level of pointers in one system call, or
``read_planned``, one made ready before the stop) while the process is
stopped; afterwards ``read_frozen`` answers from the copy only, so a JIT
that changes its registrations, or an interpreter that moves on to its next
line, as soon as it runs again cannot change what is shown.
Everything else is read from the (running) process: code, read-only data
and unwind tables, which do not change while it runs.  The
one blind spot is other writable memory, which the stepper reads only for
unusual frames (e.g. a stack switched by ``sigaltstack``); ``--no-snapshot``
keeps the process stopped instead.
"""

from __future__ import annotations

import bisect
import struct

from liveunwind.errors import MemoryReadError
from liveunwind.targets.base import AddressSpace
from liveunwind.targets.live import syscalls

TYPE_CHECKING = False
if TYPE_CHECKING:
    import mmap
    from collections.abc import Sequence

    from liveunwind.targets.base import Mapping, ThreadState
    from liveunwind.targets.files import RegularFile
    from liveunwind.targets.live.ptrace import PtraceProcess

    #: A copied piece of memory: bytes, or the buffer a stack was copied into.
    Block = bytes | bytearray | mmap.mmap

#: Default cap on the bytes copied per thread stack.
DEFAULT_STACK_CAP = 16 << 20
#: Default cap on the bytes copied for all stacks together: a process with
#: many threads parked deep in big stacks would otherwise cost gigabytes.
DEFAULT_TOTAL_CAP = 256 << 20
_unpack_word = struct.Struct("<Q").unpack_from


class Snapshot(AddressSpace):
    """AddressSpace of a process as it was at one instant."""

    pid: int

    def __init__(
        self,
        live: PtraceProcess,
        mappings: list[Mapping],
        stacks: list[tuple[int, Block]],
        problems: list[str] | None = None,
    ) -> None:
        self.pid = live.pid
        self.arch = live.arch
        self._live = live
        #: The live process's threads, asked for when first needed (decoded then: see
        #: PtraceProcess.threads), most often once the process runs again.
        self._threads: list[ThreadState] | None = None
        self._mappings = mappings
        #: The stacks, copied at once; then what ``read_frozen`` read while stopped.
        self._copies = _Copies(stacks)
        self._frozen = _Copies([])
        #: What the copy left out (stacks cut by the caps), one sentence each.
        self.problems: list[str] = problems if problems is not None else []
        #: Reads made other than by ``read_word`` (see :meth:`other_reads`).
        self._other_reads = 0

    @classmethod
    def capture(
        cls,
        live: PtraceProcess,
        *,
        stack_cap: int = DEFAULT_STACK_CAP,
        total_cap: int = DEFAULT_TOTAL_CAP,
    ) -> Snapshot:
        """Copies registers, mappings and every thread's live stack with one batch of reads.

        Each thread's copy starts just below its stack pointer (the red
        zone) and holds at most ``stack_cap`` bytes; when the copies would
        add up to more than ``total_cap``, every thread gets an equal share
        of it (a thread that needs less leaves the rest to the others).
        What was cut is said in :attr:`problems`; beyond its copy a stack is
        read from the running process.
        """
        mappings = live.mappings()
        starts = [mapping.start for mapping in mappings]
        wanted = []
        for tid, sp in live.stack_pointers():  # a thread that did not stop has none
            index = bisect.bisect_right(starts, sp) - 1
            if index < 0 or sp >= mappings[index].end:
                continue
            mapping = mappings[index]
            start = max(mapping.start, sp - live.arch.red_zone)
            wanted.append((tid, start, mapping.end - start))
        sizes = _share(total_cap, [min(live_size, stack_cap) for _, _, live_size in wanted])
        problems = [
            _cut(tid, size, live_size, stack_cap, total_cap)
            for (tid, _, live_size), size in zip(wanted, sizes)
            if size < live_size
        ]
        ranges = _merge([(start, size) for (_, start, _), size in zip(wanted, sizes) if size > 0])
        stacks = _copy(live.pid, ranges)
        # Where each copy ends, by its start (the merged ranges start apart): looked up
        # in a dict, not searched for per range — 200 threads took 2.4 ms of the freeze so.
        ends = {start: start + len(data) for start, data in stacks}
        short = [(start, size) for start, size in ranges if start + size > ends.get(start, start)]
        if short:
            # The kernel stops a copy at a page it cannot read, and what it copied is kept:
            # often that page is where the stack ends.  Debian sid's glibc puts a thread's
            # guard pages inside its stack's mapping (MADV_GUARD_INSTALL), and mappings of
            # neighbouring stacks merge: one range then runs from the lowest stack pointer
            # into the guard of the next stack up, and each thread whose stack lies past
            # where it stopped is copied again from its own stack pointer.  What lies past
            # a thread's copy is read from the running process if a walk needs it (and a
            # walk that cannot read it says where).
            retry = [
                (at, size)
                for start, whole in short
                for (_, at, _), size in zip(wanted, sizes)
                if start < at < start + whole and at + size > ends.get(start, start)
            ]
            stacks += _copy(live.pid, retry)
        if not mappings or short:
            # A process killed while held has no maps and no memory left: say so, rather
            # than walk registers through nothing.  (Rare: costs a waitpid per thread.)
            live.check_still_held()
        return cls(live, mappings, stacks, problems)

    def threads(self) -> list[ThreadState]:
        if self._threads is None:
            self._threads = self._live.threads()
        return self._threads

    def entry_point(self) -> int | None:
        return self._live.entry_point()

    def mappings(self) -> list[Mapping]:
        return self._mappings

    def read(self, address: int, size: int) -> bytes:
        """From the copy where it holds ``address``, else from the process as it is now."""
        self._other_reads += 1
        data = self._copied(address, size)
        return self._live.read(address, size) if data is None else data

    def read_frozen(self, address: int, size: int) -> bytes:
        """Memory as it was while the process was stopped, never as it is now.

        While the process is still stopped this answers from the stack
        copies, else reads the process and keeps what it read; once the
        process runs again it answers from the copies only.  The run-time
        registries and Python's frames are read through it.
        """
        self._other_reads += 1
        if self._live.stopped:
            data = self._from_stacks(address, size)
            if data is None:
                data = self._live.read(address, size)
                self._frozen.add(address, data)
            return data
        copied = self._copied(address, size)
        if copied is None:
            raise MemoryReadError(address, size, "not copied while the process was stopped")
        return copied

    def read_frozen_many(self, ranges: list[tuple[int, int]]) -> list[bytes | None]:
        """``read_frozen`` of each range; while stopped, all that the stacks lack in one call.

        A range the process cannot give in full (or larger than
        :data:`MAX_FROZEN_RANGE`) is None.
        """
        self._other_reads += 1
        if not self._live.stopped:
            return super().read_frozen_many(ranges)
        results: list[bytes | None] = [None] * len(ranges)
        missing: list[int] = []
        # The process is stopped: every loop turn here is frozen time, so the test
        # whether a range starts in a stack copy is made inline.
        starts, ends = self._copies.bounds()
        bisect_right, limit = bisect.bisect_right, MAX_FROZEN_RANGE
        for index, (address, size) in enumerate(ranges):
            if address < 0 or not 0 <= size <= limit or address + size > _SPACE_END:
                continue
            at = bisect_right(starts, address) - 1
            if at >= 0 and address < ends[at]:
                data = self._from_stacks(address, size)
                if data is not None:
                    results[index] = data
                    continue
            missing.append(index)
        try:
            fetched = syscalls.read_remote(self.pid, [ranges[index] for index in missing])
        except OSError:  # process_vm_readv refused: one read at a time, as read_frozen does
            return super().read_frozen_many(ranges)
        add = self._frozen.add
        for index, data in zip(missing, fetched):
            if data is not None:
                results[index] = data
                add(ranges[index][0], data)
        return results

    def read_planned(self, planned: syscalls.PlannedRead) -> Sequence[bytes | bytearray | None]:
        """``read_frozen_many(planned.ranges)``, with the system call made ready before the stop.

        While stopped the ranges go to the kernel as they are, those the
        stack copies hold too (the process is stopped: the bytes are the
        same), and what was read is kept as ``read_frozen`` keeps it.
        """
        self._other_reads += 1
        if not self._live.stopped:
            return self.read_frozen_many(planned.ranges)
        try:
            fetched = planned.run(self.pid)
        except OSError:  # process_vm_readv refused: one read at a time, as read_frozen does
            return self.read_frozen_many(planned.ranges)
        add = self._frozen.add
        for (start, _), data in zip(planned.ranges, fetched):
            if data is not None:
                add(start, data)
        return fetched

    def read_word(self, address: int) -> int:
        """The little-endian word at ``address``: the stepper's fast path for saved registers.

        A word no copy holds is read with :meth:`read`, which counts in :meth:`other_reads`.
        """
        value = self._copies.word(address)
        return _unpack_word(self.read(address, 8))[0] if value is None else value

    def stack_copy(self, address: int) -> tuple[int, bytes | bytearray] | None:
        """The stack copy holding ``address`` (one copied into a mapping of its own, 1 MiB or
        more, is left out: the stepper compares words of the copies it returns)."""
        block = self._copies.block_at(address)
        if block is None:
            return None
        start, data = block
        if not isinstance(data, (bytes, bytearray)) or address >= start + len(data):
            return None
        return start, data

    def other_reads(self) -> int:
        """Reads of every kind but ``read_word``'s answers from the copies, so far."""
        return self._other_reads

    def _from_stacks(self, address: int, size: int) -> bytes | None:
        """The bytes at ``address`` if a stack copy holds all of them."""
        try:
            return self._copies.get(address, size)
        except MemoryReadError:  # runs past the copy's end
            return None

    def _copied(self, address: int, size: int) -> bytes | None:
        """From the stack copies, else from what ``read_frozen`` kept; None if neither has it.

        A read that starts in a copy and runs past its end raises
        MemoryReadError (it would mix two instants) unless the other holds it whole.
        """
        try:
            data = self._copies.get(address, size)
        except MemoryReadError:
            data = self._frozen.get(address, size)
            if data is None:
                raise
            return data
        if data is None and self._frozen:
            data = self._frozen.get(address, size)
        return data

    def open_mapped_file(self, mapping: Mapping) -> RegularFile | None:
        return self._live.open_mapped_file(mapping)


class _Copies:
    """Pieces of memory copied while the process was stopped, found by address.

    Pieces may overlap or touch (a registry reads some bytes more than once;
    a registration may sit on a stack); they are merged into disjoint blocks
    when first looked up after being added, which is safe because all of
    them were copied at the same instant.
    """

    __slots__ = ("_blocks", "_ends", "_last", "_pieces", "_starts")

    def __init__(self, pieces: list[tuple[int, Block]]) -> None:
        self._pieces = pieces
        self._blocks: list[tuple[int, Block]] = []
        self._starts: list[int] = []
        self._ends: list[int] = []
        #: The block the last word came from: the stepper reads one stack at a time.
        self._last: tuple[int, Block] = (0, b"")

    def add(self, start: int, data: Block) -> None:
        if data:
            self._pieces.append((start, data))

    def __bool__(self) -> bool:
        """Whether anything was copied."""
        return bool(self._pieces or self._blocks)

    def get(self, address: int, size: int) -> bytes | None:
        """The copied bytes, or None where nothing was copied at ``address``.

        A read that starts in a copy and runs past its end raises
        MemoryReadError: it would otherwise mix two instants.
        """
        block = self._block_at(address)
        if block is None:
            return None
        start, data = block
        offset = address - start
        if offset + size <= len(data):
            piece = data[offset : offset + size]
            return piece if type(piece) is bytes else bytes(piece)
        if offset < len(data):
            raise MemoryReadError(address, size, "beyond the copied part")
        return None

    def bounds(self) -> tuple[list[int], list[int]]:
        """Where the blocks start and end, sorted: for a caller that tests many addresses."""
        if self._pieces:
            self._merge_pieces()
        return self._starts, self._ends

    def word(self, address: int) -> int | None:
        """The word at ``address`` when a block holds all of it, else None."""
        start, data = self._last
        offset = address - start
        if offset < 0 or offset + 8 > len(data):
            block = self._block_at(address)
            if block is None:
                return None
            start, data = block
            offset = address - start
            if offset + 8 > len(data):
                return None
            self._last = block
        return _unpack_word(data, offset)[0]

    def block_at(self, address: int) -> tuple[int, Block] | None:
        """The block starting at or below ``address`` (which may end before it)."""
        return self._block_at(address)

    def _block_at(self, address: int) -> tuple[int, Block] | None:
        """The block starting at or below ``address`` (which may end before it)."""
        if self._pieces:
            self._merge_pieces()
        index = bisect.bisect_right(self._starts, address) - 1
        return self._blocks[index] if index >= 0 else None

    def _merge_pieces(self) -> None:
        pieces = sorted([*self._blocks, *self._pieces], key=lambda piece: piece[0])
        runs: list[list[tuple[int, Block]]] = []
        end = 0
        for start, data in pieces:
            if runs and start <= end:
                runs[-1].append((start, data))
                end = max(end, start + len(data))
            else:
                runs.append([(start, data)])
                end = start + len(data)
        self._blocks = [_join(run) for run in runs]
        self._starts = [start for start, _ in self._blocks]
        self._ends = [start + len(data) for start, data in self._blocks]
        self._pieces = []


#: Largest range ``read_frozen_many`` fetches (Python's frame-stack chunks are far smaller).
MAX_FROZEN_RANGE = 16 << 20


#: One past the last address.
_SPACE_END = 1 << 64


def _join(run: list[tuple[int, Block]]) -> tuple[int, Block]:
    """One block from pieces sorted by start, each overlapping or touching the ones before."""
    if len(run) == 1:
        return run[0]
    first = run[0][0]
    block = bytearray(max(start + len(data) for start, data in run) - first)
    for start, data in run:
        block[start - first : start - first + len(data)] = data
    return first, bytes(block)


def _copy(pid: int, ranges: list[tuple[int, int]]) -> list[tuple[int, Block]]:
    """What process_vm_readv gives of each range, from its start (partly, or not at all)."""
    try:
        copies = syscalls.copy_remote(pid, ranges)
    except OSError:  # ESRCH: the process is gone, which the caller's check then says
        return []
    return [(start, data) for (start, _), data in zip(ranges, copies) if data]


def _merge(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Merges overlapping (start, size) ranges so no byte is copied twice."""
    merged: list[list[int]] = []
    for start, size in sorted(ranges):
        end = start + size
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(start, end - start) for start, end in merged]


def _share(budget: int, sizes: list[int]) -> list[int]:
    """Sizes cut so they add up to at most ``budget``: equal shares, unused parts passed on."""
    if sum(sizes) <= budget:
        return sizes
    shares = [0] * len(sizes)
    left, count = max(budget, 0), len(sizes)
    for index in sorted(range(len(sizes)), key=sizes.__getitem__):
        shares[index] = min(sizes[index], left // count)
        left -= shares[index]
        count -= 1
    return shares


def _cut(tid: int, copied: int, live_size: int, stack_cap: int, total_cap: int) -> str:
    """Says what the copy of one thread's stack left out, and which cap cut it."""
    cap = (
        f"the cap of {_size(stack_cap)} per thread"
        if copied == stack_cap
        else f"the cap of {_size(total_cap)} for all threads together"
    )
    return (
        f"thread {tid}: copied {_size(copied)} of its {_size(live_size)} live stack "
        f"({cap}); the rest was read from the process after it ran again"
    )


def _size(count: int) -> str:
    if count >= 1 << 20:
        return f"{count / (1 << 20):.1f} MiB"
    return f"{count >> 10} KiB" if count % 1024 == 0 else f"{count / 1024:.1f} KiB"
