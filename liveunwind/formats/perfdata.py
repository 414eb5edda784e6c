"""perf.data's file structure: bytes in, records out.

A ``perf record`` file (``tools/perf/Documentation/perf.data-file-format.txt``)
starts with a header: the ``PERFILE2`` magic, where the attr section and the
data section lie, and a bit map of the feature sections that follow the
data.  The attr section holds one ``perf_file_attr`` per event (its
``perf_event_attr`` and where its sample ids are); the data section the
event records (:mod:`liveunwind.formats.perfevents`); among the features,
HEADER_BUILD_ID names the build-id of every file samples fell in, and
HEADER_ARCH the machine (``uname -m``).  Pipe-mode files (``perf record -o -``,
magic and a 16-byte header, attrs as records) are recognised and refused.
Every offset and size is checked against the file's size before use.
"""

from __future__ import annotations

import struct

from liveunwind.errors import FormatError
from liveunwind.formats.perfevents import HEADER, EventAttr

MAGIC = b"PERFILE2"
#: What the header of a pipe (``perf record -o -``) says its size is.
PIPE_HEADER_SIZE = 16
_FILE_HEADER = struct.Struct("<8sQQ QQ QQ QQ 32s")  # magic size attr_size attrs data event_types
_SECTION = struct.Struct("<QQ")
#: Feature bits (tools/perf/util/header.h), in file order.
FEATURE_BUILD_ID = 2
FEATURE_HOSTNAME = 3
FEATURE_OSRELEASE = 4
FEATURE_ARCH = 6
FEATURE_CMDLINE = 11
_FEATURE_BITS = 256
#: Events a file may describe (perf allows a few hundred at most in practice).
MAX_ATTRS = 4096
#: Largest feature section decoded (the build-id list of a big system is a few MB).
MAX_FEATURE = 64 << 20
#: ``build_id_event.header.misc``: the build-id's size is in the record.
_MISC_BUILD_ID_SIZE = 1 << 15
_BUILD_ID_EVENT = struct.Struct("<i20sB3x")  # pid, build_id[20], size (PERF_ALIGN(20, 8) = 24)


class Section:
    """Where a part of the file lies: offset and size, checked against the file."""

    __slots__ = ("offset", "size")

    def __init__(self, offset: int, size: int) -> None:
        self.offset = offset
        self.size = size

    @property
    def end(self) -> int:
        return self.offset + self.size


class FileHeader:
    """perf.data's header: its sections and the features it has."""

    __slots__ = ("attr_size", "attrs", "data", "data_cut", "features")

    def __init__(
        self,
        attr_size: int,
        attrs: Section,
        data: Section,
        features: list[int],
        *,
        data_cut: bool = False,
    ) -> None:
        self.attr_size = attr_size
        #: The file ends inside the data section: ``data`` is what is there of it.
        self.data_cut = data_cut
        self.attrs = attrs
        self.data = data
        #: The feature bits set, in order: their sections follow the data in that order.
        self.features = features

    @property
    def feature_table(self) -> Section:
        """The table of the feature sections: one (offset, size) per set feature bit."""
        return Section(self.data.end, _SECTION.size * len(self.features))


def read_header(data: bytes, file_size: int) -> FileHeader:
    """Decodes the header at the start of a perf.data file of ``file_size`` bytes."""
    if len(data) < 16 or data[:8] != MAGIC:
        if data[:8] == MAGIC[::-1]:
            raise FormatError("a big-endian perf.data file (only little-endian is read)")
        raise FormatError("not a perf.data file (no PERFILE2 magic)")
    size = struct.unpack_from("<Q", data, 8)[0]
    if size == PIPE_HEADER_SIZE:
        raise FormatError(
            "a pipe-mode perf.data (perf record -o -): not read; record to a file, "
            "or convert it with perf inject -i IN -o OUT"
        )
    if len(data) < _FILE_HEADER.size:
        raise FormatError(
            f"the file is {len(data)} bytes, shorter than perf.data's header: it is truncated"
        )
    if size < _FILE_HEADER.size:
        raise FormatError(f"perf.data header of {size} bytes is too short")
    (_magic, _size, attr_size, attrs_at, attrs_size, data_at, data_size, _et, _ets, bits) = (
        _FILE_HEADER.unpack_from(data)
    )
    attrs = _checked(Section(attrs_at, attrs_size), file_size, "attr section")
    if data_size == 0:
        raise FormatError(
            "its data section is empty: nothing was recorded, or perf record did not finish "
            "the file (it writes the header last)"
        )
    body = Section(data_at, data_size)
    cut = body.end > file_size
    if cut:  # a file cut short: what is there is read, and said to be cut
        body = _checked(Section(data_at, max(file_size - data_at, 0)), file_size, "data section")
    if attr_size < _SECTION.size + 64 or attr_size > 4096:
        raise FormatError(f"perf.data attr entries of {attr_size} bytes: not a perf_file_attr")
    if attrs.size % attr_size or attrs.size // attr_size > MAX_ATTRS:
        raise FormatError(f"perf.data attr section of {attrs.size} bytes is not whole entries")
    if attrs.size == 0:
        raise FormatError("perf.data has no events (an empty attr section)")
    mask = int.from_bytes(bits, "little")
    features = [bit for bit in range(_FEATURE_BITS) if mask >> bit & 1]
    return FileHeader(attr_size, attrs, body, features, data_cut=cut)


