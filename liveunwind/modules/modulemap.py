"""pc → Module: the loaded images of a target, their load bias, files and unwind sources.

Nothing is opened or parsed when the map is built; a module reads its file
the first time a pc lands in it.
"""

from __future__ import annotations

import bisect
import mmap
import os
from functools import cached_property

from liveunwind.errors import FormatError, LiveUnwindError
from liveunwind.formats.elf import PT_GNU_EH_FRAME, PT_GNU_SFRAME, ElfImage
from liveunwind.modules.debuginfo import DEFAULT_DEBUG_DIRS
from liveunwind.targets.base import Mapping

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Literal, Protocol

    from liveunwind.formats.dynamic import DynamicRegistry, RegistryRoots
    from liveunwind.formats.rules import UnwindRule
    from liveunwind.modules.debuginfo import DebugFile
    from liveunwind.modules.symbols import SymbolMatch, SymbolTable
    from liveunwind.targets.base import AddressSpace, CoreImage

#: Largest in-memory image (vDSO, JIT object) read from target memory.
_MAX_MEMORY_IMAGE = 64 << 20


class UnwindSource:
    """One unwind table of a module: the method it reports and the section it came from."""

    def __init__(self, method: str, label: str, table: UnwindTable) -> None:
        self.method = method
        self.label = label
        self.table = table
        self.rule_for = table.rule_for


if TYPE_CHECKING:

    class UnwindTable(Protocol):
        """A decoded unwind section: CfiTable, SFrameSection, a compact-unwind table…"""

        def rule_for(self, pc: int) -> UnwindRule | None: ...


class Module:
    """One loaded image: an ELF file mapped by the loader, the vDSO, or anonymous code."""

    def __init__(
        self,
        space: AddressSpace,
        mappings: list[Mapping],
        debug_dirs: Sequence[str] = DEFAULT_DEBUG_DIRS,
    ) -> None:
        self.space = space
        self.debug_dirs = debug_dirs
        self.mappings = mappings
        self.path = mappings[0].path
        self.start = mappings[0].start
        self.end = mappings[-1].end
        self.problems: list[str] = []

    @property
    def name(self) -> str:
        return os.path.basename(self.path) if self.path.startswith("/") else self.path

    @property
    def is_vdso(self) -> bool:
        return self.path == "[vdso]"

    # -- the image ----------------------------------------------------------

    @cached_property
    def image(self) -> ElfImage | None:
        """The module's ELF image, or None (anonymous code, missing or foreign file).

        A core has already opened and checked the file it found for the
        module (``mapped_image``); that image is used rather than a second one.
        """
        if not self.is_vdso:
            image = self.space.mapped_image(min(self.mappings, key=lambda mapping: mapping.offset))
            if image is not None:
                return image
        try:
            data = self._image_bytes()
            return None if data is None else ElfImage(data, origin=self.path)
        except (FormatError, OSError, LiveUnwindError) as error:
            self.problems.append(str(error))
            return None

    def _image_bytes(self) -> bytes | mmap.mmap | None:
        if self.is_vdso:
            size = min(self.end - self.start, _MAX_MEMORY_IMAGE)
            return self.space.read(self.start, size)
        first = min(self.mappings, key=lambda mapping: mapping.offset)
        stream = self.space.open_mapped_file(first)
        if stream is None:
            return None
        with stream:
            return mmap.mmap(stream.fileno(), 0, prot=mmap.PROT_READ)

    @cached_property
    def load_bias(self) -> int:
        """Runtime address minus link-time address, from the lowest-offset mapping."""
        first = min(self.mappings, key=lambda mapping: mapping.offset)
        image = self.image
        if image is None:
            return first.start - first.offset
        linked = image.vaddr_for_offset(first.offset)
        return first.start - (linked if linked is not None else first.offset)

    @cached_property
    def build_id(self) -> bytes | None:
        return None if self.image is None else self.image.build_id

    @cached_property
    def debug_file(self) -> DebugFile | None:
        """The separate debug file (or MiniDebugInfo) of a stripped image, looked up on demand."""
        if self.image is None or self.is_vdso:
            return None
        from liveunwind.modules.debuginfo import find_debug_file

        return find_debug_file(
            self.image, self.path, self.build_id, self.debug_dirs, problems=self.problems
        )

    # -- symbols ------------------------------------------------------------

    @cached_property
    def symbols(self) -> SymbolTable | None:
        """Function symbols of the image and, when it has one, of its debug file."""
        if self.image is None:
            return None
        from liveunwind.modules.symbols import SymbolTable

        images = [self.image]
        if self.debug_file is not None:
            images.append(self.debug_file.image)
        try:
            return SymbolTable(*images)
        except FormatError as error:
            self.problems.append(str(error))
            return None

    def symbolize(self, pc: int) -> SymbolMatch | None:
        table = self.symbols
        return None if table is None else table.lookup(pc - self.load_bias)

    @cached_property
    def registry_roots(self) -> RegistryRoots:
        """Runtime addresses of the JIT registry heads this module defines (usually none).

        Kept with the module, so a later backtrace that finds the module
        mapped as before does not look through its symbols again.
        """
        from liveunwind.formats.dynamic import RegistryRoots, find_roots

        if self.is_vdso or self.image is None:
            return RegistryRoots()
        try:
            return find_roots(self.image, self.load_bias)
        except FormatError as error:
            self.problems.append(f"{self.name}: {error}")
            return RegistryRoots()

    # -- unwind sources -----------------------------------------------------

    @cached_property
    def unwind_sources(self) -> dict[str, list[UnwindSource]]:
        """The module's unwind tables by method (``cfi``, ``sframe``), best first."""
        sources: dict[str, list[UnwindSource]] = {}
        if self.image is not None:
            for source in unwind_tables(self.image, self.problems):
                sources.setdefault(source.method, []).append(source)
            if not self.is_vdso:
                debug_frame = UnwindSource("cfi", "debug file", _DebugFileFrames(self))
                sources.setdefault("cfi", []).append(debug_frame)
        return sources


