"""pc → Module: the loaded images of a target, and its JIT registry.

:class:`ModuleMap` groups a target's mappings into modules: an
:class:`ElfModule` per mapped file and the vDSO, or the images a Mach-O core
lists (:class:`~liveunwind.modules.macho.MachOModule`).  Nothing is opened or
parsed when the map is built; a module reads its file the first time a pc
lands in it, and keeps every answer (see
:class:`~liveunwind.modules.module.Module` for how long).
"""

from __future__ import annotations

import bisect
from functools import cached_property

from liveunwind.errors import FormatError, LiveUnwindError
from liveunwind.formats.elf import ElfImage
from liveunwind.modules.debuginfo import DEFAULT_DEBUG_DIRS
from liveunwind.modules.module import Module, RegistryRoots
from liveunwind.modules.sources import DebugFileFrames, UnwindSource, unwind_tables
from liveunwind.targets.files import map_elf

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from liveunwind.modules.debuginfo import DebugFile
    from liveunwind.modules.jit import DynamicRegistry
    from liveunwind.modules.lines import ModuleLines
    from liveunwind.modules.macho import MachOModule
    from liveunwind.modules.symbols import SymbolTable
    from liveunwind.targets.base import AddressSpace, CoreImage, Mapping

#: Largest in-memory image (the vDSO) read from target memory.
_MAX_MEMORY_IMAGE = 64 << 20


class ElfModule(Module):
    """One ELF image: the mappings of one file (grouped by the module map), or the vDSO.

    ``space`` is the target it is read from; a module taken over by a later
    map of the same process is handed that map's space.
    """

    def __init__(
        self,
        space: AddressSpace,
        mappings: list[Mapping],
        debug_dirs: Sequence[str] = DEFAULT_DEBUG_DIRS,
    ) -> None:
        super().__init__(mappings[0].path, mappings[0].start, mappings[-1].end, mappings)
        self.space = space
        self.debug_dirs = debug_dirs

    @property
    def is_vdso(self) -> bool:
        return self.path == "[vdso]"

    def use_space(self, space: AddressSpace) -> None:
        self.space = space

    # -- the image ----------------------------------------------------------

    @cached_property
    def image(self) -> ElfImage | None:
        """The module's ELF image, or None (anonymous code, missing or foreign file).

        A core has already opened and checked the file it found for the
        module (``mapped_image``); that image is used rather than a second one.
        """
        if not self.is_vdso:
            image = self.space.mapped_image(self._first_mapping)
            if image is not None:
                return image
        try:
            return self._open_image()
        except (FormatError, OSError, LiveUnwindError) as error:
            self.problems.append(str(error))
            return None

    @property
    def _first_mapping(self) -> Mapping:
        """The mapping of the lowest file offset: where the ELF header is."""
        return min(self.mappings, key=lambda mapping: mapping.offset)

    def _open_image(self) -> ElfImage | None:
        """The vDSO from target memory, else the mapped file as the target sees it."""
        if self.is_vdso:
            size = min(self.end - self.start, _MAX_MEMORY_IMAGE)
            return ElfImage(self.space.read(self.start, size), origin=self.path)
        file = self.space.open_mapped_file(self._first_mapping)
        return None if file is None else map_elf(file)

    @cached_property
    def load_bias(self) -> int:
        """Runtime address minus link-time address, from the lowest-offset mapping."""
        first = self._first_mapping
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

    @cached_property
    def lines(self) -> ModuleLines | None:
        """Source lines and inline scopes from the image's DWARF, its debug file's, or debuginfod's.

        Looked for the first time a frame of the module asks (only with ``--lines``).
        """
        if self.is_vdso:
            return None
        from liveunwind.modules.lines import read_lines

        return read_lines(self)

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

    @cached_property
    def registry_roots(self) -> RegistryRoots:
        """Runtime addresses of the JIT registry heads this module defines (usually none).

        Kept with the module, so a later backtrace that finds the module
        mapped as before does not look through its symbols again.
        """
        if self.is_vdso or self.image is None:
            return RegistryRoots()
        from liveunwind.modules.jit import find_roots

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
                debug_frame = UnwindSource("cfi", "debug file", DebugFileFrames(self._debug_image))
                sources.setdefault("cfi", []).append(debug_frame)
        return sources

    def _debug_image(self) -> ElfImage | None:
        debug_file = self.debug_file
        return None if debug_file is None else debug_file.image


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
        by_file: dict[tuple[str, int], ElfModule] = {}
        for mapping in self._mappings:
            if mapping.is_file or mapping.path == "[vdso]":
                key = (mapping.path, mapping.inode)
                module = by_file.get(key)
                if module is None:
                    module = ElfModule(self.space, [mapping], self.debug_dirs)
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
                old.use_space(self.space)
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
        found: list[MachOModule] = []
        for image in images:
            if image.path:
                ranges = [(start, end) for _, start, end in image.segments]
                found.append(
                    MachOModule(image.path, image.load_address, ranges, arch=arch, uuid=image.uuid)
                )
        self.modules.extend(found)
        for mapping in self._mappings:
            owner = next((m for m in found if m.contains(mapping.start)), None)
            if owner is not None:
                owner.mappings.append(mapping)
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
        from liveunwind.formats.perfmap import parse_perf_map
        from liveunwind.modules.jit import DynamicRegistry

        lists: list[int] = []
        descriptors: list[int] = []
        for module in self.modules:
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


def _identity(module: Module) -> tuple[object, ...]:
    """What makes two modules of one process the same: path and every mapping."""
    return (module.path, module.start, tuple(module.mappings))


def _maybe_jit(mapping: Mapping) -> bool:
    """Executable memory no file describes: where JIT compilers put code."""
    return mapping.executable and not mapping.is_file and not mapping.path.startswith("[v")
