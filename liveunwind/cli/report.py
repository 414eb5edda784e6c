"""Rendering a Backtrace (or one per process or core of a run): human text and one JSON document."""

from __future__ import annotations

import os

from liveunwind.frames import StopReason

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from liveunwind.cli.group import Group
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
SCHEMA_VERSION = 6
SCHEMA_ID = "urn:liveunwind:backtrace:6"


class ProcessResult:
    """One process of a many-process run: its backtrace, or why it has none.

    ``name`` is its command name as /proc gave it when it was chosen (""
    if it was gone by then); ``error`` the one line saying why there is no
    backtrace (it exited, could not be traced, ...), with ``exit_code`` the
    code a one-process run would have ended with.
    """

    __slots__ = ("backtrace", "error", "exit_code", "name", "pid")

    def __init__(
        self,
        pid: int,
        name: str,
        backtrace: Backtrace | None,
        error: str | None = None,
        exit_code: int = 0,
    ) -> None:
        self.pid = pid
        self.name = name
        self.backtrace = backtrace
        self.error = error
        self.exit_code = exit_code


class CoreResult:
    """One core of a many-core run: its backtrace, or why it has none.

    ``program`` is the executable's path (systemd-coredump's
    ``user.coredump.exe``, else what the core records; "" if neither
    says); ``error`` the one line saying why there is no backtrace, with
    ``exit_code`` the code a one-core run would have ended with; ``group``
    the index of its crash signature in the run's groups (``--group``).
    """

    __slots__ = ("backtrace", "error", "exit_code", "group", "path", "program")

    def __init__(
        self,
        path: str,
        program: str,
        backtrace: Backtrace | None,
        error: str | None = None,
        exit_code: int = 0,
    ) -> None:
        self.path = path
        self.program = program
        self.backtrace = backtrace
        self.error = error
        self.exit_code = exit_code
        self.group: int | None = None


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


def process_header(result: ProcessResult) -> str:
    """The line above a process's block: ``Process PID "NAME":``, or why it has no backtrace."""
    name = f' "{result.name}"' if result.name else ""
    if result.backtrace is None:
        return f"Process {result.pid}{name}: not backtraced: {result.error}"
    return f"Process {result.pid}{name}:"


def format_process_text(
    result: ProcessResult, *, symbols: bool = True, verbose: bool = False
) -> str:
    """One process of a many-process run: its header line, then its backtrace's text."""
    if result.backtrace is None:
        return process_header(result) + "\n"
    return (
        process_header(result)
        + "\n"
        + format_text(result.backtrace, symbols=symbols, verbose=verbose)
    )


def format_core_text(result: CoreResult, *, symbols: bool = True, verbose: bool = False) -> str:
    """One core of a many-core run: ``Core PATH:`` and its backtrace, or why it was not read."""
    if result.backtrace is None:
        return f"Core {result.path}: not read: {result.error}\n"
    text = format_text(result.backtrace, symbols=symbols, verbose=verbose)
    return f"Core {result.path}:\n{text}"


def format_groups_text(groups: list[Group], results: list[CoreResult]) -> str:
    """``--group``: one line per crash signature (count, program, signal, frames), its
    example cores under it; then the cores that could not be read, a line each."""
    read = sum(result.error is None for result in results)
    lines = [f"{len(groups)} crash signatures in {read} cores:"]
    width = len(str(max((group.count for group in groups), default=0)))
    for group in groups:
        lines.append(f"  {group.count:>{width}}  {group.signature.text()}")
        more = group.count - len(group.examples)
        tail = f" (and {more} more)" if more else ""
        lines.append(f"  {' ' * width}  e.g. {', '.join(group.examples)}{tail}")
    failed = [result for result in results if result.error is not None]
    if failed:
        lines.append(f"cores not read ({len(failed)}):")
        lines.extend(f"  {result.path}: {result.error}" for result in failed)
    return "\n".join(lines) + "\n"


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
    frames = thread.frames
    width = len(str(max(len(frames) - 1, 0)))
    modules: dict[str, str] = {}
    if verbose:
        for frame in frames:
            lines.extend(f"      ({note})" for note in frame.notes)
            lines.extend(_frame_text(frame, width, symbols, modules))
    else:
        # _frame_text's plain lines made here, the text before each index's pc made once
        # per run and the rest of the line once per function (_plain_rest): the C target's
        # 303 frames in about 125 µs, not 231.
        prefixes, append = _index_prefixes(width, len(frames)), lines.append
        for frame in frames:
            if (
                frame.inlined
                or frame.python
                or frame.file is not None
                or not 0 <= frame.index < len(prefixes)
            ):
                lines.extend(_frame_text(frame, width, symbols, modules))
                continue
            append(f"{prefixes[frame.index]}{frame.pc:016x}{_plain_rest(frame, symbols)}")
    if verbose:
        lines.extend(f"      ({note})" for note in thread.stop_notes)
    marker = "complete" if thread.complete else "INCOMPLETE"
    if thread.stop_reason is StopReason.NOT_STOPPED:  # the header already says how it was held
        lines.append(f"  -- {thread.stop_reason.value}: no registers, so no frames ({marker})")
    else:
        lines.append(f"  -- {thread.stop_text} ({marker})")
    return "\n".join(lines)


