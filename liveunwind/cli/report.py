"""Rendering a Backtrace: human text and one JSON document."""

from __future__ import annotations

import os

from liveunwind.frames import StopReason

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from liveunwind.frames import (
        Backtrace,
        CrashInfo,
        Frame,
        PythonFrame,
        PythonTask,
        SourceLocation,
        ThreadBacktrace,
    )

#: The shape of the ``--json`` document, and the ``$id`` of the JSON Schema that
#: describes it (``schemas/backtrace.schema.json``, shipped in the package).  Any
#: change to the document's shape raises the version: the schema is closed, so
#: even a new field would fail validation against the old one.
SCHEMA_VERSION = 4
SCHEMA_ID = "urn:liveunwind:backtrace:4"


def format_text(backtrace: Backtrace, *, symbols: bool = True, verbose: bool = False) -> str:
    """One block per thread: a header, one line per frame, and why the walk stopped."""
    blocks = [
        _thread_text(thread, symbols, verbose) + _unplaced_text(thread)
        for thread in backtrace.threads
    ]
    if backtrace.crash is not None:
        blocks.insert(0, _crash_text(backtrace.crash))
    if backtrace.tasks is not None:
        blocks.append(_tasks_text(backtrace.tasks))
    if backtrace.problems:
        blocks.append("\n".join(f"note: {problem}" for problem in backtrace.problems))
    return "\n\n".join(blocks) + "\n"


def _tasks_text(tasks: list[PythonTask]) -> str:
    """``asyncio tasks:``, then each task, the thread running it, and its await chain."""
    lines = [f"asyncio tasks ({len(tasks)}):"]
    for task in tasks:
        running = f" (running on thread {task.thread})" if task.thread is not None else ""
        lines.append(f"  Task {task.name!r} at {task.address:#x}{running}:")
        lines.extend(f"    {line}" for frame in task.frames for line in _python_lines(frame))
    return "\n".join(lines)


def _crash_text(crash: CrashInfo) -> str:
    lines = []
    if crash.executable or crash.arguments:
        lines.append(f"Executable: {crash.executable}")
        if crash.arguments:
            lines.append(f"Command line: {crash.arguments}")
    lines.append(f"Signal: {crash.describe()}")
    return "\n".join(lines)


def _thread_text(thread: ThreadBacktrace, symbols: bool, verbose: bool) -> str:
    state = f" ({thread.state})" if thread.state else ""
    lines = [f'Thread {thread.tid} "{thread.name}"{state}:']
    width = len(str(max(len(thread.frames) - 1, 0)))
    for frame in thread.frames:
        if verbose:
            lines.extend(f"      ({note})" for note in frame.notes)
        lines.extend(_frame_text(frame, width, symbols))
    if verbose:
        lines.extend(f"      ({note})" for note in thread.stop_notes)
    marker = "complete" if thread.complete else "INCOMPLETE"
    if thread.stop_reason is StopReason.NOT_STOPPED:  # the header already says how it was held
        lines.append(f"  -- {thread.stop_reason.value}: no registers, so no frames ({marker})")
    else:
        lines.append(f"  -- {thread.stop_text} ({marker})")
    return "\n".join(lines)


def _frame_text(frame: Frame, width: int, symbols: bool) -> list[str]:
    """The frame's line; with source lines, its inlined calls first, innermost first.

    Inlined calls have no pc or method of their own: they sit under the
    frame's index, as gdb lists them before the function they were inlined into.
    The Python frames an eval-loop frame runs follow its line, innermost
    first, in the same columns, marked ``[py]``.
    """
    index, pc = f"#{frame.index:<{width}}", f"0x{frame.pc:016x}"
    lines = []
    for place in frame.inlined:
        lines.append(f"  {index}  {pc}  {place.function or '??'}{_source(place)}  [inline]")
        index, pc = " " * len(index), " " * len(pc)
    parts = [index, pc]
    if symbols:
        parts.append(_location(frame))
    if frame.module:
        module = os.path.basename(frame.module)
        if frame.function is None and frame.module_offset is not None:
            # No symbol: give the address addr2line and objdump want instead.
            module += f"+{frame.module_offset:#x}"
        parts.append(f"({module})")
    parts.append(f"[{frame.method.value}]")
    lines.append("  " + "  ".join(parts) + _source(frame))
    if frame.python:
        blank = f"  {' ' * (width + 1)}  {' ' * 18}  "
        for python in frame.python:
            lines.extend(f"{blank}{line}" for line in _python_lines(python))
    return lines


