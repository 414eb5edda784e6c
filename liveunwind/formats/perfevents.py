"""perf event records as the kernel writes them: bytes in, records out.

The same bytes fill a ``perf_event_open`` ring buffer and the data section
of a ``perf.data`` file (``include/uapi/linux/perf_event.h``): each record
is a ``perf_event_header`` (type, misc, size) and a body whose layout the
event's ``perf_event_attr`` decides.  :class:`EventAttr` holds the fields of
the attr that matter (``sample_type``, ``read_format``, ``sample_regs_user``,
``sample_stack_user``, ``sample_id_all``, ``branch_sample_type``), decoded
from the attr's bytes or given; :func:`decode` turns one record into a
:class:`Sample` (ip, pid/tid, time, cpu, period, the user registers' ABI and
values, the user stack copy and how much of it is filled),
:class:`Mmap` (MMAP and MMAP2, with the inode or the build-id flavour),
:class:`Comm`, :class:`Task` (FORK and EXIT) or :class:`Lost`; every other
type is an :class:`Other` that says its type and size, skipped.  Every
length is checked against the record before it is used; a record that
does not add up raises FormatError.  Sample fields after the stack copy
(weight, data source, …) are not decoded.
"""

from __future__ import annotations

import operator
import struct

from liveunwind.errors import FormatError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

# perf_event_header.type
RECORD_MMAP = 1
RECORD_LOST = 2
RECORD_COMM = 3
RECORD_EXIT = 4
RECORD_FORK = 7
RECORD_SAMPLE = 9
RECORD_MMAP2 = 10
#: perf.data's own records (not the kernel's) start here: FINISHED_ROUND, …
RECORD_USER_TYPE_START = 64
RECORD_FINISHED_ROUND = 68

# perf_event_header.misc
MISC_CPUMODE_MASK = 7
MISC_USER = 2
MISC_MMAP_DATA = 1 << 13
MISC_COMM_EXEC = 1 << 13
MISC_MMAP_BUILD_ID = 1 << 14

# perf_event_attr.sample_type
SAMPLE_IP = 1 << 0
SAMPLE_TID = 1 << 1
SAMPLE_TIME = 1 << 2
SAMPLE_ADDR = 1 << 3
SAMPLE_READ = 1 << 4
SAMPLE_CALLCHAIN = 1 << 5
SAMPLE_ID = 1 << 6
SAMPLE_CPU = 1 << 7
SAMPLE_PERIOD = 1 << 8
SAMPLE_STREAM_ID = 1 << 9
SAMPLE_RAW = 1 << 10
SAMPLE_BRANCH_STACK = 1 << 11
SAMPLE_REGS_USER = 1 << 12
SAMPLE_STACK_USER = 1 << 13
SAMPLE_IDENTIFIER = 1 << 16

# perf_event_attr.read_format
READ_TOTAL_TIME_ENABLED = 1 << 0
READ_TOTAL_TIME_RUNNING = 1 << 1
READ_ID = 1 << 2
READ_GROUP = 1 << 3
READ_LOST = 1 << 4

#: perf_event_attr.branch_sample_type: each branch stack starts with hw_idx.
BRANCH_HW_INDEX = 1 << 17
#: perf_event_attr's flags word: bit 18 is sample_id_all.
FLAG_SAMPLE_ID_ALL = 1 << 18
#: ...and bit 10 is freq: sample_period is a frequency.
FLAG_FREQ = 1 << 10

#: perf_event_attr's type PERF_TYPE_SOFTWARE, and its clocks whose period is
#: nanoseconds on a CPU (PERF_COUNT_SW_CPU_CLOCK, PERF_COUNT_SW_TASK_CLOCK).
TYPE_SOFTWARE = 1
SW_CPU_CLOCK = 0
SW_TASK_CLOCK = 1

#: ``PERF_SAMPLE_REGS_ABI_NONE``: the sample caught a kernel thread, no user registers.
REGS_ABI_NONE = 0

