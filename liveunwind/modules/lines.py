"""Source lines and inlined calls of a module's pcs: what ``--lines`` adds to each frame.

``locate(module, pc, exact)`` answers, for one physical frame, the logical
frames at its pc, innermost first: for each the function, source file and
line.  The last is the function the frame physically runs in; the ones
before it are calls inlined into it.  A physical frame's own ``file`` and
``line`` are those of the last entry, and ``inlined`` the entries before it.
Caller frames look up ``pc - 1`` (their pc is a return address, and the call
may be the last instruction of an inlined body), as gdb does; frame 0 and a
frame interrupted by a signal (``exact``) look up the pc itself.

The DWARF comes from the module's own image when it kept its debug
sections, else from its separate debug file (build-id, debuglink), else —
when ``DEBUGINFOD_URLS`` is set — from a debuginfod server by build-id.
Everything is read the first time a pc lands in the module and kept on a
:class:`ModuleLines` that lives as long as the module does; nothing here is
imported by a backtrace without ``--lines``, unless a module's functions are
named from its DWARF (no file of it has a ``.symtab``).
"""

from __future__ import annotations

import _thread
import mmap
import os
import struct

from liveunwind.errors import FormatError
from liveunwind.formats.dwarf.info import (
    DebugInfo,
    DW_TAG_inlined_subroutine,
    Sections,
)
from liveunwind.formats.dwarf.line import LineTable, parse_header
from liveunwind.frames import SourceLocation
from liveunwind.modules.debuginfo import (
    ELFCOMPRESS_ZLIB,
    MAX_DECOMPRESSED_SECTION,
    SHF_COMPRESSED,
    has_dwarf,
    section_data,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from types import ModuleType
    from typing import Protocol

    from liveunwind.formats.dwarf.forms import Buffer
    from liveunwind.formats.dwarf.info import Unit
    from liveunwind.formats.elf import ElfImage
    from liveunwind.modules.debuginfo import DebugFile

    class LocatingModule(Protocol):
        """What :func:`locate` asks of a module (``modules.module.Module`` has it all)."""

        path: str
        problems: list[str]

        @property
        def load_bias(self) -> int: ...
        @property
        def lines(self) -> ModuleLines | None: ...

    class LineModule(LocatingModule, Protocol):
        """What finding a module's DWARF needs (``modules.modulemap.ElfModule`` has it all)."""

        @property
        def image(self) -> ElfImage | None: ...
        @property
        def debug_file(self) -> DebugFile | None: ...
        @property
        def build_id(self) -> bytes | None: ...


#: The DWARF sections a lookup reads, by their field in :class:`Sections`.
DWARF_SECTIONS = {
    "info": ".debug_info",
    "abbrev": ".debug_abbrev",
    "aranges": ".debug_aranges",
    "line": ".debug_line",
    "str": ".debug_str",
    "line_str": ".debug_line_str",
    "str_offsets": ".debug_str_offsets",
    "addr": ".debug_addr",
    "ranges": ".debug_ranges",
    "rnglists": ".debug_rnglists",
}
#: Answers kept per module; a long session's cache is emptied when it fills.
_MAX_CACHED_ANSWERS = 1 << 14
_CHDR64 = struct.Struct("IIQQ")
#: Compressed bytes given to zlib at a time: about 256 KiB comes out of DWARF, a size
#: malloc serves again from memory already touched (1 MiB pieces faulted 1,600 more pages).
_INFLATE_PIECE = 1 << 16
#: The interpreter's switch interval while read-ahead threads run (see _switch_sooner).
_READ_AHEAD_SWITCH = 0.0005


class ModuleLines:
    """The line tables and function scopes of one ELF image with DWARF, read lazily."""

    def __init__(self, image: ElfImage, sections: Sections | None = None) -> None:
        """``sections`` are the image's DWARF sections if the caller has read them already."""
        self.image = image
        self._info: DebugInfo | None = None if sections is None else DebugInfo(sections)
        self._broken: FormatError | None = None
        #: Compressed sections inflated only as far as lookups reach, by field.
        self._growing: dict[str, GrowingSection] = {}
        self._tables: dict[int, LineTable | None] = {}
        #: Addresses read-ahead announced, by the unit .debug_aranges gives them:
        #: a unit's line program then runs once, as far as all of them need.
        self._wanted: dict[int, list[int]] = {}
        self._answers: dict[int, list[SourceLocation]] = {}

    @property
    def info(self) -> DebugInfo:
        """The image's DWARF units; sections that cannot be read fail every lookup, read once."""
        return self._open(ahead=False)

    def _open(self, ahead: bool) -> DebugInfo:
        if self._info is None:
            if self._broken is not None:
                raise self._broken
            try:
                sections, self._growing = read_sections(self.image, ahead)
                info = self._growing.get("info")
                abbrev = self._growing.get("abbrev")
                self._info = DebugInfo(
                    sections,
                    None if info is None else info.ensure,
                    None if abbrev is None else abbrev.ensure,
                )
            except FormatError as error:
                self._broken = error
                raise
        return self._info

    def read_ahead(self, addresses: Iterable[int], threads: bool = True) -> list[int]:
        """Starts reading the DWARF of lookups to come at link-time ``addresses``.

        With ``threads``, a compressed ``.debug_info`` inflates on a thread
        from now on, as far as the last unit ``.debug_aranges`` gives for the
        addresses — the bulk of a first lookup in a big library (Debian's
        libc: 4.1 of its 5.8 MiB for testprogs/lines, 12-18 ms with ISA-L),
        done while frames are named and the first units decoded.  Returns the
        addresses in the order their units lie in the section: looked up in
        that order, each waits only for its own unit.  With threads or
        without, each unit's line program is then run once, as far as all of
        its addresses need.  Errors wait for the lookups, which report them.
        """
        order = sorted(set(addresses))
        try:
            info = self._open(ahead=threads)
        except FormatError:
            return order
        growing = self._growing.get("info") if threads else None
        placed: list[tuple[int, int]] = []
        goal = 0
        try:
            for address in order:
                listed = info.listed_unit(address)
                if listed is None:
                    goal = -1  # found by the units' own ranges: those are read whole
                    placed.append((1 << 64, address))
                    continue
                placed.append((listed[0], address))
                self._wanted.setdefault(listed[0], []).append(address)
                if goal >= 0:
                    goal = -1 if listed[1] < 0 else max(goal, listed[1])
        except FormatError:
            goal = -1
        if growing is not None:
            growing.read_ahead(goal)
        placed.sort()
        return [address for _unit, address in placed]

    def locate(self, address: int) -> list[SourceLocation]:
        """The logical frames at link-time ``address``, innermost first ([] if unknown)."""
        answer = self._answers.get(address)
        if answer is None:
            answer = self._locate(address)
            if len(self._answers) >= _MAX_CACHED_ANSWERS:
                self._answers.clear()
            self._answers[address] = answer
        return answer

    def _locate(self, address: int) -> list[SourceLocation]:
        info = self.info
        unit = info.unit_for_pc(address)
        if unit is None:
            return []
        table = self.line_table(unit)
        if table is not None:
            table.run_for(self._wanted.pop(unit.offset, ()))
        found = table.lookup(address) if table is not None else None
        file, line = found if found is not None else (None, None)
        frames = []
        for die in reversed(info.scopes(unit, address)):
            name, linkage = info.function_names(die)
            frames.append(SourceLocation(_display_name(name, linkage), file, line))
            if die.tag == DW_TAG_inlined_subroutine:
                call_file, line = info.call_site(die)
                file = None
                if call_file is not None and table is not None:
                    file = table.file_name(call_file)
        if not frames and found is not None:
            frames.append(SourceLocation(None, file, line))
        return frames

    def line_table(self, unit: Unit) -> LineTable | None:
        """The line table of ``unit`` (its ``DW_AT_stmt_list``), decoded once."""
        if unit.offset in self._tables:
            return self._tables[unit.offset]
        table = None
        sections = self.info.sections
        if unit.stmt_list is not None and sections.line is not None:
            growing = self._growing.get("line")
            if growing is not None:
                growing.ensure_unit(unit.stmt_list, sections.byte_order)
            header = parse_header(
                sections.line,
                unit.stmt_list,
                byte_order=sections.byte_order,
                address_size=unit.format.address_size,
                comp_dir=unit.comp_dir,
                debug_str=sections.str,
                debug_line_str=sections.line_str,
            )
            table = LineTable(sections.line, header)
        self._tables[unit.offset] = table
        return table


def _display_name(name: str | None, linkage: str | None) -> str | None:
    """A function's name as liveunwind prints symbols: demangled linkage name, else DW_AT_name."""
    if linkage:
        from liveunwind.modules.symbols import demangle

        return demangle(linkage)
    return name


# -- which image has the DWARF ---------------------------------------------------


def read_lines(module: LineModule) -> ModuleLines | None:
    """The line information of ``module``, or None where no DWARF can be found for it.

    Called once per module (``ElfModule.lines`` keeps the answer, so the
    module owns this cache and it goes with the module).
    """
    image = dwarf_image(module)
    return None if image is None else ModuleLines(image)


def dwarf_image(module: LineModule) -> ElfImage | None:
    """The image holding the module's ``.debug_info``: its own, its debug file's, debuginfod's."""
    image = module.image
    if image is None:
        return None
    if has_dwarf(image):
        return image
    debug_file = module.debug_file
    if debug_file is not None and has_dwarf(debug_file.image):
        return debug_file.image
    build_id = module.build_id
    if build_id and os.environ.get("DEBUGINFOD_URLS"):
        from liveunwind.modules.debuginfod import debuginfo_image

        fetched = debuginfo_image(build_id, module.problems)
        if fetched is not None and has_dwarf(fetched):
            return fetched
    return None


def read_sections(
    image: ElfImage, ahead: bool = False
) -> tuple[Sections, dict[str, GrowingSection]]:
    """The image's DWARF sections, decompressed, and those decompressed only on demand.

    Inflating is the bulk of a first lookup in a big library: Debian's libc
    debug file holds 9 MiB of zlib-compressed DWARF, 36 ms to inflate whole
    with zlib (27 of them ``.debug_info``; ISA-L's inflater, if installed, takes 12).
    ``.debug_info``, ``.debug_line`` and ``.debug_abbrev`` are read by
    offset, unit by unit, so they are inflated only as far as the units a
    backtrace needs (72%, 76% and 70% of them for testprogs/lines; the
    abbreviations had taken 2.7 ms to inflate whole).  With ``ahead``
    ``.debug_info`` starts inflating on a thread before the other sections
    are read (see :meth:`ModuleLines.read_ahead`, which then sets how far),
    and ``.debug_line`` after it on the same thread.  The abbreviations, a
    sixth of the size, inflate as lookups reach them.
    """
    fields: dict[str, Buffer | None] = {}
    growing: dict[str, GrowingSection] = {}
    whole: list[tuple[str, GrowingSection]] = []
    for field, name in DWARF_SECTIONS.items():
        section = GrowingSection.of(image, name)
        if section is None:
            fields[field] = section_data(image, name)
            continue
        if field in ("info", "line", "abbrev"):
            growing[field] = section
            fields[field] = section.data
        else:
            whole.append((field, section))
    if ahead and "info" in growing:
        growing["info"].read_ahead(then=growing.get("line"))
    for field, section in whole:
        section.ensure(-1)
        fields[field] = section.data
    return Sections(image.byte_order, **fields), growing


def inflater() -> ModuleType:
    """ISA-L's zlib-compatible inflater when ``isal`` is installed, else zlib.

    On Debian's libc debug file ISA-L inflates ``.debug_info`` in 12 ms,
    zlib in 27: the difference is a third of what ``--lines`` adds to a
    backtrace of a program with frames in libc.
    """
    try:
        from isal import isal_zlib  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        import zlib

        return zlib
    return isal_zlib


class GrowingSection:
    """A zlib-compressed (ELFCOMPRESS_ZLIB) section inflated front to back as far as asked.

    ``data`` has the section's full size from the start and fills from the
    front: ``filled`` bytes are there, and a reader asks :meth:`ensure` for
    what it is about to read (``DebugInfo``'s ``need``, ``ensure_unit`` for
    line programs).  Writing each step straight into its place, and feeding
    zlib the compressed bytes a piece at a time from the mapped file, copies
    every byte once: growing a buffer and zlib's ``unconsumed_tail`` had
    copied the section three times over, and in a fresh process each page
    first touched costs a fault (5,900 of them for testprogs/lines before,
    4,100 after; 1,700 without ``--lines``).
    """

    def __init__(self, stream: Buffer, size: int, where: str) -> None:
        library = inflater()
        # Zero pages from the kernel, each touched first when written (a bytearray
        # of the size would be zero-filled, touching them all at once).  Private:
        # mmap's default, a shared mapping, is memory of a file system, whose pages
        # are slower to fault in (Debian's libc's .debug_info inflated 72% in a fresh
        # process: 11.2-12.5 ms private, 11.9-17 ms shared, medians 1.5 ms apart).
        # Anonymous, so no SIGBUS: no file behind it can shrink (targets.files reads files).
        flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
        self.data: mmap.mmap | bytearray = mmap.mmap(-1, size, flags) if size else bytearray()
        self.filled = 0
        self.size = size
        self.where = where
        self._stream = memoryview(stream).cast("B")
        self._at = 0  # how much of the stream zlib has been given
        self._decompressor = library.decompressobj()
        self._error: type[Exception] = library.error
        #: Guards what the read-ahead thread shares: filled, goal, running, failure.
        self._state = _thread.allocate_lock()
        #: Held while there is no news from the read-ahead thread, which releases it
        #: when it adds bytes or ends; only the thread that waits acquires it.
        self._news = _thread.allocate_lock()
        self._news.acquire()
        #: Where the read-ahead thread stops (it reads it before each step).
        self._goal = 0
        #: Whether a read-ahead thread owns the decompressor now.
        self._running = False
        self._failure: BaseException | None = None
        #: The section a read-ahead thread inflates next, once this one is at its goal.
        self._then: GrowingSection | None = None
        #: Whether a caller's :meth:`ensure` owns the stream (then ``_running`` is set too),
        #: and whether a read-ahead asked for meanwhile is to start when it is done.
        self._claimed = False
        self._resume = False

    @staticmethod
    def of(image: ElfImage, name: str) -> GrowingSection | None:
        """The section as a GrowingSection if it is zlib-compressed; None otherwise."""
        section = image.sections.get(name)
        if section is None or not section.flags & SHF_COMPRESSED:
            return None
        data = image.contents(section)
        if data is None or len(data) < _CHDR64.size:
            return None
        kind, _reserved, size, _align = struct.unpack_from(image.byte_order + _CHDR64.format, data)
        where = f"{image.origin}: {name}"
        if kind != ELFCOMPRESS_ZLIB:
            return None
        if size > MAX_DECOMPRESSED_SECTION:
            raise FormatError(f"{where}: claims {size} bytes decompressed, above the limit")
        return GrowingSection(data[_CHDR64.size :], size, where)

    def read_ahead(self, end: int = -1, then: GrowingSection | None = None) -> None:
        """Inflates the section up to ``end`` (all of it for -1) on a thread of its own.

        zlib and ISA-L let go of the GIL while they inflate, so this runs
        alongside the Python that walks stacks, names frames and decodes the
        first units; :meth:`ensure` then waits only for bytes not there yet,
        and inflates past ``end`` itself once the thread is done.  Calling it
        again moves the goal (and starts a thread again if the last one is done).

        ``then`` (kept for later calls) is read ahead whole when the thread is
        done: one thread, not one per section, so that ``.debug_info``, which
        every lookup waits for, has the spare core to itself.  Two threads
        sharing it (and, on a busy machine, sharing it with other work) had
        made ``.debug_info`` take 3-4 times as long to inflate as it takes alone.
        """
        goal = self.size if end < 0 else min(end, self.size)
        with self._state:
            if then is not None:
                self._then = then
            self._goal = goal
            # A caller inflating it now (see ensure) starts the thread when it is done.
            self._resume = self._claimed
            if self._running or self._failure is not None or self.filled >= goal:
                return
            self._running = True
        _switch_sooner()
        _thread.start_new_thread(self._inflate_ahead, ())

    def _inflate_ahead(self) -> None:
        """The read-ahead thread: inflates until the goal is reached or the stream fails."""
        try:
            while True:
                with self._state:
                    if self.filled >= self._goal:
                        break
                self._step()
                with self._state:
                    if self._news.locked():
                        self._news.release()
        except BaseException as error:  # handed to the thread that waits for the bytes
            self._failure = error
        finally:
            if self._then is not None:
                self._then.read_ahead()  # before this thread is seen to be done
            with self._state:
                self._running = False
                if self._news.locked():
                    self._news.release()
            _switch_as_before()

    def _step(self) -> None:
        """Gives zlib the next piece of the stream and puts what comes out in place."""
        piece = self._stream[self._at : self._at + _INFLATE_PIECE]
        if not piece:
            raise FormatError(f"{self.where}: does not inflate to the {self.size} bytes declared")
        filled = self.filled
        try:
            # At most what is left of the section: more is corrupt, and left in
            # unconsumed_tail, which the check below then reports.
            chunk = self._decompressor.decompress(piece, self.size - filled + 1)
        except self._error as error:
            raise FormatError(f"{self.where}: {error}") from None
        self._at += len(piece) - len(self._decompressor.unconsumed_tail)
        if filled + len(chunk) > self.size:
            raise FormatError(f"{self.where}: inflates to more than the {self.size} bytes declared")
        self.data[filled : filled + len(chunk)] = chunk
        self.filled = filled + len(chunk)

    def ensure(self, end: int) -> int:
        """Inflates at least up to ``end`` (all of it for -1); returns how far it is filled."""
        end = self.size if end < 0 else min(end, self.size)
        if self.filled >= end:
            return self.filled
        while True:
            with self._state:
                if not self._running:
                    # No thread, or one that stopped short of ``end``: the stream is
                    # this thread's now (a read-ahead asked for meanwhile waits for it).
                    self._running = self._claimed = True
                    break
                self._goal = max(self._goal, end)
                if self.filled >= end:
                    return self.filled
            self._news.acquire()  # until the thread adds bytes or ends
        try:
            if self._failure is not None:
                raise self._failure
            for _ in range(len(self._stream) // _INFLATE_PIECE + 2):
                if self.filled >= end:
                    return self.filled
                self._step()
        finally:
            with self._state:
                self._running = self._claimed = False
                resume, self._resume = self._resume, False
            if resume:
                self.read_ahead(self._goal)
        raise FormatError(f"{self.where}: does not inflate to the {self.size} bytes declared")

    def ensure_unit(self, offset: int, byte_order: str) -> None:
        """Inflates the whole unit (length-prefixed, as line programs are) at ``offset``."""
        self.ensure(offset + 12)
        if offset + 4 > self.filled:
            return  # the decoder reports the offset as outside the section
        (length,) = struct.unpack_from(byte_order + "I", self.data, offset)
        if length == 0xFFFFFFFF and offset + 12 <= self.filled:
            (length,) = struct.unpack_from(byte_order + "Q", self.data, offset + 4)
            self.ensure(offset + 12 + length)
        else:
            self.ensure(offset + 4 + length)


#: Read-ahead threads running, and the switch interval from before the first began.
_switching: list[float] = []
_switching_lock = _thread.allocate_lock()


def _switch_sooner() -> None:
    """Lowers the interpreter's switch interval while read-ahead threads run.

    A thread back from inflating a step waits for the GIL until the thread
    holding it is made to let go: 5 ms by default, many times what a step
    takes to inflate (a 64 KiB piece, under 1 ms), which would stall the
    thread while the main one decodes.
    """
    import sys

    with _switching_lock:
        if not _switching:
            before = sys.getswitchinterval()
            sys.setswitchinterval(min(before, _READ_AHEAD_SWITCH))
            _switching.append(before)
        else:
            _switching.append(_switching[0])


def _switch_as_before() -> None:
    """Called as a read-ahead thread ends: the last one puts the switch interval back."""
    import sys

    with _switching_lock:
        before = _switching.pop()
        if not _switching:
            sys.setswitchinterval(before)


# -- frames ------------------------------------------------------------------------


def read_ahead_pcs(
    module: LocatingModule, pcs: list[tuple[int, bool]], threads: bool
) -> list[tuple[int, bool]]:
    """Starts reading the DWARF for frames at ``pcs`` ((runtime pc, exact) as :func:`locate`
    takes them), on threads if ``threads``; returns them in the order to look them up
    (see ``ModuleLines.read_ahead``)."""
    lines = module.lines
    if lines is None:
        return []
    bias = module.load_bias
    by_address = {pc - bias - (0 if exact else 1): (pc, exact) for pc, exact in pcs}
    return [by_address[address] for address in lines.read_ahead(by_address, threads)]


def locate(module: LocatingModule, pc: int, exact: bool) -> list[SourceLocation]:
    """The logical frames of a physical frame at runtime ``pc`` in ``module``, innermost first.

    ``exact`` is the frame's ``exact_pc``: frame 0 or a frame interrupted by a
    signal, looked up at ``pc``; any other frame at ``pc - 1``.  A module
    without DWARF, or DWARF that turns out corrupt (noted in the module's
    problems, once), gives [].
    """
    lines = module.lines
    if lines is None:
        return []
    address = pc - module.load_bias - (0 if exact else 1)
    try:
        return lines.locate(address)
    except FormatError as error:
        message = f"{module.path}: {error}"
        if message not in module.problems:
            module.problems.append(message)
        return []
