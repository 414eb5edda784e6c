"""Where CPython keeps a Python backtrace's fields, per version: the layouts.

A CPython process keeps everything a Python backtrace needs in memory:
``_PyRuntime`` heads a list of interpreters, each heads a list of thread
states, and each thread state points at its innermost ``_PyInterpreterFrame``
(3.11+), whose ``previous`` pointers lead outwards.  A frame names its code
object and the instruction it is at; the code object names the function and
file and holds the table that maps instructions to line numbers.

Where each field lies depends on the version:

- 3.11 and 3.12 publish nothing, so their layouts are written down here,
  read off CPython's ``Include/internal`` headers (``pycore_runtime.h``,
  ``pycore_interp.h``, ``cpython/pystate.h``, ``pycore_frame.h``,
  ``cpython/code.h``, ``cpython/unicodeobject.h``).  Struct layouts do not
  change within a minor version (the ABI is frozen at its first release).
- 3.13 and later publish the offsets themselves: ``_PyRuntime`` starts with a
  ``_Py_DebugOffsets`` record (cookie ``xdebugpy``, the version, then one
  group of offsets per structure).  The record itself grows between minor
  versions (3.14 inserted fields mid-way), so its own layout is written down
  per minor version; an unknown one is refused rather than guessed.

Everything here is pure: bytes in, a :class:`Layout` out.  How the objects
at those offsets are unpacked is :mod:`liveunwind.cpython.objects`; the walk
that reads them from a target, :mod:`liveunwind.cpython.walk`.
"""

from __future__ import annotations

import struct

from liveunwind.errors import FormatError

_U64 = struct.Struct("<Q")

#: The first bytes of ``_Py_DebugOffsets``.
DEBUG_COOKIE = b"xdebugpy"
#: Largest structure size a layout may claim (PyInterpreterState is ~100 KiB in 3.13+).
MAX_STRUCT_SIZE = 1 << 20


def version_text(hex_version: int) -> str:
    """``0x030B02F0`` → ``3.11.2``; pre-releases keep their level (``3.13.0rc2``)."""
    major, minor, micro = hex_version >> 24, (hex_version >> 16) & 0xFF, (hex_version >> 8) & 0xFF
    level, serial = (hex_version >> 4) & 0xF, hex_version & 0xF
    suffix = {0xA: f"a{serial}", 0xB: f"b{serial}", 0xC: f"rc{serial}"}.get(level, "")
    return f"{major}.{minor}.{micro}{suffix}"


def minor_version(hex_version: int) -> tuple[int, int]:
    """(major, minor) of a ``PY_VERSION_HEX`` value."""
    return hex_version >> 24, (hex_version >> 16) & 0xFF


