"""What a process without /proc has loaded where, and which files on this machine those are.

A target seen through a debugger stub has no ``/proc/PID/maps``.  Its
auxiliary vector places the executable (``AT_ENTRY`` against the file's
entry point) and the vDSO (``AT_SYSINFO_EHDR``); the dynamic linker's own
list — from the stub's ``qXfer:libraries-svr4`` or read from memory through
``DT_DEBUG`` (:mod:`liveunwind.targets.linkmap`) — places each shared
object by its load bias.  Each file is looked for on this machine
(:class:`~liveunwind.targets.filefinder.FileFinder`: ``--sysroot``,
``--search-path``, build-id folders) and used only if it is the one loaded:
the build-id in the ELF headers in target memory, the executable's entry
point and program header count, a library's dynamic section at ``l_ld``.
The mappings are made from the files' PT_LOAD headers, so the rest of
liveunwind sees what /proc/PID/maps would have shown for the code.
"""

from __future__ import annotations

import os

from liveunwind.errors import FormatError, MemoryReadError, UsageError
from liveunwind.formats.corenotes import (
    AT_BASE,
    AT_ENTRY,
    AT_EXECFN,
    AT_PHDR,
    AT_PHNUM,
    AT_SYSINFO_EHDR,
)
from liveunwind.formats.elf import PT_DYNAMIC, PT_LOAD, ElfImage
from liveunwind.targets import linkmap
from liveunwind.targets.base import Mapping
from liveunwind.targets.filefinder import FoundFile, open_image

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from liveunwind.arch import Arch, ReadMemory
    from liveunwind.targets.filefinder import FileFinder

    #: Says why an image is not the one loaded, or None when it is.
    Check = Callable[[ElfImage], str | None]

_PAGE = linkmap.PAGE_SIZE
#: Largest vDSO accepted (real ones are two to four pages).
_MAX_VDSO = 64 * _PAGE
#: PT_INTERP.
_PT_INTERP = 3


