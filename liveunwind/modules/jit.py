"""Unwind info registered at run time: libunwind's dynamic list, the GDB JIT interface, perf maps.

JIT compilers put code where no file describes it and announce it in one of
three ways; this module reads all three, through a ``read(address, size)``
callable it is handed (live memory, a snapshot or a core — it never knows
which), and answers :meth:`DynamicRegistry.rule_for` and
:meth:`DynamicRegistry.name_for` for absolute pcs.

**libunwind** (``libunwind-dynamic.h``): ``_U_dyn_register`` links
``unw_dyn_info_t`` records into ``unw_dyn_info_list_t _U_dyn_info_list``
{u32 version, u32 generation, first}.  Debian's ``libunwind.so.8`` has no
``.symtab`` and the list is a hidden symbol, so :func:`find_roots` decodes the
exported accessor ``_U_dyn_info_list_addr()`` from the file's bytes
(:mod:`liveunwind.formats.unwind.accessor`); a ``_U_dyn_info_list`` symbol, where one
exists (unstripped or static builds), is used first because it needs no code
decoding.  The list is walked as libunwind's own remote reader walks it:
generation read before and after, the walk repeated (a bounded number of
times) when a writer changed it under us.  The records' layouts, and the
interpretation of their DYNAMIC ops, are in :mod:`liveunwind.formats.unwind.dynamic`;
this module reads them and the FDE tables of the TABLE formats.

**GDB JIT interface**: ``__jit_debug_descriptor`` {u32 version = 1, u32
action_flag, relevant_entry, first_entry} heads a list of ``jit_code_entry``
{next, prev, symfile_addr, symfile_size}; each entry is an in-memory object
file whose ``.eh_frame``/``.debug_frame`` and symbols describe the JIT code.

**perf maps**: ``/tmp/perf-PID.map`` names code that nothing else describes;
:class:`~liveunwind.modules.perfmapfile.PerfMapFile` reads it as it grows
(only what was appended since the last read) into a
:class:`~liveunwind.formats.unwind.perfmap.PerfMap` a session keeps, and each
registry names code with a view of it.

Everything read is untrusted: every list is bounded and checked for cycles,
every count and size is capped before anything is allocated, and a corrupt
record costs only its own entry (noted in :attr:`DynamicRegistry.problems`) or
raises :class:`~liveunwind.errors.FormatError` for the pcs it covers.
"""

from __future__ import annotations

import bisect
import struct

from liveunwind.arch import arch_by_elf_machine
from liveunwind.arch.base import ACCESSOR_CODE_SIZE, WORD_MASK
from liveunwind.errors import FormatError, MemoryReadError, UsageError
from liveunwind.formats.unwind.dynamic import (
    DYN_INFO,
    DYN_INFO_LIST,
    DYN_OP,
    DYN_REGION,
    MAX_OPS,
    MAX_PROCEDURE_SIZE,
    MAX_REGIONS,
    MAX_TABLE_ENTRIES,
    TABLE_ENTRY,
    TABLE_FORMATS,
    UNW_INFO_FORMAT_DYNAMIC,
    UNW_INFO_FORMAT_IP_OFFSET,
    Procedure,
    Region,
    conventions_for,
    decode_ops,
    dynamic_rule,
)
from liveunwind.formats.unwind.perfmap import JitRange, PerfMapView
from liveunwind.modules.module import RegistryRoots
from liveunwind.targets import linkedlist

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from liveunwind.arch import Arch, ReadMemory
    from liveunwind.formats.elf import ElfImage
    from liveunwind.formats.unwind.rules import UnwindRule
    from liveunwind.modules.sources import UnwindSource

# GDB JIT interface layouts (LP64, little-endian).
_JIT_DESCRIPTOR = struct.Struct("<IIQQ")  # version, action_flag, relevant_entry, first_entry
_JIT_ENTRY = struct.Struct("<QQQQ")  # next, prev, symfile_addr, symfile_size
_U32 = struct.Struct("<I")

