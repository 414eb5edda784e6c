"""``--locals``: values decoded from bytes laid out as each version lays them out, and their JSON.

The values of real interpreters, live and in cores, are compared with
``f_locals`` in tests/system/test_python_locals.py.
"""

from __future__ import annotations

import struct

import pytest

from liveunwind.cpython import layouts, values
from liveunwind.errors import FormatError
from liveunwind.frames import PythonValue

LAYOUT_3_11 = layouts.BUILT_IN_LAYOUTS[(3, 11)]
LAYOUT_3_12 = layouts.BUILT_IN_LAYOUTS[(3, 12)]


def digits_of(number: int) -> list[int]:
    magnitude, found = abs(number), []
    while magnitude:
        found.append(magnitude & ((1 << values.DIGIT_BITS) - 1))
        magnitude >>= values.DIGIT_BITS
    return found


def long_object(layout: layouts.Layout, number: int) -> tuple[bytes, bytes]:
    """(header, digits) of ``number`` as the version stores an int."""
    digits = digits_of(number)
    header = bytearray(layout.long_digits)
    if layout.long_tagged:
        sign = 0 if number > 0 else 1 if number == 0 else 2
        struct.pack_into("<Q", header, layout.long_size, len(digits) << 3 | sign)
    else:
        struct.pack_into(
            "<q", header, layout.long_size, len(digits) * ((number > 0) - (number < 0))
        )
    return bytes(header), b"".join(struct.pack("<I", digit) for digit in digits)


@pytest.mark.parametrize("layout", [LAYOUT_3_11, LAYOUT_3_12], ids=["3.11", "3.12+"])
@pytest.mark.parametrize("number", [0, 1, -1, 2**30, -(2**70), 7**90, 10**4000])
def test_ints_of_any_size_decode_in_either_sign_encoding(
    layout: layouts.Layout, number: int
) -> None:
    header, digits = long_object(layout, number)
    count, sign = values.long_digit_count(layout, header)
    assert values.long_from_digits(digits, count, sign) == number


def test_a_digit_wider_than_thirty_bits_or_a_bad_sign_tag_is_refused() -> None:
    with pytest.raises(FormatError, match="more than 30 bits"):
        values.long_from_digits(struct.pack("<I", 1 << 30), 1, 1)
    header = bytearray(LAYOUT_3_12.long_digits)
    struct.pack_into("<Q", header, LAYOUT_3_12.long_size, 1 << 3 | 3)
    with pytest.raises(FormatError, match="sign tag"):
        values.long_digit_count(LAYOUT_3_12, bytes(header))


def test_a_negative_bytes_length_is_refused_and_type_names_stop_at_their_nul() -> None:
    header = bytearray(LAYOUT_3_12.bytes_sval)
    struct.pack_into("<q", header, LAYOUT_3_12.bytes_size, -5)
    with pytest.raises(FormatError):
        values.bytes_size(LAYOUT_3_12, bytes(header))
    assert values.c_string(b"collections.OrderedDict\0garbage") == "collections.OrderedDict"
    assert values.c_string(b"\xffname") == "\ufffdname"


def test_json_holds_simple_values_exactly_and_says_what_it_cannot() -> None:
    assert PythonValue("int", 7**90).as_json() == 7**90
    assert PythonValue("str", "ü").as_json() == "ü"
    assert PythonValue("NoneType", None).as_json() is None
    assert PythonValue("bool", True).as_json() is True
    assert PythonValue("float", 0.25).as_json() == 0.25
    assert PythonValue("float", float("inf")).as_json() == {
        "type": "float",
        "repr": "inf",
        "truncated": False,
    }
    assert PythonValue("bytes", b"\x00a").as_json() == {
        "type": "bytes",
        "repr": "b'\\x00a'",
        "truncated": False,
    }
    cut = PythonValue("str", "abc", truncated=True)
    assert cut.as_json() == {"type": "str", "repr": "'abc'", "truncated": True}
    assert cut.text() == "'abc'…"
    other = PythonValue("dict", address=0x1000)
    assert other.as_json() == {"type": "dict", "address": 0x1000}
    assert other.text() == "<dict object at 0x1000>"