HEADER = struct.Struct("<IHH")
_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")
_TWO_U32 = struct.Struct("<II")
_MMAP = struct.Struct("<IIQQQ")  # pid tid addr len pgoff
_MMAP2_INODE = struct.Struct("<IIQQ")  # maj min ino ino_generation
_MMAP2_TAIL = struct.Struct("<II")  # prot flags
_TASK = struct.Struct("<IIIIQ")  # pid ppid tid ptid time
_LOST = struct.Struct("<QQ")
#: Largest record: the header's size field is 16 bits.
MAX_RECORD = 0xFFFF
#: The attr fields read, and the least attr size holding each (PERF_ATTR_SIZE_VER*).
_ATTR_VER0 = 64
_ATTR_BRANCH = 80  # VER2: branch_sample_type
_ATTR_REGS = 96  # VER3: sample_regs_user, sample_stack_user


class EventAttr:
    """What decoding needs of one event's ``perf_event_attr``."""

    __slots__ = (
        "branch_sample_type",
        "config",
        "freq",
        "read_format",
        "sample_period",
        "sample_id_all",
        "sample_regs_user",
        "sample_stack_user",
        "sample_type",
        "type",
        "_id_size",
        "_prefix",
        "_regs",
    )

    def __init__(
        self,
        sample_type: int,
        *,
        read_format: int = 0,
        sample_regs_user: int = 0,
        sample_stack_user: int = 0,
        sample_id_all: bool = False,
        branch_sample_type: int = 0,
        type: int = 0,
        config: int = 0,
        sample_period: int = 0,
        freq: bool = False,
    ) -> None:
        self.sample_type = sample_type
        #: The event: PERF_TYPE_* and its config (software 1: cpu-clock 0, task-clock 1).
        self.type = type
        self.config = config
        #: Samples per second asked (``freq``), else events between samples.
        self.sample_period = sample_period
        self.freq = freq
        self.read_format = read_format
        self.sample_regs_user = sample_regs_user
        self.sample_stack_user = sample_stack_user
        self.sample_id_all = sample_id_all
        self.branch_sample_type = branch_sample_type
        #: Bytes of the ``sample_id`` trailer other records carry (sample_id_all).
        self._id_size = 8 * sum(
            1
            for bit in (SAMPLE_TID, SAMPLE_TIME, SAMPLE_ID, SAMPLE_STREAM_ID, SAMPLE_CPU)
            if sample_type & bit
        ) + (8 if sample_type & SAMPLE_IDENTIFIER else 0)
        #: Registers a sample holds: one word per set bit of the mask.
        self._regs = struct.Struct(f"<{bin(sample_regs_user).count('1')}Q")
        self._prefix = _sample_prefix(sample_type, read_format)

    @classmethod
    def from_bytes(cls, data: bytes | memoryview) -> EventAttr:
        """Decodes a ``perf_event_attr`` as ``perf_event_open`` takes it and perf.data keeps it."""
        if len(data) < _ATTR_VER0:
            raise FormatError(f"perf_event_attr of {len(data)} bytes: shorter than version 0")
        kind, size, config, period = struct.unpack_from("<IIQQ", data)
        if size and size < _ATTR_VER0:
            raise FormatError(f"perf_event_attr says it is {size} bytes: too short")
        available = min(len(data), size) if size else len(data)
        sample_type, read_format, flags = struct.unpack_from("<QQQ", data, 24)
        branch = _U64.unpack_from(data, 72)[0] if available >= _ATTR_BRANCH else 0
        regs, stack = (0, 0)
        if available >= _ATTR_REGS:
            regs, stack = struct.unpack_from("<QI", data, 80)
        return cls(
            sample_type,
            read_format=read_format,
            sample_regs_user=regs,
            sample_stack_user=stack,
            sample_id_all=bool(flags & FLAG_SAMPLE_ID_ALL),
            branch_sample_type=branch,
            type=kind,
            config=config,
            sample_period=period,
            freq=bool(flags & FLAG_FREQ),
        )

    @property
    def id_trailer_size(self) -> int:
        """Bytes at the end of every non-sample record that say its pid, time, cpu, id."""
        return self._id_size if self.sample_id_all else 0

    def layout_key(self) -> tuple[int, ...]:
        """The fields that decide where a record's fields lie: equal keys decode alike."""
        return (
            self.sample_type,
            self.read_format,
            self.sample_regs_user,
            int(self.sample_id_all),
            self.branch_sample_type & BRANCH_HW_INDEX,
        )

    def __repr__(self) -> str:
        return (
            f"<EventAttr sample_type={self.sample_type:#x} regs={self.sample_regs_user:#x} "
            f"stack={self.sample_stack_user}>"
        )


