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
dynamic linker's link_map list (:mod:`liveunwind.targets.linkmap`).

Cores do not record thread names; the main thread gets the process name from
NT_PRPSINFO and the thread that received the fatal signal is listed first
(the kernel, gdb and QEMU all write its NT_PRSTATUS first).
"""

from __future__ import annotations

import bisect
import os
import struct
from collections.abc import Callable, Sequence

from liveunwind.arch import Arch, arch_by_elf_machine
from liveunwind.errors import CoreFileError, FormatError, MemoryReadError, UsageError
from liveunwind.formats import corenotes
from liveunwind.formats.corenotes import (
    AT_BASE,
    AT_ENTRY,
    AT_EXECFN,
    AT_PHDR,
    AT_PHNUM,
    AT_SYSINFO_EHDR,
    CoreNotes,
)
from liveunwind.formats.elf import PT_DYNAMIC, PT_LOAD, PT_NOTE, ElfImage
from liveunwind.frames import CrashInfo
from liveunwind.targets import linkmap
from liveunwind.targets.base import AddressSpace, Mapping, ThreadState
from liveunwind.targets.coredata import open_core_data
from liveunwind.targets.filefinder import FileFinder, FoundFile, open_image
from liveunwind.targets.files import FileError, open_file

TYPE_CHECKING = False
if TYPE_CHECKING:
    from liveunwind.targets.coredata import CoreData
    from liveunwind.targets.files import RegularFile

ET_CORE = 4
_ELF_TYPES = {0: "an ELF file of no type", 1: "a relocatable object", 2: "an executable",
              3: "a shared object or PIE executable"}  # fmt: skip
_MACHINES = {2: "SPARC", 3: "i386", 8: "MIPS", 20: "PowerPC", 21: "PowerPC64", 22: "s390",
             40: "ARM", 43: "SPARC64", 243: "RISC-V", 258: "LoongArch"}  # fmt: skip
#: Most program headers accepted (the kernel's PN_XNUM scheme allows 2^32; a
#: process has one mapping per header, vm.max_map_count is 65530 by default).
_MAX_SEGMENTS = 1 << 20
#: Largest program header entry accepted (ELF64 says 56 bytes).
_MAX_PHENTSIZE = 1024
#: Largest PT_NOTE segment read (a note set per thread is a few KiB).
_MAX_NOTES_SIZE = 256 << 20
_PAGE = linkmap.PAGE_SIZE
_PN_XNUM = 0xFFFF
#: The fixed address of x86_64's legacy vsyscall page.
_X86_64_VSYSCALL = 0xFFFFFFFFFF600000
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
        self._files: dict[str, FoundFile | None] = {}
        self._rejections: dict[str, list[str]] = {}
        self._inodes: dict[str, int] = {}
        self._mappings: list[Mapping] = []
        self._mapping_starts: list[int] = []
        machine, self._segments, note_segments = self._read_headers()
        try:
            self.arch: Arch = arch_by_elf_machine(machine)
        except UsageError:
            what = _MACHINES.get(machine, f"ELF machine {machine}")
            raise CoreFileError(
                f"{self.name} is a core of an unsupported architecture ({what}); "
                "x86_64 and aarch64 are supported"
            ) from None
        self._starts = [segment.vaddr for segment in self._segments]
        self._decode, register_size = _register_decoder(self.arch)
        self.notes: CoreNotes = corenotes.parse_notes(note_segments, register_size)
        self.problems += self.notes.problems
        if not self.notes.threads:
            raise CoreFileError(f"{self.name} holds no thread registers (no NT_PRSTATUS note)")
        self.pid: int | None = self.notes.pid or self.notes.threads[0].tid
        #: The executable's path as the core records it (NT_FILE, AT_EXECFN, arguments).
        self._core_executable = ""
        self._mappings = self._build_mappings()
        self._mapping_starts = [mapping.start for mapping in self._mappings]
        if self.notes.files and executable is not None:
            self._use_executable_argument(self._core_executable or executable)
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
        """Opens a core (plain, .gz or .xz); CoreFileError/UsageError say why it cannot be used."""
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
        if len(header) == 0:
            raise CoreFileError(f"{self.name} is empty, not a core file")
        if header[:4] != b"\x7fELF":
            raise CoreFileError(f"{self.name} is not an ELF file (nor a .gz or .xz of one)")
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
        return self._mappings_from_link_map(vdso)

    def _mappings_from_file_note(
        self, files: list[corenotes.FileEntry], vdso: int | None
    ) -> list[Mapping]:
        by_start = {entry.start: entry for entry in files}
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
                        self._inode(entry.path),
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
                    self._inode(entry.path),
                    entry.path,
                )
            )
        return _without_overlaps(mappings)

    def _complete_permissions(self) -> None:
        """Permissions of mappings the core has no segment for, from their files' headers."""
        for index, mapping in enumerate(self._mappings):
            if mapping.perms != _UNKNOWN_PERMS:
                continue
            found = self._file_for(mapping.path)
            flags = None if found is None else _segment_flags(found.image, mapping, self._mappings)
            perms = "r--p" if flags is None else _perms(flags)
            self._mappings[index] = mapping._replace(perms=perms)

    def _mappings_from_link_map(self, vdso: int | None) -> list[Mapping]:
        """QEMU and some gdb cores: the executable from auxv, libraries from link_map."""
        auxv = self.notes.auxv
        recorded = self._execfn() or self._first_argument()
        self._core_executable = recorded
        synthesized: list[Mapping] = []
        if self._executable_argument is not None:
            recorded = self._executable_argument
            found: FoundFile | None = self._use_executable_argument(recorded)
        elif recorded:
            found = self._file_for(recorded, check=self._executable_check)
        else:
            self.problems.append("the core names no executable; give it as EXE")
            found = None
        if found is not None:
            if not recorded.startswith("/"):
                # Mappings of files have absolute paths; QEMU records the program as run.
                recorded = os.path.abspath(found.path)
                self._files[recorded] = found
            image = found.image
            bias = auxv.get(AT_ENTRY, image.entry) - image.entry
            synthesized += linkmap.mappings_of_image(image, bias, recorded, self._inode(recorded))
            synthesized += self._libraries(image, bias, vdso)
        if vdso:
            synthesized += self._vdso_mapping(vdso)
        return _overlay(synthesized, self._segments)

    def _libraries(self, image: ElfImage, bias: int, vdso: int | None) -> list[Mapping]:
        """Every library on the link_map list; just the dynamic linker if there is none."""
        read = self._read_core_only
        head = linkmap.first_link_map(read, image, bias)
        objects: list[linkmap.LoadedObject] = []
        if head is not None:
            objects, problems = linkmap.follow_link_map(read, head)
            self.problems += problems
        elif self.notes.auxv.get(AT_BASE):
            interpreter = _interpreter(image)
            if interpreter:
                objects = [linkmap.LoadedObject(interpreter, self.notes.auxv[AT_BASE], 0)]
        mappings = []
        for loaded in objects:
            if not loaded.name and loaded.base and loaded.base == self.notes.auxv.get(AT_BASE):
                # The dynamic linker's l_name points into the executable's PT_INTERP,
                # in read-only memory that QEMU does not dump.
                loaded = loaded._replace(name=_interpreter(image))
            if not loaded.name or loaded.base == vdso or loaded.base == bias:
                continue  # the executable itself, and the vDSO (it has no file)
            found = self._file_for(loaded.name, check=_dynamic_check(loaded, self.arch))
            if found is not None:
                mappings += linkmap.mappings_of_image(
                    found.image, loaded.base, loaded.name, self._inode(loaded.name)
                )
        return mappings

    def _vdso_mapping(self, vdso: int) -> list[Mapping]:
        index = bisect.bisect_right(self._starts, vdso) - 1
        if index < 0 or self._segments[index].vaddr != vdso:
            return []
        return [Mapping(vdso, self._segments[index].end, "r-xp", 0, 0, "[vdso]")]

    def _execfn(self) -> str:
        address = self.notes.auxv.get(AT_EXECFN)
        return linkmap.read_c_string(self._read_core_only, address) if address else ""

    def _first_argument(self) -> str:
        return self.notes.arguments.split(" ", 1)[0]

    def _special_name(self, address: int, vdso: int | None) -> str:
        """The kernel's name for an unnamed segment: ``[vdso]``, ``[vsyscall]``, or none.

        gcore dumps x86_64's legacy vsyscall page, which sits at a fixed
        address; unnamed, it would look like JIT code (anonymous and executable).
        """
        if address == vdso:
            return "[vdso]"
        if self.arch.name == "x86_64" and address == _X86_64_VSYSCALL:
            return "[vsyscall]"
        return ""

    def _inode(self, path: str) -> int:
        """Cores record no inodes; a number per path keeps each file's mappings together."""
        return self._inodes.setdefault(path, len(self._inodes) + 1)

    # -- the executable -------------------------------------------------------

    def _use_executable_argument(self, recorded: str) -> FoundFile:
        """The EXE the user named stands for ``recorded`` — if it is the core's executable."""
        assert self._executable_argument is not None
        path = self._executable_argument
        image = open_image(path)
        reason = "it is not a readable ELF file" if image is None else None
        if image is not None:
            reason = self._acceptor(recorded, self._executable_check)(image)
        if reason is not None:
            name = self._core_executable or self.notes.name or "unknown"
            raise UsageError(
                f"{path} does not match the core: {reason}; the core's executable is {name}"
            )
        assert image is not None
        found = FoundFile(path, image)
        self._files[recorded] = found
        return found

    def _executable_check(self, image: ElfImage) -> str | None:
        """The auxiliary vector fixes the entry point and program headers of the executable."""
        reason = _machine_check(image, self.arch)
        if reason is not None:
            return reason
        auxv = self.notes.auxv
        entry, phdr, phnum = auxv.get(AT_ENTRY), auxv.get(AT_PHDR), auxv.get(AT_PHNUM)
        if entry is None:
            return None
        bias = entry - image.entry
        if image.type == 2 and bias != 0:
            return f"its entry point is {image.entry:#x}, the process's was {entry:#x}"
        if bias % _PAGE:
            return f"its entry point {image.entry:#x} cannot have been loaded at {entry:#x}"
        try:
            segments = image.segments
        except FormatError as error:
            return str(error)
        if phnum is not None and phnum != len(segments):
            return f"it has {len(segments)} program headers, the process's executable had {phnum}"
        headers = [header for header in segments if header.type == 6]  # PT_PHDR
        if phdr is not None and headers and headers[0].vaddr + bias != phdr:
            return "its program headers are not where the process's executable had them"
        return None

    # -- files ----------------------------------------------------------------

    def _file_for(
        self, recorded: str, check: Callable[[ElfImage], str | None] | None = None
    ) -> FoundFile | None:
        """The file behind ``recorded`` (cached), checked against what the core remembers."""
        if recorded in self._files:
            return self._files[recorded]
        build_id = self._core_build_id(recorded)
        found, rejected = self._finder.find(recorded, build_id, self._acceptor(recorded, check))
        self._files[recorded] = found
        self._rejections[recorded] = rejected
        if found is None:
            if rejected:
                self.problems.append(f"{recorded}: not using " + "; ".join(rejected))
            else:
                self.problems.append(f"{recorded}: file not found; its code is not in the core")
        return found

    def _acceptor(
        self, recorded: str, check: Callable[[ElfImage], str | None] | None
    ) -> Callable[[ElfImage], str | None]:
        """Says why a file is not the one the core had mapped as ``recorded`` (None: it is)."""
        build_id = self._core_build_id(recorded)

        def accept(image: ElfImage) -> str | None:
            reason = _machine_check(image, self.arch)
            if reason is None and build_id is not None:
                theirs = _build_id(image)
                if theirs != build_id:
                    reason = (
                        f"its build-id {theirs.hex() if theirs else '(none)'} differs from "
                        f"{build_id.hex()} in the core"
                    )
            if reason is None and check is not None:
                reason = check(image)
            return reason

        return accept

    def _core_build_id(self, recorded: str) -> bytes | None:
        """The build-id in the ELF headers the core holds for ``recorded``, if any."""
        heads = [m for m in self._mappings_for_path(recorded) if m.offset == 0]
        if not heads:
            return None
        start = min(mapping.start for mapping in heads)
        page = self._read_core_only(start, _PAGE, partial=True)
        if len(page) < 64:
            return None
        try:
            return ElfImage(page, origin=recorded).build_id
        except FormatError:
            return None

    def _mappings_for_path(self, path: str) -> list[Mapping]:
        return [m for m in self._mappings if m.path == path]

    # -- AddressSpace -----------------------------------------------------------

    def threads(self) -> list[ThreadState]:
        threads = []
        for index, note in enumerate(self.notes.threads):
            name = self.notes.name if note.tid == self.pid else ""
            state = ""
            if index == 0:
                signal = self._crash_signal()
                state = f"received {corenotes.signal_name(signal)}" if signal else ""
            threads.append(ThreadState(note.tid, name, self._decode(note.raw_registers), state))
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
            signal_name=corenotes.signal_name(signal) if signal else "",
            code=siginfo.code if siginfo else 0,
            code_name=corenotes.code_name(signal, siginfo.code) if siginfo else "",
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
        return bytes(found.image.data[offset : offset + min(end, mapping.end) - address])

    def _read_core_only(self, address: int, size: int, *, partial: bool = False) -> bytes:
        """Core bytes only, never from files (build-ids and strings must be the process's own)."""
        pieces = []
        position, end = address, address + size
        while position < end:
            try:
                piece = self._read_piece(position, end, use_files=False)
            except MemoryReadError:
                if partial:
                    break
                raise
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


