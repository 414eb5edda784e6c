"""Shared by the ``--lines`` tests: the lines program, liveunwind's logical frames, gdb's.

Both sides are reduced to one shape: thread id → physical frames, frame 0
first, each a list of logical frames innermost first, each a
``(function, file, line)`` triple.  liveunwind's physical frames come from
``liveunwind.attach``; each frame's module is a :class:`FileModule` built from
the file ``/proc/PID/maps`` names for its pc (what a module offers the line
engine: path, image, build-id, debug file, load bias).  gdb's come from
``gdb_lines.py`` run in gdb on the same stopped process, its inline frames
grouped with the physical frame that follows them and its tail-call frames
(reconstructed from call-site DWARF, with no stack frame of their own) left
out, as the physical-frame oracles do.
"""

from __future__ import annotations

import json
import mmap
import os
import subprocess
from pathlib import Path

from liveunwind.formats.elf import ElfImage
from liveunwind.modules.debuginfo import DEFAULT_DEBUG_DIRS, find_debug_file
from liveunwind.modules.lines import read_lines

GDB_LINES = Path(__file__).with_name("gdb_lines.py")
GDB_MARKER = "LIVEUNWIND-GDB-LINES "

Logical = tuple[str | None, str | None, int | None]
LogicalFrames = dict[int, list[list[Logical]]]


class FileModule:
    """A loaded ELF file as the line engine sees a module: image, debug file, load bias."""

    def __init__(self, path: str, load_bias: int, debug_dirs: tuple[str, ...]) -> None:
        self.path = path
        self.problems: list[str] = []
        with open(path, "rb") as stream:
            data = mmap.mmap(stream.fileno(), 0, prot=mmap.PROT_READ)
        self.image = ElfImage(data, origin=path)
        self.build_id = self.image.build_id
        self.debug_file = find_debug_file(
            self.image, path, self.build_id, debug_dirs, problems=self.problems
        )
        self.load_bias = load_bias
        self.lines = read_lines(self)


def file_mappings(pid: int) -> list[tuple[int, int, str]]:
    """(start, end, path) of every file mapping of ``pid``."""
    found = []
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) == 6 and parts[5].startswith("/"):
            start, end = (int(text, 16) for text in parts[0].split("-"))
            found.append((start, end, parts[5]))
    return found


def liveunwind_logical_frames(
    pid: int, debug_dirs: tuple[str, ...] = DEFAULT_DEBUG_DIRS, problems: list[str] | None = None
) -> tuple[LogicalFrames, list[FileModule]]:
    """Every thread's physical frames with their logical frames, as liveunwind finds them.

    ``problems``, if given, receives the backtrace's own (a debug file the
    backtrace fetched for names is then the line engine's too, without a word).
    """
    from liveunwind import attach
    from liveunwind.modules.lines import locate

    backtrace = attach(pid)
    if problems is not None:
        problems.extend(backtrace.problems)
    mappings = file_mappings(pid)
    modules: dict[str, FileModule] = {}
    result: LogicalFrames = {}
    for thread in backtrace.threads:
        frames = result.setdefault(thread.tid, [])
        for frame in thread.frames:
            path = next((p for start, end, p in mappings if start <= frame.pc < end), None)
            if path is None or frame.module_offset is None:
                frames.append([])
                continue
            module = modules.get(path)
            if module is None:
                module = FileModule(path, frame.pc - frame.module_offset, debug_dirs)
                modules[path] = module
            located = locate(module, frame.pc, frame.exact_pc)
            frames.append([(loc.function, loc.file, loc.line) for loc in located])
    return result, list(modules.values())


def gdb_logical_frames(pid: int, setup: tuple[str, ...] = ()) -> LogicalFrames:
    """Every thread's physical frames with their logical frames, as gdb shows them."""
    argv = ["gdb", "-batch", "-nx", "-iex", "set debuginfod enabled off"]
    for command in setup:
        argv += ["-iex", command]
    argv += ["-x", str(GDB_LINES), "-ex", "detach", "-p", str(pid)]
    result = subprocess.run(
        argv, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL, check=False
    )
    for line in result.stdout.splitlines():
        if line.startswith(GDB_MARKER):
            threads = json.loads(line[len(GDB_MARKER) :])
            return {thread["tid"]: _group(thread["frames"]) for thread in threads}
    raise AssertionError(f"gdb printed no frames:\n{result.stdout}\n{result.stderr}")


def _group(frames: list[dict]) -> list[list[Logical]]:
    """gdb's frames grouped per physical frame: its inline frames, then itself."""
    grouped: list[list[Logical]] = []
    pending: list[Logical] = []
    for frame in frames:
        entry = (frame["name"], frame["fullname"], frame["line"])
        pending.append(entry)
        if frame["kind"] == "inline":
            continue
        if frame["kind"] != "tailcall":
            # A frame in code without line information (``_start``) is named
            # from the symbol table, which is not the line engine's business.
            without_lines = len(pending) == 1 and pending[0][1:] == (None, None)
            grouped.append([] if without_lines else pending)
        pending = []
    return grouped


def same_file(ours: str | None, gdbs: str | None) -> bool:
    """Whether liveunwind's file is gdb's.

    gdb's full name joins the compilation directory to the file's path;
    where that directory is absolute (the test programs) both must name the
    same normalised path; where it is relative (Debian's libc is built with
    ``-fdebug-prefix-map`` to ``.``) gdb joins it twice, so only the base
    names can be compared.
    """
    if ours is None or gdbs is None:
        return ours is None and gdbs is None
    if gdbs.startswith("/"):
        return os.path.normpath(ours) == os.path.normpath(gdbs)
    return os.path.basename(ours) == os.path.basename(gdbs)


def differences(ours: LogicalFrames, gdbs: LogicalFrames) -> list[str]:
    """Every logical frame where liveunwind and gdb disagree, described; [] if none."""
    found = []
    if sorted(ours) != sorted(gdbs):
        return [f"threads differ: {sorted(ours)} vs gdb {sorted(gdbs)}"]
    for tid, frames in ours.items():
        theirs = gdbs[tid]
        if len(frames) != len(theirs):
            found.append(f"tid {tid}: {len(frames)} physical frames, gdb {len(theirs)}")
        for index, (mine, gdb) in enumerate(zip(frames, theirs)):
            agree = len(mine) == len(gdb) and all(
                a[0] == b[0] and a[2] == b[2] and same_file(a[1], b[1]) for a, b in zip(mine, gdb)
            )
            if not agree:
                found.append(f"tid {tid} frame {index}:\n  ours {mine}\n  gdb  {gdb}")
    return found