class Sample:
    """PERF_RECORD_SAMPLE: where a thread was, its user registers and a copy of its stack."""

    __slots__ = (
        "abi",
        "cpu",
        "dyn_size",
        "ip",
        "misc",
        "period",
        "pid",
        "registers",
        "stack",
        "tid",
        "time",
    )

    def __init__(self) -> None:
        self.misc = 0
        self.ip = 0
        self.pid = -1
        self.tid = -1
        self.time = 0
        self.cpu = -1
        self.period = 1
        #: PERF_SAMPLE_REGS_ABI_*: 0 (none: a kernel thread), 1 (32-bit), 2 (64-bit).
        self.abi = REGS_ABI_NONE
        #: The register values, in the order of the set bits of sample_regs_user.
        self.registers: tuple[int, ...] = ()
        #: The stack copy from the user sp up (its filled part: dyn_size bytes).
        self.stack: bytes | memoryview = b""
        #: Bytes of the copy the kernel filled (the rest of the asked size is zeros).
        self.dyn_size = 0

    @property
    def user(self) -> bool:
        """The sample caught the thread in user mode (else the kernel, with its user registers)."""
        return self.misc & MISC_CPUMODE_MASK == MISC_USER

    def __repr__(self) -> str:
        return f"<Sample tid {self.tid} ip {self.ip:#x} stack {self.dyn_size}>"


class Mmap:
    """PERF_RECORD_MMAP or MMAP2: a file (or anonymous memory) mapped into a process."""

    __slots__ = (
        "build_id",
        "executable",
        "inode",
        "length",
        "path",
        "pgoff",
        "pid",
        "prot",
        "start",
        "tid",
    )

    def __init__(
        self,
        pid: int,
        tid: int,
        start: int,
        length: int,
        pgoff: int,
        path: str,
        *,
        executable: bool,
        inode: int = 0,
        prot: int | None = None,
        build_id: bytes | None = None,
    ) -> None:
        self.pid = pid
        self.tid = tid
        self.start = start
        self.length = length
        self.pgoff = pgoff
        self.path = path
        #: Code (MMAP records of data mappings carry MISC_MMAP_DATA).
        self.executable = executable
        #: The file's inode (MMAP2 without build-id), else 0.
        self.inode = inode
        #: PROT_* bits (MMAP2), None when not said.
        self.prot = prot
        #: The file's build-id (MMAP2 with MISC_MMAP_BUILD_ID), else None.
        self.build_id = build_id

    @property
    def end(self) -> int:
        return self.start + self.length

    def __repr__(self) -> str:
        return f"<Mmap {self.pid} {self.start:#x}-{self.end:#x} {self.path}>"


class Comm:
    """PERF_RECORD_COMM: a thread's name, set or changed by an exec (``exec``)."""

    __slots__ = ("exec", "name", "pid", "tid")

    def __init__(self, pid: int, tid: int, name: str, *, exec: bool) -> None:
        self.pid = pid
        self.tid = tid
        self.name = name
        self.exec = exec


