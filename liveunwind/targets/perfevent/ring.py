"""One perf ring buffer, read from Python: records out, in the order the kernel wrote them.

The buffer is the event's descriptor mapped shared (a perf descriptor, not a
file: nothing can truncate it under us): a control page, then a power of two
of data pages the kernel writes records into, wrapping around.  The kernel
advances ``data_head`` after writing; we advance ``data_tail`` after
reading, which frees the space (it never overwrites what we have not read:
it drops samples instead and says so with a LOST record).  The ordering the
kernel's header asks for — ``data_head`` read with acquire semantics before
the data, ``data_tail`` written with release semantics after it — is not
something Python's own reads promise on a weakly ordered CPU (aarch64,
riscv64), so both go through libatomic's ``__atomic_load_8`` and
``__atomic_store_8`` (GCC's runtime, the libatomic1 package), called
through ctypes: about a microsecond a call, two per drain.

Records are cut whole out of the bytes between tail and head (a record that
wraps around the end is joined); a header whose size is below its own 8
bytes or beyond what was written means a corrupt buffer: the rest is
skipped and counted.
"""

from __future__ import annotations

import ctypes
import mmap
import struct

from liveunwind.errors import TargetError

#: Offsets in ``struct perf_event_mmap_page``.
DATA_HEAD = 1024
DATA_TAIL = 1032
DATA_OFFSET = 1040
DATA_SIZE = 1048
#: Data pages mapped per CPU unless asked otherwise: 512 KiB with 4 KiB
#: pages, inside the 516 KiB per CPU an unprivileged user may lock
#: (``kernel.perf_event_mlock_kb``); about 60 samples of 8 KiB of stack.
DEFAULT_DATA_PAGES = 128
#: ``__ATOMIC_ACQUIRE`` and ``__ATOMIC_RELEASE``.
_ACQUIRE = 2
_RELEASE = 3
_HEADER = struct.Struct("<IHH")

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable


_atomics: tuple[Callable[..., int], Callable[..., None]] | None = None


def _load_atomics() -> tuple[Callable[..., int], Callable[..., None]]:
    global _atomics
    if _atomics is None:
        try:
            library = ctypes.CDLL("libatomic.so.1")
        except OSError:
            raise TargetError(
                "profile --on-cpu needs GCC's libatomic (libatomic.so.1) to read the kernel's "
                "ring buffers: install it (apt-get install libatomic1)"
            ) from None
        load, store = library.__atomic_load_8, library.__atomic_store_8
        load.argtypes = [ctypes.c_void_p, ctypes.c_int]
        load.restype = ctypes.c_uint64
        store.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int]
        store.restype = None
        _atomics = (load, store)
    return _atomics


class Ring:
    """The ring buffer of one event (one CPU's, with every event of the CPU writing into it)."""

    def __init__(self, fd: int, data_pages: int = DEFAULT_DATA_PAGES) -> None:
        if data_pages <= 0 or data_pages & (data_pages - 1):
            raise ValueError("the data pages of a ring buffer are a power of two")
        self._load, self._store = _load_atomics()
        page = mmap.PAGESIZE
        try:
            self._map = mmap.mmap(
                fd, (1 + data_pages) * page, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE
            )
        except OSError as error:
            raise TargetError(
                f"cannot map the kernel's sample buffer ({error.strerror}): more locked "
                "memory is needed (kernel.perf_event_mlock_kb, or ulimit -l), or fewer "
                "pages (--ring-pages)"
            ) from None
        # Pins the mapping (it cannot be closed while this exists) and gives its address.
        self._anchor = ctypes.c_char.from_buffer(self._map)
        self._base = ctypes.addressof(self._anchor)
        offset, size = struct.unpack_from("<QQ", self._map, DATA_OFFSET)
        if not size:  # kernels before 4.1 leave them 0: the data follows the first page
            offset, size = page, data_pages * page
        self._offset = offset
        self._size = size
        self._tail = self._load(self._base + DATA_TAIL, _ACQUIRE)
        #: Bytes skipped because a record's header made no sense.
        self.corrupt = 0

    def read(self) -> list[bytes]:
        """The records written since the last read, each whole (its 8-byte header first)."""
        head = self._load(self._base + DATA_HEAD, _ACQUIRE)
        tail = self._tail
        available = head - tail
        if available <= 0:
            return []
        size = self._size
        if available > size:  # the kernel never writes over unread data: a broken header
            self.corrupt += available
            self._release(head)
            return []
        start = self._offset + tail % size
        end = start + available
        limit = self._offset + size
        data = (
            self._map[start:end]
            if end <= limit
            else (self._map[start:limit] + self._map[self._offset : self._offset + end - limit])
        )
        records = []
        at = 0
        while at + 8 <= available:
            _kind, _misc, length = _HEADER.unpack_from(data, at)
            if length < 8 or at + length > available:
                self.corrupt += available - at
                break
            records.append(data[at : at + length])
            at += length
        self._release(head)
        return records

    def _release(self, head: int) -> None:
        self._tail = head
        self._store(self._base + DATA_TAIL, head, _RELEASE)

    def close(self) -> None:
        del self._anchor
        self._map.close()
