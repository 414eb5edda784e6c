"""What the samples of one process share: its mappings, and the files behind them.

A :class:`SampledProcess` is the address space the module map of a sampled
process is built over, kept for as long as its mappings do not change, so
that each module opens its file and reads its tables once for every sample.
Its mappings come from mmap records (:meth:`SampledProcess.map`: a new
mapping cuts what it overlaps, as ``mmap`` does) or from ``/proc/PID/maps``;
its memory is what the files hold for mappings that cannot have changed
since (read-only file mappings: code, read-only data, unwind tables) and
the vDSO when its bytes were given.  Anything else — the heap, writable
data, other threads' stacks — was not copied by the kernel: reading it
raises MemoryReadError saying it is not in the sample.

Files come from a :class:`FileSource`: :class:`RecordedFiles` looks for the
files of a recording (perf.data) on this machine, under ``--sysroot`` and
by build-id; :class:`RootFiles` opens a live process's files inside its
root (``/proc/PID/root``).  A file whose build-id is not the one the
recording names is not used: its module stays unnamed rather than wrong,
and the module says why.
"""

from __future__ import annotations

import bisect

from liveunwind.errors import FormatError, MemoryReadError
from liveunwind.formats.elf import machine_name
from liveunwind.targets.base import AddressSpace, Mapping, ThreadState
from liveunwind.targets.files import FileError, map_elf, open_in_root

TYPE_CHECKING = False
if TYPE_CHECKING:
    from liveunwind.arch import Arch
    from liveunwind.formats.elf import ElfImage
    from liveunwind.targets.filefinder import FileFinder
    from liveunwind.targets.files import RegularFile

#: Mappings kept per process (the kernel's default vm.max_map_count); more are dropped, said once.
MAX_MAPPINGS = 65530
#: Why memory outside the copy and the files cannot be read.
NOT_IN_SAMPLE = "not in the sample (the kernel copied only the registers and the stack from sp)"
#: ...and why the vDSO cannot be read: its bytes are known only when this machine's is the one.
NOT_IN_SAMPLE_VDSO = (
    "the vDSO: not in the recording, and this machine's is not known to be the same (build-id)"
)
_PROT_READ, _PROT_WRITE, _PROT_EXEC = 1, 2, 4


def _holds_code(mapping: Mapping) -> bool:
    """A mapping a module map cares about: of a file, or executable (JIT code)."""
    return mapping.is_file or mapping.executable or mapping.path.startswith("[")


def _mismatch(image: ElfImage, build_id: bytes | None, arch: Arch) -> str | None:
    """Why ``image`` is not the file recorded (machine, build-id), or None."""
    if image.machine != arch.elf_machine:
        return f"it is built for {machine_name(image.machine)}, the recording is {arch.name}"
    if build_id:
        try:
            theirs = image.build_id
        except FormatError:
            theirs = None
        if theirs != build_id:
            shown = theirs.hex() if theirs else "(none)"
            return f"its build-id {shown} differs from {build_id.hex()} in the recording"
    return None


class FileSource:
    """Where the files of a sampled process are found: each (path, build-id) looked for once.

    A subclass says how one is found (:meth:`_find`); a file not found or not
    used is one line in ``problems``, and asked for again it is None at once.
    """

    def __init__(self, problems: list[str]) -> None:
        #: A line for each file not found or not used, in the order found.
        self.problems = problems
        self._found: dict[tuple[str, bytes | None], ElfImage | None] = {}

    def image(self, path: str, build_id: bytes | None, arch: Arch) -> ElfImage | None:
        """The ELF image of the process's ``path`` (of ``build_id`` when known), or None."""
        key = (path, build_id)
        if key in self._found:
            return self._found[key]
        image, problem = self._find(path, build_id, arch)
        if problem is not None:
            self.problems.append(f"{path}: {problem}")
        self._found[key] = image
        return image

    def _find(
        self, path: str, build_id: bytes | None, arch: Arch
    ) -> tuple[ElfImage | None, str | None]:
        """The image, or None and why it is not used."""
        raise NotImplementedError


class RecordedFiles(FileSource):
    """A recording's files on this machine: the path (under the sysroot first), then build-id."""

    def __init__(self, finder: FileFinder, problems: list[str]) -> None:
        """``problems`` gets a line for each file not found or not used."""
        super().__init__(problems)
        self._finder = finder

    def _find(
        self, path: str, build_id: bytes | None, arch: Arch
    ) -> tuple[ElfImage | None, str | None]:
        found, rejected = self._finder.find(
            path, build_id, lambda image: _mismatch(image, build_id, arch)
        )
        if found is not None:
            return found.image, None
        return None, "not using " + "; ".join(rejected) if rejected else "not found on this machine"


class RootFiles(FileSource):
    """A live process's files, opened inside its root (``/proc/PID/root``)."""

    def __init__(self, root: str, problems: list[str]) -> None:
        super().__init__(problems)
        self._root = root

    def _find(
        self, path: str, build_id: bytes | None, arch: Arch
    ) -> tuple[ElfImage | None, str | None]:
        try:
            image = map_elf(open_in_root(self._root, path.removesuffix(" (deleted)")))
            why = _mismatch(image, build_id, arch)
        except (FileError, FormatError) as error:
            why = str(error)
        if why is not None:
            return None, f"not using it: {why}"
        return image, None


