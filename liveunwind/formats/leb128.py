"""LEB128, the variable-length integers of DWARF (CFI programs, expressions).

One decoder for every format that reads them, bounded so a run of
continuation bytes in a corrupt section cannot make it loop or build a huge
integer; and the two encoders decoders need to build DWARF expressions of
their own (SFrame's flexible rules become ``DW_OP_breg`` expressions).
"""

from __future__ import annotations

from liveunwind.errors import FormatError

TYPE_CHECKING = False
if TYPE_CHECKING:
    import mmap

#: A 64-bit value needs at most 10 bytes; more is corruption.
MAX_BYTES = 10


def decode(
    data: bytes | bytearray | memoryview | mmap.mmap,
    pos: int,
    end: int,
    signed: bool,
    error: type[FormatError] = FormatError,
) -> tuple[int, int]:
    """One (S/U)LEB128 at ``pos``, not read past ``end``: the value and the next position.

    Raises ``error`` (a FormatError) for a value cut off by ``end`` or longer
    than 10 bytes.
    """
    byte = data[pos] if pos < end else 0x80
    if byte < 0x40 or (not signed and byte < 0x80):
        return byte, pos + 1  # the common one-byte case
    result = 0
    shift = 0
    stop = min(end, pos + MAX_BYTES)
    while pos < stop:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            if signed and byte & 0x40:
                result -= 1 << shift
            return result, pos
    raise error(f"truncated or overlong LEB128 at offset {pos:#x}")


def encode_unsigned(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def encode_signed(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        done = (value == 0 and not byte & 0x40) or (value == -1 and byte & 0x40)
        out.append(byte if done else byte | 0x80)
        if done:
            return bytes(out)