class _DebugFileFrames:
    """``.debug_frame`` of the module's separate debug file, looked for only when needed.

    Opening a debug file costs a search of the debug directories; it is done
    the first time a pc of the module has no rule in the module's own tables.
    """

    def __init__(self, module: Module) -> None:
        self._module = module
        self._table: UnwindTable | None = None
        self._loaded = False

    def rule_for(self, pc: int) -> UnwindRule | None:
        if not self._loaded:
            self._loaded = True
            debug_file = self._module.debug_file
            if debug_file is not None:
                source = _debug_frame(debug_file.image)
                self._table = None if source is None else source.table
        return None if self._table is None else self._table.rule_for(pc)


def unwind_tables(image: ElfImage, problems: list[str]) -> list[UnwindSource]:
    """Every unwind table an ELF image carries; a corrupt one is noted in ``problems``."""
    sources = []
    for builder in (_eh_frame, _debug_frame, _sframe):
        try:
            source = builder(image)
        except FormatError as error:
            problems.append(f"{image.origin}: {error}")
            continue
        if source is not None:
            sources.append(source)
    return sources


def _byte_order(image: ElfImage) -> Literal["little", "big"]:
    return "little" if image.byte_order == "<" else "big"


def _eh_frame(image: ElfImage) -> UnwindSource | None:
    """``.eh_frame``, searched through ``.eh_frame_hdr`` when there is one."""
    from liveunwind.formats.dwarf_cfi import CfiTable

    section = image.sections.get(".eh_frame")
    if section is None or section.size == 0:
        return None
    data = image.contents(section)
    if data is None:
        return None
    hdr_data, hdr_address = None, 0
    headers = image.segments_of_type(PT_GNU_EH_FRAME)
    if headers:
        hdr_data, hdr_address = image.segment_data(headers[0]), headers[0].vaddr
    table = CfiTable(
        data,
        section.address,
        kind="eh_frame",
        hdr=hdr_data,
        hdr_address=hdr_address,
        byte_order=_byte_order(image),
    )
    return UnwindSource("cfi", ".eh_frame", table)


def _debug_frame(image: ElfImage) -> UnwindSource | None:
    """``.debug_frame``, decompressed if the toolchain compressed it."""
    from liveunwind.formats.dwarf_cfi import CfiTable
    from liveunwind.modules.debuginfo import section_data

    data = section_data(image, ".debug_frame")
    if not data:
        return None
    table = CfiTable(data, 0, kind="debug_frame", byte_order=_byte_order(image))
    return UnwindSource("cfi", ".debug_frame", table)


def _sframe(image: ElfImage) -> UnwindSource | None:
    """``.sframe``, found by PT_GNU_SFRAME (as the kernel does) or by section name."""
    headers = image.segments_of_type(PT_GNU_SFRAME)
    if headers:
        data, address = image.segment_data(headers[0]), headers[0].vaddr
    else:
        section = image.sections.get(".sframe")
        if section is None:
            return None
        data, address = image.contents(section), section.address
    if not data:
        return None
    from liveunwind.formats.sframe import SFrameSection

    return UnwindSource("sframe", ".sframe", SFrameSection(data, address))