class SampledProcess(AddressSpace):
    """One sampled process: its mappings and files, the space its module map reads.

    ``generation`` changes whenever mappings of files or of code do: a module
    map made at one generation holds for every sample taken while it lasts.
    Anonymous data (malloc's large blocks, Python's arenas, new threads'
    stacks: mapped and unmapped all along) is kept in :meth:`mappings`
    without a new generation: a module map built before does not know it,
    and a walk on a stack it does not know is bounded by the stack copy.
    """

    def __init__(self, arch: Arch, pid: int, files: FileSource) -> None:
        self.arch = arch
        self.pid = pid
        self.files = files
        self._mappings: list[Mapping] = []
        self._starts: list[int] = []
        #: path → the build-id the recording names for it (mmap records, HEADER_BUILD_ID).
        self.build_ids: dict[str, bytes] = {}
        #: The vDSO's bytes, when they are known (this machine's own, checked by build-id).
        self.vdso: bytes | None = None
        #: The paths mapped executable at some time: the files looked for.
        self._code_paths: set[str] = set()
        #: A number per path stands for the inode where records give none.
        self._inodes: dict[str, int] = {}
        self.generation = 0
        self.problems: list[str] = []

    # -- what the records say -------------------------------------------------------

    def map(
        self,
        start: int,
        end: int,
        offset: int,
        path: str,
        *,
        prot: int,
        inode: int = 0,
        build_id: bytes | None = None,
    ) -> None:
        """A new mapping (an mmap record, a line of maps): it replaces what it overlaps."""
        if end <= start:
            return
        if build_id:
            self.build_ids[path] = build_id
        if prot & _PROT_EXEC:
            self._code_paths.add(path)
        if path.startswith("/") and not path.startswith("//") and not inode:
            inode = self._inodes.setdefault(path, len(self._inodes) + 1)
        perms = (
            ("r" if prot & _PROT_READ else "-")
            + ("w" if prot & _PROT_WRITE else "-")
            + ("x" if prot & _PROT_EXEC else "-")
            + "p"
        )
        mapping = Mapping(start, end, perms, offset, inode, path)
        kept: list[Mapping] = []
        overlapped = self._overlapping(start, end)
        for old in overlapped:
            if old.start < start:
                kept.append(old._replace(end=start))
            if old.end > end:
                kept.append(old._replace(start=end, offset=old.offset + (end - old.start)))
        first = bisect.bisect_left(self._starts, start)
        while first > 0 and self._mappings[first - 1].end > start:
            first -= 1
        last = bisect.bisect_left(self._starts, end)
        if len(self._mappings) - (last - first) + len(kept) >= MAX_MAPPINGS:
            if not self.problems or "mappings" not in self.problems[-1]:
                self.problems.append(f"process {self.pid}: more than {MAX_MAPPINGS} mappings")
            return
        placed = sorted([*kept, mapping])
        # Slices replaced in place (a memmove), not lists rebuilt: a recording may hold
        # tens of thousands of mmap records of one process.
        self._mappings[first:last] = placed
        self._starts[first:last] = [each.start for each in placed]
        if any(map(_holds_code, [mapping, *overlapped])):
            self.generation += 1

    def _overlapping(self, start: int, end: int) -> list[Mapping]:
        index = bisect.bisect_right(self._starts, start) - 1
        index = max(index, 0)
        found = []
        for mapping in self._mappings[index:]:
            if mapping.start >= end:
                break
            if mapping.end > start:
                found.append(mapping)
        return found

    def forget_mappings(self) -> None:
        """The process ran a new program (exec): none of its mappings is left."""
        self._mappings, self._starts = [], []
        self.generation += 1

    def copy(self, pid: int) -> SampledProcess:
        """The child of a fork: the same mappings and files."""
        child = SampledProcess(self.arch, pid, self.files)
        child._mappings, child._starts = list(self._mappings), list(self._starts)
        child.build_ids, child.vdso, child._inodes = dict(self.build_ids), self.vdso, self._inodes
        child._code_paths = set(self._code_paths)
        return child

    def mapping_at(self, address: int) -> Mapping | None:
        index = bisect.bisect_right(self._starts, address) - 1
        if index >= 0 and address < self._mappings[index].end:
            return self._mappings[index]
        return None

    # -- AddressSpace -----------------------------------------------------------

    def mappings(self) -> list[Mapping]:
        return self._mappings

    def threads(self) -> list[ThreadState]:
        return []  # a process is seen one thread at a time, through its samples

    def read(self, address: int, size: int) -> bytes:
        """Bytes that cannot have changed since the file was mapped, or the vDSO's."""
        mapping = self.mapping_at(address)
        if mapping is None or size < 0 or address + size > mapping.end:
            raise MemoryReadError(address, size, NOT_IN_SAMPLE)
        if mapping.path == "[vdso]":
            at = address - mapping.start
            if self.vdso is None or at + size > len(self.vdso):
                raise MemoryReadError(address, size, NOT_IN_SAMPLE_VDSO)
            return self.vdso[at : at + size]
        if mapping.is_file and not mapping.writable:
            image = self.mapped_image(mapping)
            if image is not None:
                data = image.read(mapping.offset + address - mapping.start, size)
                if len(data) == size:
                    return data
        raise MemoryReadError(address, size, NOT_IN_SAMPLE)

    def mapped_image(self, mapping: Mapping) -> ElfImage | None:
        """The file of a mapping of code's file; None for a file never mapped executable.

        Perf records no munmap: data files the loader maps for a moment (its
        cache, locale archives) stay in the mappings; they hold no code to
        walk or name, and are not looked for.
        """
        if not mapping.is_file or mapping.path not in self._code_paths:
            return None
        return self.files.image(mapping.path, self.build_ids.get(mapping.path), self.arch)

    def open_mapped_file(self, mapping: Mapping) -> RegularFile | None:
        return None  # every file is handed over as an image (mapped_image), checked
