"""A target made of byte buffers: walks of synthetic stacks without a process."""

from __future__ import annotations

from liveunwind.arch.x86_64 import X86_64
from liveunwind.errors import MemoryReadError
from liveunwind.targets.base import AddressSpace, Mapping, ThreadState
from liveunwind.targets.files import RegularFile, open_file


class BufferSpace(AddressSpace):
    """A target whose memory is a few byte buffers at fixed addresses, one thread stopped."""

    arch = X86_64

    def __init__(self, regions: list[tuple[Mapping, bytes]], registers: dict[int, int]) -> None:
        self._regions = sorted(regions)
        self._registers = registers

    def read(self, address: int, size: int) -> bytes:
        for mapping, data in self._regions:
            if mapping.start <= address and address + size <= mapping.end:
                return data[address - mapping.start : address - mapping.start + size]
        raise MemoryReadError(address, size, "not in any buffer")

    def mappings(self) -> list[Mapping]:
        return [mapping for mapping, _ in self._regions]

    def threads(self) -> list[ThreadState]:
        return [ThreadState(1, "wrap", dict(self._registers))]

    def open_mapped_file(self, mapping: Mapping) -> RegularFile | None:
        return open_file(mapping.path)
