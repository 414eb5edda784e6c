"""CPython's objects as bytes: thread states, frames, code objects, ``str``, ``bytes``, line tables.

Each structure a walk reads is unpacked with one ``struct`` call
(:class:`Record`), at the offsets its version's
:class:`~liveunwind.cpython.layouts.Layout` gives; names are decoded from a
``str`` object's header and characters (:class:`StringShape`), and the line
an instruction is at from the code object's ``co_linetable``
(:func:`line_for_offset`).  Every length is bounded before it is believed.

Everything here is pure: bytes in, records out.
"""

from __future__ import annotations

import operator
import struct

from liveunwind.errors import FormatError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from liveunwind.cpython.layouts import Layout

_U64 = struct.Struct("<Q")
_I32 = struct.Struct("<i")
_U32 = struct.Struct("<I")

# -- records ------------------------------------------------------------------------


def word(data: bytes, offset: int) -> int:
    """The little-endian 64-bit word at ``offset`` of ``data``."""
    return int(_U64.unpack_from(data, offset)[0])


class Record:
    """Fields of a structure at known offsets, unpacked with one ``struct`` call.

    ``fields`` are (offset, struct code) pairs; :meth:`unpack` returns their
    values in the order given, whatever order their offsets are in.
    """

    __slots__ = ("_order", "_struct")

    def __init__(self, fields: list[tuple[int, str]]) -> None:
        by_offset = sorted(range(len(fields)), key=lambda index: fields[index][0])
        layout = "<"
        at = 0
        for index in by_offset:
            offset, code = fields[index]
            if offset < at:
                raise FormatError(f"overlapping fields at offset {offset}")
            layout += f"{offset - at}x{code}" if offset > at else code
            at = offset + struct.calcsize("<" + code)
        self._struct = struct.Struct(layout)
        #: Picks each field, in the order given, from the values in offset order.
        self._order = operator.itemgetter(*(by_offset.index(index) for index in range(len(fields))))

    def unpack(self, data: bytes | bytearray, offset: int = 0) -> tuple[int, ...]:
        """The fields of the structure at ``offset`` of ``data``."""
        return self._order(self._struct.unpack_from(data, offset))


def tstate_record(layout: Layout) -> Record:
    """A thread state's next, interpreter, native id, frame pointer and frame stack (start, top)."""
    return Record(
        [
            (layout.tstate_next, "Q"),
            (layout.tstate_interp, "Q"),
            (layout.tstate_native_thread_id, "Q"),
            (layout.tstate_frame, "Q"),
            (layout.tstate_datastack, "Q"),
            (layout.tstate_datastack + 8, "Q"),
        ]
    )


def frame_record(layout: Layout) -> Record:
    """A frame's code object, previous frame, instruction pointer and owner."""
    return Record(
        [
            (layout.frame_code, "Q"),
            (layout.frame_previous, "Q"),
            (layout.frame_instr, "Q"),
            (layout.frame_owner, "B"),
        ]
    )


class CodeFields:
    """The fields of a code object a Python frame's description needs (see :func:`code_record`)."""

    __slots__ = (
        "filename",
        "firstlineno",
        "firsttraceable",
        "identity",
        "linetable",
        "name",
        "qualname",
        "type",
    )

    def __init__(self, record: Record, layout: Layout, data: bytes) -> None:
        #: Every field of the record: what tells this code object from another
        #: one later put at the same address.
        self.identity = record.unpack(data)
        (
            self.type,
            self.filename,
            self.name,
            self.qualname,
            self.linetable,
            self.firstlineno,
        ) = self.identity
        where = layout.code_firsttraceable
        self.firsttraceable = 0 if where is None else int(_I32.unpack_from(data, where)[0])


def code_record(layout: Layout) -> Record:
    """A code object's type, file name, name, qualified name, line table and first line."""
    return Record(
        [
            (layout.object_type, "Q"),
            (layout.code_filename, "Q"),
            (layout.code_name, "Q"),
            (layout.code_qualname, "Q"),
            (layout.code_linetable, "Q"),
            (layout.code_firstlineno, "i"),
        ]
    )


# -- strings and bytes --------------------------------------------------------------

#: Longest name or file name decoded (PATH_MAX is 4096 bytes).
MAX_STRING_LENGTH = 4096
#: Longest line table read (a 100,000-line function has a ~500 KB table).
MAX_LINETABLE = 4 << 20
_KIND_CODECS = {1: "latin-1", 2: "utf-16-le", 4: "utf-32-le"}


