"""Python frames from bytes made here: hostile memory, refused records, cut line tables, reports.

A made-up interpreter in fake memory (cycles, wrong types, pointers past the
address space, huge strings), _Py_DebugOffsets records that do not match,
and the text, JSON and folded output of Python frames.  Real interpreters,
live and in cores, are tests/system/test_python_frames.py.
"""

from __future__ import annotations

import struct

import jsonschema
import pytest

from liveunwind.cpython import layouts, objects
from liveunwind.cpython.codecache import CodeCache
from liveunwind.cpython.interpreter import Interpreter
from liveunwind.cpython.memory import Memory
from liveunwind.cpython.stacks import PythonThread, describe
from liveunwind.cpython.walk import collect
from liveunwind.errors import FormatError, MemoryReadError
from liveunwind.frames import Backtrace
from tests.support.schema import SCHEMA


def frames_of(thread: PythonThread) -> list[tuple[str, str, int | None]]:
    return [(frame.function, frame.file, frame.line) for frame in thread.frames]


# -- line tables --------------------------------------------------------------------------


def test_a_cut_line_table_raises_format_error() -> None:
    # A long-form entry (code 14) whose line delta varint is cut off.
    with pytest.raises(FormatError):
        objects.line_for_offset(bytes([0x80 | (14 << 3), 0x41]), 1, 4)
    with pytest.raises(FormatError):
        objects.line_for_offset(bytes([0x01]), 1, 0)  # no marker bit


# -- _Py_DebugOffsets records -------------------------------------------------------------


def _record(minor: tuple[int, int], version: int) -> bytearray:
    """A plausible _Py_DebugOffsets record of ``minor``: every size 4096, every offset 8."""
    positions = layouts.debug_record_positions(minor)
    data = bytearray(max(positions.values()) + 8)
    data[:8] = layouts.DEBUG_COOKIE
    for name, at in positions.items():
        value = 4096 if name.endswith(".size") else 8
        struct.pack_into("<Q", data, at, value)
    struct.pack_into("<Q", data, positions["version"], version)
    struct.pack_into("<Q", data, positions["free_threaded"], 0)
    return data


@pytest.mark.parametrize("minor", [(3, 13), (3, 14), (3, 15)])
def test_debug_offsets_records_that_do_not_match_are_refused(minor: tuple[int, int]) -> None:
    version = (3 << 24) | (minor[1] << 16) | 0xF0
    positions = layouts.debug_record_positions(minor)
    layout = layouts.layout_from_debug_offsets(bytes(_record(minor, version)), version)
    assert layout.minor == minor and layout.source == "_Py_DebugOffsets"

    def refused(data: bytearray, hex_version: int = version) -> str:
        with pytest.raises(FormatError) as error:
            layouts.layout_from_debug_offsets(bytes(data), hex_version)
        return str(error.value)

    bad = _record(minor, version)
    bad[:8] = b"xdebugPY"
    assert "cookie" in refused(bad)
    other = (3 << 24) | ((minor[1] - 1) << 16)
    assert "says CPython" in refused(_record(minor, other))
    threaded = _record(minor, version)
    struct.pack_into("<Q", threaded, positions["free_threaded"], 1)
    if minor >= (3, 14):
        assert "per-thread bytecode" in refused(threaded)
    else:
        assert layouts.layout_from_debug_offsets(bytes(threaded), version).free_threaded
    bad = _record(minor, version)
    struct.pack_into("<Q", bad, positions["thread_state.current_frame"], 4096)
    assert "outside" in refused(bad)
    bad = _record(minor, version)
    struct.pack_into("<Q", bad, positions["code_object.size"], 1 << 40)
    assert "claims" in refused(bad)
    assert "cut short" in refused(_record(minor, version)[:64])
    unknown = (3 << 24) | (99 << 16)
    assert "not known" in refused(_record(minor, version), unknown)


# -- hostile memory --------------------------------------------------------------------


class FakeMemory:
    """Words placed at addresses: a made-up interpreter for loops no real one has."""

    def __init__(self) -> None:
        self.bytes: dict[int, int] = {}

    def put(self, address: int, value: int, size: int = 8) -> None:
        for index, byte in enumerate(value.to_bytes(size, "little")):
            self.bytes[address + index] = byte

    def read_many(self, ranges: list[tuple[int, int]]) -> list[bytes | None]:
        return [self.read(*each) if each[0] in self.bytes else None for each in ranges]

    def read(self, address: int, size: int) -> bytes:
        if address not in self.bytes:
            raise MemoryReadError(address, size)
        return bytes(self.bytes.get(address + index, 0) for index in range(size))