class Task:
    """PERF_RECORD_FORK or EXIT: a thread or process began or ended."""

    __slots__ = ("exit", "pid", "ppid", "ptid", "tid", "time")

    def __init__(self, pid: int, ppid: int, tid: int, ptid: int, time: int, *, exit: bool) -> None:
        self.pid = pid
        self.ppid = ppid
        self.tid = tid
        self.ptid = ptid
        self.time = time
        self.exit = exit


class Lost:
    """PERF_RECORD_LOST: samples the kernel dropped (the ring buffer was full)."""

    __slots__ = ("id", "lost")

    def __init__(self, id: int, lost: int) -> None:
        self.id = id
        self.lost = lost


class Other:
    """A record of a type not decoded here, kept as its type and size."""

    __slots__ = ("size", "type")

    def __init__(self, type: int, size: int) -> None:
        self.type = type
        self.size = size


Record = Sample | Mmap | Comm | Task | Lost | Other


def decode(attr: EventAttr, data: bytes | memoryview, offset: int = 0) -> tuple[Record, int]:
    """The record at ``offset`` of ``data`` and its size (where the next one starts).

    The header's size must cover the header, and the record must lie whole
    in ``data``; a body shorter than its fields say is a FormatError (whose
    message does not repeat the offset: the caller knows where it read).
    """
    if offset + HEADER.size > len(data):
        raise FormatError("perf record header is cut short")
    kind, misc, size = HEADER.unpack_from(data, offset)
    if size < HEADER.size:
        raise FormatError(f"perf record says it is {size} bytes")
    if offset + size > len(data):
        raise FormatError(f"perf record of {size} bytes is cut short")
    body = memoryview(data)[offset + HEADER.size : offset + size]
    decoder = _DECODERS.get(kind)
    if decoder is None:
        return Other(kind, size), size
    return decoder(attr, misc, body), size


def record_time(attr: EventAttr, kind: int, data: bytes | memoryview, offset: int) -> int | None:
    """The time of the record at ``offset`` (its header's ``kind`` already read), if it says.

    A sample's is among its first fields; another kernel record's is in its
    ``sample_id`` trailer (``sample_id_all``).  Enough to order records
    without decoding them.
    """
    sample_type = attr.sample_type
    if not sample_type & SAMPLE_TIME:
        return None
    size = _U32.unpack_from(data, offset + 4)[0] >> 16
    if kind == RECORD_SAMPLE:
        at = offset + HEADER.size
        at += 8 * bool(sample_type & SAMPLE_IDENTIFIER) + 8 * bool(sample_type & SAMPLE_IP)
        at += 8 * bool(sample_type & SAMPLE_TID)
    elif attr.sample_id_all and kind < RECORD_USER_TYPE_START and kind != RECORD_SAMPLE:
        at = offset + size - attr.id_trailer_size + 8 * bool(sample_type & SAMPLE_TID)
        if at < offset + HEADER.size:
            return None
    else:
        return None
    if at + 8 > offset + size:
        return None
    return int(_U64.unpack_from(data, at)[0])


class _Cursor:
    """Reads fields off a record body, each checked against its end."""

    __slots__ = ("body", "position")

    def __init__(self, body: memoryview) -> None:
        self.body = body
        self.position = 0

    def take(self, size: int, what: str) -> int:
        start = self.position
        if size < 0 or start + size > len(self.body):
            raise FormatError(f"perf sample is cut short in its {what}")
        self.position = start + size
        return start

    def u64(self, what: str) -> int:
        return int(_U64.unpack_from(self.body, self.take(8, what))[0])


