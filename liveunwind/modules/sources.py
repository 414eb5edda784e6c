"""The unwind tables of an ELF image, each behind the one question the stepper asks.

:func:`unwind_tables` builds an :class:`UnwindSource` for every table an image
carries (Go's ``.gopclntab``, ``.eh_frame``, ``.debug_frame``, ``.sframe``); a module adds the
``.debug_frame`` of its separate debug file (:class:`DebugFileFrames`).  Every
table satisfies :class:`UnwindTable`: ``rule_for(pc)`` with a link-time pc,
None where the table has no entry, FormatError where the entry is corrupt.
"""

from __future__ import annotations

from liveunwind.errors import FormatError
from liveunwind.formats.elf import PT_GNU_EH_FRAME, PT_GNU_SFRAME
from liveunwind.sources import SOURCES_BY_NAME

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Literal, Protocol

    from liveunwind.formats.elf import ElfImage
    from liveunwind.formats.unwind.gopclntab import GoPclnTab
    from liveunwind.formats.unwind.rules import UnwindRule
    from liveunwind.modules.goruntime import GoRuntime
    from liveunwind.modules.lines import ModuleLines

    class UnwindTable(Protocol):
        """A decoded unwind section: CfiTable, SFrameSection, a compact-unwind table…

        The contract is what unwinding needs and nothing more; a tool that
        shows a table's entries (``unwind-info``) narrows to the concrete class.
        """

        def rule_for(self, pc: int) -> UnwindRule | None: ...


class UnwindSource:
    """One unwind table of a module: the source it belongs to and the section it came from.

    ``name`` is a table of the registry (liveunwind/sources.py: ``cfi``,
    ``sframe``, ``compact``), under which the module lists it; ``method`` is
    what the frames its rules find report, as the registry says.
    """

    def __init__(self, name: str, label: str, table: UnwindTable) -> None:
        self.name = name
        self.method = SOURCES_BY_NAME[name].method
        self.label = label
        self.table = table
        self.rule_for = table.rule_for


class GoTable(UnwindSource):
    """A Go program's ``.gopclntab``, and the layout of its scheduler's records, read when asked.

    The layout (``modules/goruntime.py``) is what a walk needs to continue
    from the scheduler stack into the goroutine that switched to it; it is
    read the first time a walk asks, and kept with the table.
    """

    def __init__(self, table: GoPclnTab, image: ElfImage) -> None:
        super().__init__("cfi", ".gopclntab", table)
        self.go = table
        self._image = image
        self._runtime: GoRuntime | str | None = None

    def runtime(self, lines: Callable[[], ModuleLines | None]) -> GoRuntime | str:
        """The program's scheduler layout, or why it cannot be known (read once).

        ``lines`` gives the module's DWARF (its own, or its debug file's).
        """
        if self._runtime is None:
            from liveunwind.modules.goruntime import read_runtime

            self._runtime = read_runtime(self._image, lines)
        return self._runtime


class DebugFileFrames:
    """``.debug_frame`` of a module's separate debug file, looked for only when needed.

    Opening a debug file costs a search of the debug directories; it is done
    (by ``load_debug_image``) the first time a pc of the module has no rule
    in the module's own tables.
    """

    def __init__(self, load_debug_image: Callable[[], ElfImage | None]) -> None:
        self._load_debug_image = load_debug_image
        self._table: UnwindTable | None = None
        self._loaded = False

    def rule_for(self, pc: int) -> UnwindRule | None:
        if not self._loaded:
            self._loaded = True
            image = self._load_debug_image()
            if image is not None:
                source = _debug_frame(image)
                self._table = None if source is None else source.table
        return None if self._table is None else self._table.rule_for(pc)


def unwind_tables(image: ElfImage, problems: list[str]) -> list[UnwindSource]:
    """Every unwind table an ELF image carries; a corrupt one is noted in ``problems``."""
    sources = []
    for builder in (_gopclntab, _eh_frame, _debug_frame, _sframe):
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


def _gopclntab(image: ElfImage) -> GoTable | None:
    """Go's ``.gopclntab``, first of the ``cfi`` sources of a Go program.

    It is Go's call-frame information, and it counts as CFI: for Go code it
    says what Go's ``.debug_frame`` says (both come from the same SP deltas),
    and it also knows where Go's stacks end (``runtime.goexit``, the
    scheduler stack's switches), which ``.debug_frame`` does not, so it is
    asked first.  It covers only Go's functions; C code linked into the
    program keeps its ``.eh_frame``.
    """
    section = image.sections.get(".gopclntab")
    if section is None:
        return None
    data = image.contents(section)
    if not data:
        return None
    from liveunwind.arch import arch_by_elf_machine
    from liveunwind.errors import UsageError
    from liveunwind.formats.unwind.gopclntab import GoPclnTab

    try:
        arch = arch_by_elf_machine(image.machine)
    except UsageError:
        return None  # not an architecture liveunwind unwinds
    text = image.sections.get(".text")
    table = GoPclnTab(data, arch, text.address if text is not None else 0)
    return GoTable(table, image)


def _eh_frame(image: ElfImage) -> UnwindSource | None:
    """``.eh_frame``, searched through ``.eh_frame_hdr`` when there is one."""
    from liveunwind.formats.unwind.dwarf_cfi import CfiTable

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
    from liveunwind.formats.unwind.dwarf_cfi import CfiTable
    from liveunwind.modules.debuginfo import section_data

    data = section_data(image, ".debug_frame")
    if not data:
        return None
    table = CfiTable(data, 0, kind="debug_frame", byte_order=_byte_order(image))
    return UnwindSource("cfi", ".debug_frame", table)


def _sframe(image: ElfImage) -> UnwindSource | None:
    """``.sframe``, found by PT_GNU_SFRAME (as the kernel does) or by section name."""
    data: memoryview | None
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
    from liveunwind.formats.unwind.sframe import SFrameSection

    return UnwindSource("sframe", ".sframe", SFrameSection(data, address))