class StringShape:
    """Where a ``str`` object's characters are and how to decode them.

    ``inline`` characters follow the header at ``offset``; otherwise
    ``offset`` is where the header holds the pointer to them (a legacy,
    non-compact string).
    """

    __slots__ = ("codec", "inline", "length", "offset", "size", "truncated")

    def __init__(self, layout: Layout, header: bytes, keep: int | None = None) -> None:
        """``keep``: read only the first ``keep`` characters of a longer string (``truncated``)
        instead of refusing one longer than :data:`MAX_STRING_LENGTH`."""
        length = word(header, layout.ascii_length)
        self.truncated = keep is not None and length > keep
        if keep is not None:
            length = min(length, keep)
        elif length > MAX_STRING_LENGTH:
            raise FormatError(f"str of {length} characters (more than {MAX_STRING_LENGTH})")
        state = int(_U32.unpack_from(header, layout.ascii_state)[0])
        kind, compact, ascii = (state >> 2) & 7, (state >> 5) & 1, (state >> 6) & 1
        codec = "ascii" if ascii else _KIND_CODECS.get(kind)
        if codec is None:
            raise FormatError(f"str of unknown kind {kind}")
        self.length = length
        self.codec = codec
        #: Bytes of character data.
        self.size = length * (1 if ascii else kind)
        self.inline = bool(compact)
        if not compact:
            self.offset = layout.compact_size  # where PyUnicodeObject keeps data.any
        else:
            self.offset = layout.ascii_size if ascii else layout.compact_size

    def decode(self, data: bytes) -> str:
        return data.decode(self.codec, "replace")


def header_size(layout: Layout) -> int:
    """Bytes to read of a ``str`` object to know its shape (and a pointer past it)."""
    return layout.compact_size + 8


def bytes_length(layout: Layout, header: bytes) -> int:
    """The length of a ``bytes`` object from its first ``bytes_sval`` bytes, bounded."""
    size = word(header, layout.bytes_size)
    if size > MAX_LINETABLE:
        raise FormatError(f"bytes of {size} bytes (more than {MAX_LINETABLE})")
    return size


# -- line tables (3.11+ co_linetable) -------------------------------------------------

# Each entry starts with a byte whose top bit is set: bits 3-6 are the entry's
# code, bits 0-2 the number of code units it covers minus one.  Codes 0-9 are
# the short form and 10-12 the one-line forms (line delta code - 10), neither
# changing the line but those; 13 is "no column" (a signed varint line delta
# follows), 14 the long form (signed varint line delta, then end line and
# columns), 15 "no location" (line None for those units).
_NO_COLUMNS, _LONG, _NO_LOCATION = 13, 14, 15
#: Bytes per code unit (_Py_CODEUNIT).
CODE_UNIT = 2


def _varint(table: bytes, at: int) -> tuple[int, int]:
    """An unsigned varint of 6-bit chunks, low first, bit 6 meaning more; (value, next)."""
    end = len(table)
    if at >= end:
        raise FormatError("line table: varint past the end")
    byte = table[at]
    value, shift = byte & 63, 0
    at += 1
    while byte & 64:
        if at >= end or shift > 28:
            raise FormatError("line table: varint past the end")
        byte = table[at]
        at += 1
        shift += 6
        value |= (byte & 63) << shift
    return value, at


def line_for_offset(table: bytes, firstlineno: int, offset: int) -> int | None:
    """The line CPython reports for byte ``offset`` of the code (``PyCode_Addr2Line``).

    ``offset`` is the frame's instruction pointer minus the code's first
    instruction, in bytes.  A negative offset (a frame not started yet) is
    the function's first line; an offset in a range without location, or
    past the table, has no line (None).
    """
    if offset < 0:
        return firstlineno
    line = firstlineno
    start = 0
    at = 0
    end = len(table)
    while at < end:
        first = table[at]
        if not first & 128:
            raise FormatError(f"line table: entry at {at} does not start with its marker bit")
        code = (first >> 3) & 15
        units = (first & 7) + 1
        at += 1
        if code in (_NO_COLUMNS, _LONG):
            raw, at = _varint(table, at)
            line += -(raw >> 1) if raw & 1 else raw >> 1
        elif 10 <= code <= 12:
            line += code - 10
        stop = start + units * CODE_UNIT
        if start <= offset < stop:
            return None if code == _NO_LOCATION else line
        start = stop
        while at < end and not table[at] & 128:  # the entry's remaining bytes
            at += 1
    return None
