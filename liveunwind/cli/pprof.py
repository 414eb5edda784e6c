"""``--pprof FILE``: a profile as pprof's ``profile.proto``, gzipped, for pprof and fleets.

What the file holds (field numbers from pprof's ``proto/profile.proto``):

- two sample types: ``samples``/``count``, the samples a stack was seen
  in (the default type), and ``cpu``/``nanoseconds``, the kernel's CPU
  time of the stack's thread (psutil, start to end) shared among the
  thread's stacks in proportion to the samples in which the thread was
  running (state R).  The second is an estimate: the kernel counts CPU
  per thread, not per stack; a thread whose CPU is unknown (it ended
  first) or that was never seen running adds none.
- one sample per (thread, stack), its locations innermost first, labelled
  ``thread`` with the thread's label (its name, or ``name-tid`` with
  ``--per-thread``): the thread is a label, not a frame, so that
  ``go tool pprof -top`` counts functions over every thread, and
  ``-tagfocus thread=NAME`` picks one.
- one location per frame name, at the pc the name was first seen at (the
  profile counts by name: see :class:`~liveunwind.backtrace.profile.FrameSite`),
  in the mapping of its module, with one line: its function and, with
  ``--lines`` (and for Python frames, whose lines are always read), its
  line.  Inlined calls and Python frames are locations of their own at
  their native frame's pc, as they are levels of their own in the folded
  stacks.
- functions by (name, file), their system name the same as their name
  (the symbolizer keeps only the demangled name), none for Python
  functions; a frame without a symbol keeps the name the folded stacks
  give it (``module+0xoffset``, or its pc).
- one mapping per module kept frames are in: start, limit, file offset,
  path and build-id, marked as already symbolized (so pprof does not try
  to symbolize it again).
- period ``wall``/``nanoseconds`` of one sampling period (the asked rate:
  the samples are taken on the wall clock), the start time and the duration,
  and comments: the process and what was folded or left out.

Written by hand, not with the ``protobuf`` package: the wire format needs
varints and length-delimited fields only, about a hundred lines here,
while protobuf 7.36 is a 343 KB wheel (2.7 MB installed) whose
``descriptor_pb2`` takes 31–43 ms to import (``-X importtime``, measured
2026-11-26), plus a compiled ``profile_pb2`` to vendor.  Nothing is read
back; ``go tool pprof`` is the oracle in tests/system/test_profile_formats.py.
"""

from __future__ import annotations

from collections import Counter

TYPE_CHECKING = False
if TYPE_CHECKING:
    from liveunwind.backtrace.profile import FrameSite, ModuleSite, Profile, ThreadProfile

# profile.proto's fields, by message.
_PROFILE_SAMPLE_TYPE = 1
_PROFILE_SAMPLE = 2
_PROFILE_MAPPING = 3
_PROFILE_LOCATION = 4
_PROFILE_FUNCTION = 5
_PROFILE_STRING_TABLE = 6
_PROFILE_TIME_NANOS = 9
_PROFILE_DURATION_NANOS = 10
_PROFILE_PERIOD_TYPE = 11
_PROFILE_PERIOD = 12
_PROFILE_COMMENT = 13
_PROFILE_DEFAULT_SAMPLE_TYPE = 14
_VALUE_TYPE_TYPE = 1
_VALUE_TYPE_UNIT = 2
_SAMPLE_LOCATION_ID = 1
_SAMPLE_VALUE = 2
_SAMPLE_LABEL = 3
_LABEL_KEY = 1
_LABEL_STR = 2
_MAPPING_ID = 1
_MAPPING_MEMORY_START = 2
_MAPPING_MEMORY_LIMIT = 3
_MAPPING_FILE_OFFSET = 4
_MAPPING_FILENAME = 5
_MAPPING_BUILD_ID = 6
_MAPPING_HAS_FUNCTIONS = 7
_MAPPING_HAS_FILENAMES = 8
_MAPPING_HAS_LINE_NUMBERS = 9
_MAPPING_HAS_INLINE_FRAMES = 10
_LOCATION_ID = 1
_LOCATION_MAPPING_ID = 2
_LOCATION_ADDRESS = 3
_LOCATION_LINE = 4
_LINE_FUNCTION_ID = 1
_LINE_LINE = 2
_FUNCTION_ID = 1
_FUNCTION_NAME = 2
_FUNCTION_SYSTEM_NAME = 3
_FUNCTION_FILENAME = 4

_VARINT = 0
_LENGTH_DELIMITED = 2