class _SamplePrefix:
    """A sample layout's fields before its registers in one struct, for :func:`decode_sample`.

    Read field by field (:class:`_Cursor`), the 10,708 samples of a
    bench/perfdata.py recording took 0.038 s of CPU to decode, and every
    worker of ``liveunwind perf`` decodes them all; in one unpack, the Sample
    made without its ``__init__``, 0.020 s.  Only for layouts whose fields
    before the registers are fixed but for a callchain (``perf record
    --call-graph dwarf``'s); the others, and every error, go field by field.
    """

    __slots__ = ("callchain", "fields", "pick")

    def __init__(self, fields: struct.Struct, names: list[str], *, callchain: bool) -> None:
        self.fields = fields
        #: (ip, pid, tid, time, cpu, period) of the struct's values followed by _UNSAID.
        self.pick = operator.itemgetter(
            *(names.index(name) if name in names else len(names) + index
              for index, name in enumerate(_PICKED))
        )  # fmt: skip
        #: A callchain (its count, then that many words) follows the fixed fields.
        self.callchain = callchain


#: The fields a prefix gives, and what a sample whose layout does not have one says of it.
_PICKED = ("ip", "pid", "tid", "time", "cpu", "period")
_UNSAID = (0, -1, -1, 0, -1, 1)


def _sample_prefix(sample_type: int, read_format: int) -> _SamplePrefix | None:
    """The prefix of samples of this layout, None where a field before the registers
    has a size of its own (raw data, a branch stack, a read group)."""
    if sample_type & (SAMPLE_RAW | SAMPLE_BRANCH_STACK) or (
        sample_type & SAMPLE_READ and read_format & READ_GROUP
    ):
        return None
    layout = "<"
    names: list[str] = []
    for bit, fields, named in (
        (SAMPLE_IDENTIFIER, "8x", ()),
        (SAMPLE_IP, "Q", ("ip",)),
        (SAMPLE_TID, "II", ("pid", "tid")),
        (SAMPLE_TIME, "Q", ("time",)),
        (SAMPLE_ADDR, "8x", ()),
        (SAMPLE_ID, "8x", ()),
        (SAMPLE_STREAM_ID, "8x", ()),
        (SAMPLE_CPU, "I4x", ("cpu",)),
        (SAMPLE_PERIOD, "Q", ("period",)),
    ):
        if sample_type & bit:
            layout += fields
            names.extend(named)
    if sample_type & SAMPLE_READ:
        layout += f"{_read_values_size(read_format, 1)}x"
    return _SamplePrefix(
        struct.Struct(layout), names, callchain=bool(sample_type & SAMPLE_CALLCHAIN)
    )


def decode_sample(attr: EventAttr, misc: int, body: memoryview) -> Sample:
    """A sample by its layout's prefix where that layout has one and the record holds every
    field whole; else (and for every error's message) field by field."""
    prefix = attr._prefix
    if prefix is None:
        return _decode_sample_by_field(attr, misc, body)
    end = len(body)
    at = prefix.fields.size
    if at > end:
        return _decode_sample_by_field(attr, misc, body)
    sample = _new_sample(Sample)
    sample.misc = misc
    sample.ip, sample.pid, sample.tid, sample.time, sample.cpu, sample.period = prefix.pick(
        prefix.fields.unpack_from(body) + _UNSAID
    )
    sample.abi, sample.registers, sample.stack, sample.dyn_size = REGS_ABI_NONE, (), b"", 0
    if prefix.callchain:
        if at + 8 > end:
            return _decode_sample_by_field(attr, misc, body)
        at += 8 + 8 * _U64.unpack_from(body, at)[0]
        if at > end:
            return _decode_sample_by_field(attr, misc, body)
    sample_type = attr.sample_type
    if sample_type & SAMPLE_REGS_USER:
        if at + 8 > end:
            return _decode_sample_by_field(attr, misc, body)
        sample.abi = _U64.unpack_from(body, at)[0]
        at += 8
        if sample.abi != REGS_ABI_NONE:
            regs = attr._regs
            if at + regs.size > end:
                return _decode_sample_by_field(attr, misc, body)
            sample.registers = regs.unpack_from(body, at)
            at += regs.size
    if sample_type & SAMPLE_STACK_USER:
        if at + 8 > end:
            return _decode_sample_by_field(attr, misc, body)
        size = _U64.unpack_from(body, at)[0]
        at += 8
        if size:
            if at + size + 8 > end:
                return _decode_sample_by_field(attr, misc, body)
            dyn_size = _U64.unpack_from(body, at + size)[0]
            if dyn_size > size:
                return _decode_sample_by_field(attr, misc, body)
            sample.dyn_size = dyn_size
            sample.stack = body[at : at + dyn_size]
    return sample


