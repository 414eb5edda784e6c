"""What one run learned about a file, handed to every other process that maps the same file.

``liveunwind pid --all`` backtraces many processes, most of them mapping the
same libc, libstdc++ and programs.  A module's file-derived facts — its
opened image, symbol tables, unwind tables, debug file and line tables —
do not depend on where a process mapped the file, so :class:`SharedFiles`
keeps them per file and a module of a later process takes them over
instead of reading the file again; what depends on the process (load
bias, JIT registry roots) is found anew.  With them goes the module's
``file_key``, under which every target's unwinder cache of the run finds
the plans of the rules decoded and the names looked up in the file
(:attr:`SharedFiles.facts`, a :class:`~liveunwind.unwinder.cache.FileFacts`),
so the second process of a program decodes and names nothing again.

The same file: the device and inode /proc/PID/maps gives (never the path:
one path in two mount namespaces can be two files), and the build-id the
file was read with equal to the build-id in the ELF headers the process
has in memory (device and inode alone can collide: btrfs subvolumes share a
device number in /proc/PID/maps).  A file without a build-id is not shared;
one whose size or mtime changed since it was read is dropped.  Cores record
no device or inode: for them (``by_path``) the file is the path the core
records, with the same build-id check — every core of one run finds its
files the same way (the same ``--sysroot`` and search path).

Memory: at most :data:`MAX_FILES` files are kept (least recently used
dropped first); each file's facts are bounded as a module's are, and the
plans and names by file as :class:`~liveunwind.unwinder.cache.FileFacts` says
(:data:`~liveunwind.unwinder.cache.MAX_ENTRIES` each, for the whole run).
"""

from __future__ import annotations

from collections import OrderedDict

from liveunwind.errors import FormatError, MemoryReadError
from liveunwind.formats.elf import ElfImage
from liveunwind.modules.elfmodule import ElfModule
from liveunwind.unwinder.cache import FileFacts

TYPE_CHECKING = False
if TYPE_CHECKING:
    from liveunwind.modules.module import Module
    from liveunwind.modules.modulemap import ModuleMap

#: Most files whose facts are kept for the run.  The libraries of every process
#: of an idle host number a few hundred; each keeps its image (the file read as
#: needed, pread into memory) and the tables, symbols and lines it decoded.
MAX_FILES = 1024
#: The ELF headers and the build-id note sit in the first page of a mapped file.
_HEADER_READ = 4096
#: The cached properties of an ElfModule that come from its file alone.
#: ``file_key`` goes with them: what the unwinder's cache keeps of the file is found by it.
FILE_FACTS = (
    "image",
    "build_id",
    "debug_file",
    "lines",
    "symbols",
    "unwind_sources",
    "file_key",
)


class _File:
    """The facts of one file, gathered from every module that read some of them."""

    __slots__ = ("build_id", "facts", "problems")

    def __init__(self, build_id: bytes) -> None:
        self.build_id = build_id
        self.facts: dict[str, object] = {}
        self.problems: list[str] = []


class SharedFiles:
    """Per file (device, inode, build-id): the facts modules of this run read of it."""

    def __init__(self, *, by_path: bool = False) -> None:
        """``by_path``: the targets are cores, whose files are known by path alone."""
        self._by_path = by_path
        self._files: OrderedDict[tuple[str, int], _File] = OrderedDict()
        #: The plans and names the unwinder found in the files, by file key and
        #: link-time address: every target's cache of the run uses these tables.
        self.facts = FileFacts()
        #: Modules handed facts instead of reading their files: what sharing saved.
        self.adopted = 0

    def adopt(self, module: Module) -> None:
        """Gives a module of a new map the facts kept for its file, if it is the same file."""
        if not isinstance(module, ElfModule) or module.is_vdso or "image" in module.__dict__:
            return
        key = _key(module, self._by_path)
        known = self._files.get(key) if key is not None else None
        if known is None or key is None:
            return
        image = known.facts.get("image")
        if not isinstance(image, ElfImage) or image.source is None or image.source.changed():
            del self._files[key]
            return
        if _build_id_in_memory(module) != known.build_id:
            return
        module.__dict__.update(known.facts)
        module.problems.extend(known.problems)
        self._files.move_to_end(key)
        self.adopted += 1

    def keep(self, modules: ModuleMap | None) -> None:
        """After a backtrace: keeps what its modules read of their files for the next process."""
        if modules is None:
            return
        for module in modules.modules:
            if not isinstance(module, ElfModule) or module.is_vdso:
                continue
            key = _key(module, self._by_path)
            if key is None or module.__dict__.get("image") is None:
                continue  # not read (no frame there), or unreadable: nothing to share
            build_id = module.build_id
            if not build_id:
                continue
            known = self._files.get(key)
            if known is None or known.build_id != build_id:
                known = self._files[key] = _File(build_id)
                known.problems = module.problems
            for name in FILE_FACTS:
                if name in module.__dict__:
                    known.facts.setdefault(name, module.__dict__[name])
            self._files.move_to_end(key)
        while len(self._files) > MAX_FILES:
            self._files.popitem(last=False)


def _key(module: ElfModule, by_path: bool) -> tuple[str, int] | None:
    """The file's device and inode as the process's mappings give them (or its path)."""
    mapping = module.mappings[0]
    if not mapping.is_file:
        return None
    return (mapping.path, 0) if by_path else (mapping.device, mapping.inode)


def _build_id_in_memory(module: ElfModule) -> bytes | None:
    """The build-id of the ELF headers the process maps at the file's offset 0, if any."""
    first = min(module.mappings, key=lambda mapping: mapping.offset)
    if first.offset != 0:
        return None
    try:
        data = module.space.read(first.start, min(_HEADER_READ, first.end - first.start))
        return ElfImage(data, origin="target memory").build_id
    except (FormatError, MemoryReadError, OSError):
        return None