class Layout:
    """Where the fields a Python backtrace reads lie, for one CPython version.

    Offsets are in bytes from the start of their structure.  Fields a
    version does not have are None: ``cframe_current`` (3.13+ keep the frame
    in the thread state), ``frame_is_entry`` (3.12+ mark an eval call's start
    with an entry frame instead), ``code_firsttraceable`` (not published by
    ``_Py_DebugOffsets``).
    """

    __slots__ = (
        "ascii_length",
        "ascii_size",
        "ascii_state",
        "bytes_size",
        "bytes_sval",
        "cframe_current",
        "cframe_previous",
        "code_adaptive",
        "code_filename",
        "code_firstlineno",
        "code_firsttraceable",
        "code_flags",
        "code_linetable",
        "code_localsplusnames",
        "code_localspluskinds",
        "code_name",
        "code_qualname",
        "compact_size",
        "entry_owner",
        "executable_tag_bits",
        "frame_code",
        "frame_is_entry",
        "frame_owner",
        "frame_previous",
        "frame_instr",
        "frame_localsplus",
        "frame_stackpointer",
        "awaited_depth",
        "float_value",
        "free_threaded",
        "gen_frame_state",
        "gen_iframe",
        "interp_id",
        "interp_next",
        "interp_threads_head",
        "long_digits",
        "long_size",
        "long_tagged",
        "minor",
        "object_type",
        "runtime_interpreters_head",
        "source",
        "tstate_datastack",
        "tstate_frame",
        "tstate_interp",
        "tstate_native_thread_id",
        "tstate_next",
        "tstate_root_cframe",
        "tuple_items",
        "tuple_size",
        "type_name",
        "yield_from_states",
    )

    def __init__(
        self, minor: tuple[int, int], source: str, **offsets: int | tuple[int, ...] | None
    ) -> None:
        #: The (major, minor) version the layout is for.
        self.minor = minor
        #: Where it came from: "built in" or "_Py_DebugOffsets".
        self.source = source
        self.object_type = 8
        self.cframe_current: int | None = None
        self.cframe_previous: int | None = None
        #: The ``_PyCFrame`` inside the thread state where every cframe chain ends (3.11, 3.12).
        self.tstate_root_cframe: int | None = None
        self.frame_is_entry: int | None = None
        self.code_firsttraceable: int | None = None
        #: The frame owner value of an eval call's entry frame (3.12+), else None.
        self.entry_owner: int | None = None
        #: Low bits of ``f_executable`` that tag the reference (3.14's _PyStackRef).
        self.executable_tag_bits = 0
        #: What ``--tasks`` reads of a coroutine (3.14+, else None): the frame it embeds
        #: (``gi_iframe``), its state (``gi_frame_state``, an int8), the values of that
        #: state in which it awaits another object (the top of its frame's stack, at
        #: ``stackpointer``).
        self.gen_iframe: int | None = None
        self.gen_frame_state: int | None = None
        self.frame_stackpointer: int | None = None
        self.yield_from_states: tuple[int, ...] = ()
        #: A build without the GIL (``--disable-gil``: 3.13t): its objects' headers are
        #: larger, which the published offsets already say.
        self.free_threaded = False
        self.awaited_depth = 1
        for name, value in offsets.items():
            setattr(self, name, value)
        # Type-checking aids: every int field is set by the tables below.
        self.runtime_interpreters_head: int
        self.interp_next: int
        #: The interpreter's id (``interp.id``: 0 for the main one).
        self.interp_id: int
        self.interp_threads_head: int
        self.tstate_next: int
        self.tstate_interp: int
        self.tstate_native_thread_id: int
        #: ``datastack_chunk``, the chunk frames are pushed on; ``datastack_top`` follows
        #: it in every version (3.11-3.14), where the chunk's used part ends.
        self.tstate_datastack: int
        #: The thread state's ``cframe`` pointer (3.11, 3.12) or ``current_frame`` (3.13+).
        self.tstate_frame: int
        self.frame_code: int
        self.frame_previous: int
        #: ``prev_instr`` (3.11, 3.12) or ``instr_ptr`` (3.13+): either way the
        #: instruction offset CPython turns into a line is this minus the code's start.
        self.frame_instr: int
        self.frame_owner: int
        self.code_filename: int
        self.code_name: int
        self.code_qualname: int
        self.code_linetable: int
        self.code_firstlineno: int
        self.code_adaptive: int
        self.ascii_size: int
        self.ascii_length: int
        self.ascii_state: int
        self.compact_size: int
        self.bytes_size: int
        self.bytes_sval: int
        # What --locals reads: a frame's local variables (``localsplus``), the code
        # object's names and kinds of them, and the objects simple values are.
        self.frame_localsplus: int
        #: ``co_flags``: whether the code keeps its variables in slots (CO_OPTIMIZED).
        self.code_flags: int
        self.code_localsplusnames: int
        self.code_localspluskinds: int
        self.tuple_size: int
        self.tuple_items: int
        self.float_value: int
        #: ``ob_size`` (3.11: its sign is the int's) or ``lv_tag`` (3.12+: digits << 3 | sign).
        self.long_size: int
        self.long_tagged: bool
        self.long_digits: int
        #: ``tp_name`` of a type object: the C string its name is.
        self.type_name: int

    def __repr__(self) -> str:
        threaded = "t" if self.free_threaded else ""
        return f"<Layout CPython {self.minor[0]}.{self.minor[1]}{threaded} ({self.source})>"

    @property
    def tstate_read_size(self) -> int:
        """Bytes of a thread state to read: up to the last field used.

        With the root ``_PyCFrame`` (3.11, 3.12), which the cframe chain reads
        last: fetched with the thread state, it costs the stop no read of its own.
        """
        fields = (self.tstate_next, self.tstate_interp, self.tstate_native_thread_id)
        end = max(*fields, self.tstate_frame, self.tstate_datastack + 8) + 8
        if self.tstate_root_cframe is not None and self.cframe_previous is not None:
            end = max(end, self.tstate_root_cframe + self.cframe_previous + 8)
        return end

    @property
    def frame_read_size(self) -> int:
        fields = [self.frame_code, self.frame_previous, self.frame_instr, self.frame_owner]
        if self.frame_is_entry is not None:
            fields.append(self.frame_is_entry)
        return max(fields) + 8

    @property
    def code_read_size(self) -> int:
        fields = [
            self.object_type,
            self.code_filename,
            self.code_name,
            self.code_qualname,
            self.code_linetable,
            self.code_firstlineno,
        ]
        if self.code_firsttraceable is not None:
            fields.append(self.code_firsttraceable)
        return max(fields) + 8


