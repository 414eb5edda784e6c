"""``liveunwind unwind-info``: the unwind tables of a binary, as liveunwind decodes them.

When a backtrace looks wrong, the first question is what the tables say at
the pc in question.  This prints every table of a file (or one format), and
with ``--pc`` the one rule each table gives at that address side by side, so
a disagreement between ``.eh_frame`` and ``.sframe`` is visible at a glance.
Addresses are link-time addresses of the file (``module_offset`` in
liveunwind's JSON output, or what ``objdump -d`` shows).

Listing a table's entries is this command's business, not the unwinder's: the
:class:`~liveunwind.modules.sources.UnwindTable` contract is only
``rule_for``, and the dump narrows to the concrete decoders (CfiTable,
SFrameSection, CompactUnwindTable, GoPclnTab) for what each of them can show.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache
from typing import TYPE_CHECKING

from liveunwind.arch import Arch, arch_by_elf_machine
from liveunwind.errors import FormatError, TargetError, UsageError
from liveunwind.formats.elf import ElfImage
from liveunwind.formats.unwind.dwarf_cfi import CfiTable, Fde
from liveunwind.formats.unwind.gopclntab import GoPclnTab
from liveunwind.formats.unwind.rules import UnwindRule
from liveunwind.formats.unwind.sframe import SFrameSection
from liveunwind.modules.sources import UnwindSource, unwind_tables
from liveunwind.targets.files import FileError, open_elf, open_file

if TYPE_CHECKING:
    from liveunwind.modules.symbols import SymbolTable


def load_image(path: str) -> ElfImage:
    """Maps ``path`` and reads its ELF headers; a one-line error if it is not ELF.

    Only a regular file is opened (targets/files.py): a FIFO or a device is
    refused by name instead of blocking or running a driver.
    """
    try:
        return open_elf(path)
    except FileError as error:
        raise TargetError(f"cannot read {path}: {error.reason}") from None
    except FormatError as error:
        raise TargetError(str(error)) from None


_MACH_O_MAGICS = (b"\xcf\xfa\xed\xfe", b"\xca\xfe\xba\xbe")


def describe_file(path: str, wanted: str | None, pc: int | None) -> tuple[str, bool]:
    """The report for ``path``; the flag says whether any requested table was found."""
    if _is_mach_o(path):
        return _describe_mach_o(path, wanted, pc)
    image = load_image(path)
    if wanted == "compact":
        return f"{path}: compact unwind exists only in Mach-O files\n", False
    try:
        arch = arch_by_elf_machine(image.machine)
    except UsageError as error:  # the file's machine, not the command line, is wrong
        raise TargetError(f"{path}: {error}") from None
    problems: list[str] = []
    sources = [
        source
        for source in unwind_tables(image, problems)
        if wanted is None or source.name == wanted
    ]
    lines = list(_header(path, image, arch, sources, wanted))
    if pc is None:
        for source in sources:
            lines.extend(_dump(source, image, arch))
    else:
        lines.extend(_rules_at(sources, image, arch, pc))
    lines.extend(f"note: {problem}" for problem in problems)
    return "\n".join(lines) + "\n", bool(sources)


def _is_mach_o(path: str) -> bool:
    try:
        with open_file(path) as file:
            return file.read(4) in _MACH_O_MAGICS
    except FileError:
        return False  # load_image reports it


def _describe_mach_o(path: str, wanted: str | None, pc: int | None) -> tuple[str, bool]:
    """A Mach-O file: its compact unwind table (and the __eh_frame it escapes to)."""
    from liveunwind.modules.macho import MachOImage

    try:
        image = MachOImage(path)
    except FormatError as error:
        raise TargetError(str(error)) from None
    arch = image.arch
    problems: list[str] = []
    sources = [
        source
        for source in image.unwind_tables(problems)
        if wanted is None or source.name == wanted
    ]
    labels = ", ".join(source.label for source in sources) or f"no {wanted or 'unwind'} tables"
    lines = [f"{path} ({arch.name}, Mach-O): {labels}"]
    table = image.compact_table
    if pc is None:
        if table is not None and wanted in (None, "compact"):
            lines.extend(table.format_dump().rstrip("\n").splitlines())
    else:
        match = image.symbols.lookup(pc)
        where = "" if match is None else f" ({match.name}+{match.offset:#x})"
        lines.append(f"at {pc:#x}{where}")
        if table is not None and (entry := table.entry_for(pc)) is not None:
            lines.append(
                f"  compact entry {entry.start:#x}..{entry.end:#x}  encoding {entry.encoding:#010x}"
                f"  {table.describe_encoding(entry.encoding)}"
            )
        lines.extend(_rule_lines(sources, arch, pc))
    lines.extend(f"note: {problem}" for problem in problems)
    return "\n".join(lines) + "\n", bool(sources)


def _header(
    path: str, image: ElfImage, arch: Arch, sources: list[UnwindSource], wanted: str | None
) -> Iterator[str]:
    labels = ", ".join(source.label for source in sources) or f"no {wanted or 'unwind'} tables"
    yield f"{path} ({arch.name}): {labels}"


def _symbol(image: ElfImage, address: int) -> str:
    from liveunwind.modules.symbols import demangle

    match = _symbols(image).lookup(address)
    if match is None:
        return ""
    name = demangle(match.name)
    return f"{name}+{match.offset:#x}" if match.offset else name


@lru_cache(maxsize=4)
def _symbols(image: ElfImage) -> SymbolTable:
    from liveunwind.modules.symbols import SymbolTable

    return SymbolTable(image)


def _rules_at(sources: list[UnwindSource], image: ElfImage, arch: Arch, pc: int) -> Iterator[str]:
    symbol = _symbol(image, pc)
    yield f"at {pc:#x}" + (f" ({symbol})" if symbol else "")
    yield from _rule_lines(sources, arch, pc)


def _rule_lines(sources: list[UnwindSource], arch: Arch, pc: int) -> Iterator[str]:
    """Each table's rule at ``pc``, aligned, so disagreements stand out."""
    width = max((len(source.label) for source in sources), default=0)
    for source in sources:
        try:
            rule = source.rule_for(pc)
        except FormatError as error:
            yield f"  {source.label:<{width}}  corrupt: {error}"
            continue
        if rule is None:
            yield f"  {source.label:<{width}}  no entry covers {pc:#x}"
        else:
            span = f"{rule.start:#x}..{rule.end:#x}"
            yield f"  {source.label:<{width}}  [{span}]  {_rule_text(rule, arch)}"