def _frame_text(frame: Frame, width: int, symbols: bool, modules: dict[str, str]) -> list[str]:
    """The frame's line; with source lines, its inlined calls first, innermost first.

    Inlined calls have no pc or method of their own: they sit under the
    frame's index, as gdb lists them before the function they were inlined into.
    The Python frames an eval-loop frame runs follow its line, innermost
    first, in the same columns, marked ``[py]``.  ``modules`` keeps each
    module's file name for the thread's next frames: with one string built
    per line, the C target's 303 frames take 0.39 ms, not 0.49.
    """
    if not (frame.inlined or frame.python or frame.file is not None):
        return [f"  #{frame.index:<{width}}  0x{frame.pc:016x}" + _plain_rest(frame, symbols)]
    index, pc = f"#{frame.index:<{width}}", f"0x{frame.pc:016x}"
    lines = []
    for place in frame.inlined:
        lines.append(f"  {index}  {pc}  {place.function or '??'}{_source(place)}  [inline]")
        index, pc = " " * len(index), " " * len(pc)
    text = f"  {index}  {pc}  {_location(frame)}" if symbols else f"  {index}  {pc}"
    if frame.module:
        module = modules.get(frame.module)
        if module is None:
            module = modules[frame.module] = os.path.basename(frame.module)
        if frame.function is None and frame.module_offset is not None:
            # No symbol: give the address addr2line and objdump want instead.
            module += f"+{frame.module_offset:#x}"
        text += f"  ({module})"
    text += f"  [{frame.method.value}]"
    lines.append(text if frame.file is None else text + _source(frame))
    if frame.python:
        blank = f"  {' ' * (width + 1)}  {' ' * 18}  "
        for python in frame.python:
            lines.extend(f"{blank}{line}" for line in _python_lines(python))
    return lines


def _plain_rest(frame: Frame, symbols: bool) -> str:
    """What follows the index and pc on a frame line with no inlined calls, source or Python.

    The same for every frame of a function at one offset and method, in every
    thread and process of a run: made once (30,200 frames of the 9-thread C
    target's threads written 100 times: 30.7 ms, 22.5 with this), forgotten
    at :data:`_MAX_PLAIN_RESTS`.
    """
    key = (
        frame.function,
        frame.offset,
        frame.module,
        frame.module_offset,
        frame.method,
        frame.signal_frame,
        symbols,
    )
    rest = _plain_rests.get(key)
    if rest is None:
        rest = f"  {_location(frame)}" if symbols else ""
        if frame.module:
            module = os.path.basename(frame.module)
            if frame.function is None and frame.module_offset is not None:
                module += f"+{frame.module_offset:#x}"  # no symbol: what addr2line wants
            rest += f"  ({module})"
        rest += f"  [{frame.method.value}]"
        if len(_plain_rests) >= _MAX_PLAIN_RESTS:
            _plain_rests.clear()
        _plain_rests[key] = rest
    return rest


#: Frame lines' rests by what makes them (:func:`_plain_rest`), at most this many.
_MAX_PLAIN_RESTS = 1 << 14
_plain_rests: dict[tuple[object, ...], str] = {}


def _index_prefixes(width: int, count: int) -> list[str]:
    """The text before the pc's digits on the lines of frames 0 to ``count - 1`` of a thread
    whose indexes are ``width`` digits wide (``  #3   0x``), made once per width."""
    prefixes = _prefixes.get(width)
    if prefixes is None:
        prefixes = _prefixes[width] = []
    for index in range(len(prefixes), count):
        prefixes.append(f"  #{index:<{width}}  0x")
    return prefixes


#: The prefixes of :func:`_index_prefixes`, by width (as many as the longest thread's frames).
_prefixes: dict[int, list[str]] = {}


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


def to_processes_document(results: list[ProcessResult]) -> dict[str, Any]:
    """The ``--json`` document of a many-process run: one entry per process, in order.

    Each entry carries the process's backtrace as the document a
    one-process run prints (``backtrace``), or null and the ``error`` that
    kept it from being taken.  ``complete``: every process backtraced, every
    walk complete.
    """
    return {
        "$schema": SCHEMA_ID,
        "schema_version": SCHEMA_VERSION,
        "complete": all(
            result.backtrace is not None and result.backtrace.complete for result in results
        ),
        "processes": [
            {
                "pid": result.pid,
                "name": result.name,
                "error": result.error,
                "backtrace": None
                if result.backtrace is None
                else to_json_document(result.backtrace),
            }
            for result in results
        ],
    }


def format_processes_json(results: list[ProcessResult]) -> str:
    import json

    return json.dumps(to_processes_document(results), indent=2) + "\n"


def to_cores_document(results: list[CoreResult], groups: list[Group] | None) -> dict[str, Any]:
    """The ``--json`` document of a many-core run: one entry per core, in order; with
    ``--group``, the crash signatures, most cores first.

    Each entry carries the core's backtrace as the document a one-core run
    prints, or null and the ``error`` that kept it from being read; ``group``
    is the index of its signature in ``groups`` (null without ``--group``
    or without a backtrace).  ``complete``: every core read, every walk
    complete.
    """
    document: dict[str, Any] = {
        "$schema": SCHEMA_ID,
        "schema_version": SCHEMA_VERSION,
        "complete": all(
            result.backtrace is not None and result.backtrace.complete for result in results
        ),
        "cores": [
            {
                "path": result.path,
                "program": result.program,
                "error": result.error,
                "group": result.group,
                "backtrace": None
                if result.backtrace is None
                else to_json_document(result.backtrace),
            }
            for result in results
        ],
    }
    if groups is not None:
        document["groups"] = [
            {
                "program": group.signature.program,
                "signal": group.signature.signal,
                "frames": list(group.signature.frames),
                "count": group.count,
                "examples": group.examples,
            }
            for group in groups
        ]
    return document


def format_cores_json(results: list[CoreResult], groups: list[Group] | None) -> str:
    import json

    return json.dumps(to_cores_document(results, groups), indent=2) + "\n"