def _checked(section: Section, file_size: int, what: str) -> Section:
    if section.end > file_size:
        raise FormatError(
            f"perf.data's {what} ({section.offset:#x}+{section.size:#x}) runs past the end "
            f"of the file ({file_size} bytes): it is truncated"
        )
    return section


class FileAttr:
    """One event of the file: its attr, and where its sample ids are listed."""

    __slots__ = ("attr", "ids")

    def __init__(self, attr: EventAttr, ids: Section) -> None:
        self.attr = attr
        self.ids = ids


def read_attrs(header: FileHeader, data: bytes, file_size: int) -> list[FileAttr]:
    """The attr section's entries (``data`` is the section's bytes)."""
    step = header.attr_size
    found = []
    for at in range(0, len(data) - step + 1, step):
        entry = data[at : at + step]
        attr = EventAttr.from_bytes(entry[: step - _SECTION.size])
        where = Section(*_SECTION.unpack_from(entry, step - _SECTION.size))
        ids = _checked(where, file_size, "ids")
        found.append(FileAttr(attr, ids))
    return found


def feature_sections(header: FileHeader, table: bytes, file_size: int) -> dict[int, Section]:
    """Feature bit → its section, from the table after the data (``table``: its bytes)."""
    if len(table) < header.feature_table.size:
        raise FormatError("perf.data's feature table is cut short: the file is truncated")
    sections = {}
    for index, bit in enumerate(header.features):
        offset, size = _SECTION.unpack_from(table, index * _SECTION.size)
        if offset + size <= file_size and size <= MAX_FEATURE:
            sections[bit] = Section(offset, size)
    return sections


def read_string(data: bytes) -> str:
    """A feature's ``perf_header_string``: a length, then that many bytes, NUL-padded."""
    if len(data) < 4:
        raise FormatError("perf.data feature string is cut short")
    length = struct.unpack_from("<I", data)[0]
    if 4 + length > len(data):
        raise FormatError("perf.data feature string runs past its section")
    return data[4 : 4 + length].split(b"\0", 1)[0].decode("utf-8", "replace")


class BuildId:
    """A file's build-id as HEADER_BUILD_ID lists it: which process, which file."""

    __slots__ = ("build_id", "kernel", "path", "pid")

    def __init__(self, pid: int, build_id: bytes, path: str, *, kernel: bool) -> None:
        self.pid = pid
        self.build_id = build_id
        self.path = path
        #: The kernel's or a module's (misc's cpumode is the kernel's).
        self.kernel = kernel


def read_build_ids(data: bytes) -> list[BuildId]:
    """HEADER_BUILD_ID's ``build_id_event`` records (header, pid, build-id, file name)."""
    found = []
    at = 0
    fixed = HEADER.size + _BUILD_ID_EVENT.size
    while at + fixed <= len(data):
        _kind, misc, size = HEADER.unpack_from(data, at)
        if size < fixed or at + size > len(data):
            raise FormatError(f"perf.data build-id record at {at:#x} of {size} bytes is malformed")
        pid, raw, length = _BUILD_ID_EVENT.unpack_from(data, at + HEADER.size)
        if not misc & _MISC_BUILD_ID_SIZE:
            length = 20
        if length > 20:
            raise FormatError(f"perf.data build-id record says its id is {length} bytes")
        name = data[at + fixed : at + size].split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
        kernel = misc & 7 in (1, 3, 5)  # PERF_RECORD_MISC_KERNEL, _HYPERVISOR, _GUEST_KERNEL
        found.append(BuildId(pid, raw[:length], name, kernel=kernel))
        at += size
    return found
