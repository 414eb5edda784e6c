"""A perf.data file: its events, its features, and its records in time order.

Compressed records (``perf record -z``) are pieces of one zstd stream of
records, inflated as they come (each at most :data:`MAX_DECOMPRESSED`).
``perf record`` writes each CPU's ring buffer out in turn, so records are
in time order only within a ring; a FINISHED_ROUND record marks the end of a
pass over all rings.  As perf itself does, records are held back until a
round ends and then handed on in time order up to the newest time of the
round before (a later round never holds anything older), at most
:data:`MAX_PENDING` (and :data:`MAX_PENDING_BYTES` of stack copies) at
once.  The file is read through ``targets/files.py`` in chunks; every size
comes from the file and is checked against it.
"""

from __future__ import annotations

import heapq

from liveunwind.errors import FormatError, TargetError
from liveunwind.formats import perfdata, perfevents
from liveunwind.formats.perfevents import HEADER, RECORD_FINISHED_ROUND, RECORD_SAMPLE
from liveunwind.formats.zstd import StreamDecompressor
from liveunwind.targets.files import FileError, open_file

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator

    from liveunwind.formats.perfevents import EventAttr, Record
    from liveunwind.targets.files import RegularFile

#: Bytes of the data section read at once.  Small enough for malloc to keep reusing the
#: same memory (below its mmap threshold): each 8 MiB chunk was fresh pages, faulted in one by
#: one (the records of a 90 MB file: 26,600 page faults and 0.14 s of CPU; in 64 KiB chunks
#: 700 and 0.10 s), and every worker of ``liveunwind perf`` reads the whole file.
CHUNK = 64 << 10
#: Records held back for ordering, and the stack bytes of the samples among them; beyond
#: either the oldest go on without waiting for their round (a file without rounds).
MAX_PENDING = 200_000
MAX_PENDING_BYTES = 256 << 20
#: PERF_RECORD_COMPRESSED (perf record -z): a piece of one zstd stream of records.
RECORD_COMPRESSED = 81
#: Bytes one compressed record may inflate to (perf compresses its ring buffers' flushes:
#: at most their size, 512 KiB by default; -m can raise it).
MAX_DECOMPRESSED = 64 << 20


class PerfDataError(TargetError):
    """The file is not a perf.data this can read, or not one made for unwinding (exit 2)."""


