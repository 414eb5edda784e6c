"""ELF core files (Linux kernel, gdb gcore, QEMU user mode) as an AddressSpace.

A core holds the process's registers in its notes and its memory in PT_LOAD
segments — but not all of it: the kernel's coredump_filter leaves out
file-backed read-only mappings except their first page (the ELF headers,
with the build-id note), and QEMU leaves out every read-only mapping.  That
memory is read from the mapped files, found on this machine by
:class:`~liveunwind.targets.filefinder.FileFinder` and used only when they
are the files the process had (same build-id, or the same layout where the
core holds no build-id).  Which file is mapped where comes from the NT_FILE
note, or — for cores without one — from the auxiliary vector and the
dynamic linker's link_map list, as for any target without /proc
(:mod:`liveunwind.targets.loadedfiles`, which finds and checks every file).

Cores do not record thread names; the main thread gets the process name from
NT_PRPSINFO and the thread that received the fatal signal is listed first
(the kernel, gdb and QEMU all write its NT_PRSTATUS first).
"""

from __future__ import annotations

import bisect
import os
import struct
from collections.abc import Sequence

from liveunwind.arch import Arch, arch_by_elf_machine, supported
from liveunwind.errors import CoreFileError, FormatError, MemoryReadError, UsageError
from liveunwind.formats.auxv import AT_ENTRY, AT_SYSINFO_EHDR
from liveunwind.formats.elf import PT_LOAD, PT_NOTE, ElfImage, machine_name
from liveunwind.frames import CrashInfo
from liveunwind.targets import linkmap
from liveunwind.targets.base import AddressSpace, Mapping, ThreadState
from liveunwind.targets.cores import notes as core_notes
from liveunwind.targets.cores.coredata import ACCEPTED, open_core_data
from liveunwind.targets.cores.notes import CoreNotes
from liveunwind.targets.filefinder import FileFinder
from liveunwind.targets.files import FileError, open_file
from liveunwind.targets.loadedfiles import (
    LoadedFiles,
    WrongExecutable,
    executable_check,
    layout_check,
    without_overlaps,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from liveunwind.targets.cores.coredata import CoreData
    from liveunwind.targets.filefinder import FoundFile
    from liveunwind.targets.files import RegularFile

ET_CORE = 4
_ELF_TYPES = {0: "an ELF file of no type", 1: "a relocatable object", 2: "an executable",
              3: "a shared object or PIE executable"}  # fmt: skip
#: Most program headers accepted (the kernel's PN_XNUM scheme allows 2^32; a
#: process has one mapping per header, vm.max_map_count is 65530 by default).
_MAX_SEGMENTS = 1 << 20
#: Largest program header entry accepted (ELF64 says 56 bytes).
_MAX_PHENTSIZE = 1024
#: Largest PT_NOTE segment read (a note set per thread is a few KiB).
_MAX_NOTES_SIZE = 256 << 20
_PAGE = linkmap.PAGE_SIZE
_PN_XNUM = 0xFFFF
#: Placeholder for a mapping whose permissions the core does not record.
_UNKNOWN_PERMS = "?"


class _Segment:
    """One PT_LOAD of the core: ``available`` of its ``filesz`` bytes are really in the file."""

    __slots__ = ("available", "filesz", "flags", "index", "memsz", "offset", "vaddr")

    def __init__(
        self,
        index: int,
        vaddr: int,
        memsz: int,
        offset: int,
        filesz: int,
        flags: int,
        available: int,
    ) -> None:
        self.index = index
        self.vaddr = vaddr
        self.memsz = memsz
        self.offset = offset
        self.filesz = filesz
        self.flags = flags
        self.available = available

    @property
    def end(self) -> int:
        return self.vaddr + self.memsz

    @property
    def perms(self) -> str:
        return _perms(self.flags)


class ElfCore(AddressSpace):
    """AddressSpace of a process as an ELF core file recorded it."""

    def __init__(
        self, data: CoreData, executable: str | None = None, finder: FileFinder | None = None
    ) -> None:
        self.name = data.name
        self._data = data
        self._executable_argument = executable
        self._finder = finder or FileFinder()
        self.problems: list[str] = []
        self._mappings: list[Mapping] = []
        self._mapping_starts: list[int] = []
        machine, self._segments, note_segments = self._read_headers()
        try:
            self.arch: Arch = arch_by_elf_machine(machine)
        except UsageError:
            raise CoreFileError(
                f"{self.name} is a core of an unsupported architecture ({machine_name(machine)}); "
                f"{supported()} are supported"
            ) from None
        self._starts = [segment.vaddr for segment in self._segments]
        self._loaded = LoadedFiles(
            self.arch, self._read_core_only, self._finder, target="the core", problems=self.problems
        )
        self.notes: CoreNotes = core_notes.parse_notes(note_segments, self.arch.user_regs_size)
        self.problems += self.notes.problems
        if not self.notes.threads:
            raise CoreFileError(f"{self.name} holds no thread registers (no NT_PRSTATUS note)")
        self.pid: int | None = self.notes.pid or self.notes.threads[0].tid
        #: The executable's path as the core records it (NT_FILE, AT_EXECFN, arguments).
        self._core_executable = ""
        try:
            self._mappings = self._build_mappings()
            self._mapping_starts = [mapping.start for mapping in self._mappings]
            if self.notes.files and executable is not None:
                recorded = self._core_executable or executable
                header = self._header_of(recorded)
                self._loaded.use_executable(executable, recorded, self.notes.auxv, header)
        except WrongExecutable as error:
            name = self._core_executable or self.notes.name or "unknown"
            raise UsageError(
                f"{error.path} does not match the core: {error.reason}; "
                f"the core's executable is {name}"
            ) from None
        self._complete_permissions()

    @classmethod
    def open(
        cls,
        core: str,
        executable: str | None = None,
        *,
        sysroot: str | None = None,
        search_path: Sequence[str] = (),
    ) -> ElfCore:
        """Opens a core (plain or compressed); CoreFileError/UsageError say why not."""
        data = open_core_data(core)
        try:
            return cls(data, executable, FileFinder(sysroot=sysroot, search_path=search_path))
        except BaseException:
            data.close()
            raise

    # -- headers --------------------------------------------------------------

    def _read_headers(self) -> tuple[int, list[_Segment], list[bytes]]:
        """Checks the ELF header and reads the program headers and the notes."""
        header = self._data.read_at(0, 64)
        packed = self._data.compression
        if len(header) == 0 and packed is not None:
            raise CoreFileError(
                f"{self.name} is {packed}-compressed but holds no data (empty, cut or corrupt)"
            )
        if len(header) == 0:
            raise CoreFileError(f"{self.name} is empty, not a core file")
        if header[:4] != b"\x7fELF" and packed is not None:
            raise CoreFileError(
                f"{self.name} is {packed}-compressed, but not a core: no ELF inside"
            )
        if header[:4] != b"\x7fELF":
            raise CoreFileError(
                f"{self.name} is not an ELF file, nor compressed in a form read here "
                f"(cores are read {ACCEPTED})"
            )
        if len(header) < 64:
            raise CoreFileError(f"{self.name} is truncated inside its ELF header")
        if header[4] != 2:
            raise CoreFileError(
                f"{self.name} is a 32-bit ELF file; only 64-bit cores are supported"
            )
        if header[5] != 1:
            raise CoreFileError(
                f"{self.name} is big-endian; only little-endian cores are supported"
            )
        elf_type, machine = struct.unpack_from("<HH", header, 16)
        if elf_type != ET_CORE:
            what = _ELF_TYPES.get(elf_type, f"an ELF file of type {elf_type}")
            raise CoreFileError(f"{self.name} is {what}, not a core file")
        (phoff,) = struct.unpack_from("<Q", header, 32)
        (shoff,) = struct.unpack_from("<Q", header, 40)
        phentsize, phnum = struct.unpack_from("<HH", header, 54)
        if phnum == _PN_XNUM:
            phnum = self._extended_segment_count(shoff)
        if not 56 <= phentsize <= _MAX_PHENTSIZE or phnum > _MAX_SEGMENTS:
            raise CoreFileError(f"{self.name} has a corrupt program header table")
        size = self._data.size
        if size is not None and (phoff >= size or phentsize * phnum > size - phoff):
            raise CoreFileError(f"{self.name} is truncated inside its program header table")
        table = self._data.read_at(phoff, phentsize * phnum)
        if len(table) < phentsize * phnum:
            raise CoreFileError(f"{self.name} is truncated inside its program header table")
        segments, notes = [], []
        for index in range(phnum):
            ptype, flags, offset, vaddr, _paddr, filesz, memsz, _align = struct.unpack_from(
                "<IIQQQQQQ", table, index * phentsize
            )
            if ptype == PT_LOAD and memsz > 0 and vaddr + memsz <= 1 << 64:
                available = filesz
                if self._data.size is not None:
                    available = max(0, min(filesz, self._data.size - offset))
                if available < filesz:
                    self.problems.append(
                        f"the core is truncated: LOAD segment {index} "
                        f"({vaddr:#x}-{vaddr + memsz:#x}) has {available:#x} of its "
                        f"{filesz:#x} bytes"
                    )
                segments.append(
                    _Segment(index, vaddr, memsz, offset, min(filesz, memsz), flags, available)
                )
            elif ptype == PT_NOTE:
                notes.append(self._read_notes(index, offset, filesz))
        segments.sort(key=lambda segment: segment.vaddr)
        return machine, segments, notes

    def _extended_segment_count(self, shoff: int) -> int:
        """PN_XNUM: the real count is ``sh_info`` of section header 0."""
        raw = self._data.read_at(shoff + 44, 4)
        if len(raw) < 4:
            raise CoreFileError(f"{self.name} is truncated before its segment count")
        return struct.unpack("<I", raw)[0]

    def _read_notes(self, index: int, offset: int, size: int) -> bytes:
        if size > _MAX_NOTES_SIZE:
            raise CoreFileError(f"{self.name} has a note segment of {size} bytes; corrupt")
        data = self._data.read_at(offset, size)
        if len(data) < size:
            self.problems.append(
                f"the core is truncated: NOTE segment {index} has {len(data):#x} of its "
                f"{size:#x} bytes"
            )
        return data

    # -- mappings -------------------------------------------------------------

    def _build_mappings(self) -> list[Mapping]:
        """Mappings from NT_FILE when the core has it, else from auxv and link_map."""
        auxv = self.notes.auxv
        vdso = auxv.get(AT_SYSINFO_EHDR)
        files = self.notes.files
        if files:
            mappings = self._mappings_from_file_note(files, vdso)
            self._core_executable = self._path_at(mappings, auxv.get(AT_ENTRY))
            return mappings
        return self._mappings_from_link_map()

    def _mappings_from_file_note(
        self, files: list[core_notes.FileEntry], vdso: int | None
    ) -> list[Mapping]:
        by_start = {entry.start: entry for entry in self._resolve_relative(files)}
        mappings: list[Mapping] = []
        for segment in self._segments:
            entry = by_start.pop(segment.vaddr, None)
            if entry is not None:
                mappings.append(
                    Mapping(
                        segment.vaddr,
                        segment.end,
                        segment.perms,
                        entry.offset,
                        self._loaded.inode(entry.path),
                        entry.path,
                    )
                )
            else:
                path = self._special_name(segment.vaddr, vdso)
                mappings.append(Mapping(segment.vaddr, segment.end, segment.perms, 0, 0, path))
        # Files the core has no segment for (gcore leaves out unchanged read-only
        # and code mappings); their permissions come from the file later.
        for entry in by_start.values():
            mappings.append(
                Mapping(
                    entry.start,
                    entry.end,
                    _UNKNOWN_PERMS,
                    entry.offset,
                    self._loaded.inode(entry.path),
                    entry.path,
                )
            )
        return without_overlaps(mappings)

    def _resolve_relative(self, files: list[core_notes.FileEntry]) -> list[core_notes.FileEntry]:
        """Entries recorded by a relative path get the path of the file found here for them.

        A relative path (a core made in a container, or rewritten by a tool)
        names no file on this machine.  The file is looked for as an absent
        one is — the EXE given first for the file holding the entry point,
        then ``--sysroot``, ``--search-path`` and build-id folders — and
        matched by the build-id in the core's copy of its first page, or
        without one by name and size.  Not found, the entries keep their
        path and are anonymous memory, and a problem says why.
        """
        entry_point = self.notes.auxv.get(AT_ENTRY)
        resolved: dict[str, str] = {}
        for path in dict.fromkeys(entry.path for entry in files):
            if not path or path.startswith("/"):
                continue
            own = [entry for entry in files if entry.path == path]
            holds_entry = entry_point is not None and any(
                entry.start <= entry_point < entry.end for entry in own
            )
            found = self._loaded.find(
                path,
                min((entry.start for entry in own if entry.offset == 0), default=None),
                executable_check(self.notes.auxv, "the core") if holds_entry else None,
                layout=layout_check([(e.start, e.end, e.offset) for e in own], "the core"),
                first=self._executable_argument if holds_entry else None,
                unused=", so its mappings are anonymous memory (a relative path names no file "
                "here: give the file as EXE, or its folder with --search-path or --sysroot)",
            )
            if found is not None:
                resolved[path] = os.path.abspath(found.path)
                self._loaded.adopt(resolved[path], found)
        return [entry._replace(path=resolved.get(entry.path, entry.path)) for entry in files]

    @property
    def matches(self) -> list[str]:
        """The file here that stands for each recorded path not here, and how it was matched."""
        return self._loaded.matches

    def _complete_permissions(self) -> None:
        """Permissions of mappings the core has no segment for, from their files' headers."""
        for index, mapping in enumerate(self._mappings):
            if mapping.perms != _UNKNOWN_PERMS:
                continue
            found = self._file_for(mapping.path)
            flags = None if found is None else _segment_flags(found.image, mapping, self._mappings)
            perms = "r--p" if flags is None else _perms(flags)
            self._mappings[index] = mapping._replace(perms=perms)

    def _mappings_from_link_map(self) -> list[Mapping]:
        """QEMU and some gdb cores: the executable from auxv, libraries from link_map.

        The vDSO's extent is its core segment's; the rest of the core's
        segments are anonymous memory around the files.
        """
        auxv = self.notes.auxv
        self._core_executable = self._loaded.execfn(auxv) or self._first_argument()
        files = self._loaded.mappings(
            auxv, self._core_executable, self._executable_argument, vdso_extent=self._vdso_mapping
        )
        return _overlay(files, self._segments)

    def _vdso_mapping(self, vdso: int) -> list[Mapping]:
        """The vDSO as long as the core's segment at its address."""
        index = bisect.bisect_right(self._starts, vdso) - 1
        if index < 0 or self._segments[index].vaddr != vdso:
            return []
        return [Mapping(vdso, self._segments[index].end, "r-xp", 0, 0, "[vdso]")]

    def _first_argument(self) -> str:
        return self.notes.arguments.split(" ", 1)[0]

    def _special_name(self, address: int, vdso: int | None) -> str:
        """The kernel's name for an unnamed segment: ``[vdso]``, ``[vsyscall]``, or none.

        gcore dumps x86_64's legacy vsyscall page, which sits at a fixed
        address; unnamed, it would look like JIT code (anonymous and executable).
        """
        if address == vdso:
            return "[vdso]"
        if address == self.arch.vsyscall_page:
            return "[vsyscall]"
        return ""

    # -- files ----------------------------------------------------------------

    def _file_for(self, recorded: str) -> FoundFile | None:
        """The file behind ``recorded``, checked against the ELF headers the core holds.

        Without them (no build-id to compare), against where the core maps it.
        """
        own = [(m.start, m.end, m.offset) for m in self._mappings if m.path == recorded]
        layout = layout_check(own, "the core")
        return self._loaded.find(recorded, self._header_of(recorded), layout=layout)

    def _header_of(self, recorded: str) -> int | None:
        """Where the core's mappings of ``recorded`` start with its ELF header, if they do."""
        heads = [m.start for m in self._mappings if m.path == recorded and m.offset == 0]
        return min(heads, default=None)

    # -- AddressSpace -----------------------------------------------------------

    def threads(self) -> list[ThreadState]:
        # The kernel, and gdb's gcore, write the signal that ended (or stopped)
        # the process into every thread's pr_cursig: it is the first thread's.
        # A later thread whose pr_cursig differs from it has a signal of its own.
        threads = []
        crash_signal = self._crash_signal()
        for index, note in enumerate(self.notes.threads):
            name = self.notes.name if note.tid == self.pid else ""
            signal = crash_signal if index == 0 else note.signal
            state = ""
            if signal and (index == 0 or signal != crash_signal):
                state = f"received {core_notes.signal_name(signal)}"
            registers = self.arch.registers_from_user_regs(note.raw_registers)
            threads.append(ThreadState(note.tid, name, registers, state))
        return threads

    def mappings(self) -> list[Mapping]:
        return self._mappings

    def read(self, address: int, size: int) -> bytes:
        if size < 0 or address < 0 or address + size > 1 << 64:
            raise MemoryReadError(address, size, "outside the address space")
        pieces = []
        position, end = address, address + size
        while position < end:
            piece = self._read_piece(position, end, use_files=True)
            pieces.append(piece)
            position += len(piece)
        return b"".join(pieces)

    def entry_point(self) -> int | None:
        return self.notes.auxv.get(AT_ENTRY)

    def mapped_image(self, mapping: Mapping) -> ElfImage | None:
        """The image of the file found for ``mapping``, already mapped and checked."""
        if not mapping.is_file:
            return None
        found = self._file_for(mapping.path)
        return None if found is None else found.image

    def open_mapped_file(self, mapping: Mapping) -> RegularFile | None:
        if not mapping.is_file:
            return None
        found = self._file_for(mapping.path)
        if found is None:
            return None
        try:
            return open_file(found.path)
        except FileError:
            return None

    def close(self) -> None:
        """Closes the core file (mapped files stay open while modules use them)."""
        self._data.close()

    def __enter__(self) -> ElfCore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- crash ------------------------------------------------------------------

    def _crash_signal(self) -> int:
        if self.notes.signal is not None:
            return self.notes.signal.signal
        return self.notes.threads[0].signal

    def crash_info(self) -> CrashInfo:
        """What the core says about the process and the signal that ended it."""
        signal = self._crash_signal()
        siginfo = self.notes.signal
        return CrashInfo(
            executable=self._core_executable or self.notes.name,
            arguments=self.notes.arguments,
            signal=signal,
            signal_name=core_notes.signal_name(signal) if signal else "",
            code=siginfo.code if siginfo else 0,
            code_name=core_notes.code_name(signal, siginfo.code) if siginfo else "",
            fault_address=siginfo.fault_address if siginfo else None,
            tid=self.notes.threads[0].tid,
        )

    # -- memory -----------------------------------------------------------------

    def _segment_at(self, address: int) -> tuple[_Segment | None, int]:
        """The segment holding ``address`` (or None) and where the next segment starts."""
        index = bisect.bisect_right(self._starts, address) - 1
        following = self._starts[index + 1] if index + 1 < len(self._starts) else 1 << 64
        if index >= 0 and address < self._segments[index].end:
            return self._segments[index], following
        return None, following

    def _read_piece(self, address: int, end: int, *, use_files: bool) -> bytes:
        """Bytes from ``address`` up to at most ``end`` from one source; raises if none has them."""
        segment, following = self._segment_at(address)
        reason = "not in the core"
        if segment is not None:
            held = segment.vaddr + segment.available
            if address < held:
                offset = segment.offset + (address - segment.vaddr)
                data = self._data.read_at(offset, min(end, held) - address)
                if data:
                    return data
                self._truncated(segment, address)
            reason = self._missing_reason(segment)
            following = segment.end
        if use_files:
            data = self._read_file(address, min(end, following))
            if data:
                return data
        raise MemoryReadError(address, end - address, reason)

    def _truncated(self, segment: _Segment, address: int) -> None:
        """A compressed core ended early: the segment holds less than its header says."""
        segment.available = address - segment.vaddr
        self.problems.append(
            f"the core is truncated: LOAD segment {segment.index} "
            f"({segment.vaddr:#x}-{segment.end:#x}) is cut after {segment.available:#x} of its "
            f"{segment.filesz:#x} bytes"
        )

    @staticmethod
    def _missing_reason(segment: _Segment) -> str:
        if segment.available < segment.filesz:
            return f"the core is truncated in LOAD segment {segment.index}"
        return f"LOAD segment {segment.index} holds only {segment.filesz:#x} bytes"

    def _read_file(self, address: int, end: int) -> bytes:
        index = bisect.bisect_right(self._mapping_starts, address) - 1
        if index < 0:
            return b""
        mapping = self._mappings[index]
        if address >= mapping.end or not mapping.is_file:
            return b""
        found = self._file_for(mapping.path)
        if found is None:
            return b""
        offset = mapping.offset + (address - mapping.start)
        try:
            return found.image.read(offset, min(end, mapping.end) - address)
        except FormatError:  # the file changed since it was opened: not there, as if missing
            return b""

    def _read_core_only(self, address: int, size: int) -> bytes:
        """Core bytes only, never from files (build-ids and strings must be the process's own)."""
        pieces = []
        position, end = address, address + size
        while position < end:
            piece = self._read_piece(position, end, use_files=False)
            pieces.append(piece)
            position += len(piece)
        return b"".join(pieces)

    def _path_at(self, mappings: list[Mapping], address: int | None) -> str:
        if address is None:
            return ""
        for mapping in mappings:
            if address in mapping and mapping.is_file:
                return mapping.path
        return ""


def _perms(flags: int) -> str:
    """``/proc/PID/maps`` permissions of ELF segment flags (PF_R 4, PF_W 2, PF_X 1)."""
    return (
        ("r" if flags & 4 else "-")
        + ("w" if flags & 2 else "-")
        + ("x" if flags & 1 else "-")
        + "p"
    )


def _segment_flags(image: ElfImage, mapping: Mapping, mappings: list[Mapping]) -> int | None:
    """Flags of the PT_LOAD whose link-time pages hold ``mapping`` (one of ``mappings``).

    Matched by address (the mapping's start less the file's load bias), not
    by file offset: lld packs segments back to back in the file, so the page
    holding the start of the code is also the last page of the read-only
    segment before it, while in memory every segment has pages of its own.
    The load bias comes from the file's lowest-offset mapping, which holds
    the ELF header at offset 0: only the first PT_LOAD maps that page.
    """
    try:
        loads = image.segments_of_type(PT_LOAD)
    except FormatError:
        return None
    same_file = [m for m in mappings if m.path == mapping.path]
    first = min(same_file, key=lambda m: m.offset, default=mapping)
    if not loads or loads[0].offset - loads[0].offset % _PAGE != first.offset:
        return None
    bias = first.start - (loads[0].vaddr - loads[0].vaddr % _PAGE)
    address = mapping.start - bias
    for header in loads:
        if header.vaddr - header.vaddr % _PAGE <= address < header.vaddr + header.memsz:
            return header.flags
    return None


def _overlay(files: list[Mapping], segments: list[_Segment]) -> list[Mapping]:
    """File mappings (sorted, none overlapping), plus what else core segments hold, as anonymous."""
    ends = [mapping.end for mapping in files]  # sorted too: the mappings do not overlap
    result = list(files)
    for segment in segments:
        position = segment.vaddr
        index = bisect.bisect_right(ends, position)
        while index < len(files) and files[index].start < segment.end:
            if files[index].start > position:
                result.append(Mapping(position, files[index].start, segment.perms, 0, 0, ""))
            position = max(position, files[index].end)
            index += 1
        if position < segment.end:
            result.append(Mapping(position, segment.end, segment.perms, 0, 0, ""))
    return sorted(result, key=lambda m: m.start)
