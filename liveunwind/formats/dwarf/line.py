"""``.debug_line``: the line-number program of one compilation unit (DWARF 2–5, §6.2).

:func:`parse_header` reads a program's header (directory and file tables,
DWARF 5's ``DW_LNCT_*`` entry formats with ``DW_FORM_line_strp`` names in
``.debug_line_str``); :class:`LineTable` runs the program and answers
"which file and line holds this address".

The answer is gdb's, not just "the last row at or below the address": gdb
files rows into one table per source file, closes a file's range with a
line-0 marker when the program switches to another file (a marker that
drops that file's rows at the same address), skips rows with line 0, keeps
an is-stmt row over a non-stmt row of another file at the same address, and
at one address prefers the last is-stmt row.  Emulating that here is what
makes ``--lines`` agree with gdb on optimised code, where several rows share
an address.

Only the unit's own program is decoded, when a pc first lands in it, and
only as far as the pcs looked up need (see :class:`LineTable`): for the 12
units of a testprogs/lines backtrace, headers, programs and lookups took
4.2 ms run whole, 2.0 ms now.  Every loop consumes at least one byte of the
program, so its length bounds the work; tables are bounded by the section's size.
"""

from __future__ import annotations

import bisect
import posixpath
import struct

from liveunwind.formats.dwarf.forms import (
    DW_FORM_line_strp,
    DW_FORM_string,
    DW_FORM_strp,
    DW_FORM_udata,
    DwarfError,
    UnitFormat,
    c_string,
    fixed_size,
    read_value,
)
from liveunwind.formats.leb128 import decode as _leb128

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

    from liveunwind.formats.dwarf.forms import Buffer

DW_LNCT_path = 1
DW_LNCT_directory_index = 2

DW_LNS_copy = 1
DW_LNS_advance_pc = 2
DW_LNS_advance_line = 3
DW_LNS_set_file = 4
DW_LNS_set_column = 5
DW_LNS_negate_stmt = 6
DW_LNS_set_basic_block = 7
DW_LNS_const_add_pc = 8
DW_LNS_fixed_advance_pc = 9
DW_LNE_end_sequence = 1
DW_LNE_set_address = 2
DW_LNE_define_file = 3
DW_LNE_set_discriminator = 4

#: Most entries in a directory or file table (each takes at least a byte anyway).
_MAX_ENTRIES = 1 << 20


class LineProgramHeader:
    """The header of one line-number program: its parameters and file table.

    File paths are put together when a row or a call site first names the
    file: a libc unit lists a hundred headers and its rows use a few, and
    joining and normalising every path took a third of reading the header.
    """

    __slots__ = (
        "_directories",
        "_entries",
        "_first_file",
        "_paths",
        "_strings",
        "default_is_stmt",
        "format",
        "line_base",
        "line_range",
        "max_ops",
        "min_inst_length",
        "opcode_base",
        "opcode_lengths",
        "program_end",
        "program_start",
    )

    def __init__(self) -> None:
        self.format = UnitFormat("<", 8, 4, 4)
        self.min_inst_length = 1
        self.max_ops = 1
        self.default_is_stmt = True
        self.line_base = 0
        self.line_range = 1
        self.opcode_base = 1
        self.opcode_lengths: bytes = b""
        self.program_start = 0
        self.program_end = 0
        #: The directory table and the file table as read: (name, its form, directory index).
        self._directories: list[tuple[int | bytes | str, int, int]] = []
        self._entries: list[tuple[int | bytes | str, int, int]] = []
        #: The index of the first file (DWARF 5 numbers them from 0, earlier from 1).
        self._first_file = 0
        self._strings: tuple[Buffer | None, Buffer | None] = (None, None)
        #: Paths put together so far, by file index; and directories, by ~index.
        self._paths: dict[int, str | None] = {}

    def file(self, index: int) -> str | None:
        """The path of file ``index``, normalised (``dir/../x.h`` names ``x.h``); None if none."""
        paths = self._paths
        if index in paths:
            return paths[index]
        path = None
        at = index - self._first_file
        if 0 <= at < len(self._entries):
            name, form, directory = self._entries[at]
            path = posixpath.normpath(
                _join(self._directory(directory), _string(name, form, self._strings))
            )
        paths[index] = path
        return path

    def _directory(self, index: int) -> str:
        """Directory ``index``: the first is the compilation directory, the others under it."""
        key = ~index
        known = self._paths.get(key)
        if known is not None:
            return known
        found = ""
        if 0 <= index < len(self._directories):
            name, form, _ = self._directories[index]
            found = _string(name, form, self._strings)
            if index:
                found = _join(self._directory(0), found)
        self._paths[key] = found
        return found


