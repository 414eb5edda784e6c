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

import struct

from liveunwind.errors import LiveUnwindError
from liveunwind.formats.elf import NT_GNU_BUILD_ID, ElfImage
from liveunwind.modules.elfmodule import ElfModule
from liveunwind.unwinder.cache import FileFacts

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections import OrderedDict

    from liveunwind.modules.module import Module
    from liveunwind.modules.modulemap import ModuleMap
else:
    # The C class under collections's: collections's body costs a many-process run 1.2 ms
    # before its workers start.
    from _collections import OrderedDict

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

    __slots__ = ("build_id", "facts", "note", "problems")

    def __init__(self, build_id: bytes, note: tuple[int, bytes] | None) -> None:
        self.build_id = build_id
        #: Where the build-id note lies in the file's first page, and its bytes.
        self.note = note
        self.facts: dict[str, object] = {}
        self.problems: list[str] = []


class SharedFiles:
    """Per file (device, inode, build-id): the facts modules of this run read of it."""

    def __init__(self, *, by_path: bool = False, once: bool = False) -> None:
        """``by_path``: the targets are cores, whose files are known by path alone;
        ``once``: each target is backtraced once (FileFacts says what that spares)."""
        self._by_path = by_path
        self._files: OrderedDict[tuple[str, int], _File] = OrderedDict()
        #: The plans and names the unwinder found in the files, by file key and
        #: link-time address: every target's cache of the run uses these tables.
        self.facts = FileFacts(once=once)
        #: Modules handed facts instead of reading their files: what sharing saved.
        self.adopted = 0

    def adopt(self, modules: list[Module]) -> None:
        """Gives the modules of a new map the facts kept for their files, each if the same file.

        The build-ids in the process's memory are read in one go (one
        ``process_vm_readv`` for every module of a live process: 33 µs, where
        reading them one by one cost as much again for each further module).
        """
        candidates: list[tuple[ElfModule, tuple[int, bytes], tuple[str, int], _File]] = []
        for module in modules:
            if not isinstance(module, ElfModule) or module.is_vdso or "image" in module.__dict__:
                continue
            key = _key(module, self._by_path)
            known = self._files.get(key) if key is not None else None
            if known is None or key is None or known.note is None:
                continue
            image = known.facts.get("image")
            if not isinstance(image, ElfImage) or image.source is None or image.source.changed():
                self._files.pop(key, None)
                continue
            candidates.append((module, known.note, key, known))
        if not candidates:
            return
        in_memory = _notes_in_memory([(module, note) for module, note, _, _ in candidates])
        for (module, _, key, known), same in zip(candidates, in_memory, strict=True):
            if not same:
                continue
            module.__dict__.update(known.facts)
            module.problems.extend(known.problems)
            if key in self._files:
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
                known = self._files[key] = _File(build_id, _build_id_note(module.image, build_id))
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


def _build_id_note(image: ElfImage | None, build_id: bytes) -> tuple[int, bytes] | None:
    """Where the file's build-id note lies in its first page, and its bytes (None if not there)."""
    if image is None:
        return None
    note = struct.pack(f"{image.byte_order}III", 4, len(build_id), NT_GNU_BUILD_ID)
    note += b"GNU\0" + build_id
    try:
        at = image.read(0, _HEADER_READ).find(note)
    except (LiveUnwindError, OSError):
        return None  # the file changed since (FileChangedError): not shared
    return None if at < 0 or at % 4 else (at, note)


def _notes_in_memory(modules: list[tuple[ElfModule, tuple[int, bytes]]]) -> list[bool]:
    """Whether each module's process maps, at its file's offset 0, the build-id note given.

    The note's bytes where the known file has them: the build-id of the
    headers the process has in memory, compared without parsing them (two
    modules' headers parsed cost 50 µs of each process).  The modules are
    those of one map (one space): their bytes are read in one go (one
    ``process_vm_readv`` for a live process).
    """
    same = [False] * len(modules)
    ranges: list[tuple[int, int]] = []
    looked_at: list[tuple[int, bytes]] = []
    for index, (module, (at, note)) in enumerate(modules):
        first = min(module.mappings, key=lambda mapping: mapping.offset)
        if first.offset == 0 and at + len(note) <= first.end - first.start:
            ranges.append((first.start + at, len(note)))
            looked_at.append((index, note))
    if not ranges:
        return same
    try:
        found = modules[0][0].space.read_many(ranges)
    except (LiveUnwindError, OSError):  # a core's reader may say its file is corrupt
        return same
    for (index, note), data in zip(looked_at, found, strict=True):
        same[index] = data == note
    return same
