"""A sparse little-endian memory for unit tests of walks: placed bytes read back, no others."""

from __future__ import annotations

from liveunwind.errors import MemoryReadError


class SparseMemory:
    """Bytes placed at addresses; a read that touches anything not placed raises MemoryReadError.

    ``reads`` counts the reads, for tests of how often a strategy looks.
    """

    def __init__(self, words: dict[int, int] | None = None) -> None:
        self.bytes: dict[int, int] = {}
        self.reads = 0
        for address, value in (words or {}).items():
            self.word(address, value)

    def put(self, address: int, data: bytes) -> None:
        for index, byte in enumerate(data):
            self.bytes[address + index] = byte

    def word(self, address: int, value: int, size: int = 8) -> None:
        self.put(address, value.to_bytes(size, "little"))

    def read(self, address: int, size: int) -> bytes:
        self.reads += 1
        try:
            return bytes(self.bytes[address + index] for index in range(size))
        except KeyError:
            raise MemoryReadError(address, size) from None