def parse_header(
    data: Buffer,
    offset: int,
    *,
    byte_order: str,
    address_size: int,
    comp_dir: str = "",
    debug_str: Buffer | None = None,
    debug_line_str: Buffer | None = None,
) -> LineProgramHeader:
    """The header of the program at ``offset`` of ``.debug_line``.

    ``comp_dir`` (the unit's DW_AT_comp_dir) is directory 0 before DWARF 5,
    which names it in its own table.
    """
    if not 0 <= offset <= len(data) - 4:
        raise DwarfError(f".debug_line offset {offset:#x} outside the section")
    order = byte_order
    (length,) = struct.unpack_from(order + "I", data, offset)
    pos, offset_size = offset + 4, 4
    if length == 0xFFFFFFFF:
        if pos + 8 > len(data):
            raise DwarfError("cut 64-bit .debug_line length")
        (length,) = struct.unpack_from(order + "Q", data, pos)
        pos, offset_size = pos + 8, 8
    end = pos + length
    if end > len(data) or pos + 2 > end:
        raise DwarfError(f"line program at {offset:#x} runs past .debug_line")
    (version,) = struct.unpack_from(order + "H", data, pos)
    pos += 2
    if not 2 <= version <= 5:
        raise DwarfError(f"unsupported .debug_line version {version}")
    if version >= 5:
        if pos + 2 > end:
            raise DwarfError("cut line program header")
        address_size = data[pos]
        pos += 2  # address_size, segment_selector_size
    header = LineProgramHeader()
    header.format = fmt = UnitFormat(order, address_size, offset_size, version)
    header_length = fmt.unsigned(data, pos, offset_size) if pos + offset_size <= end else -1
    pos += offset_size
    program_start = pos + header_length
    fixed = 4 if version < 4 else 5
    if header_length < 0 or program_start > end or pos + fixed > end:
        raise DwarfError(f"bad line program header at {offset:#x}")
    header.min_inst_length = data[pos]
    pos += 1
    if version >= 4:
        header.max_ops = data[pos] or 1
        pos += 1
    header.default_is_stmt = bool(data[pos])
    header.line_base = data[pos + 1] - 256 if data[pos + 1] >= 128 else data[pos + 1]
    header.line_range = data[pos + 2]
    header.opcode_base = data[pos + 3]
    pos += 4
    if header.line_range == 0:
        raise DwarfError("line program with line_range 0")
    opcodes_end = pos + max(header.opcode_base - 1, 0)
    if opcodes_end > program_start:
        raise DwarfError("standard opcode lengths run past the line program header")
    header.opcode_lengths = bytes(data[pos:opcodes_end])
    pos = opcodes_end
    header._strings = (debug_str, debug_line_str)
    if version >= 5:
        header._directories, pos = _v5_entries(data, pos, program_start, fmt)
        header._entries, pos = _v5_entries(data, pos, program_start, fmt)
        if not header._directories:
            header._directories = [(comp_dir, DW_FORM_string, 0)]
    else:
        header._directories, pos = _v4_directories(data, pos, program_start, comp_dir)
        header._entries = _v4_files(data, pos, program_start)
        header._first_file = 1
    header.program_start, header.program_end = program_start, end
    return header


