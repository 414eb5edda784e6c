"""Outside oracles: the backtraces gdb and eu-stack find for a process or core.

liveunwind's end-to-end tests compare its frames with what established
unwinders report for the same stopped stacks. Both tools are run as
subprocesses and their answers reduced to the same shape: thread id -> frames,
frame 0 first, where a frame's pc is the exact pc for frame 0 and for a frame
interrupted by a signal, and the return address (not return address - 1) for
every other frame. That is what gdb's ``frame.pc()`` gives and what eu-stack
prints, and what liveunwind's ``Frame.pc`` is expected to hold.

gdb and eu-stack both attach with ptrace and a thread can have only one tracer,
so call them one after the other, never concurrently on the same process.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

GDB_SCRIPT = Path(__file__).with_name("gdb_frames.py")
GDB_MARKER = "LIVEUNWIND-GDB-FRAMES "
TOOL_TIMEOUT = 300.0
"""Seconds an oracle may take: gdb walks a 10000-frame stack in Python slowly."""


class OracleError(RuntimeError):
    """An oracle tool failed or printed something this module cannot read."""


@dataclass(frozen=True)
class OracleFrame:
    """One frame as an oracle reported it.

    ``kind`` is gdb's frame type ("normal", "inline", "sigtramp", "tailcall",
    ...); eu-stack does not classify frames, so its frames have ``kind=None``.
    ``name`` is the function name the tool found, or None; it is there so that
    failing comparisons print something a person can read.
    """

    pc: int
    name: str | None
    kind: str | None = None

    def __str__(self) -> str:
        kind = f" [{self.kind}]" if self.kind not in (None, "normal") else ""
        return f"{self.pc:#x} {self.name or '??'}{kind}"


Backtraces = dict[int, list[OracleFrame]]
"""Thread id -> frames, frame 0 first."""


def physical(frames: list[OracleFrame]) -> list[OracleFrame]:
    """Drop gdb's virtual frames, leaving one frame per real stack frame.

    gdb shows an inlined call as a frame of its own with the same pc as the
    frame it was inlined into, and reconstructs calls that ended in a tail jump
    ("tailcall" frames) from DWARF call-site information; neither has a frame
    on the stack, so an unwinder (and eu-stack) cannot see them.
    """
    return [f for f in frames if f.kind not in ("inline", "tailcall")]


def pcs(frames: list[OracleFrame]) -> list[int]:
    """Return the pcs of the physical frames: the list unwinders are compared on."""
    return [f.pc for f in physical(frames)]


def describe(frames: list[OracleFrame]) -> str:
    """Render frames one per line, numbered, for assertion messages."""
    return "\n".join(f"#{i:<3} {frame}" for i, frame in enumerate(frames))


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """Run an oracle tool, capturing its output; a hang becomes an OracleError."""
    try:
        return subprocess.run(
            argv,
            check=False,  # callers judge the output: eu-stack exits 1 on partial stacks
            capture_output=True,
            text=True,
            timeout=TOOL_TIMEOUT,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        raise OracleError(f"{argv[0]} did not finish within {TOOL_TIMEOUT} s: {argv}") from exc
    except FileNotFoundError as exc:
        raise OracleError(f"{argv[0]} is not installed") from exc


def _gdb_argv(gdb: str, max_frames: int, setup: list[str]) -> list[str]:
    """Build the gdb command line shared by the live and the core oracle.

    ``setup`` commands run before the target is loaded (``-iex``), which is when
    sysroot and solib-search-path must be set. debuginfod stays off so that no
    test waits on the network.
    """
    argv = [gdb, "-batch", "-nx", "-iex", "set debuginfod enabled off"]
    for command in setup:
        argv += ["-iex", command]
    return [*argv, "-ex", f"set $lu_max_frames = {max_frames}", "-x", str(GDB_SCRIPT)]


def parse_gdb(result: subprocess.CompletedProcess[str]) -> Backtraces:
    """Read the marker line printed by gdb_frames.py; anything else is noise."""
    for line in result.stdout.splitlines():
        if line.startswith(GDB_MARKER):
            threads = json.loads(line[len(GDB_MARKER) :])
            return {
                t["tid"]: [OracleFrame(f["pc"], f["name"], f["kind"]) for f in t["frames"]]
                for t in threads
            }
    raise OracleError(
        f"gdb printed no frames (exit {result.returncode}):\n{result.stdout}\n{result.stderr}"
    )


def gdb_backtraces(
    pid: int,
    *,
    gdb: str = "gdb",
    max_frames: int = 0,
    sysroot: str | None = None,
    executable: str | None = None,
    debuginfod: bool = False,
) -> Backtraces:
    """Every thread's frames of live process ``pid`` as gdb unwinds them.

    gdb attaches, walks all threads, and detaches: the process keeps running.
    ``max_frames`` limits frames per thread (0: no limit). ``sysroot`` is where
    gdb finds the process's libraries (``/proc/PID/root`` for a chroot), and
    ``executable`` the program when gdb cannot (``/proc/PID/exe`` in a chroot).
    With ``debuginfod`` gdb asks the servers of ``DEBUGINFOD_URLS`` for debug files.
    """
    setup = [f"set sysroot {sysroot}"] if sysroot else []
    if debuginfod:
        setup.append("set debuginfod enabled on")
    program = [executable] if executable else []
    argv = [*_gdb_argv(gdb, max_frames, setup), "-ex", "detach", *program, "-p", str(pid)]
    return parse_gdb(_run(argv))


def gdb_core_backtraces(
    core: Path | str,
    exe: Path | str,
    *,
    sysroot: Path | str | None = None,
    solib_search_path: Path | str | None = None,
    gdb: str = "gdb",
    max_frames: int = 0,
) -> Backtraces:
    """Every thread's frames in core file ``core`` of ``exe`` as gdb unwinds them.

    ``sysroot`` and ``solib_search_path`` locate the shared libraries of a core
    from another system (e.g. an aarch64 core read by gdb-multiarch).
    """
    setup = []
    if sysroot is not None:
        setup.append(f"set sysroot {sysroot}")
    if solib_search_path is not None:
        setup.append(f"set solib-search-path {solib_search_path}")
    argv = [*_gdb_argv(gdb, max_frames, setup), str(exe), str(core)]
    return parse_gdb(_run(argv))


def gdb_gcore(pid: int, core: Path | str, *, gdb: str = "gdb") -> None:
    """Write a core file of live process ``pid`` with gdb's gcore; it keeps running.

    Gives the core-file oracle (and liveunwind's core support) a core whose
    stacks are known to match a live process, without crashing anything.
    """
    argv = [gdb, "-batch", "-nx", "-iex", "set debuginfod enabled off"]
    argv += ["-ex", f"gcore {core}", "-ex", "detach", "-p", str(pid)]
    result = _run(argv)
    if not Path(core).is_file():
        raise OracleError(f"gdb wrote no core (exit {result.returncode}):\n{result.stderr}")


def gdb_run_to_core(
    program: Path | str, commands: list[str], core: Path | str, *, gdb: str = "gdb"
) -> str:
    """Runs ``program`` under gdb, which stops it where ``commands`` (breakpoints,
    ``run``, ``continue``…) say, writes its core there and kills it; gdb's output.

    The core of a program caught at an instant no signal could choose (inside
    a given function), for the tests of what a walk does there.
    """
    argv = [gdb, "-batch", "-nx", "-iex", "set debuginfod enabled off"]
    for command in ["set pagination off", "set confirm off", *commands]:
        argv += ["-ex", command]
    argv += ["-ex", f"generate-core-file {core}", "-ex", "kill", str(program)]
    result = _run(argv)
    if not Path(core).is_file():
        raise OracleError(
            f"gdb wrote no core (exit {result.returncode}):\n{result.stdout}\n{result.stderr}"
        )
    return result.stdout


_EU_THREAD = re.compile(r"^TID (\d+):$")
# "#3  0x000056278e7401d7 - 1 from_library": with -a, " - 1" marks a return
# address (eu-stack looks its symbol up at pc - 1); the name may be missing.
_EU_FRAME = re.compile(r"^#(\d+)\s+0x([0-9a-f]+)(?: - 1)?\s*(\S.*)?$")


def parse_eu_stack(text: str) -> Backtraces:
    """Parse ``eu-stack -a`` output into thread id -> frames.

    The printed address is kept as is: eu-stack prints the return address even
    where it marks the frame with " - 1", which is what gdb's frame.pc() holds.
    """
    threads: Backtraces = {}
    current: list[OracleFrame] | None = None
    for line in text.splitlines():
        if match := _EU_THREAD.match(line):
            current = threads.setdefault(int(match[1]), [])
        elif (match := _EU_FRAME.match(line)) and current is not None:
            if int(match[1]) != len(current):
                raise OracleError(f"eu-stack frame numbers out of order at: {line!r}")
            current.append(OracleFrame(int(match[2], 16), match[3]))
    return threads


def eu_stack_backtraces(pid: int, *, eu_stack: str = "eu-stack", max_frames: int = 0) -> Backtraces:
    """Every thread's frames of live process ``pid`` as elfutils' eu-stack unwinds them.

    eu-stack exits 1 when some stack ended in an error but still prints what it
    found; that is an answer, so only "no threads at all" is an OracleError.
    """
    result = _run([eu_stack, "-a", "-n", str(max_frames), "-p", str(pid)])
    threads = parse_eu_stack(result.stdout)
    if not threads:
        raise OracleError(
            f"eu-stack printed no threads (exit {result.returncode}):\n{result.stderr}"
        )
    return threads