class LoadedFiles:
    """The files one target has loaded, as found on this machine."""

    def __init__(
        self, arch: Arch, read_memory: ReadMemory, finder: FileFinder, *, header_read: int = _PAGE
    ) -> None:
        self.arch = arch
        #: Reads target memory itself (never a local file): build-ids, the loader's list.
        self._read = read_memory
        self._finder = finder
        #: Bytes read first for an ELF header in memory (a page, or what one request carries).
        self._header_read = min(header_read, _PAGE)
        self.problems: list[str] = []
        self._files: dict[str, FoundFile] = {}
        self._inodes: dict[str, int] = {}

    def file(self, mapping: Mapping) -> FoundFile | None:
        """The file found for a file mapping this made, if one was."""
        return self._files.get(mapping.path) if mapping.is_file else None

    def mappings(
        self,
        auxv: dict[int, int],
        recorded: str,
        executable: str | None,
        loader_list: Callable[[], list[linkmap.LoadedObject] | None],
    ) -> list[Mapping]:
        """Mappings of the executable, every library and the vDSO.

        ``recorded`` is the executable's path as the target knows it ("" if
        the stub does not say; then ``AT_EXECFN`` is read), ``executable``
        the file the user named for it, and ``loader_list`` gives the
        loader's list when someone else has read it (else None: it is read
        from memory here).
        """
        if not recorded and auxv.get(AT_EXECFN):
            recorded = linkmap.read_c_string(self._read, auxv[AT_EXECFN])
        mappings: list[Mapping] = []
        found = self._executable(auxv, recorded, executable)
        if found is not None:
            path, image, bias = found
            mappings += linkmap.mappings_of_image(image, bias, path, self._inode(path))
            mappings += self._libraries(image, bias, auxv, loader_list)
        vdso = auxv.get(AT_SYSINFO_EHDR)
        if vdso:
            mappings += self._vdso(vdso)
        return _without_overlaps(mappings)

    # -- the executable -----------------------------------------------------------

    def _executable(
        self, auxv: dict[int, int], recorded: str, executable: str | None
    ) -> tuple[str, ElfImage, int] | None:
        """The path the executable's mappings carry, its image, and its load bias."""
        check = self._executable_check(auxv)
        found: FoundFile | None
        if executable is not None:
            image = open_image(executable)
            reason = "it is not a readable ELF file" if image is None else check(image)
            if reason is not None:
                raise UsageError(f"{executable} is not the target's executable: {reason}")
            assert image is not None
            found = FoundFile(executable, image)
            recorded = recorded or os.path.abspath(executable)
        elif recorded:
            phdr = auxv.get(AT_PHDR)
            header = None if phdr is None else phdr - phdr % _PAGE
            found = self._find(recorded, self._build_id_at(header), check)
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

    def _executable_check(self, auxv: dict[int, int]) -> Check:
        """The auxiliary vector fixes the executable's machine, entry point and header count."""
        arch = self.arch

        def check(image: ElfImage) -> str | None:
            if image.machine != arch.elf_machine:
                return f"it is not built for {arch.name}"
            entry, phnum = auxv.get(AT_ENTRY), auxv.get(AT_PHNUM)
            if entry is None:
                return None
            bias = entry - image.entry
            if image.type == 2 and bias != 0:
                return f"its entry point is {image.entry:#x}, the target's is {entry:#x}"
            if bias % _PAGE:
                return f"its entry point {image.entry:#x} cannot have been loaded at {entry:#x}"
            try:
                count = len(image.segments)
            except FormatError as error:
                return str(error)
            if phnum is not None and phnum != count:
                return f"it has {count} program headers, the target's executable has {phnum}"
            return None

        return check

    # -- libraries and the vDSO ---------------------------------------------------

    def _libraries(
        self,
        image: ElfImage,
        bias: int,
        auxv: dict[int, int],
        loader_list: Callable[[], list[linkmap.LoadedObject] | None],
    ) -> list[Mapping]:
        """Every shared object on the loader's list; just the dynamic linker if there is none."""
        objects = loader_list()
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
                loaded = loaded._replace(name=_interpreter(image))  # ld.so's l_name is often ""
            if not loaded.name.startswith("/") or loaded.base in (vdso, bias):
                continue  # the executable itself, the vDSO, or a name that is no path
            check = _dynamic_check(loaded, self.arch)
            found = self._find(loaded.name, self._build_id_at(loaded.base), check)
            if found is not None:
                self._files[loaded.name] = found
                inode = self._inode(loaded.name)
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

    def _find(self, recorded: str, build_id: bytes | None, check: Check) -> FoundFile | None:
        """This machine's copy of the target's ``recorded``, checked by build-id and ``check``."""

        def accept(image: ElfImage) -> str | None:
            if build_id is not None:
                try:
                    theirs = image.build_id
                except FormatError:
                    theirs = None
                if theirs != build_id:
                    shown = theirs.hex() if theirs else "(none)"
                    return f"its build-id {shown} differs from {build_id.hex()} in the target"
            return check(image)

        found, rejected = self._finder.find(recorded, build_id, accept)
        if found is None:
            if rejected:
                self.problems.append(f"{recorded}: not using " + "; ".join(rejected))
            else:
                self.problems.append(f"{recorded}: file not found on this machine")
        return found

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

    def _inode(self, path: str) -> int:
        """The target's inodes are not known: a number per path keeps a file's mappings together."""
        return self._inodes.setdefault(path, len(self._inodes) + 1)


def _dynamic_check(loaded: linkmap.LoadedObject, arch: Arch) -> Check:
    """A library is the loaded one if it is built for ``arch`` with its dynamic section at l_ld."""

    def check(image: ElfImage) -> str | None:
        if image.machine != arch.elf_machine:
            return f"it is not built for {arch.name}"
        if not loaded.dynamic:
            return None
        try:
            dynamic = image.segments_of_type(PT_DYNAMIC)
        except FormatError as error:
            return str(error)
        if not dynamic or dynamic[0].vaddr + loaded.base != loaded.dynamic:
            return f"its dynamic section is not at {loaded.dynamic:#x} where the loaded one is"
        return None

    return check


def _interpreter(image: ElfImage) -> str:
    """The PT_INTERP path of an executable ("" for static ones)."""
    try:
        headers = [header for header in image.segments if header.type == _PT_INTERP]
        if not headers:
            return ""
        return bytes(image.segment_data(headers[0])).split(b"\0", 1)[0].decode("utf-8", "replace")
    except FormatError:
        return ""


def _without_overlaps(mappings: list[Mapping]) -> list[Mapping]:
    """Sorted by start; a mapping overlapping an earlier one is dropped (a confused target)."""
    result: list[Mapping] = []
    for mapping in sorted(mappings, key=lambda m: (m.start, m.end)):
        if result and mapping.start < result[-1].end:
            continue
        result.append(mapping)
    return result