def _common(**offsets: int | None) -> dict[str, int | None]:
    """Fields of objects that 3.11 and 3.12 share."""
    shared: dict[str, int | None] = {
        "interp_next": 0,
        "tstate_next": 8,
        "tstate_interp": 16,
        "tstate_frame": 56,
        "code_filename": 112,
        "code_name": 120,
        "code_qualname": 128,
        "code_linetable": 136,
        "ascii_length": 16,
        "ascii_state": 32,
        "bytes_size": 16,
        "bytes_sval": 32,
        "runtime_interpreters_head": 40,
        "frame_localsplus": 72,
        "code_flags": 48,
        "code_localsplusnames": 96,
        "code_localspluskinds": 104,
        "tuple_size": 16,
        "tuple_items": 24,
        "float_value": 16,
        "long_size": 16,
        "long_digits": 24,
        "type_name": 24,
    }
    shared.update(offsets)
    return shared


#: CPython 3.11: frames record ``is_entry`` on the first frame an eval call runs.
LAYOUT_3_11 = Layout(
    (3, 11),
    "built in",
    **_common(
        interp_id=48,
        interp_threads_head=16,
        tstate_native_thread_id=160,
        tstate_datastack=296,
        tstate_root_cframe=336,
        cframe_current=8,
        cframe_previous=16,
        frame_code=32,
        frame_previous=48,
        frame_instr=56,
        frame_is_entry=68,
        frame_owner=69,
        code_firstlineno=72,
        code_firsttraceable=168,
        code_adaptive=184,
        ascii_size=48,
        compact_size=72,
        long_tagged=False,
    ),
)

#: CPython 3.12: each eval call pushes an entry frame owned by the C stack (owner 3).
LAYOUT_3_12 = Layout(
    (3, 12),
    "built in",
    **_common(
        interp_id=8,
        interp_threads_head=72,
        tstate_native_thread_id=144,
        tstate_datastack=232,
        tstate_root_cframe=272,
        cframe_current=0,
        cframe_previous=8,
        frame_code=0,
        frame_previous=8,
        frame_instr=56,
        frame_owner=70,
        entry_owner=3,
        code_firstlineno=68,
        code_firsttraceable=176,
        code_adaptive=192,
        ascii_size=40,
        compact_size=56,
        long_tagged=True,
    ),
)

BUILT_IN_LAYOUTS = {(3, 11): LAYOUT_3_11, (3, 12): LAYOUT_3_12}


# -- _Py_DebugOffsets (3.13+) ------------------------------------------------------

