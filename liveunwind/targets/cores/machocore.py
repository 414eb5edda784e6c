"""Mach-O core files (MH_CORE): memory, threads and loaded images of a macOS process.

A core is a header, load commands and raw memory, and we need only three
commands (LC_SEGMENT_64 for memory, LC_THREAD for registers, LC_NOTE for
the "all image infos" list), sliced straight out of the file's bytes, read
as they are needed (``files.FileContents``: never an mmap, which a file
truncated meanwhile turns into SIGBUS), which is fast on multi-gigabyte
cores; the headers of images (in the core's memory or in their files) are
read by :mod:`liveunwind.formats.macho`.  Every count, size and offset comes
from an untrusted file and is checked before use.

Images (modules) come from the "all image infos" LC_NOTE that LLDB and
Apple's tools write; without it, the core's memory is searched for Mach-O
headers on page boundaries and their LC_UUIDs are matched against the files
found along the search path.
"""

from __future__ import annotations

import mmap
import os
import struct
from bisect import bisect_right
from dataclasses import dataclass

from liveunwind.arch import Arch, arch_by_macho_cpu_type
from liveunwind.errors import CoreFileError, FormatError, MemoryReadError
from liveunwind.formats.macho import (
    HEADER,
    LC_SEGMENT_64,
    MH_MAGIC_64,
    MachOHeader,
    c_string,
    fat_slices,
    load_commands,
)
from liveunwind.targets.base import AddressSpace, CoreImage, Mapping, ThreadState
from liveunwind.targets.files import FileContents, FileError, RegularFile, open_file

MH_CORE = 4
#: File types whose headers can be found in memory: executable, dylib, dyld, bundle.
_IMAGE_FILE_TYPES = {2, 6, 7, 8}
LC_THREAD = 0x4
LC_UNIXTHREAD = 0x5
LC_NOTE = 0x31
ALL_IMAGE_INFOS = "all image infos"

_HEADER = HEADER
_SEGMENT = struct.Struct("<2I16s4Q4I")
_NOTE = struct.Struct("<2I16s2Q")
_IMAGE_INFOS = struct.Struct("<2IQ2I")
_IMAGE_ENTRY = struct.Struct("<Q16s2Q2I")
_SEGMENT_VMADDR = struct.Struct("<16s2Q")
_MAX_IMAGES = 1 << 16
_MAX_SEGMENTS_PER_IMAGE = 256
_MAX_HEADER_BYTES = 1 << 20
_MAX_SEARCH_FILES = 20000
_PAGE = 4096


@dataclass(frozen=True, slots=True)
class CoreSegment:
    """One LC_SEGMENT_64 of the core: target memory ``[vmaddr, vmaddr+vmsize)``."""

    vmaddr: int
    vmsize: int
    fileoff: int
    filesize: int
    initprot: int

    @property
    def end(self) -> int:
        return self.vmaddr + self.vmsize

    @property
    def perms(self) -> str:
        prot = self.initprot
        return (
            ("r" if prot & 1 else "-")
            + ("w" if prot & 2 else "-")
            + ("x" if prot & 4 else "-")
            + "p"
        )