#: Bounds on untrusted counts and sizes.
MAX_LIST_ENTRIES = 1 << 16
MAX_GENERATION_RETRIES = 4
MAX_CFI_ENTRY = 1 << 16
MAX_CIE_DISTANCE = 1 << 22
MAX_JIT_OBJECT = 64 << 20
MAX_JIT_TOTAL = 256 << 20
MAX_NAME = 512
#: Problems kept per registry (a corrupt list could otherwise produce one per entry).
MAX_PROBLEMS = 64
#: Rules a registry keeps (see :class:`DynamicRegistry`).
MAX_CACHED_RULES = 1 << 16


# -- finding the roots ----------------------------------------------------------------

_STT_FUNC = 2
_STT_GNU_IFUNC = 10
_SHF_ALLOC = 2
_SHF_EXECINSTR = 4
_ET_REL = 1


def find_roots(image: ElfImage, load_bias: int) -> RegistryRoots:
    """Where a module keeps registry heads, as runtime addresses (``load_bias`` added).

    Looks for ``_U_dyn_info_list`` (else decodes ``_U_dyn_info_list_addr``)
    and ``__jit_debug_descriptor`` in the module's ``.symtab`` and ``.dynsym``.
    Pure: the accessor's code is read from the image, not from the target.
    """
    _check_little_endian(image)
    lists: tuple[int, ...] = ()
    symbol = image.find_symbol("_U_dyn_info_list")
    if symbol is not None:
        lists = ((symbol.value + load_bias) & WORD_MASK,)
    else:
        accessor = image.find_symbol("_U_dyn_info_list_addr")
        if accessor is not None:
            lists = ((_decode_list_accessor(image, accessor.value) + load_bias) & WORD_MASK,)
    descriptors: tuple[int, ...] = ()
    symbol = image.find_symbol("__jit_debug_descriptor")
    if symbol is not None:
        descriptors = ((symbol.value + load_bias) & WORD_MASK,)
    return RegistryRoots(lists, descriptors)


def _check_little_endian(image: ElfImage) -> None:
    """The registries' layouts are read little-endian: a big-endian image has none of ours."""
    if image.byte_order != "<":
        raise FormatError(f"{image.origin}: big-endian images are not supported here")


def _decode_list_accessor(image: ElfImage, address: int) -> int:
    """The link-time address ``_U_dyn_info_list_addr()`` returns, decoded from its code.

    libunwind's list is a hidden symbol in Debian's ``libunwind.so.8`` (which
    has no ``.symtab``); what is exported is this function, which only returns
    the list's address.  Its code is two or three instructions, so the address
    is read off them (``Arch.address_returned``) rather than by calling
    anything in the target.
    """
    offset = image.offset_for_vaddr(address, ACCESSOR_CODE_SIZE)
    if offset is None:
        raise FormatError(
            f"{image.origin}: _U_dyn_info_list_addr at {address:#x} is not in the file"
        )
    code = bytes(image.slice(offset, ACCESSOR_CODE_SIZE))
    try:
        found = arch_by_elf_machine(image.machine).address_returned(code, address)
    except UsageError:
        found = None
    if found is None:
        raise FormatError(
            f"{image.origin}: cannot decode _U_dyn_info_list_addr ({code.hex()}) for machine "
            f"{image.machine}"
        )
    return found


# -- the perf map, as it grows ------------------------------------------------------------


# -- the registry ---------------------------------------------------------------------


class _JitObject:
    """One GDB JIT entry: an in-memory object file and what it describes."""

    __slots__ = ("address", "end", "functions", "sources", "start")

    def __init__(
        self,
        address: int,
        start: int,
        end: int,
        sources: list[UnwindSource],
        functions: list[JitRange],
    ) -> None:
        self.address = address
        self.start = start
        self.end = end
        self.sources = sources
        self.functions = functions


