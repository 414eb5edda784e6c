"""What every loaded image offers the unwinder and the symbolizer: the Module contract.

An ELF file mapped by the loader (:class:`~liveunwind.modules.modulemap.ElfModule`)
and a Mach-O image of a core (:class:`~liveunwind.modules.macho.MachOModule`)
derive from :class:`Module`, so the module map, the stepper and the
symbolizer ask any module the same questions without probing for attributes.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from functools import cached_property
    from typing import Protocol

    from liveunwind.modules.lines import ModuleLines
    from liveunwind.modules.sources import UnwindSource
    from liveunwind.modules.symbols import SymbolMatch
    from liveunwind.targets.base import AddressSpace, Mapping

    class SymbolLookup(Protocol):
        """A module's function symbols, searched by link-time address."""

        def lookup(self, address: int, *, checked: bool = False) -> SymbolMatch | None:
            """The function holding ``address``; ``checked``: a walk decides by the answer."""
else:
    # the standard library's, cheaper to import (liveunwind/classes.py says why)
    from liveunwind.classes import cached_property


class RegistryRoots:
    """Runtime addresses of the JIT registry heads one module defines (usually none).

    A plain class rather than a named tuple: it is defined on every
    backtrace's import path, where a named tuple's class costs 70 µs.
    """

    __slots__ = ("jit_descriptors", "libunwind_lists")

    def __init__(
        self, libunwind_lists: tuple[int, ...] = (), jit_descriptors: tuple[int, ...] = ()
    ) -> None:
        #: Addresses of libunwind's ``_U_dyn_info_list``.
        self.libunwind_lists = libunwind_lists
        #: Addresses of the GDB JIT interface's ``__jit_debug_descriptor``.
        self.jit_descriptors = jit_descriptors


_NO_ROOTS = RegistryRoots()


class Module:
    """One loaded image of a target: where it is, its file, symbols and unwind tables.

    ``path``, ``start``, ``end``, ``mappings`` (the target's mappings that
    belong to it) and ``problems`` are plain attributes; the rest are read on
    demand, and a subclass keeps what costs something to find (the opened
    image, its symbols and unwind tables, the load bias, registry roots) as
    cached properties.

    Who owns those caches, and when they go: the module itself, which lives
    as long as a :class:`~liveunwind.modules.modulemap.ModuleMap` holds it.
    A session's next map of the same process takes over every module mapped
    exactly as before, caches and all (that is what makes a second backtrace
    fast); a module that was unmapped or moved is left behind with its map
    and dropped with it.
    """

    def __init__(self, path: str, start: int, end: int, mappings: list[Mapping]) -> None:
        self.path = path
        self.start = start
        self.end = end
        self.mappings = mappings
        #: What went wrong reading the module, for the report.
        self.problems: list[str] = []

    @property
    def name(self) -> str:
        return os.path.basename(self.path) if self.path.startswith("/") else self.path

    @property
    def is_vdso(self) -> bool:
        return False

    @property
    def image(self) -> object | None:
        """The decoded file (an ElfImage, a MachOImage), or None when it cannot be read."""
        raise NotImplementedError

    @property
    def load_bias(self) -> int:
        """Runtime address minus link-time address."""
        raise NotImplementedError

    @property
    def build_id(self) -> bytes | None:
        """What identifies the file's contents: the GNU build-id, or a Mach-O UUID."""
        raise NotImplementedError

    @cached_property
    def file_key(self) -> object:
        """Stands for what the module read of its file, in caches shared by the targets of a run.

        The rules and names at a link-time address depend on the file alone,
        so the unwinder's cache keeps them by this key and the address (not
        by where the module is mapped).  Each module has its own, unless it
        took its file's facts over from a module of another target of the
        run that maps the same file (``backtrace/shared.py``: then this key
        comes with them), so no two different files ever share one.
        """
        return object()

    @property
    def symbols(self) -> SymbolLookup | None:
        """Function symbols by link-time address, or None when there are none to read."""
        raise NotImplementedError

    def symbolize(self, pc: int, *, checked: bool = False) -> SymbolMatch | None:
        """The function holding the absolute address ``pc``, if the module's symbols say.

        ``checked``: a walk decides by the answer (where a function starts and
        ends), so it must come from the module's files, not only a cache of them.
        """
        table = self.symbols
        return None if table is None else table.lookup(pc - self.load_bias, checked=checked)

    @property
    def unwind_sources(self) -> dict[str, list[UnwindSource]]:
        """The module's unwind tables by source (``cfi``, ``sframe``, ``compact``), best first."""
        raise NotImplementedError

    def unchanged(self) -> bool:
        """Whether what the module read of its file still holds (a module that reads none: True).

        Asked before a later map of the same process takes the module over.
        """
        return True

    def use_space(self, space: AddressSpace) -> None:
        """A later map of the same process took the module over: read through ``space`` now.

        Only a module that reads the target needs it; the default ignores it.
        """

    @property
    def lines(self) -> ModuleLines | None:
        """Source lines and inline scopes from the module's DWARF; None where it has none."""
        return None

    @property
    def registry_roots(self) -> RegistryRoots:
        """Runtime addresses of the JIT registry heads this module defines: none by default."""
        return _NO_ROOTS