def _join(directory: str, name: str) -> str:
    if not directory or name.startswith("/"):
        return name
    return posixpath.join(directory, name)


def _v4_directories(
    data: Buffer, pos: int, end: int, comp_dir: str
) -> tuple[list[tuple[int | bytes | str, int, int]], int]:
    """``include_directories`` (DWARF 2–4): index 0 is the compilation directory."""
    dirs: list[tuple[int | bytes | str, int, int]] = [(comp_dir, DW_FORM_string, 0)]
    while pos < end and data[pos] != 0 and len(dirs) < _MAX_ENTRIES:
        name, pos = read_value(data, pos, end, DW_FORM_string, _ANY_FORMAT)
        dirs.append((name, DW_FORM_string, 0))
    return dirs, pos + 1


def _v4_files(data: Buffer, pos: int, end: int) -> list[tuple[int | bytes | str, int, int]]:
    """``file_names`` (DWARF 2–4), numbered from 1: (name, form, directory index) each."""
    files: list[tuple[int | bytes | str, int, int]] = []
    while pos < end and data[pos] != 0 and len(files) < _MAX_ENTRIES:
        name, pos = read_value(data, pos, end, DW_FORM_string, _ANY_FORMAT)
        directory, pos = _leb128(data, pos, end, False, DwarfError)
        _mtime, pos = _leb128(data, pos, end, False, DwarfError)
        _length, pos = _leb128(data, pos, end, False, DwarfError)
        files.append((name, DW_FORM_string, directory))
    return files


def _v5_entries(
    data: Buffer, pos: int, end: int, fmt: UnitFormat
) -> tuple[list[tuple[int | bytes | str, int, int]], int]:
    """A DWARF 5 directory or file table: (name, its form, directory index) each.

    Names stay as read (an offset into a string section, mostly) until
    :meth:`LineProgramHeader.file` needs one; other contents of a fixed size
    (an MD5) are stepped over, and one-byte directory indices read in place.
    """
    if pos >= end:
        raise DwarfError("cut DWARF 5 line table")
    format_count = data[pos]
    pos += 1
    formats = []
    for _ in range(format_count):
        content, pos = _leb128(data, pos, end, False, DwarfError)
        form, pos = _leb128(data, pos, end, False, DwarfError)
        formats.append((content, form, fixed_size(form, fmt)))
    count, pos = _leb128(data, pos, end, False, DwarfError)
    if count > min(_MAX_ENTRIES, end - pos):
        raise DwarfError(f"line table claims {count} entries")
    entries: list[tuple[int | bytes | str, int, int]] = []
    for _ in range(count):
        name: int | bytes | str = ""
        name_form, directory = DW_FORM_string, 0
        for content, form, size in formats:
            if content == DW_LNCT_directory_index and form == DW_FORM_udata and pos < end:
                if data[pos] < 0x80:
                    directory, pos = data[pos], pos + 1
                    continue
            elif content not in (DW_LNCT_path, DW_LNCT_directory_index) and size is not None:
                pos += size
                continue
            value, pos = read_value(data, pos, end, form, fmt)
            if content == DW_LNCT_path:
                name, name_form = value, form
            elif content == DW_LNCT_directory_index and isinstance(value, int):
                directory = value
        if pos > end:
            raise DwarfError("line table entry runs past the header")
        entries.append((name, name_form, directory))
    return entries, pos


def _string(value: object, form: int, strings: tuple[Buffer | None, Buffer | None]) -> str:
    """The text of a name in a line table, wherever its form keeps it."""
    if isinstance(value, str):
        return value
    if isinstance(value, int) and form in (DW_FORM_strp, DW_FORM_line_strp):
        section = strings[0] if form == DW_FORM_strp else strings[1]
        return c_string(section, value) or "?"
    return "?"  # strx in a line table needs the unit's string offsets; no producer does it


