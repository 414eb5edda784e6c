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
exported accessor ``_U_dyn_info_list_addr()`` (x86_64 ``lea rax,[rip+d]; ret``,
aarch64 ``adrp x0; add x0; ret``) from the file's bytes; a ``_U_dyn_info_list``
symbol, where one exists (unstripped or static builds), is used first because
it needs no code decoding.  The list is walked as libunwind's own remote
reader walks it: generation read before and after, the walk repeated (a
bounded number of times) when a writer changed it under us.

**GDB JIT interface**: ``__jit_debug_descriptor`` {u32 version = 1, u32
action_flag, relevant_entry, first_entry} heads a list of ``jit_code_entry``
{next, prev, symfile_addr, symfile_size}; each entry is an in-memory object
file whose ``.eh_frame``/``.debug_frame`` and symbols describe the JIT code.

**perf maps**: ``/tmp/perf-PID.map`` lines ``START SIZE name`` (hex) name code
that nothing else describes; :func:`parse_perf_map` takes the text.

Conventions for ``UNW_INFO_FORMAT_DYNAMIC`` — libunwind interprets this format
only on IA-64; on x86_64 and aarch64 liveunwind defines it as follows:

* An *instruction* (the unit of ``insn_count`` and ``when``) is one byte on
  x86_64 (variable-length code: ``when`` is the byte offset of the
  instruction's first byte within its region) and one 4-byte word on aarch64.
* Register numbers (``reg``, and ``val`` of SAVE_REG) are libunwind's, which
  are the DWARF numbers on both architectures.
* At procedure entry the frame is the ABI's: x86_64 CFA = rsp+8 with the return
  address at CFA-8; aarch64 CFA = sp with the return address in x30.
* An op at ``when`` = *t* takes effect once instruction *t* has executed: for
  pcs past region start + min(t, length-1) (IA-64's rule; ``when`` = -1 or an
  empty region: from the region's start).  Ops are applied by ``when``; within
  one ``when``, COPY_STATE first, then frame changes (ADD, SAVE_REG of sp,
  POP_FRAMES), then register saves, then LABEL_STATE, each group in array order.
* ADD sp, v: sp += v (two's complement).  The CFA - sp distance is tracked
  through every ADD, so while the CFA is sp-based its offset follows.  ADD fp, v
  adjusts an established frame pointer the same way; ADD to any other register
  is not supported (FormatError).
* SAVE_REG reg=sp, val=fp establishes the frame pointer (``mov rbp,rsp`` /
  ``mov x29,sp``): the CFA becomes fp + (CFA - sp at that point).  SAVE_REG of
  any other register: the caller's value is in register ``val``.
* SPILL_SP_REL reg, off: saved at sp + off, sp being its value *after* the
  instruction (so ``push rbx`` is ADD sp,-8 and SPILL_SP_REL rbx,0 at the same
  ``when``).  SPILL_FP_REL reg, off: saved at fp + off; needs an established
  frame pointer.  Both become CFA-relative rules at once, so later sp changes do
  not move them.
* POP_FRAMES (any count ≥ 1): the instruction restored sp to its entry value;
  the entry frame holds from then on (this flat model has no nested frames).
* LABEL_STATE / COPY_STATE val: name the current state / make it current.
* ALIAS has no effect on the frame state (as in libunwind); STOP ends the
  region's op list; ``qp`` is ignored (no predication on either architecture).
* ``insn_count`` < 0 is allowed only in the last region, which then covers
  the procedure's last -insn_count instructions, up to ``end_ip``.

``UNW_INFO_FORMAT_TABLE`` and ``UNW_INFO_FORMAT_REMOTE_TABLE`` are read alike:
``table_data`` is the target address of ``table_len`` words of sorted
{int32 start_ip_offset, int32 fde_offset} pairs relative to ``segbase``
(``UNW_INFO_FORMAT_IP_OFFSET``: start offsets relative to ``start_ip``); the
FDE at segbase + fde_offset is ``.eh_frame``-style and decoded by
:class:`~liveunwind.formats.dwarf_cfi.CfiTable` from bytes read around it,
``gp`` being the datarel base.  (libunwind's local TABLE format points at its
own private .debug_frame index; a program registering TABLE in a target has
only the documented layout, which is the remote one.)

Everything read is untrusted: every list is bounded and checked for cycles,
every count and size is capped before anything is allocated, and a corrupt
record costs only its own entry (noted in :attr:`DynamicRegistry.problems`) or
raises :class:`~liveunwind.errors.FormatError` for the pcs it covers.
"""

from __future__ import annotations

import bisect
import struct
from collections import namedtuple
from collections.abc import Callable, Iterator, Sequence

from liveunwind.errors import FormatError, MemoryReadError
from liveunwind.formats.rules import CfaRule, RegisterRule, RegKind, UnwindRule
from liveunwind.targets import linkedlist

TYPE_CHECKING = False
if TYPE_CHECKING:
    from liveunwind.arch import Arch
    from liveunwind.formats.elf import ElfImage
    from liveunwind.modules.modulemap import UnwindSource

#: Reads ``size`` bytes of target memory (raises MemoryReadError).
ReadMemory = Callable[[int, int], bytes]

# unw_dyn_info_t.format
UNW_INFO_FORMAT_DYNAMIC = 0
UNW_INFO_FORMAT_TABLE = 1
UNW_INFO_FORMAT_REMOTE_TABLE = 2
UNW_INFO_FORMAT_ARM_EXIDX = 3
UNW_INFO_FORMAT_IP_OFFSET = 4

# unw_dyn_operation_t
UNW_DYN_STOP = 0
UNW_DYN_SAVE_REG = 1
UNW_DYN_SPILL_FP_REL = 2
UNW_DYN_SPILL_SP_REL = 3
UNW_DYN_ADD = 4
UNW_DYN_POP_FRAMES = 5
UNW_DYN_LABEL_STATE = 6
UNW_DYN_COPY_STATE = 7
UNW_DYN_ALIAS = 8

# Layouts (LP64, little-endian targets; libunwind pads for 8-byte words).
_LIST = struct.Struct("<IIQ")  # version, generation, first
_INFO = struct.Struct("<QQQQQiiQQQIIQ")  # see _read_libunwind_entry
_INFO_SIZE = _INFO.size  # 88: 56 bytes of header + the 32-byte union
_REGION = struct.Struct("<QiI")  # next, insn_count, op_count
_OP = struct.Struct("<bbhiQ")  # tag, qp, reg, when, val
_TABLE_ENTRY = struct.Struct("<ii")  # start_ip_offset, fde_offset
_JIT_DESCRIPTOR = struct.Struct("<IIQQ")
_JIT_ENTRY = struct.Struct("<QQQQ")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")

#: Bounds on untrusted counts and sizes.
MAX_LIST_ENTRIES = 1 << 16
MAX_GENERATION_RETRIES = 4
MAX_REGIONS = 256
MAX_OPS = 4096
MAX_LABELS = 64
MAX_PROCEDURE_SIZE = 1 << 30
MAX_TABLE_ENTRIES = 1 << 20
MAX_CFI_ENTRY = 1 << 16
MAX_CIE_DISTANCE = 1 << 22
MAX_JIT_OBJECT = 64 << 20
MAX_JIT_TOTAL = 256 << 20
MAX_NAME = 512
MAX_PERF_MAP_LINES = 1 << 20
#: Problems kept per registry (a corrupt list could otherwise produce one per entry).
MAX_PROBLEMS = 64

_MASK = (1 << 64) - 1


class JitRange(namedtuple("JitRange", "start end name source")):
    """Code a JIT announced: ``[start, end)``, its name and who announced it."""

    __slots__ = ()
    start: int
    end: int
    name: str
    #: ``libunwind`` (a DYNAMIC procedure), ``libunwind-table`` (a table of FDEs, named
    #: as a whole), ``gdb-jit`` (a function of a JIT object) or ``perf-map``.
    source: str


class RegistryRoots(
    namedtuple("RegistryRoots", "libunwind_lists jit_descriptors", defaults=((), ()))
):
    """Runtime addresses of registry heads found in one module's symbols."""

    __slots__ = ()
    libunwind_lists: tuple[int, ...]
    jit_descriptors: tuple[int, ...]

    def __bool__(self) -> bool:
        return bool(self.libunwind_lists or self.jit_descriptors)


# -- finding the roots ----------------------------------------------------------------

_STT_FUNC = 2
_STT_GNU_IFUNC = 10
_SHF_ALLOC = 2
_SHF_EXECINSTR = 4
_ET_REL = 1
_SYMBOL = struct.Struct("<IBBHQQ")


class _Symbol(namedtuple("_Symbol", "name value size kind shndx")):
    """One ELF symbol, its name decoded and its type (``kind``) split out."""

    __slots__ = ()
    name: str
    value: int
    size: int
    kind: int
    shndx: int


def _symbols(image: ElfImage) -> Iterator[_Symbol]:
    """Every symbol of ``.symtab`` then ``.dynsym`` (names decoded; any type).

    :class:`~liveunwind.modules.symbols.SymbolTable` keeps only functions and
    takes ``st_value`` as an address; finding data roots and reading
    relocatable JIT objects (section-relative values) needs both differently.
    """
    for table, strings in _symbol_tables(image):
        raw_strings = bytes(strings)
        usable = len(table) - len(table) % _SYMBOL.size
        for name_offset, info, _other, shndx, value, size in _SYMBOL.iter_unpack(table[:usable]):
            if not name_offset or name_offset >= len(raw_strings):
                continue
            end = raw_strings.find(b"\0", name_offset, name_offset + MAX_NAME)
            name = raw_strings[name_offset : end if end >= 0 else name_offset + MAX_NAME]
            yield _Symbol(name.decode("utf-8", "replace"), value, size, info & 0xF, shndx)


def _find_symbol(image: ElfImage, name: str) -> _Symbol | None:
    """The first defined symbol called ``name`` in ``.symtab``, then ``.dynsym``.

    Searched without decoding every symbol (libpython has some 10 000, and
    every module of a process with JIT code is searched): the name is found
    in the string table with ``bytes.find``, then the symbol whose name field
    holds that offset.  A name found inside a longer string still counts, as
    linkers share string tails between symbols.
    """
    needle = name.encode() + b"\0"
    for table, strings in _symbol_tables(image):
        table, strings = bytes(table), bytes(strings)
        position = strings.find(needle)
        while position > 0:
            symbol = _symbol_named(table, position, name)
            if symbol is not None:
                return symbol
            position = strings.find(needle, position + 1)
    return None


def _symbol_tables(image: ElfImage) -> Iterator[tuple[memoryview, memoryview]]:
    """The image's symbol and string tables, ``.symtab`` first; little-endian images only."""
    if image.byte_order != "<":
        raise FormatError(f"{image.origin}: big-endian images are not supported here")
    for _section, table, strings in image.symbol_tables():
        yield table, strings


def _symbol_named(table: bytes, name_offset: int, name: str) -> _Symbol | None:
    """The defined symbol of ``table`` whose name starts at ``name_offset``, if any."""
    key = name_offset.to_bytes(4, "little")
    at = table.find(key)
    while 0 <= at <= len(table) - _SYMBOL.size:
        if at % _SYMBOL.size == 0:
            _, info, _other, shndx, value, size = _SYMBOL.unpack_from(table, at)
            if shndx != 0:
                return _Symbol(name, value, size, info & 0xF, shndx)
        at = table.find(key, at + 1)
    return None


def find_roots(image: ElfImage, load_bias: int) -> RegistryRoots:
    """Where a module keeps registry heads, as runtime addresses (``load_bias`` added).

    Looks for ``_U_dyn_info_list`` (else decodes ``_U_dyn_info_list_addr``)
    and ``__jit_debug_descriptor`` in the module's ``.symtab`` and ``.dynsym``.
    Pure: the accessor's code is read from the image, not from the target.
    """
    wanted = ("_U_dyn_info_list", "_U_dyn_info_list_addr", "__jit_debug_descriptor")
    found = {name: symbol for name in wanted if (symbol := _find_symbol(image, name))}
    lists: tuple[int, ...] = ()
    if "_U_dyn_info_list" in found:
        lists = ((found["_U_dyn_info_list"].value + load_bias) & _MASK,)
    elif "_U_dyn_info_list_addr" in found:
        accessor = found["_U_dyn_info_list_addr"].value
        lists = ((_decode_list_accessor(image, accessor) + load_bias) & _MASK,)
    descriptors: tuple[int, ...] = ()
    if "__jit_debug_descriptor" in found:
        descriptors = ((found["__jit_debug_descriptor"].value + load_bias) & _MASK,)
    return RegistryRoots(lists, descriptors)


_ENDBR64 = bytes.fromhex("f30f1efa")
_AARCH64_BTI_C = 0xD503245F
_AARCH64_PACIASP = 0xD503233F
_AARCH64_RET = 0xD65F03C0


def _decode_list_accessor(image: ElfImage, address: int) -> int:
    """The link-time address ``_U_dyn_info_list_addr()`` returns, decoded from its code."""
    offset = image.offset_for_vaddr(address, 16)
    if offset is None:
        raise FormatError(
            f"{image.origin}: _U_dyn_info_list_addr at {address:#x} is not in the file"
        )
    code = bytes(image.slice(offset, 16))
    if image.machine == 62:  # x86_64: [endbr64] lea rax,[rip+disp32]; ret
        start = 4 if code.startswith(_ENDBR64) else 0
        insn = code[start : start + 8]
        if insn[:3] == b"\x48\x8d\x05" and insn[7:8] == b"\xc3":
            displacement = struct.unpack_from("<i", insn, 3)[0]
            return address + start + 7 + displacement
    elif image.machine == 183:  # aarch64: [bti c|paciasp] adrp x0; add x0,x0,#lo; ret
        words = list(struct.unpack("<4I", code))
        if words[0] in (_AARCH64_BTI_C, _AARCH64_PACIASP):
            words.pop(0)
            address += 4
        adrp, add, ret = words[:3]
        if (
            adrp & 0x9F00001F == 0x90000000
            and add & 0xFFC003FF == 0x91000000
            and ret == _AARCH64_RET
        ):
            immediate = ((adrp >> 3) & 0x1FFFFC) | ((adrp >> 29) & 3)
            if immediate & (1 << 20):
                immediate -= 1 << 21
            page = (address & ~0xFFF) + (immediate << 12)
            return page + ((add >> 10) & 0xFFF)
    raise FormatError(
        f"{image.origin}: cannot decode _U_dyn_info_list_addr ({code.hex()}) for machine "
        f"{image.machine}"
    )


# -- perf maps ------------------------------------------------------------------------


def parse_perf_map(text: str) -> list[JitRange]:
    """The entries of a ``/tmp/perf-PID.map``: ``START SIZE name`` per line, hex numbers.

    Malformed lines are skipped (the file is written by the target); at most
    :data:`MAX_PERF_MAP_LINES` lines are read.
    """
    ranges = []
    for count, line in enumerate(text.splitlines()):
        if count >= MAX_PERF_MAP_LINES:
            break
        parts = line.strip().split(None, 2)
        if len(parts) != 3:
            continue
        try:
            start, size = int(parts[0], 16), int(parts[1], 16)
        except ValueError:
            continue
        if size <= 0 or start < 0 or start + size > _MASK:
            continue
        ranges.append(JitRange(start, start + size, parts[2], "perf-map"))
    return ranges


# -- the registry ---------------------------------------------------------------------


class _DynArch(
    namedtuple("_DynArch", "insn_size sp fp return_address entry_cfa_offset entry_ra_offset")
):
    """The DYNAMIC-format conventions of one architecture (see the module docstring)."""

    __slots__ = ()
    insn_size: int
    sp: int
    fp: int
    return_address: int
    entry_cfa_offset: int
    #: Where the return address is at entry: CFA-relative offset, or None (in its register).
    entry_ra_offset: int | None


_DYN_ARCHES = {
    "x86_64": _DynArch(1, 7, 6, 16, 8, -8),
    "aarch64": _DynArch(4, 31, 29, 30, 0, None),
}


class _Op(namedtuple("_Op", "tag reg when val")):
    """One libunwind ``unw_dyn_op_t``."""

    __slots__ = ()
    tag: int
    reg: int
    when: int
    val: int


class _Region(namedtuple("_Region", "insn_count ops")):
    """One ``unw_dyn_region_info_t``: its length in instructions and its ops."""

    __slots__ = ()
    insn_count: int
    ops: tuple[_Op, ...]


class _Procedure:
    """One libunwind entry: a DYNAMIC procedure or a table of FDEs."""

    __slots__ = (
        "end",
        "error",
        "format",
        "gp",
        "name",
        "regions",
        "segbase",
        "start",
        "table",
        "table_entries",
    )

    def __init__(self, start: int, end: int, name: str, format: int, gp: int = 0) -> None:
        self.start = start
        self.end = end
        self.name = name
        self.format = format
        self.gp = gp
        self.regions: tuple[_Region, ...] = ()
        self.segbase = 0
        self.table = 0
        self.table_entries = 0
        #: Why its unwind info cannot be used (its range and name still can).
        self.error = ""


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
    parsed perf map, if any (names only).  The registry is read on first use;
    a registry that changes afterwards is not re-read — build a new one per
    backtrace.  A target stopped only briefly has :meth:`read_all` called
    while it is stopped: every read happens then, and the parsing waits for
    the first query, after the target runs again.
    """

    def __init__(
        self,
        read: ReadMemory,
        arch: Arch,
        *,
        libunwind_lists: Sequence[int] = (),
        jit_descriptors: Sequence[int] = (),
        perf_map: Sequence[JitRange] = (),
    ) -> None:
        if arch.name not in _DYN_ARCHES:
            raise FormatError(f"dynamic unwind info is not supported on {arch.name}")
        self._raw_read = read
        self._arch = _DYN_ARCHES[arch.name]
        self._lists = tuple(libunwind_lists)
        self._descriptors = tuple(jit_descriptors)
        self._perf_map = list(perf_map)
        #: What was wrong with the registries, for the report (at most MAX_PROBLEMS).
        self.problems: list[str] = []
        self._dropped_problems = 0
        self._touched: list[tuple[int, int]] = []
        self._listed = False
        self._loaded = False
        self._procedures: list[_Procedure] = []
        #: (entry address, object address, object bytes) of each GDB JIT entry, parsed on load.
        self._jit_files: list[tuple[int, int, bytes]] = []
        self._objects: list[_JitObject] = []
        self._unwind = _Intervals()
        self._names = _Intervals()
        self._rules: dict[int, UnwindRule | None] = {}

    # -- public queries -------------------------------------------------------

    def ranges(self) -> list[JitRange]:
        """Every announced code range, sorted: libunwind procedures, JIT functions, perf map."""
        self._load()
        found = [JitRange(p.start, p.end, p.name, _source(p)) for p in self._procedures]
        for jit_object in self._objects:
            found.extend(jit_object.functions)
        found.extend(self._perf_map)
        return sorted(found, key=lambda item: (item.start, item.end, item.source))

    def covers(self, pc: int) -> bool:
        """Whether any registration (with unwind info or just a name) includes ``pc``."""
        self._load()
        return any(True for _ in self._unwind.covering(pc)) or any(
            True for _ in self._names.covering(pc)
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
            if isinstance(item, _Procedure):
                rule = self._procedure_rule(item, pc)
            else:
                assert isinstance(item, _JitObject)
                rule = self._object_rule(item, pc)
            if rule is not None:
                break
        if len(self._rules) < 65536:
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
            if procedure.format in _TABLE_FORMATS and not procedure.error:
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
        if address < 0 or size < 0 or address + size > _MASK + 1:
            raise MemoryReadError(address & _MASK, size, "address out of range")
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
        for entry in self._perf_map:
            self._names.items.append((entry.start, entry.end, entry))
        self._unwind.freeze()
        self._names.freeze()

    # -- libunwind ------------------------------------------------------------

    def _read_libunwind_list(self, address: int) -> list[_Procedure]:
        """The list's procedures; re-read while its generation changes (bounded)."""
        procedures: list[_Procedure] = []
        for _attempt in range(MAX_GENERATION_RETRIES):
            try:
                _version, generation, first = _LIST.unpack(self._read(address, _LIST.size))
            except MemoryReadError as error:
                self._problem(f"libunwind list at {address:#x}: {error}")
                return []
            procedures, problems = self._walk_libunwind(first)
            try:
                after = _LIST.unpack(self._read(address, _LIST.size))[1]
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

    def _walk_libunwind(self, first: int) -> tuple[list[_Procedure], list[str]]:
        procedures: list[_Procedure] = []
        problems: list[str] = []
        entries = linkedlist.walk(
            self._read,
            first,
            _INFO,
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
    ) -> _Procedure:
        """Decodes one unw_dyn_info_t from its unpacked fields.

        Layout: next, prev, start_ip, end_ip, gp, int32 format, int32 pad,
        load_offset, then the union — pi {name_ptr, handler, u32 flags,
        i32 pad0, regions} or ti/rti {name_ptr, segbase, table_len, table_data}.
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
        procedure = _Procedure(start, end, name or f"jit@{start:#x}", fmt, gp)
        try:
            if fmt == UNW_INFO_FORMAT_DYNAMIC:
                procedure.regions = self._read_regions(regions_or_table)
            elif fmt in _TABLE_FORMATS:
                table_len = high << 32 | low  # flags and pad0 of pi overlay it
                if table_len > MAX_TABLE_ENTRIES:
                    raise FormatError(f"table_len {table_len} is too large")
                procedure.segbase, procedure.table = handler_or_segbase, regions_or_table
                procedure.table_entries = table_len * 8 // _TABLE_ENTRY.size
            else:
                raise FormatError(f"unsupported unwind-info format {fmt}")
        except (MemoryReadError, FormatError) as error:
            procedure.error = str(error)
            problems.append(f"libunwind entry {address:#x} ({procedure.name}): {error}")
        return procedure

    def _read_regions(self, address: int) -> tuple[_Region, ...]:
        regions: list[_Region] = []
        seen: set[int] = set()
        while address:
            if address in seen or len(regions) >= MAX_REGIONS:
                raise FormatError(f"region list cycles or exceeds {MAX_REGIONS} regions")
            seen.add(address)
            next_address, insn_count, op_count = _REGION.unpack(self._read(address, _REGION.size))
            if op_count > MAX_OPS:
                raise FormatError(f"region at {address:#x} claims {op_count} ops")
            raw = self._read(address + _REGION.size, op_count * _OP.size) if op_count else b""
            ops = []
            for tag, _qp, reg, when, val in _OP.iter_unpack(raw):
                if tag == UNW_DYN_STOP:
                    break
                ops.append(_Op(tag, reg, when, val))
            if insn_count < 0 and next_address:
                raise FormatError("negative insn_count in a region that is not the last")
            regions.append(_Region(insn_count, tuple(ops)))
            address = next_address
        return tuple(regions)

    def _procedure_rule(self, procedure: _Procedure, pc: int) -> UnwindRule | None:
        if procedure.error:
            raise FormatError(f"{procedure.name}: {procedure.error}")
        if procedure.format == UNW_INFO_FORMAT_DYNAMIC:
            return _dynamic_rule(procedure, pc, self._arch)
        return self._table_rule(procedure, pc)

    # -- FDE tables -----------------------------------------------------------

    def _table_entry(self, procedure: _Procedure, index: int) -> tuple[int, int]:
        address = procedure.table + index * _TABLE_ENTRY.size
        try:
            return _TABLE_ENTRY.unpack(self._read(address, _TABLE_ENTRY.size))
        except MemoryReadError as error:
            raise FormatError(f"{procedure.name}: table entry {index}: {error}") from None

    def _read_table(self, procedure: _Procedure) -> None:
        """The whole table in one read, then every FDE (with its CIE) an entry points at."""
        try:
            size = procedure.table_entries * _TABLE_ENTRY.size
            table = self._read(procedure.table, size) if size else b""
            for _start, offset in _TABLE_ENTRY.iter_unpack(table):
                self._fde_bytes((procedure.segbase + offset) & _MASK)
        except (MemoryReadError, FormatError) as error:
            self._problem(f"{procedure.name}: {error}")

    def _table_rule(self, procedure: _Procedure, pc: int) -> UnwindRule | None:
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
        fde_address = (procedure.segbase + self._table_entry(procedure, low - 1)[1]) & _MASK
        try:
            data, section_address = self._fde_bytes(fde_address)
        except MemoryReadError as error:
            raise FormatError(f"{procedure.name}: FDE at {fde_address:#x}: {error}") from None
        from liveunwind.formats.dwarf_cfi import CfiTable

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
        entries = linkedlist.walk(
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
        from liveunwind.modules.modulemap import unwind_tables

        image = ElfImage(data, origin=f"JIT object at {address:#x}")
        sections = image.section_headers
        code = [
            (section.address, section.address + section.size)
            for section in sections
            if section.flags & _SHF_ALLOC and section.flags & _SHF_EXECINSTR and section.size
        ]
        relocatable = image.type == _ET_REL
        functions = []
        for symbol in _symbols(image):
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


_TABLE_FORMATS = (UNW_INFO_FORMAT_TABLE, UNW_INFO_FORMAT_REMOTE_TABLE, UNW_INFO_FORMAT_IP_OFFSET)
#: Whose name wins: a procedure's own, a JIT object's symbol, perf's, then a table's
#: (the name of a whole table of functions, e.g. a library's).
_NAME_RANKS = {"libunwind": 0, "gdb-jit": 1, "perf-map": 2, "libunwind-table": 3}


def _source(procedure: _Procedure) -> str:
    return "libunwind-table" if procedure.format in _TABLE_FORMATS else "libunwind"


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


# -- interpreting UNW_INFO_FORMAT_DYNAMIC ----------------------------------------------


class _FrameState:
    """The frame at one point of a procedure, relative to the CFA (entry sp + entry offset)."""

    __slots__ = ("cfa_on_fp", "fp_depth", "registers", "sp_depth")

    def __init__(
        self,
        sp_depth: int,
        fp_depth: int | None,
        cfa_on_fp: bool,
        registers: dict[int, RegisterRule],
    ) -> None:
        self.sp_depth = sp_depth  # CFA - sp
        self.fp_depth = fp_depth  # CFA - fp, once the frame pointer is established
        self.cfa_on_fp = cfa_on_fp
        self.registers = registers

    def copy(self) -> _FrameState:
        return _FrameState(self.sp_depth, self.fp_depth, self.cfa_on_fp, dict(self.registers))


def _entry_state(arch: _DynArch) -> _FrameState:
    registers = {}
    if arch.entry_ra_offset is not None:
        registers[arch.return_address] = RegisterRule(RegKind.OFFSET, arch.entry_ra_offset)
    return _FrameState(arch.entry_cfa_offset, None, False, registers)


#: Order of ops that share a ``when``: COPY_STATE, frame changes, saves, LABEL_STATE.
_PHASE = {
    UNW_DYN_COPY_STATE: 0,
    UNW_DYN_ADD: 1,
    UNW_DYN_POP_FRAMES: 1,
    UNW_DYN_SAVE_REG: 2,
    UNW_DYN_SPILL_FP_REL: 2,
    UNW_DYN_SPILL_SP_REL: 2,
    UNW_DYN_ALIAS: 2,
    UNW_DYN_LABEL_STATE: 3,
}


def _signed(value: int) -> int:
    return value - (1 << 64) if value & (1 << 63) else value


def _dynamic_rule(procedure: _Procedure, pc: int, arch: _DynArch) -> UnwindRule:
    """Runs the procedure's regions up to ``pc`` and freezes the state into a rule."""
    if not procedure.start <= pc < procedure.end:
        raise FormatError(f"pc {pc:#x} outside {procedure.name}")
    target = (pc - procedure.start) // arch.insn_size
    total = (procedure.end - procedure.start) // arch.insn_size
    state = _entry_state(arch)
    labels: dict[int, _FrameState] = {}
    region_start = 0
    for index, region in enumerate(procedure.regions):
        length = region.insn_count
        if length < 0:
            if index != len(procedure.regions) - 1:
                raise FormatError(f"{procedure.name}: negative insn_count before the last region")
            length = -length
            if total - length < region_start:
                raise FormatError(
                    f"{procedure.name}: last region of {length} instructions overlaps "
                    f"the {region_start} before it"
                )
            region_start = total - length
        if target < region_start:
            break
        if region_start + length > total:
            raise FormatError(f"{procedure.name}: regions are longer than the procedure")
        ordered = sorted(region.ops, key=lambda op: (op.when, _PHASE.get(op.tag, 2)))
        for op in ordered:
            if target <= region_start + min(op.when, length - 1):
                continue  # the instruction at `when` has not executed yet
            state = _apply(op, state, labels, arch, procedure.name)
        region_start += length
    return _freeze(state, arch, procedure)


def _apply(
    op: _Op, state: _FrameState, labels: dict[int, _FrameState], arch: _DynArch, name: str
) -> _FrameState:
    tag, reg = op.tag, op.reg
    value = _signed(op.val)
    if tag == UNW_DYN_ADD:
        if reg == arch.sp:
            state.sp_depth -= value
        elif reg == arch.fp and state.fp_depth is not None:
            state.fp_depth -= value
        else:
            raise FormatError(f"{name}: ADD to register {reg} is not supported")
    elif tag == UNW_DYN_SAVE_REG:
        if reg == arch.sp:
            if op.val != arch.fp:
                raise FormatError(f"{name}: sp saved to register {op.val}, not the frame pointer")
            state.fp_depth, state.cfa_on_fp = state.sp_depth, True
        else:
            state.registers[reg] = RegisterRule(RegKind.REGISTER, register=op.val)
    elif tag == UNW_DYN_SPILL_SP_REL:
        state.registers[reg] = RegisterRule(RegKind.OFFSET, value - state.sp_depth)
    elif tag == UNW_DYN_SPILL_FP_REL:
        if state.fp_depth is None:
            raise FormatError(f"{name}: fp-relative spill before the frame pointer is set")
        state.registers[reg] = RegisterRule(RegKind.OFFSET, value - state.fp_depth)
    elif tag == UNW_DYN_POP_FRAMES:
        if value < 1:
            raise FormatError(f"{name}: POP_FRAMES of {value} frames")
        return _entry_state(arch)
    elif tag == UNW_DYN_LABEL_STATE:
        if op.val not in labels and len(labels) >= MAX_LABELS:
            raise FormatError(f"{name}: more than {MAX_LABELS} labels")
        labels[op.val] = state.copy()
    elif tag == UNW_DYN_COPY_STATE:
        if op.val not in labels:
            raise FormatError(f"{name}: COPY_STATE of unknown label {op.val}")
        return labels[op.val].copy()
    elif tag != UNW_DYN_ALIAS:
        raise FormatError(f"{name}: unknown op tag {tag}")
    return state


def _freeze(state: _FrameState, arch: _DynArch, procedure: _Procedure) -> UnwindRule:
    if state.cfa_on_fp:
        assert state.fp_depth is not None
        cfa = CfaRule(arch.fp, state.fp_depth)
    else:
        cfa = CfaRule(arch.sp, state.sp_depth)
    return UnwindRule(
        cfa=cfa,
        registers=tuple(sorted(state.registers.items())),
        return_address_register=arch.return_address,
        start=procedure.start,
        end=procedure.end,
    )