def _rule_text(rule: UnwindRule, arch: Arch) -> str:
    from liveunwind.formats.unwind.dwarf_expr import describe

    def expression_text(expression: bytes) -> str:
        try:
            return describe(expression, arch.register_name)
        except FormatError:
            return "<malformed expression>"

    return rule.describe(arch.register_name, expression_text)


def _dump_go(label: str, table: GoPclnTab, arch: Arch) -> Iterator[str]:
    """Go's functions, each with its rules (an undefined return address ends the walk)."""
    yield ""
    yield f"{label} (Go {table.version} layout): {len(table)} functions"
    try:
        for index in range(len(table)):
            function = table.function(index)
            yield ""
            yield f"{table.name(function)}  {function.entry:#x}..{function.end:#x}"
            for address, rule in table.rows(function):
                yield f"  {address:#x}  {_rule_text(rule, arch)}"
    except FormatError as error:
        yield f"corrupt {label}: {error}"


def _dump(source: UnwindSource, image: ElfImage, arch: Arch) -> Iterator[str]:
    table = source.table
    if isinstance(table, SFrameSection):
        yield from table.format_objdump().rstrip("\n").splitlines()
        return
    if isinstance(table, GoPclnTab):
        yield from _dump_go(source.label, table, arch)
        return
    assert isinstance(table, CfiTable), "unwind_tables makes Go, CFI and SFrame tables only"
    yield ""
    yield f"{source.label}:"
    try:
        for entry in table.entries():
            if not isinstance(entry, Fde):
                continue  # a CIE: its initial rules show in each FDE's first row
            symbol = _symbol(image, entry.pc_begin)
            yield ""
            yield (
                f"FDE {entry.pc_begin:#x}..{entry.pc_end:#x}"
                + (f"  {symbol}" if symbol else "")
                + f"  (offset {entry.offset:#x})"
            )
            for address, rule in table.rows(entry):
                yield f"  {address:#x}  {_rule_text(rule, arch)}"
    except FormatError as error:
        yield f"corrupt {source.label}: {error}"