_ANY_FORMAT = UnitFormat("<", 8, 4, 4)


class LineTable:
    """One unit's rows, filed per source file as gdb files them, searchable by address.

    The program runs only as far as the lookups need: a pc's answer is
    settled once the sequence holding it has made a row past it (sequences
    of a linked program do not overlap, so no row still to come lies at or
    below the pc but above the row that holds it).  The program then stops,
    and runs on from there when a later lookup needs more.
    """

    def __init__(self, data: Buffer, header: LineProgramHeader) -> None:
        self.header = header
        #: Per file path: addresses (sorted) and, at the same index, (line, is_stmt).
        self._addresses: dict[str, list[int]] = {}
        self._rows: dict[str, list[tuple[int, bool]]] = {}
        self._per_file: dict[str, list[tuple[int, int, bool]]] = {}
        self._recorder = _Recorder(self._per_file, data, header)
        self._sorted = True

    def run_for(self, addresses: Iterable[int]) -> None:
        """Runs the program until the rows of every one of ``addresses`` are there."""
        recorder = self._recorder
        pending = sorted({address for address in addresses if not recorder.settled(address)})
        if pending:
            recorder.run(pending)
            self._sorted = False

    def lookup(self, address: int) -> tuple[str, int] | None:
        """(file path, line) for ``address``, as gdb's ``find_pc_line`` answers; None if none."""
        self.run_for((address,))
        if not self._sorted:
            for path, entries in self._per_file.items():
                # gdb's stable sort: by address, a line-0 marker before real rows at one
                # address.  A copy: the filing still pops what it filed last.
                ordered = sorted(entries, key=_by_address)
                self._addresses[path] = [entry[0] for entry in ordered]
                self._rows[path] = [(entry[1], entry[2]) for entry in ordered]
            self._sorted = True
        best: tuple[int, str, int] | None = None
        for path, addresses in self._addresses.items():
            index = bisect.bisect_right(addresses, address) - 1
            if index < 0:
                continue
            rows = self._rows[path]
            line, is_stmt = rows[index]
            if line == 0 or (best is not None and addresses[index] <= best[0]):
                continue
            if not is_stmt:
                back = index
                while (
                    back > 0
                    and addresses[back - 1] == addresses[back]
                    and rows[back - 1][0] != 0
                    and not rows[back][1]
                ):
                    back -= 1
                if rows[back][1]:
                    line = rows[back][0]
            best = (addresses[index], path, line)
        return None if best is None else (best[1], best[2])

    def file_name(self, index: int) -> str | None:
        """The path of file ``index`` (for DW_AT_call_file and DW_AT_decl_file)."""
        return self.header.file(index)


def _by_address(entry: tuple[int, int, bool]) -> tuple[int, bool]:
    return entry[0], entry[1] != 0


#: Where the sequence being run stops for the pcs waited for: not yet known (no row yet).
_UNKNOWN = -1
#: ... or nowhere: some pc waited for lies below the sequence, in another one.
_NOWHERE = 1 << 65