class PerfDataFile:
    """An opened perf.data: its one sample layout, its features, its records."""

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            self._file: RegularFile = open_file(path)
        except FileError as error:
            raise PerfDataError(str(error)) from None
        try:
            self._read_structure()
        except FormatError as error:
            self._file.close()
            raise PerfDataError(f"{path}: {error}") from None
        #: What went wrong while reading the records (a corrupt or cut record ends them).
        self.problems: list[str] = []
        if self.header.data_cut:
            self.problems.append(
                f"{path}: the file ends inside its data section (it is truncated): "
                "the samples up to there are read"
            )
        #: Records of types not read (by type).
        self.skipped: dict[int, int] = {}
        #: perf record -z: the zstd stream of the compressed records, and what is left of
        #: a record its last piece began.
        self._stream: StreamDecompressor | None = None
        self._left_over = b""

    def _read_structure(self) -> None:
        size = self._file.size
        head = self._file.pread(4096, 0)
        self.header = perfdata.read_header(head, size)
        attrs = self.header.attrs
        entries = perfdata.read_attrs(self.header, self._file.pread(attrs.size, attrs.offset), size)
        layouts = {entry.attr.layout_key() for entry in entries}
        if len(layouts) > 1:
            raise FormatError(
                f"its {len(entries)} events have different sample layouts (not read: record "
                "one event, or events of the same sample type)"
            )
        #: The events' common layout (the first event's attr).
        self.attr: EventAttr = entries[0].attr
        self.events = len(entries)
        table = self.header.feature_table
        sections = {}
        if table.end <= size:
            raw = self._file.pread(table.size, table.offset)
            sections = perfdata.feature_sections(self.header, raw, size)
        #: HEADER_ARCH ("" when the file does not say).
        self.arch_name = self._string(sections.get(perfdata.FEATURE_ARCH))
        #: HEADER_HOSTNAME and HEADER_OSRELEASE: the machine and kernel it was recorded on.
        self.hostname = self._string(sections.get(perfdata.FEATURE_HOSTNAME))
        self.osrelease = self._string(sections.get(perfdata.FEATURE_OSRELEASE))
        self.cmdline = self._string(sections.get(perfdata.FEATURE_CMDLINE))
        #: HEADER_BUILD_ID's entries of user-space files.
        self.build_ids: list[perfdata.BuildId] = []
        section = sections.get(perfdata.FEATURE_BUILD_ID)
        if section is not None:
            found = perfdata.read_build_ids(self._file.pread(section.size, section.offset))
            self.build_ids = [entry for entry in found if not entry.kernel]

    def _string(self, section: perfdata.Section | None) -> str:
        if section is None:
            return ""
        try:
            return perfdata.read_string(self._file.pread(section.size, section.offset))
        except FormatError:
            return ""

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> PerfDataFile:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- records ------------------------------------------------------------------

    def records(self) -> Iterator[Record]:
        """Every record of the data section, in time order within what rounds allow.

        A record that is cut or corrupt ends the records; :attr:`problems` says where.
        """
        # Each pending record with its time, its place in the file and the bytes it holds.
        pending: list[tuple[int, int, Record, int]] = []
        push, pop = heapq.heappush, heapq.heappop
        sequence = held = 0  # held: the stack bytes the pending samples keep
        newest = 0  # the newest time seen since the last round ended
        flush_to = -1  # the newest time of the round before: all older may go
        for kind, time, record in self._raw_records():
            if kind == RECORD_FINISHED_ROUND:
                while pending and pending[0][0] <= flush_to:
                    _time, _sequence, record, size = pop(pending)
                    held -= size
                    yield record
                flush_to = newest
                continue
            if time is None:
                time = newest
            elif time > newest:
                newest = time
            size = _held(record)
            push(pending, (time, sequence, record, size))
            sequence += 1
            held += size
            while len(pending) > MAX_PENDING or held > MAX_PENDING_BYTES:
                _time, _sequence, record, size = pop(pending)
                held -= size
                yield record
        while pending:
            yield pop(pending)[2]

    def _raw_records(self) -> Iterator[tuple[int, int | None, Record]]:
        """(type, time, record) of each record in file order."""
        attr = self.attr
        data = self.header.data
        position, end = data.offset, data.end
        buffer: bytes = b""
        view = memoryview(buffer)
        at = 0
        header, header_size = HEADER.unpack_from, HEADER.size
        # A sample's time is its own field: one decoded at once says it (the 10,700 samples of
        # bench/perfdata.py: records() 0.061 -> 0.048 s of CPU, and every worker reads them).
        samples_timed = attr.sample_type & perfevents.SAMPLE_TIME
        decode_sample = perfevents.decode_sample
        while True:
            if at + header_size <= len(buffer):
                kind, misc, size = header(buffer, at)
                whole = at + max(size, header_size) <= len(buffer)
            else:
                whole = False
            if not whole:
                if position >= end:
                    break
                # The record begun is read again with the chunk after it: joining it to
                # that chunk copied every chunk once more (the 90 MB of 10,700 samples of
                # bench/perfdata.py: records() took 0.091 s of CPU, now 0.064 with the
                # one-struct sample decoding).
                left = len(buffer) - at
                chunk = self._file.pread(min(left + CHUNK, end - position + left), position - left)
                if len(chunk) <= left:
                    self.problems.append(f"{self.path}: cut short at offset {position:#x}")
                    return
                position += len(chunk) - left
                buffer = chunk
                view = memoryview(buffer)
                at = 0
                continue
            if kind == RECORD_SAMPLE and samples_timed and size >= header_size:
                try:
                    sample = decode_sample(attr, misc, view[at + header_size : at + size])
                except FormatError:
                    pass  # said as any corrupt record is, below
                else:
                    at += size
                    yield kind, sample.time, sample
                    continue
            try:
                time = perfevents.record_time(attr, kind, buffer, at)
                record, size = perfevents.decode(attr, buffer, at)
            except FormatError as error:
                offset = position - len(buffer) + at
                self.problems.append(
                    f"{self.path}: corrupt record at offset {offset:#x} ({error}); "
                    "the records after it are not read"
                )
                return
            if kind == RECORD_COMPRESSED:
                try:
                    yield from self._decompressed(buffer[at + HEADER.size : at + size])
                except FormatError as error:
                    self.problems.append(
                        f"{self.path}: compressed records: {error}; the records after are not read"
                    )
                    return
                at += size
                continue
            at += size
            if isinstance(record, perfevents.Other) and kind != RECORD_FINISHED_ROUND:
                self.skipped[kind] = self.skipped.get(kind, 0) + 1
                continue
            yield kind, time, record
        if at < len(buffer) and not self.header.data_cut:
            self.problems.append(
                f"{self.path}: the data section ends inside a record at offset "
                f"{end - (len(buffer) - at):#x}"
            )

    def _decompressed(self, piece: bytes) -> Iterator[tuple[int, int | None, Record]]:
        """The records in one PERF_RECORD_COMPRESSED's piece of the zstd stream (perf record -z).

        A record may begin in one piece and end in the next: what is left over
        waits for it.  FormatError for a corrupt stream or record.
        """
        if self._stream is None:
            self._stream = StreamDecompressor(f"{self.path}: compressed records")
        inner = self._left_over + self._stream.feed(piece, MAX_DECOMPRESSED)
        attr, at = self.attr, 0
        while at + HEADER.size <= len(inner) and at + _size_at(inner, at) <= len(inner):
            kind = int.from_bytes(inner[at : at + 4], "little")
            time = perfevents.record_time(attr, kind, inner, at)
            record, size = perfevents.decode(attr, inner, at)
            at += size
            if isinstance(record, perfevents.Other) and kind != RECORD_FINISHED_ROUND:
                self.skipped[kind] = self.skipped.get(kind, 0) + 1
                continue
            yield kind, time, record
        self._left_over = inner[at:]


def _held(record: Record) -> int:
    """Bytes a pending record keeps: a sample's stack copy."""
    return record.dyn_size if isinstance(record, perfevents.Sample) else 0


def _size_at(buffer: bytes, at: int) -> int:
    """The size field of the record header at ``at`` (at least the header's, to move on)."""
    size = int.from_bytes(buffer[at + 6 : at + 8], "little")
    return max(size, HEADER.size)
