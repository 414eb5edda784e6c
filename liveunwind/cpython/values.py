"""Simple Python objects as bytes: the values ``--locals`` shows, and how much of each.

A local variable is shown by value when it is None, a bool, an int, a
float, a str or a bytes object — each read from the object's own fields at
the offsets of the version's :class:`~liveunwind.cpython.layouts.Layout` —
and as its type and address otherwise.  Every length is bounded before it
is believed, and what is cut says so (``PythonValue.truncated``).

Everything here is pure: bytes in, values out.
"""

from __future__ import annotations

import struct

from liveunwind.errors import FormatError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from liveunwind.cpython.layouts import Layout

#: Characters of a str, and bytes of a bytes object, read and shown.
MAX_TEXT = 200
#: 30-bit digits of an int read: 4,300 decimal digits, as far as CPython itself converts an
#: int to text by default (``sys.get_int_max_str_digits()``); a larger int shows its low digits.
MAX_INT_DIGITS = 477
#: Bits per digit of CPython's ints on every 64-bit build (``PYLONG_BITS_IN_DIGIT``).
DIGIT_BITS = 30
#: Characters of a type's name (``tp_name``) read.
MAX_TYPE_NAME = 128

#: The symbols ``--locals`` and ``--tasks`` compare objects with: the types read by value,
#: None, and the coroutines a task's await chain is made of.
VALUE_SYMBOLS = (
    "PyLong_Type",
    "PyBool_Type",
    "PyFloat_Type",
    "PyCell_Type",
    "_Py_NoneStruct",
    "PyCoro_Type",
    "PyGen_Type",
)
NONE_OBJECT = "_Py_NoneStruct"

_I64 = struct.Struct("<q")
_U64 = struct.Struct("<Q")
_F64 = struct.Struct("<d")

# localspluskinds: what each slot of a frame's local variables is (pycore_code.h).
#: A comprehension's variable inlined into its function (3.12+): f_locals leaves it out.
KIND_HIDDEN = 0x10
#: A variable another function's closure reads: the slot holds its cell once the frame started.
KIND_CELL = 0x40
#: A variable of an enclosing function: the slot holds that function's cell.
KIND_FREE = 0x80


def long_digit_count(layout: Layout, header: bytes) -> tuple[int, int]:
    """(digits, sign) of an int from its header: sign is 1, 0 or -1."""
    if layout.long_tagged:
        tag = int(_U64.unpack_from(header, layout.long_size)[0])
        sign = tag & 3
        if sign == 3:
            raise FormatError(f"int with a sign tag of 3 (lv_tag {tag:#x})")
        return tag >> 3, (1, 0, -1)[sign]
    size = int(_I64.unpack_from(header, layout.long_size)[0])
    return abs(size), (size > 0) - (size < 0)


def long_from_digits(digits: bytes, count: int, sign: int) -> int:
    """The int whose ``count`` little-endian 30-bit digits (one per uint32) are ``digits``."""
    value = 0
    for index in range(count - 1, -1, -1):
        digit = int.from_bytes(digits[index * 4 : index * 4 + 4], "little")
        if digit >> DIGIT_BITS:
            raise FormatError(f"int digit {digit:#x} has more than {DIGIT_BITS} bits")
        value = (value << DIGIT_BITS) | digit
    return sign * value


def float_value(layout: Layout, data: bytes) -> float:
    return float(_F64.unpack_from(data, layout.float_value)[0])


def bytes_size(layout: Layout, header: bytes) -> int:
    """A bytes object's length (its ``ob_size``), which must not be negative."""
    size = int(_I64.unpack_from(header, layout.bytes_size)[0])
    if size < 0:
        raise FormatError(f"bytes of {size} bytes")
    return size


def c_string(data: bytes) -> str:
    """The NUL-terminated UTF-8 string at the start of ``data`` (a ``tp_name``)."""
    end = data.find(b"\0")
    return data[: end if end >= 0 else len(data)].decode("utf-8", "replace")