class _Intervals:
    """Possibly overlapping intervals searchable by address."""

    __slots__ = ("_max_ends", "_starts", "items")

    def __init__(self) -> None:
        self.items: list[tuple[int, int, object]] = []
        self._starts: list[int] = []
        self._max_ends: list[int] = []

    def freeze(self) -> None:
        self.items.sort(key=lambda item: (item[0], item[1]))
        self._starts = [start for start, _, _ in self.items]
        highest = 0
        self._max_ends = []
        for _, end, _ in self.items:
            highest = max(highest, end)
            self._max_ends.append(highest)

    def covering(self, address: int) -> Iterator[object]:
        """Items holding ``address``, latest start first (the innermost of nested ones)."""
        index = bisect.bisect_right(self._starts, address) - 1
        while index >= 0 and self._max_ends[index] > address:
            start, end, item = self.items[index]
            if start <= address < end:
                yield item
            index -= 1


class DynamicRegistry:
    """Everything a target registered at run time, read through ``read``.

    ``libunwind_lists`` and ``jit_descriptors`` are runtime addresses of
    ``_U_dyn_info_list`` and ``__jit_debug_descriptor`` (from
    :func:`find_roots` over the target's modules); ``perf_map`` holds the
    parsed perf map, if any (names only): a view of what a session keeps
    (:class:`~liveunwind.modules.perfmapfile.PerfMapFile`), or the entries of
    a map parsed whole.  The registry is read on first use; a registry that
    changes afterwards is not re-read — build a new one per backtrace.  A
    target stopped only briefly has :meth:`read_all` called while it is
    stopped: every read happens then, and the parsing waits for the first
    query, after the target runs again.

    The registry is the one cache of rules for JIT code: :meth:`rule_for`
    keeps the rule (or None) of every pc it was asked about, at most
    :data:`MAX_CACHED_RULES` of them (later pcs are answered but not kept).
    The cache lives as long as the registry: its module map, that is one
    backtrace, since a JIT may put other code at the same addresses before
    the next one.
    """

    def __init__(
        self,
        read: ReadMemory,
        arch: Arch,
        *,
        libunwind_lists: Sequence[int] = (),
        jit_descriptors: Sequence[int] = (),
        perf_map: PerfMapView | Sequence[JitRange] = (),
    ) -> None:
        self._conventions = conventions_for(arch)
        self._raw_read = read
        self._lists = tuple(libunwind_lists)
        self._descriptors = tuple(jit_descriptors)
        self._perf_map = perf_map if isinstance(perf_map, PerfMapView) else PerfMapView.of(perf_map)
        #: What was wrong with the registries, for the report (at most MAX_PROBLEMS).
        self.problems: list[str] = []
        self._dropped_problems = 0
        for problem in self._perf_map.problems:
            self._problem(problem)
        self._touched: list[tuple[int, int]] = []
        self._listed = False
        self._loaded = False
        self._procedures: list[Procedure] = []
        #: (entry address, object address, object bytes) of each GDB JIT entry, parsed on load.
        self._jit_files: list[tuple[int, int, bytes]] = []
        self._objects: list[_JitObject] = []
        self._unwind = _Intervals()
        self._names = _Intervals()
        #: Lookup pc → its rule or None; see the class docstring for its bounds and lifetime.
        self._rules: dict[int, UnwindRule | None] = {}

    # -- public queries -------------------------------------------------------

    def ranges(self) -> list[JitRange]:
        """Every announced code range, sorted: libunwind procedures, JIT functions, perf map."""
        self._load()
        found = [JitRange(p.start, p.end, p.name, _source(p)) for p in self._procedures]
        for jit_object in self._objects:
            found.extend(jit_object.functions)
        found.extend(self._perf_map.entries())
        return sorted(found, key=lambda item: (item.start, item.end, item.source))

    def covers(self, pc: int) -> bool:
        """Whether any registration (with unwind info or just a name) includes ``pc``."""
        self._load()
        return (
            any(True for _ in self._unwind.covering(pc))
            or any(True for _ in self._names.covering(pc))
            or self._perf_map.range_for(pc) is not None
        )

    def name_for(self, pc: int) -> str | None:
        """The registered name of the code at ``pc`` (see :meth:`range_for`)."""
        found = self.range_for(pc)
        return None if found is None else found.name

    def range_for(self, pc: int) -> JitRange | None:
        """The best-named registered range holding ``pc``, by source rank (:data:`_NAME_RANKS`).

        Among names of one source the innermost (latest-starting) range wins.
        """
        self._load()
        best = min(self._names.covering(pc), key=_name_rank, default=None)
        named = self._perf_map.range_for(pc)
        if named is not None and (best is None or _name_rank(named) < _name_rank(best)):
            best = named
        return best if isinstance(best, JitRange) else None

    def rule_for(self, pc: int) -> UnwindRule | None:
        """The rule at ``pc`` (a lookup pc: callers pass return address - 1).

        None when nothing registered covers ``pc``; FormatError when the
        registration covering it is corrupt or unsupported.
        """
        if pc in self._rules:
            return self._rules[pc]
        self._load()
        rule = None
        for item in self._unwind.covering(pc):
            if isinstance(item, Procedure):
                rule = self._procedure_rule(item, pc)
            else:
                assert isinstance(item, _JitObject)
                rule = self._object_rule(item, pc)
            if rule is not None:
                break
        if len(self._rules) < MAX_CACHED_RULES:
            self._rules[pc] = rule
        return rule

    def read_all(self) -> list[tuple[int, int]]:
        """Reads now all registry memory any query may need; returns it as merged ranges.

        That is the lists, their records, names and regions, the JIT objects,
        and each FDE table whole with every FDE and CIE it points at (which
        :meth:`rule_for` would otherwise read lazily).  Queries afterwards
        read only addresses within these ranges, so a target stopped just for
        this call can run again before the registry is used.  Nothing is
        parsed here that can wait: JIT objects are parsed on the first query.
        """
        self._read_lists()
        for procedure in self._procedures:
            if procedure.format in TABLE_FORMATS and not procedure.error:
                self._read_table(procedure)
        return _merge(self._touched)

    def _problem(self, text: str) -> None:
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(text)
            return
        self._dropped_problems += 1
        self.problems[-1] = f"... and {self._dropped_problems} more problems"

    # -- reading --------------------------------------------------------------

    def _read(self, address: int, size: int) -> bytes:
        if address < 0 or size < 0 or address + size > WORD_MASK + 1:
            raise MemoryReadError(address & WORD_MASK, size, "address out of range")
        data = self._raw_read(address, size)
        if len(data) != size:
            raise MemoryReadError(address, size, "short read")
        self._touched.append((address, size))
        return data

    def _string(self, address: int) -> str:
        """A NUL-terminated string of at most MAX_NAME bytes, read in chunks that stay in a page."""
        collected = b""
        while len(collected) < MAX_NAME:
            chunk = min(64, 4096 - (address + len(collected)) % 4096, MAX_NAME - len(collected))
            data = self._read(address + len(collected), chunk)
            end = data.find(b"\0")
            if end >= 0:
                return (collected + data[:end]).decode("utf-8", "replace")
            collected += data
        return collected.decode("utf-8", "replace")

    def _read_lists(self) -> None:
        """Reads the libunwind lists (decoding their small records) and the JIT objects' bytes."""
        if self._listed:
            return
        self._listed = True
        for address in self._lists:
            self._procedures.extend(self._read_libunwind_list(address))
        budget = [MAX_JIT_TOTAL]
        for address in self._descriptors:
            self._jit_files.extend(self._read_jit_descriptor(address, budget))

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        self._read_lists()
        for entry, address, data in self._jit_files:
            try:
                jit_object = self._jit_object(address, data)
            except FormatError as error:
                self._problem(f"GDB JIT entry {entry:#x}: {error}")
                continue
            if jit_object is not None:
                self._objects.append(jit_object)
        self._jit_files = []
        for procedure in self._procedures:
            self._unwind.items.append((procedure.start, procedure.end, procedure))
            name = JitRange(procedure.start, procedure.end, procedure.name, _source(procedure))
            self._names.items.append((procedure.start, procedure.end, name))
        for jit_object in self._objects:
            self._unwind.items.append((jit_object.start, jit_object.end, jit_object))
            for function in jit_object.functions:
                self._names.items.append((function.start, function.end, function))
        self._unwind.freeze()
        self._names.freeze()

    # -- libunwind ------------------------------------------------------------

    def _read_libunwind_list(self, address: int) -> list[Procedure]:
        """The list's procedures; re-read while its generation changes (bounded)."""
        procedures: list[Procedure] = []
        for _attempt in range(MAX_GENERATION_RETRIES):
            try:
                _version, generation, first = DYN_INFO_LIST.unpack(
                    self._read(address, DYN_INFO_LIST.size)
                )
            except MemoryReadError as error:
                self._problem(f"libunwind list at {address:#x}: {error}")
                return []
            procedures, problems = self._follow_libunwind_list(first)
            try:
                after = DYN_INFO_LIST.unpack(self._read(address, DYN_INFO_LIST.size))[1]
            except MemoryReadError as error:
                after = generation
                problems.append(f"libunwind list at {address:#x}: {error}")
            if after == generation:
                for problem in problems:
                    self._problem(problem)
                return procedures
        self._problem(
            f"libunwind list at {address:#x} kept changing; "
            f"using the last of {MAX_GENERATION_RETRIES} reads"
        )
        return procedures

    def _follow_libunwind_list(self, first: int) -> tuple[list[Procedure], list[str]]:
        procedures: list[Procedure] = []
        problems: list[str] = []
        entries = linkedlist.follow(
            self._read,
            first,
            DYN_INFO,
            0,
            limit=MAX_LIST_ENTRIES,
            label="libunwind list",
            problems=problems,
        )
        for address, fields in entries:
            try:
                procedures.append(self._libunwind_entry(address, fields, problems))
            except (MemoryReadError, FormatError) as error:
                problems.append(f"libunwind entry {address:#x}: {error}")
        return procedures, problems

    def _libunwind_entry(
        self, address: int, fields: tuple[int, ...], problems: list[str]
    ) -> Procedure:
        """One unw_dyn_info_t from its unpacked fields (layout: ``DYN_INFO``).

        Its name and regions are read from the target.  A bad code range
        drops the entry; a bad name or unwind info is noted in ``problems``
        and the procedure kept, as its range still names the code.
        """
        _next, _prev, start, end, gp, fmt, _pad, _load_offset = fields[:8]
        name_ptr, handler_or_segbase, low, high, regions_or_table = fields[8:]
        if not start < end or end - start > MAX_PROCEDURE_SIZE:
            raise FormatError(f"bad code range {start:#x}..{end:#x}")
        name = ""
        if name_ptr:
            try:
                name = self._string(name_ptr)
            except MemoryReadError as error:
                problems.append(f"libunwind entry {address:#x}: name: {error}")
        procedure = Procedure(start, end, name or f"jit@{start:#x}", fmt, gp)
        try:
            if fmt == UNW_INFO_FORMAT_DYNAMIC:
                procedure.regions = self._read_regions(regions_or_table)
            elif fmt in TABLE_FORMATS:
                table_len = high << 32 | low  # flags and pad0 of pi overlay it
                if table_len > MAX_TABLE_ENTRIES:
                    raise FormatError(f"table_len {table_len} is too large")
                procedure.segbase, procedure.table = handler_or_segbase, regions_or_table
                procedure.table_entries = table_len * 8 // TABLE_ENTRY.size
            else:
                raise FormatError(f"unsupported unwind-info format {fmt}")
        except (MemoryReadError, FormatError) as error:
            procedure.error = str(error)
            problems.append(f"libunwind entry {address:#x} ({procedure.name}): {error}")
        return procedure

    def _read_regions(self, address: int) -> tuple[Region, ...]:
        regions: list[Region] = []
        seen: set[int] = set()
        while address:
            if address in seen or len(regions) >= MAX_REGIONS:
                raise FormatError(f"region list cycles or exceeds {MAX_REGIONS} regions")
            seen.add(address)
            next_address, insn_count, op_count = DYN_REGION.unpack(
                self._read(address, DYN_REGION.size)
            )
            if op_count > MAX_OPS:
                raise FormatError(f"region at {address:#x} claims {op_count} ops")
            raw = self._read(address + DYN_REGION.size, op_count * DYN_OP.size) if op_count else b""
            ops = decode_ops(raw)
            if insn_count < 0 and next_address:
                raise FormatError("negative insn_count in a region that is not the last")
            regions.append(Region(insn_count, ops))
            address = next_address
        return tuple(regions)

    def _procedure_rule(self, procedure: Procedure, pc: int) -> UnwindRule | None:
        if procedure.error:
            raise FormatError(f"{procedure.name}: {procedure.error}")
        if procedure.format == UNW_INFO_FORMAT_DYNAMIC:
            return dynamic_rule(procedure, pc, self._conventions)
        return self._table_rule(procedure, pc)

    # -- FDE tables -----------------------------------------------------------

    def _table_entry(self, procedure: Procedure, index: int) -> tuple[int, int]:
        address = procedure.table + index * TABLE_ENTRY.size
        try:
            return TABLE_ENTRY.unpack(self._read(address, TABLE_ENTRY.size))
        except MemoryReadError as error:
            raise FormatError(f"{procedure.name}: table entry {index}: {error}") from None

    def _read_table(self, procedure: Procedure) -> None:
        """The whole table in one read, then every FDE (with its CIE) an entry points at."""
        try:
            size = procedure.table_entries * TABLE_ENTRY.size
            table = self._read(procedure.table, size) if size else b""
            for _start, offset in TABLE_ENTRY.iter_unpack(table):
                self._fde_bytes((procedure.segbase + offset) & WORD_MASK)
        except (MemoryReadError, FormatError) as error:
            self._problem(f"{procedure.name}: {error}")

    def _table_rule(self, procedure: Procedure, pc: int) -> UnwindRule | None:
        """Binary-searches the target's table (one entry read per probe) and decodes the FDE."""
        base = (
            procedure.start if procedure.format == UNW_INFO_FORMAT_IP_OFFSET else procedure.segbase
        )
        relative = pc - base
        low, high = 0, procedure.table_entries
        while low < high:
            middle = (low + high) // 2
            if self._table_entry(procedure, middle)[0] <= relative:
                low = middle + 1
            else:
                high = middle
        if low == 0:
            return None
        fde_address = (procedure.segbase + self._table_entry(procedure, low - 1)[1]) & WORD_MASK
        try:
            data, section_address = self._fde_bytes(fde_address)
        except MemoryReadError as error:
            raise FormatError(f"{procedure.name}: FDE at {fde_address:#x}: {error}") from None
        from liveunwind.formats.unwind.dwarf_cfi import CfiTable

        table = CfiTable(data, section_address, kind="eh_frame", data_base=procedure.gp)
        try:
            return table.rule_from_fde_at(fde_address - section_address, pc)
        except FormatError as error:
            if "covers" in str(error):
                return None  # a gap between two FDEs: the table does not cover pc
            raise

    def _fde_bytes(self, fde_address: int) -> tuple[bytes, int]:
        """Bytes spanning the FDE at ``fde_address`` and its CIE, and their start address."""
        fde_end = fde_address + self._entry_size(fde_address)
        cie_pointer = _U32.unpack(self._read(fde_address + 4, 4))[0]
        if cie_pointer == 0 or cie_pointer > MAX_CIE_DISTANCE:
            raise FormatError(f"FDE at {fde_address:#x} has CIE pointer {cie_pointer:#x}")
        cie_address = fde_address + 4 - cie_pointer
        cie_end = cie_address + self._entry_size(cie_address)
        start, end = min(cie_address, fde_address), max(cie_end, fde_end)
        return self._read(start, end - start), start

    def _entry_size(self, address: int) -> int:
        length = _U32.unpack(self._read(address, 4))[0]
        if length == 0 or length > MAX_CFI_ENTRY:
            raise FormatError(f"CFI entry at {address:#x} has length {length:#x}")
        return 4 + length

    # -- GDB JIT interface ----------------------------------------------------

    def _read_jit_descriptor(self, address: int, budget: list[int]) -> list[tuple[int, int, bytes]]:
        """(entry, object address, object bytes) of each entry of the descriptor's list."""
        try:
            version, _action, _relevant, first = _JIT_DESCRIPTOR.unpack(
                self._read(address, _JIT_DESCRIPTOR.size)
            )
        except MemoryReadError as error:
            self._problem(f"__jit_debug_descriptor at {address:#x}: {error}")
            return []
        if version != 1:
            self._problem(f"__jit_debug_descriptor at {address:#x}: version {version}")
            return []
        files: list[tuple[int, int, bytes]] = []
        problems: list[str] = []
        entries = linkedlist.follow(
            self._read,
            first,
            _JIT_ENTRY,
            0,
            limit=MAX_LIST_ENTRIES,
            label="GDB JIT list",
            problems=problems,
        )
        for entry, (_next, _prev, symfile, size) in entries:
            try:
                if size > MAX_JIT_OBJECT or size > budget[0]:
                    raise FormatError(f"object of {size} bytes is over the limit")
                budget[0] -= size
                files.append((entry, symfile, self._read(symfile, size)))
            except (MemoryReadError, FormatError) as error:
                self._problem(f"GDB JIT entry {entry:#x}: {error}")
        for problem in problems:
            self._problem(problem)
        return files

    def _jit_object(self, address: int, data: bytes) -> _JitObject | None:
        """The code ranges, functions and unwind tables of one in-memory object file."""
        from liveunwind.formats.elf import ElfImage
        from liveunwind.modules.sources import unwind_tables

        image = ElfImage(data, origin=f"JIT object at {address:#x}")
        _check_little_endian(image)
        sections = image.section_headers
        code = [
            (section.address, section.address + section.size)
            for section in sections
            if section.flags & _SHF_ALLOC and section.flags & _SHF_EXECINSTR and section.size
        ]
        relocatable = image.type == _ET_REL
        functions = []
        for symbol in image.symbols():
            if symbol.kind not in (_STT_FUNC, _STT_GNU_IFUNC) or not 0 < symbol.shndx < 0xFF00:
                continue
            start = symbol.value
            if relocatable:  # ET_REL values are offsets into their section
                if symbol.shndx >= len(sections):
                    continue
                start += sections[symbol.shndx].address
            functions.append(JitRange(start, start + max(symbol.size, 1), symbol.name, "gdb-jit"))
        if not code:
            code = [(function.start, function.end) for function in functions]
        if not code:
            return None
        table_problems: list[str] = []
        sources = unwind_tables(image, table_problems)
        for problem in table_problems:
            self._problem(problem)
        start = min(low for low, _ in code)
        end = max(high for _, high in code)
        return _JitObject(address, start, end, sources, functions)

    def _object_rule(self, jit_object: _JitObject, pc: int) -> UnwindRule | None:
        for source in jit_object.sources:
            rule = source.rule_for(pc)
            if rule is not None:
                return rule
        return None


#: Whose name wins: a procedure's own, a JIT object's symbol, perf's, then a table's
#: (the name of a whole table of functions, e.g. a library's).
_NAME_RANKS = {"libunwind": 0, "gdb-jit": 1, "perf-map": 2, "libunwind-table": 3}


def _source(procedure: Procedure) -> str:
    return "libunwind-table" if procedure.format in TABLE_FORMATS else "libunwind"


def _name_rank(item: object) -> int:
    assert isinstance(item, JitRange)
    return _NAME_RANKS[item.source]


def _merge(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[list[int]] = []
    for start, size in sorted(ranges):
        if merged and start <= merged[-1][0] + merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], start + size - merged[-1][0])
        else:
            merged.append([start, size])
    return [(start, size) for start, size in merged]
