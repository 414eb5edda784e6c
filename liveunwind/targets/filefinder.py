"""Finding the files a core refers to, on a machine that may not be the one that wrote it.

Candidates are tried in this order: the recorded path under ``--sysroot``
(when given: a sysroot says where the core's root lives, so it wins over a
host file of the same name; a relative path too, as a core made in a
container or rewritten by a tool may record it), the recorded path itself
(a relative one, as QEMU records the program, from the current folder), the
file's name in each ``--search-path`` folder, then build-id directories
(``/usr/lib/debug/.build-id/xx/rest`` and friends, also under the sysroot and
the search path).  A candidate is used only if it is a regular ELF file that
passes the caller's check — typically "same build-id as the image in core
memory" or "same dynamic section address" — and that has code: a separate
``.debug`` file found by build-id has the right id but no instructions, so
it is passed over in favour of a real file.
"""

from __future__ import annotations

import os

from liveunwind.errors import FormatError
from liveunwind.formats.elf import PT_LOAD, SHT_NOBITS, ElfImage
from liveunwind.targets.files import FileError, NotRegularFileError, open_elf

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    #: Says why an image is not the one wanted, or None when it is.
    Check = Callable[[ElfImage], str | None]

_BUILD_ID_DIRS = ("usr/lib/debug/.build-id", "usr/lib/.build-id")


class FoundFile:
    """A file that passed every check, with its image kept mapped, and how it was matched."""

    __slots__ = ("image", "matched", "path")

    def __init__(self, path: str, image: ElfImage, matched: str = "") -> None:
        self.path = path
        self.image = image
        #: How it was known to be the file ("by build-id …"; "" when not said).
        self.matched = matched


class FileFinder:
    """Looks up the files of one core."""

    def __init__(self, *, sysroot: str | None = None, search_path: Sequence[str] = ()) -> None:
        self.sysroot = sysroot
        self.search_path = [folder for folder in search_path if folder]

    def candidates(self, recorded: str, build_id: bytes | None) -> Iterator[str]:
        """Paths to try for a file recorded as ``recorded``, best first, without repeats."""
        seen: set[str] = set()
        for path in self._candidates(recorded, build_id):
            if path not in seen:
                seen.add(path)
                yield path

    def _candidates(self, recorded: str, build_id: bytes | None) -> Iterator[str]:
        clean = recorded.removesuffix(" (deleted)")
        if clean and self.sysroot:
            yield os.path.join(self.sysroot, clean.lstrip("/"))
        if clean:
            yield clean  # a relative path (QEMU's AT_EXECFN) is tried from the current folder
        name = os.path.basename(clean)
        if name:
            for folder in self.search_path:
                yield os.path.join(folder, name)
        if build_id and len(build_id) >= 2:
            head, rest = build_id[:1].hex(), build_id[1:].hex()
            roots = ["/", *([self.sysroot] if self.sysroot else [])]
            folders = [os.path.join(root, sub) for root in roots for sub in _BUILD_ID_DIRS]
            folders += [os.path.join(folder, ".build-id") for folder in self.search_path]
            for folder in folders:
                yield os.path.join(folder, head, rest)
                yield os.path.join(folder, head, rest + ".debug")

    def find(
        self, recorded: str, build_id: bytes | None, check: Check, *, first: str | None = None
    ) -> tuple[FoundFile | None, list[str]]:
        """The first candidate that passes ``check``, and why others were turned down.

        ``first`` is tried before every other candidate (the EXE the user named).
        """
        rejected: list[str] = []
        paths = self.candidates(recorded, build_id)
        if first is not None:
            paths = _chain(first, paths)
        for path in paths:
            try:
                image = open_image(path, strict=True)
            except NotRegularFileError as error:
                rejected.append(f"{path}: {error.reason}")
                continue
            if image is None:
                continue
            reason = check(image) or cut_short(image)
            if reason is None and not has_code(image):
                reason = "it has no code (a separate debug file)"
            if reason is not None:
                rejected.append(f"{path}: {reason}")
                continue
            return FoundFile(path, image), rejected
        return None, rejected


def open_image(path: str, *, strict: bool = False) -> ElfImage | None:
    """Maps ``path`` as an ELF image if it is a regular, readable ELF64 file.

    Anything else is None — or, with ``strict``, a FIFO, device or other
    non-regular file raises NotRegularFileError so the caller can say why
    it was passed over.  Such a file is never opened.
    """
    try:
        return open_elf(path)
    except NotRegularFileError:
        if strict:
            raise
        return None
    except (FileError, FormatError):
        return None


def cut_short(image: ElfImage) -> str | None:
    """Why ``image`` is not whole: its file ends before a PT_LOAD's bytes do; else None."""
    try:
        end = max((h.offset + h.filesz for h in image.segments_of_type(PT_LOAD)), default=0)
    except FormatError as error:
        return str(error)
    if end > len(image.data):
        return f"is {len(image.data)} bytes, shorter than its segments ({end}): cut short"
    return None


def has_code(image: ElfImage) -> bool:
    """True if an executable PT_LOAD holds bytes in the file (not a stripped .debug file)."""
    try:
        loads = image.segments_of_type(PT_LOAD)
        text = image.sections.get(".text")
    except FormatError:
        return False
    if text is not None and text.type == SHT_NOBITS:  # the code was split off
        return False
    return any(header.flags & 1 and header.filesz > 0 for header in loads)


def _chain(first: str, rest: Iterator[str]) -> Iterator[str]:
    yield first
    for path in rest:
        if path != first:
            yield path
