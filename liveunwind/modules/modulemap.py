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
import itertools

from liveunwind.errors import FormatError
from liveunwind.modules.debuginfo import DEFAULT_DEBUG_DIRS
from liveunwind.modules.elfmodule import ElfModule
from liveunwind.modules.module import Module

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence
    from functools import cached_property

    from liveunwind.formats.unwind.perfmap import PerfMapView
    from liveunwind.modules.jit import DynamicRegistry
    from liveunwind.modules.macho import MachOModule
    from liveunwind.targets.base import AddressSpace, CoreImage, Mapping
else:
    # the standard library's, cheaper to import (liveunwind/classes.py says why)
    from liveunwind.classes import cached_property


class ModuleMap:
    """All modules of a target, found by address."""

    def __init__(
        self,
        space: AddressSpace,
        *,
        debug_dirs: Sequence[str] = DEFAULT_DEBUG_DIRS,
        perf_map: PerfMapView | str = "",
        previous: ModuleMap | None = None,
        adopt: Callable[[list[Module]], None] | None = None,
    ) -> None:
        """``previous``: an earlier map of the same process, whose unchanged modules are
        taken over; ``adopt``: called with the modules (those taken over too), before
        anything is read, to hand each module not yet read what this run already read
        of its file from another process (``backtrace/shared.py``)."""
        self.space = space
        self.debug_dirs = tuple(debug_dirs)
        #: The target's /tmp/perf-PID.map, if it wrote one: what a session keeps of it
        #: (``PerfMapFile``), or its text.
        self.perf_map = perf_map
        self.modules: list[Module] = []
        self._mappings = [mapping for mapping in space.mappings() if mapping.readable]
        self._starts = [mapping.start for mapping in self._mappings]
        self._module_of_mapping: list[Module | None] = []
        #: Set (to a number no other map has) when a module's file changed and was read anew.
        self._read_anew: int | None = None
        self._group()
        if previous is not None:
            self._reuse(previous)
        if adopt is not None:
            adopt(self.modules)

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
        tables and symbols: what makes the second backtrace of a process fast
        — unless its file changed since it was read (``Module.unchanged``).
        """
        known = {_identity(module): module for module in previous.modules}
        replaced: dict[int, Module] = {}
        for index, module in enumerate(self.modules):
            old = known.get(_identity(module))
            if old is not None and not old.unchanged():
                module.problems.extend(old.problems)  # its file changed: read it anew, say so
                self._read_anew = next(_MAPS_READ_ANEW)
            elif old is not None:
                old.use_space(self.space)
                replaced[id(module)] = old
                self.modules[index] = old
        self._module_of_mapping = [
            replaced.get(id(module), module) if module is not None else None
            for module in self._module_of_mapping
        ]

    @property
    def unchanged_since(self) -> frozenset[tuple[object, ...]]:
        """The identities of this map's modules, to tell whether caches keyed by them hold.

        A map that read a module's file anew is like no other: what was
        cached from the file before it changed goes.
        """
        identities = frozenset(_identity(module) for module in self.modules)
        return identities if self._read_anew is None else identities | {(self._read_anew,)}

    def _group_mach_o(self, images: list[CoreImage]) -> None:
        """A Mach-O core names its images and their segments itself."""
        from liveunwind.modules.macho import MachOModule

        arch = self.space.arch
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
        for module in self._modules_with_code():
            _ = module.registry_roots

    @cached_property
    def registry(self) -> DynamicRegistry | None:
        """Unwind info and names registered at run time (JIT code), or None if there can be none.

        JIT code lives in anonymous executable memory; a process without any
        (most of them) costs nothing here.  Otherwise every module is asked
        for the registry heads it defines (libunwind's list, the GDB JIT
        descriptor), and the perf map adds names (a text is parsed here; a
        session's view of the map was parsed as the file grew).  The
        registry is read with the space's ``read_frozen`` where it has one (a
        snapshot: the memory as it was while the process was stopped), else
        with ``read``.
        """
        if not self.jit_possible:
            return None
        from liveunwind.formats.unwind.perfmap import parse_perf_map
        from liveunwind.modules.jit import DynamicRegistry

        perf_map = self.perf_map
        lists: list[int] = []
        descriptors: list[int] = []
        for module in self._modules_with_code():
            lists.extend(module.registry_roots.libunwind_lists)
            descriptors.extend(module.registry_roots.jit_descriptors)
        try:
            return DynamicRegistry(
                self.space.read_frozen,
                self.space.arch,
                libunwind_lists=lists,
                jit_descriptors=descriptors,
                perf_map=parse_perf_map(perf_map) if isinstance(perf_map, str) else perf_map,
            )
        except FormatError:
            return None

    def _modules_with_code(self) -> Iterator[Module]:
        """The modules that map code: only they define registry heads.

        A file mapped only as data (a memfd, a database file) is no ELF
        module; opening it to look through its symbols would note that it is
        not an ELF file, for every process with JIT code that maps one.
        """
        return (module for module in self.modules if any(m.executable for m in module.mappings))

    @property
    def problems(self) -> list[str]:
        """What went wrong in the modules and, if it was read, the run-time registry; sorted."""
        found = {problem for module in self.modules for problem in module.problems}
        registry = self.__dict__.get("registry")  # only if built: asking would build it
        if registry is not None:
            found.update(registry.problems)
        return sorted(found)


#: Numbers the maps that read a module's file anew.
_MAPS_READ_ANEW = itertools.count()


def _identity(module: Module) -> tuple[object, ...]:
    """What makes two modules of one process the same: path and every mapping."""
    return (module.path, module.start, tuple(module.mappings))


def _maybe_jit(mapping: Mapping) -> bool:
    """Executable memory no file describes: where JIT compilers put code."""
    return mapping.executable and not mapping.is_file and not mapping.path.startswith("[v")