def _varint(value: int) -> bytes:
    """``value`` as a protobuf varint (a negative int64 as its two's complement, 10 bytes)."""
    if 0 <= value < 0x80:
        return _SMALL[value]
    value &= (1 << 64) - 1
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_SMALL = [bytes((value,)) for value in range(0x80)]


#: Each field's key (field number and wire type), by field number: every field is below 16.
_VARINT_KEYS = [bytes((field << 3 | _VARINT,)) for field in range(16)]
_LENGTH_DELIMITED_KEYS = [bytes((field << 3 | _LENGTH_DELIMITED,)) for field in range(16)]


def _number(field: int, value: int) -> bytes:
    """A varint field; zero is left out, as proto3 leaves out defaults."""
    return _VARINT_KEYS[field] + _varint(value) if value else b""


def _bytes(field: int, data: bytes) -> bytes:
    return _LENGTH_DELIMITED_KEYS[field] + _varint(len(data)) + data


def _packed(field: int, values: list[int]) -> bytes:
    return _bytes(field, b"".join(_varint(value) for value in values)) if values else b""


class _Strings:
    """pprof's string table: each string once, referred to by index; "" is index 0."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {"": 0}

    def __call__(self, text: str) -> int:
        return self.index.setdefault(text, len(self.index))

    def encode(self) -> bytes:
        return b"".join(
            _bytes(_PROFILE_STRING_TABLE, text.encode("utf-8", "replace")) for text in self.index
        )


def _value_type(strings: _Strings, kind: str, unit: str) -> bytes:
    return _number(_VALUE_TYPE_TYPE, strings(kind)) + _number(_VALUE_TYPE_UNIT, strings(unit))


class _Builder:
    """The profile's tables, filled as the samples name their locations."""

    def __init__(self, profile: Profile, lines: bool) -> None:
        self.profile = profile
        self.lines = lines
        self.strings = _Strings()
        #: Frame name → its location's id, as a varint (what samples hold).
        self.locations: dict[str, bytes] = {}
        self.functions: dict[tuple[str, str], int] = {}
        self.mappings: dict[int, int] = {}  # id(ModuleSite) → mapping id
        self.location_bytes = bytearray()
        self.function_bytes = bytearray()
        self.mapping_bytes = bytearray()

    def location(self, name: str) -> bytes:
        """The id of the name's location as a varint; the location is written the first time."""
        found = self.locations.get(name)
        if found is not None:
            return found
        number = len(self.locations) + 1
        self.locations[name] = _varint(number)
        site = self.profile.sites.get(name)  # none for OVERFLOW's name
        line = _number(_LINE_FUNCTION_ID, self.function(name, site))
        if site is not None and site.line:  # --lines, and Python frames
            line += _number(_LINE_LINE, site.line)
        message = _number(_LOCATION_ID, number)
        if site is not None:
            if site.module is not None:
                message += _number(_LOCATION_MAPPING_ID, self.mapping(site.module))
            message += _number(_LOCATION_ADDRESS, site.pc)
        message += _bytes(_LOCATION_LINE, line)
        self.location_bytes += _bytes(_PROFILE_LOCATION, message)
        return self.locations[name]

    def function(self, name: str, site: FrameSite | None) -> int:
        function = site.function if site is not None else name
        file = (site.file or "") if site is not None else ""
        # A Python function has no symbol: no system name.  pprof takes a
        # system name for a linker's and simplifies it (``<module>`` would
        # lose its brackets and so its name) unless it differs from the name.
        system = "" if site is not None and site.python else function
        found = self.functions.get((function, file))
        if found is not None:
            return found
        number = self.functions[function, file] = len(self.functions) + 1
        strings = self.strings
        self.function_bytes += _bytes(
            _PROFILE_FUNCTION,
            _number(_FUNCTION_ID, number)
            + _number(_FUNCTION_NAME, strings(function))
            + _number(_FUNCTION_SYSTEM_NAME, strings(system))
            + _number(_FUNCTION_FILENAME, strings(file)),
        )
        return number

    def mapping(self, module: ModuleSite) -> int:
        found = self.mappings.get(id(module))
        if found is not None:
            return found
        number = self.mappings[id(module)] = len(self.mappings) + 1
        strings = self.strings
        self.mapping_bytes += _bytes(
            _PROFILE_MAPPING,
            _number(_MAPPING_ID, number)
            + _number(_MAPPING_MEMORY_START, module.start)
            + _number(_MAPPING_MEMORY_LIMIT, module.end)
            + _number(_MAPPING_FILE_OFFSET, module.file_offset)
            + _number(_MAPPING_FILENAME, strings(module.path))
            + _number(_MAPPING_BUILD_ID, strings(module.build_id))
            + _number(_MAPPING_HAS_FUNCTIONS, 1)
            + _number(_MAPPING_HAS_FILENAMES, self.lines)
            + _number(_MAPPING_HAS_LINE_NUMBERS, self.lines)
            + _number(_MAPPING_HAS_INLINE_FRAMES, self.lines),
        )
        return number

    def samples(self, thread: ThreadProfile) -> bytes:
        """The thread's samples, one per stack: [samples, estimated CPU nanoseconds]."""
        cpu = _cpu_nanoseconds(thread, self.profile.duration)
        label = _bytes(
            _SAMPLE_LABEL,
            _number(_LABEL_KEY, self.strings("thread"))
            + _number(_LABEL_STR, self.strings(thread.label)),
        )
        out = bytearray()
        for stack, count in sorted(thread.stacks.items()):
            share = round(cpu * thread.running_stacks.get(stack, 0) / thread.running) if cpu else 0
            known = self.locations.get
            locations = b"".join([known(name) or self.location(name) for name in reversed(stack)])
            out += _bytes(
                _PROFILE_SAMPLE,
                _bytes(_SAMPLE_LOCATION_ID, locations)
                + _packed(_SAMPLE_VALUE, [count, share])
                + label,
            )
        return bytes(out)