def _fake_interpreter(memory: FakeMemory, *, thread_loop: bool, frame_loop: bool) -> Interpreter:
    """3.12 layout: runtime → interpreter → thread state → two frames of one code object."""
    layout = layouts.LAYOUT_3_12
    runtime, interp, tstate, cframe, frames, code = 0x1000, 0x2000, 0x3000, 0x4000, 0x5000, 0x6000
    name, linetable = 0x7000, 0x8000
    memory.put(runtime + layout.runtime_interpreters_head, interp)
    memory.put(interp + layout.interp_next, 0)
    memory.put(interp + layout.interp_id, 0)  # the main interpreter
    memory.put(interp + layout.interp_threads_head, tstate)
    memory.put(tstate, 0)
    memory.put(tstate + layout.tstate_next, tstate if thread_loop else 0)
    memory.put(tstate + layout.tstate_interp, interp)
    memory.put(tstate + layout.tstate_native_thread_id, 42)
    memory.put(tstate + layout.tstate_frame, cframe)
    memory.put(tstate + layout.tstate_datastack + 8, 0)
    memory.put(cframe + layout.cframe_current, frames)  # type: ignore[operator]
    for index in range(2):
        frame = frames + index * 0x100
        memory.put(frame + layout.frame_code, code)
        following = frames if frame_loop and index == 1 else (frame + 0x100 if index == 0 else 0)
        memory.put(frame + layout.frame_previous, following)
        memory.put(frame + layout.frame_instr, code + layout.code_adaptive)
        memory.put(frame + layout.frame_owner, 0, 1)
    for start in (code, name, linetable):
        memory.put(start, 1)  # the reference count: the object starts here
    memory.put(code + layout.object_type, 0xC0DE)
    for offset in (layout.code_filename, layout.code_name, layout.code_qualname):
        memory.put(code + offset, name)
    memory.put(code + layout.code_linetable, linetable)
    memory.put(code + layout.code_firstlineno, 7, 4)
    memory.put(code + layout.code_firsttraceable, 0, 4)  # type: ignore[operator]
    memory.put(name + layout.object_type, 0x57)
    memory.put(name + layout.ascii_length, 1)
    memory.put(
        name + layout.ascii_state, (1 << 2) | (1 << 5) | (1 << 6), 4
    )  # 1-byte, compact, ascii
    memory.put(name + layout.ascii_size, ord("f"), 1)
    memory.put(name + layout.compact_size, 0)
    memory.put(linetable + layout.object_type, 0xB17E)
    memory.put(linetable + layout.bytes_size, 1)
    memory.put(linetable + layout.bytes_sval, 0x80 | (10 << 3) | 0, 1)  # line +0 for 1 unit
    memory.put(linetable + layout.bytes_sval + 1, 0)
    types = {"PyCode_Type": 0xC0DE, "PyUnicode_Type": 0x57, "PyBytes_Type": 0xB17E}
    return Interpreter("fake", runtime, 0x030C01F0, layout, types)


def test_a_made_up_interpreter_reads_as_expected() -> None:
    memory = FakeMemory()
    interpreter = _fake_interpreter(memory, thread_loop=False, frame_loop=False)
    collected = collect(Memory(memory.read), interpreter)
    assert collected.problems == []
    [thread] = describe(collected)
    assert thread.native_id == 42
    assert frames_of(thread) == [("f", "f", 7), ("f", "f", 7)]


def test_loops_in_target_memory_are_cut_and_said() -> None:
    memory = FakeMemory()
    interpreter = _fake_interpreter(memory, thread_loop=True, frame_loop=True)
    collected = collect(Memory(memory.read), interpreter)
    [thread] = describe(collected)  # the thread list's loop back to itself is cut
    assert frames_of(thread) == [("f", "f", 7), ("f", "f", 7)]
    assert any("loops" in problem for problem in collected.problems)


def test_objects_of_the_wrong_type_are_left_out_and_said() -> None:
    memory = FakeMemory()
    interpreter = _fake_interpreter(memory, thread_loop=False, frame_loop=False)
    interpreter.types["PyCode_Type"] = 0xBAD
    collected = collect(Memory(memory.read), interpreter)
    [thread] = describe(collected)
    assert thread.frames == []
    assert any("not a code object" in problem for problem in collected.problems)
    interpreter = _fake_interpreter(memory, thread_loop=False, frame_loop=False)
    interpreter.types["PyUnicode_Type"] = 0xBAD
    interpreter.codes = CodeCache()
    [thread] = describe(collect(Memory(memory.read), interpreter))
    assert frames_of(thread) == [("<unknown>", "<unknown>", 7)] * 2


