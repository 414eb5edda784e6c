"""One ELF image loaded in a target: a mapped file's mappings, or the vDSO.

Everything (the file, its tables, symbols, debug file, lines) is read the first
time a pc lands in the module and kept on it; see
:class:`~liveunwind.modules.module.Module` for how long.
"""

from __future__ import annotations

import os

from liveunwind.errors import FormatError, LiveUnwindError
from liveunwind.formats.elf import ElfImage
from liveunwind.modules.debuginfo import DEFAULT_DEBUG_DIRS, has_dwarf
from liveunwind.modules.module import Module, RegistryRoots
from liveunwind.modules.sources import DebugFileFrames, UnwindSource, unwind_tables
from liveunwind.targets.files import map_elf

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from functools import cached_property

    from liveunwind.formats.dwarf.info import DebugInfo
    from liveunwind.modules.debuginfo import DebugFile
    from liveunwind.modules.lines import ModuleLines
    from liveunwind.modules.module import SymbolLookup
    from liveunwind.targets.base import AddressSpace, Mapping
else:
    # the standard library's, cheaper to import (liveunwind/classes.py says why)
    from liveunwind.classes import cached_property


#: Largest in-memory image (the vDSO) read from target memory.
_MAX_MEMORY_IMAGE = 64 << 20
#: The largest page size of the architectures liveunwind reads: a mapping's last page may
#: run this far past the end of its file without the file having been cut short.
_LARGEST_PAGE = 64 << 10


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
                return self._checked(image)
        try:
            image = self._open_image()
        except (FormatError, OSError, LiveUnwindError) as error:
            self.problems.append(str(error))
            return None
        return image if image is None or self.is_vdso else self._checked(image)

    def _checked(self, image: ElfImage) -> ElfImage | None:
        """``image``, unless its file is shorter than what the target maps of it (a problem).

        A file cut short since the target mapped it no longer holds the
        code, tables and symbols the target runs with; what is left of it
        is not used (a wrong frame is worse than a missing one).
        """
        mapped = max(mapping.offset + mapping.end - mapping.start for mapping in self.mappings)
        if len(image.data) + _LARGEST_PAGE < mapped:
            self.problems.append(
                f"{image.origin}: is {len(image.data)} bytes, shorter than the {mapped} the "
                "process maps of it: cut short since it was mapped, not used"
            )
            return None
        return image

    def unchanged(self) -> bool:
        """False when the file read for the module changed since (size, mtime): read it anew.

        Noted as a problem of the module; a later map of the same process
        then opens the file again rather than taking this module over.
        """
        image = self.__dict__.get("image")  # only if opened: asking would open it
        if image is None or image.source is None:
            return True
        why = image.source.changed()
        if why is not None:
            self.problems.append(f"{image.origin}: {why}; read again")
        return why is None

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
        if file is None:
            return None
        if file.note:
            self.problems.append(file.note)
        return map_elf(file)

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
        """The separate debug file of a stripped image, looked up on demand.

        Local files first (build-id directories, ``.gnu_debuglink``,
        MiniDebugInfo); then, with ``DEBUGINFOD_URLS`` set and only for a
        module that still lacks function symbols or CFI, debuginfod's debug
        file.  A module with a ``.symtab`` and ``.eh_frame`` of its own never
        asks a server.
        """
        if self.image is None or self.is_vdso:
            return None
        from liveunwind.modules.debuginfo import find_debug_file

        local = find_debug_file(
            self.image, self.path, self.build_id, self.debug_dirs, problems=self.problems
        )
        if not self.build_id or not os.environ.get("DEBUGINFOD_URLS"):
            return local
        if not self._lacks_symbols_or_cfi(local):
            return local
        from liveunwind.modules.debuginfod import debug_file

        return debug_file(self.build_id, self.problems) or local

    def _lacks_symbols_or_cfi(self, local: DebugFile | None) -> bool:
        """Whether neither the image nor its local debug file has a ``.symtab``, or CFI."""
        from liveunwind.modules.debuginfo import has_cfi
        from liveunwind.modules.symbols import has_symtab

        image = self.image
        if image is None:
            return False
        images = [image] if local is None else [image, local.image]
        try:
            return not any(map(has_symtab, images)) or not any(map(has_cfi, images))
        except FormatError as error:
            self.problems.append(str(error))
            return False

    @cached_property
    def lines(self) -> ModuleLines | None:
        """Source lines and inline scopes from the image's DWARF, its debug file's, or debuginfod's.

        Looked for the first time a frame of the module asks: with ``--lines``, or
        for function names where no file of the module has a ``.symtab``.
        """
        if self.is_vdso:
            return None
        from liveunwind.modules.lines import read_lines

        return read_lines(self)

    # -- symbols ------------------------------------------------------------

    @cached_property
    def symbols(self) -> SymbolLookup | None:
        """Function symbols of the image and, when it has one, of its debug file.

        Where neither has a ``.symtab``, the DWARF of either names the functions.
        """
        if self.image is None:
            return None
        from liveunwind.modules.symbols import DwarfFunctions, SymbolTable, has_symtab

        images = [self.image]
        if self.debug_file is not None:
            images.append(self.debug_file.image)
        try:
            table = SymbolTable(*images)
            if any(map(has_symtab, images)) or not any(map(has_dwarf, images)):
                return table
        except FormatError as error:
            self.problems.append(str(error))
            return None
        return DwarfFunctions(self._debug_info, table)

    def _debug_info(self) -> DebugInfo:
        """The DWARF units of the module (FormatError when none can be read)."""
        lines = self.lines
        if lines is None:
            raise FormatError(f"{self.path}: no DWARF")
        return lines.info

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
        """The module's unwind tables by source (``cfi``, ``sframe``), best first."""
        sources: dict[str, list[UnwindSource]] = {}
        if self.image is not None:
            for source in unwind_tables(self.image, self.problems):
                sources.setdefault(source.name, []).append(source)
            if not self.is_vdso:
                debug_frame = UnwindSource("cfi", "debug file", DebugFileFrames(self._debug_image))
                sources.setdefault("cfi", []).append(debug_frame)
        return sources

    def _debug_image(self) -> ElfImage | None:
        debug_file = self.debug_file
        return None if debug_file is None else debug_file.image