def _program_module(profile: Profile) -> ModuleSite | None:
    """The program's own module: where most of the main thread's walks begin (``_start``).

    pprof takes the first mapping for the profiled program (``go tool
    pprof``'s "File:", a fleet service's binary name); without this it would
    be whichever module the first stack written touched first (ld.so, libc).
    """
    outermost: Counter[int] = Counter()
    modules: dict[int, ModuleSite] = {}
    for thread in profile.threads.values():
        if thread.name != profile.main_name:
            continue
        for stack, count in thread.stacks.items():
            site = profile.sites.get(stack[0]) if stack else None
            if site is not None and site.module is not None:
                modules[id(site.module)] = site.module
                outermost[id(site.module)] += count
    if not outermost:
        return None
    return modules[outermost.most_common(1)[0][0]]


def _cpu_nanoseconds(thread: ThreadProfile, duration: float) -> int:
    """The thread's CPU time over the profile, or 0 when unknown or never seen running."""
    if thread.cpu_percent is None or not thread.running:
        return 0
    return round(thread.cpu_percent / 100.0 * duration * 1e9)


def encode(profile: Profile, *, lines: bool = False, comments: tuple[str, ...] = ()) -> bytes:
    """The profile as a serialized ``Profile`` message (not yet gzipped)."""
    builder = _Builder(profile, lines)
    strings = builder.strings
    program = _program_module(profile)
    if program is not None:
        builder.mapping(program)  # mapping 1: what pprof names as the profile's program
    samples = b"".join(builder.samples(thread) for thread in profile.by_cpu())
    head = _bytes(_PROFILE_SAMPLE_TYPE, _value_type(strings, "samples", "count")) + _bytes(
        _PROFILE_SAMPLE_TYPE, _value_type(strings, "cpu", "nanoseconds")
    )
    tail = (
        _number(_PROFILE_TIME_NANOS, round(profile.started_at * 1e9))
        + _number(_PROFILE_DURATION_NANOS, round(profile.duration * 1e9))
        + _bytes(_PROFILE_PERIOD_TYPE, _value_type(strings, "wall", "nanoseconds"))
        + _number(_PROFILE_PERIOD, round(1e9 / profile.rate_asked))
        + b"".join(_number(_PROFILE_COMMENT, strings(comment)) for comment in comments)
        + _number(_PROFILE_DEFAULT_SAMPLE_TYPE, strings("samples"))
    )
    return b"".join(
        (
            head,
            samples,
            bytes(builder.mapping_bytes),
            bytes(builder.location_bytes),
            bytes(builder.function_bytes),
            strings.encode(),  # last: every string above is in it by now
            tail,
        )
    )


def render(profile: Profile, *, lines: bool = False, comments: tuple[str, ...] = ()) -> bytes:
    """The gzipped file ``--pprof`` writes."""
    import gzip

    # mtime 0: the same profile gives the same bytes (the time is inside).
    # Level 1, not gzip's 9: at the bounds (49,000 stacks of 20 frames, 7.2 MB
    # encoded) 1 took 0.03 s for 1.39 MB, 6 0.29 s for 1.51 MB, 9 2.3 s for 1.50 MB.
    return gzip.compress(encode(profile, lines=lines, comments=comments), 1, mtime=0)
