"""What a target without /proc has loaded where, and which files on this machine those are.

A target seen through a debugger stub, and a core without an NT_FILE note
(QEMU's, some gdb cores), have no list of mappings.  The auxiliary vector
places the executable (``AT_ENTRY`` against the file's entry point) and the
vDSO (``AT_SYSINFO_EHDR``); the dynamic linker's own list — from the stub's
``qXfer:libraries-svr4`` or read from memory through ``DT_DEBUG``
(:mod:`liveunwind.targets.linkmap`) — places each shared object by its load
bias.  The mappings are made from the files' PT_LOAD headers, so the rest
of liveunwind sees what /proc/PID/maps would have shown for the code.

Every file of such a target, and every file an ELF core's NT_FILE note
names, is looked for on this machine
(:class:`~liveunwind.targets.filefinder.FileFinder`: ``--sysroot``,
``--search-path``, build-id folders) and used only if it is the one loaded:
built for the target's machine, the build-id in the ELF headers in target
memory, the executable's entry point and program headers, a library's
dynamic section at ``l_ld``.
"""

from __future__ import annotations

import os

from liveunwind.errors import FormatError, MemoryReadError, UsageError
from liveunwind.formats.auxv import (
    AT_BASE,
    AT_ENTRY,
    AT_EXECFN,
    AT_PHDR,
    AT_PHNUM,
    AT_SYSINFO_EHDR,
)
from liveunwind.formats.elf import PT_DYNAMIC, PT_LOAD, ElfImage, machine_name
from liveunwind.targets import linkmap
from liveunwind.targets.base import Mapping
from liveunwind.targets.filefinder import FoundFile, open_image

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from liveunwind.arch import Arch, ReadMemory
    from liveunwind.formats.elf import ProgramHeader
    from liveunwind.targets.filefinder import FileFinder

    #: Says why an image is not the one loaded, or None when it is.
    Check = Callable[[ElfImage], str | None]

_PAGE = linkmap.PAGE_SIZE
#: Largest vDSO accepted (real ones are two to four pages).
_MAX_VDSO = 64 * _PAGE
_PT_INTERP = 3
_PT_PHDR = 6
_ET_EXEC = 2