# The record's own layout per minor version: after the 8-byte cookie, one
# uint64 per name, groups in order.  Only the names read below matter, but
# every field is listed so that the positions can be counted.
_DEBUG_RECORD_3_13 = (
    ("", "version free_threaded"),
    ("runtime_state", "size finalizing interpreters_head"),
    (
        "interpreter_state",
        "size id next threads_head gc imports_modules sysdict builtins ceval_gil"
        " gil_runtime_state gil_runtime_state_enabled gil_runtime_state_locked"
        " gil_runtime_state_holder",
    ),
    (
        "thread_state",
        "size prev next interp current_frame thread_id native_thread_id datastack_chunk status",
    ),
    ("interpreter_frame", "size previous executable instr_ptr localsplus owner"),
    (
        "code_object",
        "size filename name qualname linetable firstlineno argcount localsplusnames"
        " localspluskinds co_code_adaptive",
    ),
    ("pyobject", "size ob_type"),
    ("type_object", "size tp_name tp_repr tp_flags"),
    ("tuple_object", "size ob_item ob_size"),
    ("list_object", "size ob_item ob_size"),
    ("dict_object", "size ma_keys ma_values"),
    ("float_object", "size ob_fval"),
    ("long_object", "size lv_tag ob_digit"),
    ("bytes_object", "size ob_size ob_sval"),
    ("unicode_object", "size state length asciiobject_size"),
)

# 3.14 added fields to interpreter_state, interpreter_frame and code_object,
# and a set_object group; of the groups after unicode_object, gen_object is read
# (asyncio tasks' coroutines).
_DEBUG_RECORD_3_14 = (
    ("", "version free_threaded"),
    ("runtime_state", "size finalizing interpreters_head"),
    (
        "interpreter_state",
        "size id next threads_head threads_main gc imports_modules sysdict builtins ceval_gil"
        " gil_runtime_state gil_runtime_state_enabled gil_runtime_state_locked"
        " gil_runtime_state_holder code_object_generation tlbc_generation",
    ),
    (
        "thread_state",
        "size prev next interp current_frame thread_id native_thread_id datastack_chunk status",
    ),
    (
        "interpreter_frame",
        "size previous executable instr_ptr localsplus owner stackpointer tlbc_index",
    ),
    (
        "code_object",
        "size filename name qualname linetable firstlineno argcount localsplusnames"
        " localspluskinds co_code_adaptive co_tlbc",
    ),
    ("pyobject", "size ob_type"),
    ("type_object", "size tp_name tp_repr tp_flags"),
    ("tuple_object", "size ob_item ob_size"),
    ("list_object", "size ob_item ob_size"),
    ("set_object", "size used table mask"),
    ("dict_object", "size ma_keys ma_values"),
    ("float_object", "size ob_fval"),
    ("long_object", "size lv_tag ob_digit"),
    ("bytes_object", "size ob_size ob_sval"),
    ("unicode_object", "size state length asciiobject_size"),
    ("gc", "size collecting"),
    ("gen_object", "size gi_name gi_iframe gi_frame_state"),
    ("llist_node", "next prev"),
)

# 3.15 added fields to thread_state (base_frame and the profiler's last frame after
# current_frame; the GIL and exception fields after status), an err_stackitem group
# after it, two type_object fields, a heap_type_object group and
# unicode_object.compactunicodeobject_size.
_DEBUG_RECORD_3_15 = (
    ("", "version free_threaded"),
    ("runtime_state", "size finalizing interpreters_head"),
    _DEBUG_RECORD_3_14[2],
    (
        "thread_state",
        "size prev next interp current_frame base_frame last_profiled_frame"
        " last_profiled_frame_seq thread_id native_thread_id datastack_chunk status holds_gil"
        " gil_requested current_exception exc_state",
    ),
    ("err_stackitem", "exc_value"),
    _DEBUG_RECORD_3_14[4],
    _DEBUG_RECORD_3_14[5],
    ("pyobject", "size ob_type"),
    ("type_object", "size tp_name tp_repr tp_flags tp_basicsize tp_dictoffset"),
    ("heap_type_object", "size ht_cached_keys"),
    ("tuple_object", "size ob_item ob_size"),
    ("list_object", "size ob_item ob_size"),
    ("set_object", "size used table mask"),
    ("dict_object", "size ma_keys ma_values"),
    ("float_object", "size ob_fval"),
    ("long_object", "size lv_tag ob_digit"),
    ("bytes_object", "size ob_size ob_sval"),
    ("unicode_object", "size state length asciiobject_size compactunicodeobject_size"),
    ("gc", "size collecting frame generation_stats_size generation_stats"),
    ("gen_object", "size gi_name gi_iframe gi_frame_state"),
    ("llist_node", "next prev"),
)