class MachOCore(AddressSpace):
    """An AddressSpace over a Mach-O core file.

    ``search_path`` lists directories (searched recursively, bounded) and
    files where the images' files may be found by UUID.
    """

    pid: int | None = None

    def __init__(self, path: str, search_path: list[str] | tuple[str, ...] = ()) -> None:
        self.path = path
        self.search_path = tuple(search_path)
        try:
            self._contents = FileContents(open_file(path))
        except FileError as error:
            raise CoreFileError(f"cannot read {path}: {error.reason}") from None
        self._data: bytes | mmap.mmap = self._contents.data
        self._filled(0, _HEADER.size)
        if len(self._data) < _HEADER.size:
            raise CoreFileError(f"{path}: too short for a Mach-O header")
        magic, cpu_type, _subtype, file_type, ncmds, sizeofcmds, _flags = _HEADER.unpack_from(
            self._data, 0
        )
        if magic != MH_MAGIC_64 or file_type != MH_CORE:
            raise CoreFileError(f"{path}: not a 64-bit Mach-O core")
        arch = arch_by_macho_cpu_type(cpu_type)
        if arch is None or arch.macho is None:
            raise CoreFileError(f"{path}: unsupported CPU type {cpu_type:#x}")
        self.arch: Arch = arch
        self._cpu_type = cpu_type
        self._thread_states = arch.macho
        self._filled(_HEADER.size, sizeofcmds)
        self.segments: list[CoreSegment] = []
        self._thread_commands: list[tuple[int, int]] = []
        self._notes: dict[str, tuple[int, int]] = {}
        try:
            commands = load_commands(self._data, ncmds, sizeofcmds)
        except FormatError as error:
            raise CoreFileError(f"{path}: {error}") from None
        for command, offset, size in commands:
            if command == LC_SEGMENT_64:
                self._segment(offset, size)
            elif command in (LC_THREAD, LC_UNIXTHREAD):
                self._thread_commands.append((offset + 8, offset + size))
            elif command == LC_NOTE and size >= _NOTE.size:
                _, _, owner, note_offset, note_size = _NOTE.unpack_from(self._data, offset)
                if note_offset + note_size > len(self._data):
                    raise CoreFileError(f"{path}: LC_NOTE data runs past the end of the file")
                self._filled(note_offset, note_size)
                self._notes.setdefault(c_string(owner), (note_offset, note_size))
        self.segments.sort(key=lambda segment: segment.vmaddr)
        self._starts = [segment.vmaddr for segment in self.segments]
        self._images: list[CoreImage] | None = None
        self._search_cache: list[str] | None = None

    def _segment(self, offset: int, size: int) -> None:
        if size < _SEGMENT.size:
            raise CoreFileError(f"{self.path}: short LC_SEGMENT_64")
        _, _, _, vmaddr, vmsize, fileoff, filesize, _, initprot, _, _ = _SEGMENT.unpack_from(
            self._data, offset
        )
        if fileoff + filesize > len(self._data):
            raise CoreFileError(
                f"{self.path}: segment at {vmaddr:#x} runs past the end of the file"
            )
        if vmsize:
            self.segments.append(CoreSegment(vmaddr, vmsize, fileoff, filesize, initprot))

    def _filled(self, offset: int, size: int) -> None:
        """Makes ``_data[offset:offset + size]`` hold the file's bytes; CoreFileError if changed."""
        try:
            self._contents.fill(offset, size)
        except (FileError, FormatError) as error:
            raise CoreFileError(str(error)) from None

    def close(self) -> None:
        self._contents.close()

    def __enter__(self) -> MachOCore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- memory ----------------------------------------------------------------------

    def read(self, address: int, size: int) -> bytes:
        """Target memory; bytes a segment covers but the file omits read as zeros."""
        if size < 0:
            raise MemoryReadError(address, size, "negative size")
        chunks = []
        position, remaining = address, size
        while remaining:
            index = bisect_right(self._starts, position) - 1
            if index < 0 or position >= self.segments[index].end:
                raise MemoryReadError(address, size, "not in the core")
            segment = self.segments[index]
            inside = position - segment.vmaddr
            take = min(remaining, segment.end - position)
            present = max(0, min(take, segment.filesize - inside))
            start = segment.fileoff + inside
            try:
                self._contents.fill(start, present)
            except (FileError, FormatError) as error:
                raise MemoryReadError(address, size, str(error)) from None
            chunks.append(bytes(self._data[start : start + present]))
            chunks.append(bytes(take - present))
            position += take
            remaining -= take
        return b"".join(chunks)

    def mappings(self) -> list[Mapping]:
        """One mapping per core segment; those inside a found image carry its file and offset."""
        owners = []
        for image in self.images():
            if not image.path:
                continue
            inode = os.stat(image.path).st_ino or 1
            for _name, start, end in image.segments:
                owners.append((start, end, image, inode))
        result = []
        for segment in self.segments:
            path, inode, offset = "", 0, 0
            for start, end, image, image_inode in owners:
                if start <= segment.vmaddr < end:
                    path, inode = image.path, image_inode
                    offset = self._file_offset(image, segment.vmaddr)
                    break
            result.append(Mapping(segment.vmaddr, segment.end, segment.perms, offset, inode, path))
        return result

    def _file_offset(self, image: CoreImage, address: int) -> int:
        """The file offset of runtime ``address`` in ``image``, from its header's segments."""
        info = self._header_at(image.load_address)
        if info is None:
            return 0
        text = next((s for s in info.segments if s.name == "__TEXT"), None)
        slide = image.load_address - text.vmaddr if text is not None else 0
        for segment in info.segments:
            if segment.vmaddr + slide <= address < segment.vmaddr + slide + segment.vmsize:
                return segment.fileoff + address - (segment.vmaddr + slide)
        return 0

    def open_mapped_file(self, mapping: Mapping) -> RegularFile | None:
        if not mapping.path:
            return None
        try:
            return open_file(mapping.path)
        except FileError:
            return None

    # -- threads -----------------------------------------------------------------------

    def threads(self) -> list[ThreadState]:
        """One thread per LC_THREAD, numbered from 1 in command order (cores have no tids)."""
        return [
            ThreadState(tid=number, name="", registers=self._registers(start, end))
            for number, (start, end) in enumerate(self._thread_commands, 1)
        ]

    def _registers(self, start: int, end: int) -> dict[int, int]:
        registers: dict[int, int] = {}
        position = start
        for _ in range(64):
            if position + 8 > end:
                break
            flavor, count = struct.unpack_from("<2I", self._data, position)
            position += 8
            state_end = position + 4 * count
            if state_end > end:
                raise CoreFileError(f"{self.path}: thread state {flavor} runs past LC_THREAD")
            self._decode_state(flavor, position, state_end, registers)
            position = state_end
        return registers

    def _decode_state(self, flavor: int, start: int, end: int, registers: dict[int, int]) -> None:
        """Adds the registers of one thread state (the architecture knows its flavors)."""
        data, size, states = self._data, end - start, self._thread_states
        if flavor == states.unified_flavor and size >= 8:
            inner, _count = struct.unpack_from("<2I", data, start)
            self._decode_state(inner, start + 8, end, registers)
            return
        known = states.thread_states.get(flavor)
        if known is not None and size >= known[0]:
            registers.update(known[1](data[start:end]))

    # -- images ------------------------------------------------------------------------

    def images(self) -> list[CoreImage]:
        """The loaded images, from the "all image infos" note or else from headers in memory."""
        if self._images is None:
            found = self._images_from_note()
            if found is None:
                found = self._images_from_memory()
            for image in found:
                image.path = self._find_file(image)
            self._images = found
        return self._images

    def _images_from_note(self) -> list[CoreImage] | None:
        note = self._notes.get(ALL_IMAGE_INFOS)
        if note is None:
            return None
        offset, size = note
        if size < _IMAGE_INFOS.size:
            raise CoreFileError(f"{self.path}: short all-image-infos note")
        version, count, entries, entry_size, _ = _IMAGE_INFOS.unpack_from(self._data, offset)
        if version != 1 or entry_size < _IMAGE_ENTRY.size or count > _MAX_IMAGES:
            raise CoreFileError(
                f"{self.path}: all-image-infos version {version}, {count} entries "
                f"of {entry_size} bytes is not a layout we know"
            )
        if entries + count * entry_size > len(self._data):
            raise CoreFileError(f"{self.path}: all-image-infos entries run past the file")
        self._filled(entries, count * entry_size)
        images = []
        for index in range(count):
            path_offset, uuid, load, segs_offset, seg_count, _ = _IMAGE_ENTRY.unpack_from(
                self._data, entries + index * entry_size
            )
            name = self._string_at(path_offset) if path_offset != 2**64 - 1 else ""
            segments = []
            if segs_offset != 2**64 - 1 and seg_count <= _MAX_SEGMENTS_PER_IMAGE:
                if segs_offset + seg_count * _SEGMENT_VMADDR.size > len(self._data):
                    raise CoreFileError(f"{self.path}: image segment list runs past the file")
                self._filled(segs_offset, seg_count * _SEGMENT_VMADDR.size)
                for number in range(seg_count):
                    seg_name, vmaddr, _ = _SEGMENT_VMADDR.unpack_from(
                        self._data, segs_offset + number * _SEGMENT_VMADDR.size
                    )
                    segments.append((c_string(seg_name), vmaddr))
            images.append(self._image(name, uuid if any(uuid) else None, load, segments))
        return images

    def _image(
        self, name: str, uuid: bytes | None, load: int, vmaddrs: list[tuple[str, int]]
    ) -> CoreImage:
        """Completes an image from its header in core memory (load address, sizes, UUID)."""
        if load == 2**64 - 1:
            text = next((vmaddr for seg_name, vmaddr in vmaddrs if seg_name == "__TEXT"), None)
            load = text if text is not None else 0
        info = self._header_at(load)
        segments: list[tuple[str, int, int]] = []
        if info is not None:
            uuid = uuid or info.uuid
            text_segment = next((s for s in info.segments if s.name == "__TEXT"), None)
            slide = load - text_segment.vmaddr if text_segment is not None else 0
            runtime = dict(vmaddrs)
            for segment in info.segments:
                if segment.vmsize and segment.name != "__PAGEZERO":
                    start = runtime.get(segment.name, segment.vmaddr + slide)
                    segments.append((segment.name, start, start + segment.vmsize))
        return CoreImage(name=name, uuid=uuid, load_address=load, segments=segments)

    def _images_from_memory(self) -> list[CoreImage]:
        """Mach-O headers at page starts of the core's memory, each one an image."""
        images = []
        for segment in self.segments:
            start = (segment.vmaddr + _PAGE - 1) // _PAGE * _PAGE
            for address in range(start, segment.vmaddr + segment.filesize - 32, _PAGE):
                if self.read(address, 4) != b"\xcf\xfa\xed\xfe":
                    continue
                info = self._header_at(address)
                if info is not None and info.file_type in _IMAGE_FILE_TYPES:
                    images.append(self._image("", info.uuid, address, []))
        return images

    def _header_at(self, address: int) -> MachOHeader | None:
        try:
            header = self.read(address, _HEADER.size)
            magic, _, _, _, _, sizeofcmds, _ = _HEADER.unpack(header)
            if magic != MH_MAGIC_64 or sizeofcmds > _MAX_HEADER_BYTES:
                return None
            commands = self.read(address + _HEADER.size, sizeofcmds)
        except MemoryReadError:
            return None
        return parse_header(header + commands)

    def _string_at(self, offset: int) -> str:
        if offset >= len(self._data):
            raise CoreFileError(f"{self.path}: image path offset {offset:#x} is past the file")
        self._filled(offset, 4096)
        return c_string(bytes(self._data[offset : offset + 4096]))

    # -- finding image files -------------------------------------------------------------

    def _find_file(self, image: CoreImage) -> str:
        """A regular file whose UUID is the image's: its own path first, then the search path."""
        if image.uuid is None:
            return image.name if image.name and os.path.isfile(image.name) else ""
        if image.name and file_uuid(image.name, self._cpu_type) == image.uuid:
            return image.name
        basename = os.path.basename(image.name) if image.name else None
        candidates = list(self._search_files())
        if basename:  # files with the recorded name first
            candidates.sort(key=lambda candidate: os.path.basename(candidate) != basename)
        for candidate in candidates:
            if file_uuid(candidate, self._cpu_type) == image.uuid:
                return candidate
        return ""

    def _search_files(self) -> list[str]:
        if self._search_cache is None:
            files: list[str] = []
            for entry in self.search_path:
                if os.path.isfile(entry):
                    files.append(entry)
                    continue
                for root, _dirs, names in os.walk(entry):
                    for name in sorted(names):
                        candidate = os.path.join(root, name)
                        if os.path.isfile(candidate) and not os.path.islink(candidate):
                            files.append(candidate)
                        if len(files) >= _MAX_SEARCH_FILES:
                            break
                    if len(files) >= _MAX_SEARCH_FILES:
                        break
            self._search_cache = files
        return self._search_cache


def parse_header(data: bytes) -> MachOHeader | None:
    """A Mach-O header with its load commands; None if malformed."""
    try:
        return MachOHeader(data)
    except FormatError:
        return None


def file_uuid(path: str, cpu_type: int) -> bytes | None:
    """LC_UUID of the ``cpu_type`` image in a thin or universal Mach-O file, or None."""
    try:
        with open_file(path) as file:
            head = file.read(_PAGE)
            if len(head) < 8:
                return None
            slices = fat_slices(head)
            offset = 0
            if slices is not None:
                offset = next((s.offset for s in slices if s.cpu_type == cpu_type), -1)
                if offset < 0:
                    return None
            header = file.pread(_HEADER.size, offset)
            if len(header) < _HEADER.size:
                return None
            magic, cpu, _, _, _, sizeofcmds, _ = _HEADER.unpack(header)
            if magic != MH_MAGIC_64 or cpu != cpu_type or sizeofcmds > _MAX_HEADER_BYTES:
                return None
            info = parse_header(header + file.pread(sizeofcmds, offset + _HEADER.size))
    except (FileError, FormatError):
        return None
    return None if info is None else info.uuid