class WrongExecutable(UsageError):
    """The EXE the user named is not the target's executable; ``reason`` says why."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path} is not the target's executable: {reason}")
        self.path = path
        self.reason = reason


class LoadedFiles:
    """The files one target has loaded, as found on this machine (each looked for once)."""

    def __init__(
        self,
        arch: Arch,
        read_memory: ReadMemory,
        finder: FileFinder,
        *,
        header_read: int = _PAGE,
        target: str = "the target",
        problems: list[str] | None = None,
    ) -> None:
        self.arch = arch
        #: Reads target memory itself (never a local file): build-ids, the loader's list.
        self._read = read_memory
        self._finder = finder
        #: Bytes read first for an ELF header in memory (a page, or what one request carries).
        self._header_read = min(header_read, _PAGE)
        #: What messages call the target ("the core": its build-ids are in the core).
        self._target = target
        #: Shared with the caller's list when given, so later finds report there too.
        self.problems: list[str] = [] if problems is None else problems
        self._files: dict[str, FoundFile | None] = {}
        self._inodes: dict[str, int] = {}
        #: Which local file stands for a recorded path that is not here, and how it was matched.
        self.matches: list[str] = []

    def file(self, mapping: Mapping) -> FoundFile | None:
        """The file found for a file mapping this made, if one was."""
        return self._files.get(mapping.path) if mapping.is_file else None

    def find(
        self,
        recorded: str,
        header: int | None,
        check: Check | None = None,
        *,
        layout: Check | None = None,
        first: str | None = None,
        unused: str = "",
    ) -> FoundFile | None:
        """This machine's copy of the target's ``recorded`` (cached, None too).

        It must be built for the target, have the build-id of the ELF headers
        at ``header`` in target memory (when they are there) and pass
        ``check``; without a build-id to compare, it must pass ``layout``
        too (the file's segments explain every mapping of it: matched by
        name and size).  ``first`` is tried before every other candidate
        (the EXE the user named).  When none is found, the problem says why,
        followed by ``unused`` (what that costs).  A file found elsewhere
        than ``recorded`` says how it was matched in :attr:`matches`.
        """
        if recorded in self._files:
            return self._files[recorded]
        build_id = self._build_id_at(header)
        if build_id is None and layout is not None:
            check = _both(check, layout)
        accept = self._acceptor(build_id, check)
        found, rejected = self._finder.find(recorded, build_id, accept, first=first)
        self._files[recorded] = found
        if found is None:
            why = (
                "not using " + "; ".join(rejected) if rejected else "file not found on this machine"
            )
            self.problems.append(f"{recorded}: {why}{unused}")
            return None
        if build_id is not None:
            found.matched = f"by build-id {build_id.hex()}"
        elif layout is not None:
            found.matched = "by name and size (the core holds no build-id for it)"
        else:
            found.matched = "by name (the target holds no build-id for it)"
        if found.path != recorded:
            self.matches.append(f"{recorded}: using {found.path}, matched {found.matched}")
        return found

    def adopt(self, path: str, found: FoundFile) -> None:
        """``path`` (a mapping's new name for a file found under another) is ``found``."""
        self._files[path] = found

    def use_executable(
        self, path: str, recorded: str, auxv: dict[int, int], header: int | None
    ) -> None:
        """The EXE the user named stands for ``recorded``; WrongExecutable if it is not it."""
        self._files[recorded] = self._executable_argument(path, auxv, header)

    def execfn(self, auxv: dict[int, int]) -> str:
        """``AT_EXECFN``: the executable's path as it was started ("" if unknown)."""
        address = auxv.get(AT_EXECFN)
        return linkmap.read_c_string(self._read, address) if address else ""

    def inode(self, path: str) -> int:
        """Inodes are not known: a number per path keeps a file's mappings together."""
        return self._inodes.setdefault(path, len(self._inodes) + 1)

    def mappings(
        self,
        auxv: dict[int, int],
        recorded: str,
        executable: str | None,
        loader_list: Callable[[], list[linkmap.LoadedObject] | None] | None = None,
        vdso_extent: Callable[[int], list[Mapping]] | None = None,
    ) -> list[Mapping]:
        """Mappings of the executable, every library and the vDSO, sorted, none overlapping.

        ``recorded`` is the executable's path as the target knows it ("" if
        the stub does not say; then ``AT_EXECFN`` is read), ``executable``
        the file the user named for it, and ``loader_list`` gives the
        loader's list when someone else has read it (without it, or when it
        gives None, the list is read from memory here).  ``vdso_extent``
        maps the vDSO when the caller knows its size (a core's segment);
        else the ELF headers in memory say.
        """
        recorded = recorded or self.execfn(auxv)
        mappings: list[Mapping] = []
        found = self._executable(auxv, recorded, executable)
        if found is not None:
            path, image, bias = found
            mappings += linkmap.mappings_of_image(image, bias, path, self.inode(path))
            mappings += self._libraries(image, bias, auxv, loader_list)
        vdso = auxv.get(AT_SYSINFO_EHDR)
        if vdso:
            mappings += (vdso_extent or self._vdso)(vdso)
        return without_overlaps(mappings)

    # -- the executable -----------------------------------------------------------

    def _executable(
        self, auxv: dict[int, int], recorded: str, executable: str | None
    ) -> tuple[str, ElfImage, int] | None:
        """The path the executable's mappings carry, its image, and its load bias."""
        phdr = auxv.get(AT_PHDR)
        header = None if phdr is None else phdr - phdr % _PAGE
        found: FoundFile | None
        if executable is not None:
            found = self._executable_argument(executable, auxv, header)
        elif recorded:
            found = self.find(recorded, header, executable_check(auxv, self._target))
        else:
            self.problems.append("the target names no executable; give it as EXE")
            return None
        if found is None:
            return None
        if not recorded.startswith("/"):
            recorded = os.path.abspath(found.path)  # QEMU records the program as it was run
        self._files[recorded] = found
        entry = auxv.get(AT_ENTRY, found.image.entry)
        return recorded, found.image, entry - found.image.entry

    def _executable_argument(
        self, path: str, auxv: dict[int, int], header: int | None
    ) -> FoundFile:
        """The EXE the user named, if it passes every check the found one would."""
        image = open_image(path)
        if image is None:
            raise WrongExecutable(path, "it is not a readable ELF file")
        check = executable_check(auxv, self._target)
        reason = self._acceptor(self._build_id_at(header), check)(image)
        if reason is not None:
            raise WrongExecutable(path, reason)
        return FoundFile(path, image)

    # -- libraries and the vDSO ---------------------------------------------------

    def _libraries(
        self,
        image: ElfImage,
        bias: int,
        auxv: dict[int, int],
        loader_list: Callable[[], list[linkmap.LoadedObject] | None] | None,
    ) -> list[Mapping]:
        """Every shared object on the loader's list; just the dynamic linker if there is none."""
        objects = loader_list() if loader_list is not None else None
        if objects is None:
            head = linkmap.first_link_map(self._read, image, bias)
            objects = []
            if head is not None:
                objects, problems = linkmap.follow_link_map(self._read, head)
                self.problems += problems
            elif auxv.get(AT_BASE):
                interpreter = _interpreter(image)
                if interpreter:
                    objects = [linkmap.LoadedObject(interpreter, auxv[AT_BASE], 0)]
        vdso = auxv.get(AT_SYSINFO_EHDR)
        mappings = []
        for loaded in objects:
            if not loaded.name and loaded.base and loaded.base == auxv.get(AT_BASE):
                # ld.so's l_name is often "" (or points into the executable's
                # PT_INTERP, in read-only memory that QEMU does not dump).
                loaded = loaded._replace(name=_interpreter(image))
            if not loaded.name.startswith("/") or loaded.base in (vdso, bias):
                continue  # the executable itself, the vDSO, or a name that is no path
            found = self.find(loaded.name, loaded.base, _dynamic_check(loaded, self._target))
            if found is not None:
                inode = self.inode(loaded.name)
                mappings += linkmap.mappings_of_image(found.image, loaded.base, loaded.name, inode)
        return mappings

    def _vdso(self, vdso: int) -> list[Mapping]:
        """The vDSO's extent, from the program headers of its image in memory."""
        image = self._image_in_memory(vdso)
        try:
            loads = [] if image is None else image.segments_of_type(PT_LOAD)
        except FormatError:
            loads = []
        if not loads:
            self.problems.append(f"[vdso] at {vdso:#x}: no ELF image there")
            return []
        end = max(load.vaddr + load.memsz for load in loads) - min(load.vaddr for load in loads)
        size = min(end + (-end % _PAGE), _MAX_VDSO)
        return [Mapping(vdso, vdso + size, "r-xp", 0, 0, "[vdso]")]

    # -- matching files -------------------------------------------------------------

    def _acceptor(self, build_id: bytes | None, check: Check | None) -> Check:
        """Says why an image is not the loaded one: machine, build-id ``build_id``, ``check``."""
        arch, target = self.arch, self._target

        def accept(image: ElfImage) -> str | None:
            if image.machine != arch.elf_machine:
                return f"it is built for {machine_name(image.machine)}, {target} is {arch.name}"
            if build_id is not None:
                try:
                    theirs = image.build_id
                except FormatError:
                    theirs = None
                if theirs != build_id:
                    shown = theirs.hex() if theirs else "(none)"
                    return f"its build-id {shown} differs from {build_id.hex()} in {target}"
            return None if check is None else check(image)

        return accept

    def _build_id_at(self, address: int | None) -> bytes | None:
        """The build-id in the ELF headers at ``address`` in target memory, if there are any."""
        image = self._image_in_memory(address) if address else None
        try:
            return None if image is None else image.build_id
        except FormatError:
            return None

    def _image_in_memory(self, address: int) -> ElfImage | None:
        """The ELF headers at page ``address`` of target memory: the first read, or the page.

        The program headers and the build-id note sit in the first few hundred
        bytes of every image the loader maps, so the first read usually does.
        """
        if address % _PAGE:
            return None
        for size in dict.fromkeys((self._header_read, _PAGE)):
            try:
                image = ElfImage(self._read(address, size), origin="target memory")
                image.segments  # noqa: B018 - checks the program headers are all there
                image.build_id  # noqa: B018 - and the notes
            except FormatError:
                continue
            except MemoryReadError:
                return None
            return image
        return None


def executable_check(auxv: dict[int, int], target: str) -> Check:
    """The auxiliary vector fixes the executable's entry point and program headers."""
    entry, phdr, phnum = auxv.get(AT_ENTRY), auxv.get(AT_PHDR), auxv.get(AT_PHNUM)

    def check(image: ElfImage) -> str | None:
        if entry is None:
            return None
        bias = entry - image.entry
        if image.type == _ET_EXEC and bias != 0:
            return f"its entry point is {image.entry:#x}, {target}'s is {entry:#x}"
        if bias % _PAGE:
            return f"its entry point {image.entry:#x} cannot have been loaded at {entry:#x}"
        try:
            segments = image.segments
        except FormatError as error:
            return str(error)
        if phnum is not None and phnum != len(segments):
            return f"it has {len(segments)} program headers, {target}'s executable has {phnum}"
        headers = [header for header in segments if header.type == _PT_PHDR]
        if phdr is not None and headers and headers[0].vaddr + bias != phdr:
            return f"its program headers are not where {target}'s executable has them"
        return None

    return check


def _dynamic_check(loaded: linkmap.LoadedObject, target: str) -> Check:
    """A library is the loaded one if its dynamic section sits where ``l_ld`` says."""

    def check(image: ElfImage) -> str | None:
        if not loaded.dynamic:
            return None
        try:
            dynamic = image.segments_of_type(PT_DYNAMIC)
        except FormatError as error:
            return str(error)
        if not dynamic or dynamic[0].vaddr + loaded.base != loaded.dynamic:
            return f"its dynamic section is not at {loaded.dynamic:#x} where {target}'s is"
        return None

    return check


def _both(first: Check | None, second: Check) -> Check:
    """A check that passes when ``first`` (if any) and then ``second`` pass."""

    def check(image: ElfImage) -> str | None:
        reason = None if first is None else first(image)
        return reason if reason is not None else second(image)

    return check


def layout_check(mappings: list[tuple[int, int, int]], target: str) -> Check:
    """A file whose PT_LOADs map as ``mappings`` (start, end, file offset) say: same name and size.

    Without a build-id to compare, a file of the same name is taken only if
    every mapping lies in one of its segments, at the offset that segment
    has in the file, all at one load bias, and the file is large enough to
    hold every page mapped from it.  The bias comes from the mapping at
    offset 0, which holds the first PT_LOAD (and the ELF header).
    """

    def check(image: ElfImage) -> str | None:
        try:
            loads = image.segments_of_type(PT_LOAD)
        except FormatError as error:
            return str(error)
        heads = [start for start, _end, offset in mappings if offset == 0]
        if not loads or not heads:
            return None  # nothing to compare: the name decides
        first = loads[0]
        bias = min(heads) - (first.vaddr - first.vaddr % _PAGE)
        for start, end, offset in mappings:
            if offset >= len(image.data):
                return f"it is {len(image.data)} bytes, {target} maps it from offset {offset:#x}"
            address = start - bias
            if not any(_maps(load, address, end - start, offset) for load in loads):
                return f"no segment of it is mapped at {start:#x} from offset {offset:#x}"
        return None

    return check


def _maps(load: ProgramHeader, address: int, size: int, offset: int) -> bool:
    """True if ``load`` maps ``size`` bytes at link-time ``address`` from file ``offset``."""
    page_vaddr = load.vaddr - load.vaddr % _PAGE
    page_offset = load.offset - load.offset % _PAGE
    end = load.vaddr + load.memsz
    if not page_vaddr <= address < end or address + size > end + (-end % _PAGE):
        return False
    return offset - page_offset == address - page_vaddr


def _interpreter(image: ElfImage) -> str:
    """The PT_INTERP path of an executable ("" for static ones)."""
    try:
        headers = [header for header in image.segments if header.type == _PT_INTERP]
        if not headers:
            return ""
        return bytes(image.segment_data(headers[0])).split(b"\0", 1)[0].decode("utf-8", "replace")
    except FormatError:
        return ""


def without_overlaps(mappings: list[Mapping]) -> list[Mapping]:
    """Sorted by start; a mapping overlapping an earlier one is dropped (a confused target)."""
    result: list[Mapping] = []
    for mapping in sorted(mappings, key=lambda m: (m.start, m.end)):
        if result and mapping.start < result[-1].end:
            continue
        result.append(mapping)
    return result