#: A Sample without its ``__init__``: :func:`decode_sample` sets every slot itself.
_new_sample = object.__new__


def _decode_sample_by_field(attr: EventAttr, misc: int, body: memoryview) -> Sample:
    sample = Sample()
    sample.misc = misc
    cursor = _Cursor(body)
    sample_type = attr.sample_type
    if sample_type & SAMPLE_IDENTIFIER:
        cursor.take(8, "identifier")
    if sample_type & SAMPLE_IP:
        sample.ip = cursor.u64("ip")
    if sample_type & SAMPLE_TID:
        sample.pid, sample.tid = _TWO_U32.unpack_from(body, cursor.take(8, "pid and tid"))
    if sample_type & SAMPLE_TIME:
        sample.time = cursor.u64("time")
    if sample_type & SAMPLE_ADDR:
        cursor.take(8, "address")
    if sample_type & SAMPLE_ID:
        cursor.take(8, "id")
    if sample_type & SAMPLE_STREAM_ID:
        cursor.take(8, "stream id")
    if sample_type & SAMPLE_CPU:
        sample.cpu = _U32.unpack_from(body, cursor.take(8, "cpu"))[0]
    if sample_type & SAMPLE_PERIOD:
        sample.period = cursor.u64("period")
    if sample_type & SAMPLE_READ:
        cursor.take(_read_size(attr.read_format, cursor), "read values")
    if sample_type & SAMPLE_CALLCHAIN:
        count = cursor.u64("callchain")
        cursor.take(8 * min(count, len(body)), "callchain")
    if sample_type & SAMPLE_RAW:
        raw = _U32.unpack_from(body, cursor.take(4, "raw data"))[0]
        cursor.take(raw, "raw data")
    if sample_type & SAMPLE_BRANCH_STACK:
        count = cursor.u64("branch stack")
        if attr.branch_sample_type & BRANCH_HW_INDEX:
            cursor.take(8, "branch stack")
        cursor.take(24 * min(count, len(body)), "branch stack")
    if sample_type & SAMPLE_REGS_USER:
        sample.abi = cursor.u64("register ABI")
        if sample.abi != REGS_ABI_NONE:
            regs = attr._regs
            sample.registers = regs.unpack_from(body, cursor.take(regs.size, "registers"))
    if sample_type & SAMPLE_STACK_USER:
        size = cursor.u64("stack size")
        if size:
            start = cursor.take(size, "stack copy")
            dyn_size = cursor.u64("stack's dyn_size")
            if dyn_size > size:
                raise FormatError(f"perf sample's stack dyn_size {dyn_size} exceeds its {size}")
            sample.dyn_size = dyn_size
            sample.stack = body[start : start + dyn_size]
    return sample


def _read_size(read_format: int, cursor: _Cursor) -> int:
    """Bytes of a sample's ``read_format`` values (a group's count read off the body)."""
    if not read_format & READ_GROUP:
        return _read_values_size(read_format, 1)
    count = cursor.u64("read group")
    return _read_values_size(read_format, min(count, len(cursor.body)))


def _read_values_size(read_format: int, count: int) -> int:
    """Bytes of ``count`` values of ``read_format`` and the times they share."""
    times = 8 * (
        bool(read_format & READ_TOTAL_TIME_ENABLED) + bool(read_format & READ_TOTAL_TIME_RUNNING)
    )
    per_value = 8 * (1 + bool(read_format & READ_ID) + bool(read_format & READ_LOST))
    return times + per_value * count