#: Per minor version: the record's layout, the owner value of an eval call's entry frame
#: (FRAME_OWNED_BY_CSTACK in 3.13, FRAME_OWNED_BY_INTERPRETER in 3.14: both 3), and the tag
#: bits of ``f_executable`` (a _PyStackRef in 3.14).
_DEBUG_RECORDS = {
    (3, 13): (_DEBUG_RECORD_3_13, 3, 0),
    (3, 14): (_DEBUG_RECORD_3_14, 3, 1),
    (3, 15): (_DEBUG_RECORD_3_15, 3, 1),
}


#: Per minor version with coroutine offsets: the ``gi_frame_state`` values of a coroutine
#: suspended in ``await`` of another object (FRAME_SUSPENDED_YIELD_FROM, and 3.15's
#: FRAME_SUSPENDED_YIELD_FROM_LOCKED, from pycore_frame.h), and how deep in its frame's
#: stack that object lies (3.15 keeps a NULL above it: ``_PyFrame_StackPeek(frame, 2)``).
_YIELD_FROM = {(3, 14): ((-1,), 1), (3, 15): ((2, 3), 2)}


def debug_record_positions(minor: tuple[int, int]) -> dict[str, int]:
    """``group.field`` → byte position in ``_Py_DebugOffsets`` of ``minor``; empty if unknown."""
    known = _DEBUG_RECORDS.get(minor)
    return {} if known is None else _positions(known[0])


def _positions(record: tuple[tuple[str, str], ...]) -> dict[str, int]:
    positions = {}
    at = len(DEBUG_COOKIE)
    for group, names in record:
        for name in names.split():
            positions[f"{group}.{name}" if group else name] = at
            at += 8
    return positions


def debug_offsets_size(minor: tuple[int, int]) -> int | None:
    """Bytes of ``_Py_DebugOffsets`` to read for ``minor``, or None if its record is unknown."""
    known = _DEBUG_RECORDS.get(minor)
    if known is None:
        return None
    return max(_positions(known[0]).values()) + 8