def test_pointers_past_the_address_space_are_refused_not_crashed_on() -> None:
    memory = FakeMemory()
    interpreter = _fake_interpreter(memory, thread_loop=False, frame_loop=False)
    layout = interpreter.layout
    memory.put(0x3000 + layout.tstate_frame, (1 << 64) - 8)  # cframe + 0 is fine, its frame not
    memory.put((1 << 64) - 8, (1 << 64) - 4)
    collected = collect(Memory(memory.read, FakeMemory().read_many), interpreter)
    assert [thread.frames for thread in describe(collected)] == [[]]
    assert any("beyond the address space" in problem for problem in collected.problems)
    # Nor does the next stop's plan ask the kernel for what the address space cannot hold.
    from liveunwind.targets.live.syscalls import PlannedRead

    memory.put(0x3000 + layout.tstate_frame, (1 << 64) - 4)  # the cframe itself runs past
    collected = collect(Memory(memory.read, FakeMemory().read_many), interpreter)
    assert any("beyond the address space" in problem for problem in collected.problems)
    assert interpreter.plan and all(start + size <= 1 << 64 for start, size in interpreter.plan)
    PlannedRead(interpreter.plan)


def test_a_huge_string_is_refused() -> None:
    layout = layouts.LAYOUT_3_12
    header = bytearray(objects.header_size(layout))
    struct.pack_into("<Q", header, layout.ascii_length, 1 << 40)
    with pytest.raises(FormatError):
        objects.StringShape(layout, bytes(header))


# -- the report -------------------------------------------------------------------------


def test_the_report_shows_placed_and_unplaced_python_frames() -> None:
    from liveunwind.cli.report import format_text, to_json_document
    from liveunwind.frames import Frame, Method, PythonFrame, StopReason, ThreadBacktrace

    frames = [Frame(0, 0x1000, 0x7000, Method.CONTEXT), Frame(1, 0x2000, 0x7100, Method.CFI)]
    frames[1].function = "_PyEval_EvalFrameDefault"
    frames[1].python = (PythonFrame("inner", "a.py", 3), PythonFrame("outer", "a.py", None))
    thread = ThreadBacktrace(7, "main", frames, StopReason.END_OF_STACK)
    thread.python_unplaced = (PythonFrame("lost", "b.py", 9),)
    backtrace = Backtrace(7, [thread], "x86_64")
    text = format_text(backtrace)
    column = " " * len("  #1  0x0000000000002000  ")
    assert f"\n{column}[py] inner (a.py:3)\n{column}[py] outer (a.py)\n" in text
    assert text.index("[py] outer") < text.index("-- end of stack") < text.index("[py] lost")
    assert "not placed on a native frame" in text
    document = to_json_document(backtrace)
    jsonschema.Draft202012Validator(SCHEMA).validate(document)
    (native,) = document["threads"]
    assert native["frames"][0]["python"] == []
    assert native["frames"][1]["python"] == [
        {"function": "inner", "file": "a.py", "line": 3, "interpreter": 0},
        {"function": "outer", "file": "a.py", "line": None, "interpreter": 0},
    ]
    assert native["python_unplaced"] == [
        {"function": "lost", "file": "b.py", "line": 9, "interpreter": 0}
    ]


def test_profile_stacks_have_a_level_per_python_frame() -> None:
    """``profile --python``: the Python frames sit under the eval frame, outermost first."""
    from liveunwind.backtrace.profile import stack_of
    from liveunwind.frames import Frame, Method, PythonFrame, StopReason, ThreadBacktrace

    frames = [Frame(0, 0x1000, 0x7000, Method.CONTEXT), Frame(1, 0x2000, 0x7100, Method.CFI)]
    frames[0].function, frames[1].function = "time_sleep", "_PyEval_EvalFrameDefault"
    frames[1].python = (PythonFrame("inner", "/srv/a.py", 3), PythonFrame("Outer.run", "a.py", 9))
    thread = ThreadBacktrace(7, "main", frames, StopReason.END_OF_STACK)
    assert stack_of(thread) == (
        "_PyEval_EvalFrameDefault",
        "Outer.run (a.py:9)",
        "inner (a.py:3)",
        "time_sleep",
    )