class ModuleMap:
    """All modules of a target, found by address."""

    def __init__(
        self,
        space: AddressSpace,
        *,
        debug_dirs: Sequence[str] = DEFAULT_DEBUG_DIRS,
        perf_map: str = "",
        previous: ModuleMap | None = None,
    ) -> None:
        self.space = space
        self.debug_dirs = tuple(debug_dirs)
        #: Text of the target's /tmp/perf-PID.map, if it wrote one.
        self.perf_map = perf_map
        self.modules: list[Module] = []
        self._mappings = [mapping for mapping in space.mappings() if mapping.readable]
        self._starts = [mapping.start for mapping in self._mappings]
        self._module_of_mapping: list[Module | None] = []
        self._group()
        if previous is not None:
            self._reuse(previous)

    def _group(self) -> None:
        """Groups the mappings of each file (and the vDSO) into one module each."""
        images = self.space.images()
        if images is not None:
            self._group_mach_o(images)
            return
        by_file: dict[tuple[str, int], Module] = {}
        for mapping in self._mappings:
            if mapping.is_file or mapping.path == "[vdso]":
                key = (mapping.path, mapping.inode)
                module = by_file.get(key)
                if module is None:
                    module = Module(self.space, [mapping], self.debug_dirs)
                    by_file[key] = module
                    self.modules.append(module)
                else:
                    module.mappings.append(mapping)
                    module.end = max(module.end, mapping.end)
                self._module_of_mapping.append(module)
            else:
                self._module_of_mapping.append(None)

    def _reuse(self, previous: ModuleMap) -> None:
        """Takes over the modules of an earlier map of the same process that did not change.

        A module mapped exactly as before keeps its opened file, parsed
        tables and symbols: what makes the second backtrace of a process fast.
        """
        known = {_identity(module): module for module in previous.modules}
        replaced: dict[int, Module] = {}
        for index, module in enumerate(self.modules):
            old = known.get(_identity(module))
            if old is not None:
                old.space = self.space
                replaced[id(module)] = old
                self.modules[index] = old
        self._module_of_mapping = [
            replaced.get(id(module), module) if module is not None else None
            for module in self._module_of_mapping
        ]

    @property
    def unchanged_since(self) -> frozenset[tuple[object, ...]]:
        """The identities of this map's modules, to tell whether caches keyed by them hold."""
        return frozenset(_identity(module) for module in self.modules)

    def _group_mach_o(self, images: list[CoreImage]) -> None:
        """A Mach-O core names its images and their segments itself."""
        from liveunwind.modules.macho import MachOModule

        arch = self.space.arch.name
        for image in images:
            if image.path:
                ranges = [(start, end) for _, start, end in image.segments]
                module = MachOModule(
                    image.path, image.load_address, ranges, arch=arch, uuid=image.uuid
                )
                self.modules.append(module)
        for mapping in self._mappings:
            owner = next((m for m in self.modules if m.contains(mapping.start)), None)
            self._module_of_mapping.append(owner)

    def mapping_at(self, address: int) -> Mapping | None:
        index = bisect.bisect_right(self._starts, address) - 1
        if index >= 0 and address < self._mappings[index].end:
            return self._mappings[index]
        return None

    def find(self, address: int) -> Module | None:
        """The module whose mappings hold ``address``."""
        index = bisect.bisect_right(self._starts, address) - 1
        if index >= 0 and address < self._mappings[index].end:
            return self._module_of_mapping[index]
        return None

    def is_executable(self, address: int) -> bool:
        """Code: an executable mapping, or a range a JIT compiler registered."""
        mapping = self.mapping_at(address)
        if mapping is not None and mapping.executable:
            return True
        registry = self.registry
        return registry is not None and registry.covers(address)

    @property
    def jit_possible(self) -> bool:
        """Whether the target can have JIT code: anonymous executable memory, or a perf map."""
        return bool(self.perf_map) or any(_maybe_jit(mapping) for mapping in self._mappings)

    def find_registry_roots(self) -> None:
        """Looks through every module's symbols for registry heads now (each module once).

        The expensive part of :attr:`registry`, done ahead of it for a
        process that is still running, so that its registry can be read
        quickly once it is stopped.
        """
        for module in self.modules:
            if isinstance(module, Module):
                _ = module.registry_roots

    @cached_property
    def registry(self) -> DynamicRegistry | None:
        """Unwind info and names registered at run time (JIT code), or None if there can be none.

        JIT code lives in anonymous executable memory; a process without any
        (most of them) costs nothing here.  Otherwise every module is asked
        for the registry heads it defines (libunwind's list, the GDB JIT
        descriptor), and the perf map adds names.  The registry is read with
        the space's ``read_frozen`` where it has one (a snapshot: the memory
        as it was while the process was stopped), else with ``read``.
        """
        if not self.jit_possible:
            return None
        from liveunwind.formats.dynamic import DynamicRegistry, parse_perf_map

        lists: list[int] = []
        descriptors: list[int] = []
        for module in self.modules:
            if isinstance(module, Module):
                lists.extend(module.registry_roots.libunwind_lists)
                descriptors.extend(module.registry_roots.jit_descriptors)
        try:
            return DynamicRegistry(
                self.space.read_frozen,
                self.space.arch,
                libunwind_lists=lists,
                jit_descriptors=descriptors,
                perf_map=parse_perf_map(self.perf_map),
            )
        except FormatError:
            return None

    @property
    def problems(self) -> list[str]:
        """What went wrong in the modules and, if it was read, the run-time registry; sorted."""
        found = {problem for module in self.modules for problem in module.problems}
        registry = self.__dict__.get("registry")  # only if built: asking would build it
        if registry is not None:
            found.update(registry.problems)
        return sorted(found)


def _identity(module: object) -> tuple[object, ...]:
    """What makes two modules of one process the same: path and every mapping."""
    mappings = getattr(module, "mappings", ())
    return (module.path, module.start, tuple(mappings))


def _maybe_jit(mapping: Mapping) -> bool:
    """Executable memory no file describes: where JIT compilers put code."""
    return mapping.executable and not mapping.is_file and not mapping.path.startswith("[v")