def _python_lines(place: PythonFrame) -> list[str]:
    """``[py] function (file:line)`` (``[py interp N]`` in a subinterpreter); with
    ``--locals``, a ``name = value`` line per variable."""
    where = place.file if place.line is None else f"{place.file}:{place.line}"
    interpreter = f" interp {place.interpreter}" if place.interpreter else ""
    lines = [f"[py{interpreter}] {place.function} ({where})"]
    if place.locals:
        lines.extend(f"       {name} = {value.text()}" for name, value in place.locals.items())
    return lines


def _unplaced_text(thread: ThreadBacktrace) -> str:
    """The thread's Python frames no native frame could be found to run, after its stack."""
    if not thread.python_unplaced:
        return ""
    lines = ["", "  note: Python frames not placed on a native frame (innermost first):"]
    for place in thread.python_unplaced:
        lines.extend(f"    {line}" for line in _python_lines(place))
    return "\n".join(lines)


def _source(place: Frame | SourceLocation) -> str:
    """``  at FILE:LINE`` where the DWARF gave one, else nothing."""
    if place.file is None:
        return ""
    return f"  at {place.file}:{place.line}" if place.line else f"  at {place.file}"


def _location(frame: Frame) -> str:
    if frame.signal_frame:
        label = "<signal handler called>"
        return f"{frame.function} {label}" if frame.function else label
    if frame.function is None:
        return "??"
    return f"{frame.function}+{frame.offset:#x}" if frame.offset else frame.function


def to_json_document(backtrace: Backtrace) -> dict[str, Any]:
    """The ``--json`` document; addresses are integers."""
    return {
        "$schema": SCHEMA_ID,
        "schema_version": SCHEMA_VERSION,
        "pid": backtrace.pid,
        "arch": backtrace.arch,
        "complete": backtrace.complete,
        "crash": None if backtrace.crash is None else _crash_json(backtrace.crash),
        "problems": backtrace.problems,
        **(
            {}
            if backtrace.tasks is None
            else {"tasks": [task.as_dict() for task in backtrace.tasks]}
        ),
        "threads": [
            {
                "tid": thread.tid,
                "name": thread.name,
                "state": thread.state,
                "stop_reason": thread.stop_reason.value,
                "stop_detail": thread.stop_detail,
                "stop_notes": thread.stop_notes,
                "complete": thread.complete,
                "frames": [_frame_json(frame) for frame in thread.frames],
                "python_unplaced": [place.as_dict() for place in thread.python_unplaced],
            }
            for thread in backtrace.threads
        ],
    }


def _crash_json(crash: CrashInfo) -> dict[str, Any]:
    return dict(crash._asdict())  # every field, in the order CrashInfo declares them


def _frame_json(frame: Frame) -> dict[str, Any]:
    return {
        "index": frame.index,
        "pc": frame.pc,
        "sp": frame.sp,
        "cfa": frame.cfa,
        "module": frame.module,
        "module_offset": frame.module_offset,
        "function": frame.function,
        "offset": frame.offset,
        "method": frame.method.value,
        "trust": frame.trust.value,
        "signal_frame": frame.signal_frame,
        "notes": frame.notes,
        "file": frame.file,
        "line": frame.line,
        "inlined": [place._asdict() for place in frame.inlined],
        "python": [place.as_dict() for place in frame.python],
    }


def format_json(backtrace: Backtrace) -> str:
    import json  # only --json needs it; it costs several ms at start-up

    return json.dumps(to_json_document(backtrace), indent=2) + "\n"