def layout_from_debug_offsets(data: bytes, hex_version: int) -> Layout:
    """The layout a 3.13+ interpreter publishes at the start of ``_PyRuntime``.

    ``hex_version`` is what the binary says it is (``Py_Version``); the
    record must carry the cookie and the same major.minor version, be of a
    default (GIL) build, and every offset must lie inside the size it states
    for its structure — a record that fails any of these is refused with a
    FormatError saying which, never used.
    """
    minor = minor_version(hex_version)
    known = _DEBUG_RECORDS.get(minor)
    if known is None:
        raise FormatError(
            f"CPython {version_text(hex_version)}: the layout of its _Py_DebugOffsets is not known"
        )
    record, entry_owner, tag_bits = known
    positions = _positions(record)
    if len(data) < max(positions.values()) + 8:
        raise FormatError("_Py_DebugOffsets: record cut short")
    if data[: len(DEBUG_COOKIE)] != DEBUG_COOKIE:
        raise FormatError("_Py_DebugOffsets: no 'xdebugpy' cookie at the start of _PyRuntime")

    def field(name: str) -> int:
        return int(_U64.unpack_from(data, positions[name])[0])

    published = field("version")
    if minor_version(published) != minor:
        raise FormatError(
            f"_Py_DebugOffsets says CPython {version_text(published)}, "
            f"the binary says {version_text(hex_version)}"
        )
    free_threaded = bool(field("free_threaded"))
    if free_threaded and minor >= (3, 14):
        # Each thread runs its own copy of a code object's bytecode there (co_tlbc,
        # tlbc_index): no such build could be had here to test reading it.
        raise FormatError(
            f"free-threaded CPython {minor[0]}.{minor[1]}: its per-thread bytecode copies "
            "are not read yet (3.13t is)"
        )
    checked: dict[str, int] = {}
    for group, names in (
        ("runtime_state", "interpreters_head"),
        ("interpreter_state", "id next threads_head"),
        ("thread_state", "next interp current_frame native_thread_id datastack_chunk"),
        ("interpreter_frame", "previous executable instr_ptr owner"),
        (
            "code_object",
            "filename name qualname linetable firstlineno co_code_adaptive argcount"
            " localsplusnames localspluskinds",
        ),
        ("pyobject", "ob_type"),
        ("type_object", "tp_name"),
        ("tuple_object", "ob_item ob_size"),
        ("float_object", "ob_fval"),
        ("long_object", "lv_tag ob_digit"),
        ("bytes_object", "ob_size ob_sval"),
        ("unicode_object", "state length asciiobject_size"),
    ):
        size = field(f"{group}.size")
        if not 0 < size <= MAX_STRUCT_SIZE:
            raise FormatError(f"_Py_DebugOffsets: {group} claims {size} bytes")
        for name in names.split():
            value = field(f"{group}.{name}")
            if value >= size:
                raise FormatError(
                    f"_Py_DebugOffsets: {group}.{name} = {value} lies outside its {size} bytes"
                )
            checked[f"{group}.{name}"] = value
    coroutines: dict[str, int | tuple[int, ...]] = {}
    if "gen_object.gi_iframe" in positions:
        size = field("gen_object.size")
        frame_size = field("interpreter_frame.size")
        for name, value, within in (
            ("gen_iframe", field("gen_object.gi_iframe"), size),
            ("gen_frame_state", field("gen_object.gi_frame_state"), size),
            ("frame_stackpointer", field("interpreter_frame.stackpointer"), frame_size),
        ):
            if value >= within:
                raise FormatError(f"_Py_DebugOffsets: {name} = {value} lies outside its object")
            coroutines[name] = value
        coroutines["yield_from_states"], coroutines["awaited_depth"] = _YIELD_FROM[minor]
    if checked["code_object.argcount"] < 4:
        raise FormatError("_Py_DebugOffsets: code_object.argcount leaves no room for co_flags")
    # The local variables follow the frame: their offset is the frame's size.
    localsplus = field("interpreter_frame.localsplus")
    if localsplus > field("interpreter_frame.size"):
        raise FormatError(
            f"_Py_DebugOffsets: interpreter_frame.localsplus = {localsplus} lies past the frame"
        )
    ascii_size = checked["unicode_object.asciiobject_size"]
    return Layout(
        minor,
        "_Py_DebugOffsets",
        runtime_interpreters_head=checked["runtime_state.interpreters_head"],
        interp_id=checked["interpreter_state.id"],
        interp_next=checked["interpreter_state.next"],
        interp_threads_head=checked["interpreter_state.threads_head"],
        tstate_next=checked["thread_state.next"],
        tstate_interp=checked["thread_state.interp"],
        tstate_native_thread_id=checked["thread_state.native_thread_id"],
        tstate_datastack=checked["thread_state.datastack_chunk"],
        tstate_frame=checked["thread_state.current_frame"],
        frame_code=checked["interpreter_frame.executable"],
        frame_previous=checked["interpreter_frame.previous"],
        frame_instr=checked["interpreter_frame.instr_ptr"],
        frame_owner=checked["interpreter_frame.owner"],
        entry_owner=entry_owner,
        executable_tag_bits=tag_bits,
        object_type=checked["pyobject.ob_type"],
        code_filename=checked["code_object.filename"],
        code_name=checked["code_object.name"],
        code_qualname=checked["code_object.qualname"],
        code_linetable=checked["code_object.linetable"],
        code_firstlineno=checked["code_object.firstlineno"],
        code_adaptive=checked["code_object.co_code_adaptive"],
        ascii_size=ascii_size,
        ascii_length=checked["unicode_object.length"],
        ascii_state=checked["unicode_object.state"],
        # PyCompactUnicodeObject adds utf8_length and utf8 to PyASCIIObject.
        compact_size=ascii_size + 16,
        bytes_size=checked["bytes_object.ob_size"],
        bytes_sval=checked["bytes_object.ob_sval"],
        frame_localsplus=localsplus,
        # co_flags is not published; in every version with the record it is the int
        # before co_argcount (tests/system: offsetof() from each version's headers).
        code_flags=checked["code_object.argcount"] - 4,
        code_localsplusnames=checked["code_object.localsplusnames"],
        code_localspluskinds=checked["code_object.localspluskinds"],
        type_name=checked["type_object.tp_name"],
        tuple_size=checked["tuple_object.ob_size"],
        tuple_items=checked["tuple_object.ob_item"],
        float_value=checked["float_object.ob_fval"],
        long_size=checked["long_object.lv_tag"],
        long_tagged=True,
        long_digits=checked["long_object.ob_digit"],
        free_threaded=free_threaded,
        **coroutines,
    )