def _register_decoder(arch: Arch) -> tuple[Callable[[bytes], dict[int, int]], int]:
    """The NT_PRSTATUS ``pr_reg`` decoder of ``arch`` and the size it needs."""
    if arch.name == "x86_64":
        from liveunwind.arch import x86_64

        return x86_64.registers_from_user_regs, x86_64.USER_REGS_SIZE
    from liveunwind.arch import aarch64

    return aarch64.registers_from_user_regs, aarch64.USER_REGS_SIZE


def _machine_check(image: ElfImage, arch: Arch) -> str | None:
    if image.machine != arch.elf_machine:
        what = _MACHINES.get(image.machine, f"ELF machine {image.machine}")
        return f"it is built for {what}, the core is {arch.name}"
    return None


def _build_id(image: ElfImage) -> bytes | None:
    try:
        return image.build_id
    except FormatError:
        return None


def _dynamic_check(loaded: linkmap.LoadedObject, arch: Arch) -> Callable[[ElfImage], str | None]:
    """A library is the loaded one if its dynamic section sits where ``l_ld`` says."""

    def check(image: ElfImage) -> str | None:
        if not loaded.dynamic:
            return None
        try:
            dynamic = image.segments_of_type(PT_DYNAMIC)
        except FormatError as error:
            return str(error)
        if not dynamic or dynamic[0].vaddr + loaded.base != loaded.dynamic:
            return f"its dynamic section is not at {loaded.dynamic:#x} where the loaded one was"
        return None

    return check


def _interpreter(image: ElfImage) -> str:
    """The PT_INTERP path of an executable ("" for static ones)."""
    try:
        headers = [header for header in image.segments if header.type == 3]  # PT_INTERP
        if not headers:
            return ""
        return bytes(image.segment_data(headers[0])).split(b"\0", 1)[0].decode("utf-8", "replace")
    except FormatError:
        return ""


def _without_overlaps(mappings: list[Mapping]) -> list[Mapping]:
    """Sorted by start; a mapping overlapping an earlier one is dropped (corrupt notes)."""
    result: list[Mapping] = []
    for mapping in sorted(mappings, key=lambda m: (m.start, m.end)):
        if result and mapping.start < result[-1].end:
            continue
        result.append(mapping)
    return result


def _overlay(files: list[Mapping], segments: list[_Segment]) -> list[Mapping]:
    """File mappings, plus the parts of core segments they do not cover as anonymous memory."""
    files = _without_overlaps(files)
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