class _Recorder:
    """Runs a line program, filing rows the way gdb's line-table builder does.

    It stops where the pcs it is run for are settled, keeping the state of
    the line-number machine and of the filing, and goes on from there when
    run again.
    """

    def __init__(
        self,
        per_file: dict[str, list[tuple[int, int, bool]]],
        data: Buffer,
        header: LineProgramHeader,
    ) -> None:
        self.per_file = per_file
        self.data = data
        self.header = header
        self.pos = header.program_start
        #: The ranges of the sequences run to their end (none dropped by the linker).
        self.sequences: list[tuple[int, int]] = []
        #: The first address of the sequence being run (_UNKNOWN before its first row),
        #: and that of its last row.
        self.sequence_start = _UNKNOWN
        self.row_address = 0
        #: The machine's registers and the filing's memory (see run), between runs.
        self.state: tuple[object, ...] | None = None

    def settled(self, pc: int) -> bool:
        """Whether the rows that answer for ``pc`` are all filed."""
        if self.pos >= self.header.program_end:
            return True
        if self.sequence_start != _UNKNOWN and self.sequence_start <= pc < self.row_address:
            return True
        return any(start <= pc < end for start, end in self.sequences)

    def run(self, pending: list[int]) -> None:
        """Runs the program until every pc of ``pending`` (sorted) is :meth:`settled`.

        Every row is filed as gdb's ``lnp_state_machine::record_line`` files
        it.  The filing is written out where rows are made rather than called
        per row: a libc unit's program makes thousands of rows, and the call
        was a third of the time of running it.
        """
        data, header = self.data, self.header
        fmt = header.format
        file_path = header.file
        end = header.program_end
        pos = self.pos
        line_base, line_range, opcode_base = header.line_base, header.line_range, header.opcode_base
        min_inst, max_ops = header.min_inst_length, header.max_ops
        lengths = header.opcode_lengths
        per_file = self.per_file
        # gdb records a row that repeats the line of the previous one only if
        # that line never had a nonzero discriminator.  ``discarded``: a sequence
        # of a function the linker dropped (address 0).  What the filing
        # remembers: the file and line of the last row filed, the address of
        # the last row made, and whether a row there was a statement.
        address: int
        path: str | None  # the path of ``file``, looked up when it changes
        last_file: str | None
        last_address: int | None
        if self.state is None:
            address, op_index, file, line, is_stmt = 0, 0, 1, 1, header.default_is_stmt
            path = file_path(file)
            discriminator, discriminator_seen, discarded = 0, False, False
            last_file, last_line, last_address, stmt_at_address = None, 0, None, False
        else:
            (
                address,
                op_index,
                file,
                line,
                is_stmt,
                path,
                discriminator,
                discriminator_seen,
                discarded,
                last_file,
                last_line,
                last_address,
                stmt_at_address,
            ) = self.state  # type: ignore[assignment]
        sequences = self.sequences
        start = self.sequence_start
        # The row past which every pc waited for is settled; _UNKNOWN before the
        # sequence's first row, _NOWHERE if some pc lies below the sequence.
        stop = _UNKNOWN if start == _UNKNOWN else _stop(pending, start)
        while pos < end:
            opcode = data[pos]
            pos += 1
            if opcode >= opcode_base:
                adjusted = opcode - opcode_base
                advance = op_index + adjusted // line_range
                address += min_inst * (advance // max_ops)
                op_index = advance % max_ops
                delta = line_base + adjusted % line_range
                if delta:
                    line += delta
                    discriminator_seen = discriminator != 0
                discriminator = 0
            elif opcode == DW_LNS_copy:
                discriminator = 0
            else:
                if opcode == DW_LNS_advance_pc:
                    value, pos = _leb128(data, pos, end, False, DwarfError)
                    advance = op_index + value
                    address += min_inst * (advance // max_ops)
                    op_index = advance % max_ops
                elif opcode == DW_LNS_advance_line:
                    value, pos = _leb128(data, pos, end, True, DwarfError)
                    if value:
                        line += value
                        discriminator_seen = discriminator != 0
                elif opcode == DW_LNS_set_file:
                    file, pos = _leb128(data, pos, end, False, DwarfError)
                    path = file_path(file)
                elif opcode == DW_LNS_negate_stmt:
                    is_stmt = not is_stmt
                elif opcode == DW_LNS_const_add_pc:
                    advance = op_index + (255 - opcode_base) // line_range
                    address += min_inst * (advance // max_ops)
                    op_index = advance % max_ops
                elif opcode == DW_LNS_fixed_advance_pc:
                    if pos + 2 > end:
                        raise DwarfError("cut DW_LNS_fixed_advance_pc")
                    address += fmt.unsigned(data, pos, 2)
                    op_index = 0
                    pos += 2
                elif opcode == 0:
                    length, pos = _leb128(data, pos, end, False, DwarfError)
                    if length == 0 or pos + length > end:
                        raise DwarfError("bad extended opcode length in line program")
                    sub, operands, pos = data[pos], pos + 1, pos + length
                    if sub == DW_LNE_end_sequence:
                        if not discarded and last_file is not None:
                            _finish(per_file, last_file, address)
                        if start != _UNKNOWN:
                            sequences.append((start, address))
                            pending = [pc for pc in pending if not start <= pc < address]
                            start = stop = _UNKNOWN
                        last_address, stmt_at_address = None, False
                        address, op_index, file, line = 0, 0, 1, 1
                        path = file_path(file)
                        is_stmt, discarded = header.default_is_stmt, False
                        discriminator, discriminator_seen = 0, False
                        last_file, last_line = None, 0
                        if not pending:
                            break
                    elif sub == DW_LNE_set_address:
                        size = min(length - 1, 8)
                        address = fmt.unsigned(data, operands, size) if size in (4, 8) else 0
                        op_index = 0
                        # 0 (and the -1/-2 "tombstones") mark code the linker removed.
                        discarded = address == 0 or address >= (1 << (8 * size)) - 2
                    elif sub == DW_LNE_set_discriminator:
                        discriminator, _ = _leb128(data, operands, pos, False, DwarfError)
                        discriminator_seen = discriminator_seen or discriminator != 0
                    # DW_LNE_define_file (DWARF 2–4, unused by producers) and vendor ops: skipped
                else:
                    # DW_LNS_set_column, set_isa, and any standard opcode newer than
                    # this reader: skip the LEB128 operands its length entry declares.
                    count = lengths[opcode - 1] if opcode - 1 < len(lengths) else 0
                    for _ in range(count):
                        _value, pos = _leb128(data, pos, end, False, DwarfError)
                continue
            if discarded:
                continue
            # A row (special opcode or DW_LNS_copy), filed as record_line files it.
            if op_index == 0 and path is not None:
                changed = path != last_file
                if line != 0 and not (
                    changed and last_address == address and not is_stmt and stmt_at_address
                ):
                    if changed and last_file is not None:
                        _finish(per_file, last_file, address)
                    if changed or line != last_line or not discriminator_seen:
                        entries = per_file.get(path)
                        if entries is None:
                            entries = per_file[path] = []
                        entries.append((address, line, is_stmt))
                        last_file, last_line = path, line
            if last_address != address:
                stmt_at_address = False
                last_address = address
            stmt_at_address = stmt_at_address or is_stmt
            if address > stop:
                if stop != _UNKNOWN:
                    break  # a row past every pc waited for: they are settled
                start = address  # the sequence's first row
                stop = _stop(pending, start)
        self.pos = pos
        self.sequence_start = start
        self.row_address = address
        self.state = (
            address,
            op_index,
            file,
            line,
            is_stmt,
            path,
            discriminator,
            discriminator_seen,
            discarded,
            last_file,
            last_line,
            last_address,
            stmt_at_address,
        )


def _stop(pending: list[int], start: int) -> int:
    """Where a sequence starting at ``start`` settles every pc of ``pending`` (sorted)."""
    return pending[-1] if pending and pending[0] >= start else _NOWHERE


def _finish(per_file: dict[str, list[tuple[int, int, bool]]], last_file: str, address: int) -> None:
    """Closes ``last_file``'s range with a line-0 marker at ``address``."""
    entries = per_file.setdefault(last_file, [])
    last_line: int | None = None
    while entries:
        last_line = entries[-1][1]
        if entries[-1][0] != address:
            break
        entries.pop()
    if last_line:  # a marker after nothing (or after a marker) is dropped
        entries.append((address, 0, True))