# -- asyncio (3.14+) ------------------------------------------------------------------

#: The ``_AsyncioDebug`` record (the ``.AsyncioDebug`` section of the module that holds
#: ``_asyncio``: lib-dynload's _asyncio.so in 3.14, the interpreter itself in 3.15): one
#: uint64 per name, groups in order.
_ASYNCIO_RECORD = (
    (
        "asyncio_task_object",
        "size task_name task_awaited_by task_is_task task_awaited_by_is_set task_coro task_node",
    ),
    ("asyncio_interpreter_state", "size asyncio_tasks_head"),
    ("asyncio_thread_state", "size asyncio_running_loop asyncio_running_task asyncio_tasks_head"),
)
#: The section that holds it.
ASYNCIO_SECTION = ".AsyncioDebug"


class AsyncioLayout:
    """Where ``--tasks`` finds asyncio's tasks: per thread state and interpreter, and in a task.

    A C ``asyncio.Task`` is linked (``task_node``, a ``llist_node``) into its
    thread's list of tasks, or, once that thread ended, its interpreter's;
    the thread state names the task it runs now.
    """

    __slots__ = (
        "interp_tasks_head",
        "task_coro",
        "task_name",
        "task_node",
        "tstate_running_task",
        "tstate_tasks_head",
    )

    def __init__(self, fields: dict[str, int]) -> None:
        self.task_name = fields["asyncio_task_object.task_name"]
        self.task_coro = fields["asyncio_task_object.task_coro"]
        self.task_node = fields["asyncio_task_object.task_node"]
        self.interp_tasks_head = fields["asyncio_interpreter_state.asyncio_tasks_head"]
        self.tstate_running_task = fields["asyncio_thread_state.asyncio_running_task"]
        self.tstate_tasks_head = fields["asyncio_thread_state.asyncio_tasks_head"]


def asyncio_record_size() -> int:
    return 8 * sum(len(names.split()) for _, names in _ASYNCIO_RECORD)


def asyncio_layout(data: bytes) -> AsyncioLayout:
    """The layout an ``_AsyncioDebug`` record gives; every offset must lie inside its size."""
    if len(data) < asyncio_record_size():
        raise FormatError("_AsyncioDebug: record cut short")
    fields: dict[str, int] = {}
    at = 0
    for group, names in _ASYNCIO_RECORD:
        size = int(_U64.unpack_from(data, at)[0])
        if not 0 < size <= MAX_STRUCT_SIZE:
            raise FormatError(f"_AsyncioDebug: {group} claims {size} bytes")
        at += 8
        for name in names.split()[1:]:
            value = int(_U64.unpack_from(data, at)[0])
            at += 8
            if value >= size:
                raise FormatError(f"_AsyncioDebug: {group}.{name} = {value} lies outside it")
            fields[f"{group}.{name}"] = value
    return AsyncioLayout(fields)