def _text(raw: memoryview) -> str:
    """A NUL-padded string field."""
    return bytes(raw).split(b"\0", 1)[0].decode("utf-8", "surrogateescape")


def _without_trailer(attr: EventAttr, body: memoryview, fixed: int, what: str) -> memoryview:
    """The body less its ``sample_id`` trailer, checked to hold ``fixed`` bytes of fields."""
    end = len(body) - attr.id_trailer_size
    if end < fixed:
        raise FormatError(f"perf {what} record of {len(body)} bytes is too short")
    return body[:end]


def _decode_mmap(attr: EventAttr, misc: int, body: memoryview) -> Mmap:
    body = _without_trailer(attr, body, _MMAP.size, "MMAP")
    pid, tid, start, length, pgoff = _MMAP.unpack_from(body)
    return Mmap(
        pid,
        tid,
        start,
        length,
        pgoff,
        _text(body[_MMAP.size :]),
        executable=not misc & MISC_MMAP_DATA,
    )


_MMAP2_FIXED = _MMAP.size + _MMAP2_INODE.size + _MMAP2_TAIL.size


def _decode_mmap2(attr: EventAttr, misc: int, body: memoryview) -> Mmap:
    body = _without_trailer(attr, body, _MMAP2_FIXED, "MMAP2")
    pid, tid, start, length, pgoff = _MMAP.unpack_from(body)
    prot, _flags = _MMAP2_TAIL.unpack_from(body, _MMAP.size + _MMAP2_INODE.size)
    inode, build_id = 0, None
    if misc & MISC_MMAP_BUILD_ID:
        at = _MMAP.size
        size = body[at]
        if size > 20:
            raise FormatError(f"perf MMAP2 record's build-id is {size} bytes (at most 20)")
        build_id = bytes(body[at + 4 : at + 4 + size])
    else:
        inode = _MMAP2_INODE.unpack_from(body, _MMAP.size)[2]
    return Mmap(
        pid,
        tid,
        start,
        length,
        pgoff,
        _text(body[_MMAP2_FIXED:]),
        executable=bool(prot & 4),  # PROT_EXEC
        inode=inode,
        prot=prot,
        build_id=build_id,
    )


def _decode_comm(attr: EventAttr, misc: int, body: memoryview) -> Comm:
    body = _without_trailer(attr, body, 8, "COMM")
    pid, tid = _TWO_U32.unpack_from(body)
    return Comm(pid, tid, _text(body[8:]), exec=bool(misc & MISC_COMM_EXEC))


def _decode_task(attr: EventAttr, misc: int, body: memoryview, *, exit: bool) -> Task:
    body = _without_trailer(attr, body, _TASK.size, "EXIT" if exit else "FORK")
    return Task(*_TASK.unpack_from(body), exit=exit)


def _decode_lost(attr: EventAttr, misc: int, body: memoryview) -> Lost:
    body = _without_trailer(attr, body, _LOST.size, "LOST")
    return Lost(*_LOST.unpack_from(body))


def _decode_fork(attr: EventAttr, misc: int, body: memoryview) -> Task:
    return _decode_task(attr, misc, body, exit=False)


def _decode_exit(attr: EventAttr, misc: int, body: memoryview) -> Task:
    return _decode_task(attr, misc, body, exit=True)


_DECODERS: dict[int, Callable[[EventAttr, int, memoryview], Record]] = {
    RECORD_SAMPLE: decode_sample,
    RECORD_MMAP: _decode_mmap,
    RECORD_MMAP2: _decode_mmap2,
    RECORD_COMM: _decode_comm,
    RECORD_FORK: _decode_fork,
    RECORD_EXIT: _decode_exit,
    RECORD_LOST: _decode_lost,
}
