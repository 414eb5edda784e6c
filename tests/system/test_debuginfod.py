"""debuginfod: a module's debug file from a real local server, then from the client cache.

Each program runs from a folder that holds only its stripped executable: no
debug file beside it, none under /usr/lib/debug.  Debug files are served by
Debian's ``debuginfod`` inside a network namespace with only loopback
(``tests/support/debuginfod_probe.py`` and ``debuginfod_oracles_probe.py``,
run under ``unshare -n``).

- ``--lines`` through the server (behind a server that refuses connections
  and one that accepts and never answers), then from the cache once the
  server is gone: logical frames equal gdb's.
- Plain backtraces of programs built ``gcc -g`` and stripped — without a
  ``.symtab`` (names from the debug file's), without CFI (``.debug_frame``
  from the debug file), with a debug file that has no ``.symtab`` either
  (names from DWARF) — name every frame as gdb and eu-stack do with the same
  server; a program with its own ``.symtab`` and ``.eh_frame`` costs the
  server no request (its request counter says so).
- A server that answers too slowly, or with garbage (not HTTP, not ELF, the
  wrong build-id, cut short, too large), costs one note and at most its
  timeout; the frames still print, unnamed, and nothing enters the cache.
  That server is a small one of the test's own.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from liveunwind.formats.elf import ElfImage
from tests.support.cli import run_cli
from tests.support.lines import differences, gdb_logical_frames
from tests.support.paths import SUPPORT, TESTPROGS
from tests.support.programs import RunningProgram, start_program

PROBE = SUPPORT / "debuginfod_probe.py"
ORACLES_PROBE = SUPPORT / "debuginfod_oracles_probe.py"
LINES_SOURCES = [TESTPROGS / "lines" / name for name in ("lines.c", "helper.c")]
#: The functions of testprogs/lines every stack of it shows.
LINES_FUNCTIONS = {
    "main", "worker_chain", "worker_twice", "middle", "worker_middle", "worker_block",
    "recurse", "worker_recurse",
}  # fmt: skip


def _require(tool: str) -> None:
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed")


def test_frames_through_a_local_debuginfod_and_its_cache(
    lines_build: Path, tmp_path: Path, gdb: str
) -> None:
    for tool in ("debuginfod", "unshare", "ip"):
        _require(tool)
    build = lines_build
    program_dir, served, cache, work = (tmp_path / name for name in ("bin", "srv", "cache", "w"))
    for directory in (program_dir, served, work):
        directory.mkdir()
    shutil.copy(build / "lines-split", program_dir)
    shutil.copy(build / "lines-split", served)
    shutil.copy(build / "lines-split.debug", served)
    build_id = ElfImage((build / "lines-split").read_bytes()).build_id
    assert build_id is not None
    hex_id = build_id.hex()
    # gdb's copy: by build-id in a debug directory liveunwind is not told about.
    gdb_debug = tmp_path / "gdb-debug" / ".build-id" / hex_id[:2]
    gdb_debug.mkdir(parents=True)
    shutil.copy(build / "lines-split.debug", gdb_debug / f"{hex_id[2:]}.debug")
    gdb_dirs = f"/usr/lib/debug:{tmp_path / 'gdb-debug'}"

    with start_program(program_dir, "lines-split") as running:
        probe = subprocess.run(
            [
                "unshare",
                "-n",
                sys.executable,
                str(PROBE),
                str(running.pid),
                str(served),
                str(cache),
                str(work),
                hex_id,
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert probe.returncode == 0, probe.stderr
        theirs = gdb_logical_frames(running.pid, (f"set debug-file-directory {gdb_dirs}",))
    report = json.loads(probe.stdout.splitlines()[-1])

    for phase in ("served", "cached"):
        ours = {int(tid): frames for tid, frames in report[phase]["frames"].items()}
        ours = {tid: [[tuple(entry) for entry in frame] for frame in f] for tid, f in ours.items()}
        assert differences(ours, theirs) == [], phase
        names = {entry[0] for frames in ours.values() for frame in frames for entry in frame}
        assert {"chain_level3", "inner_wait", "worker_block"} <= names, phase
    # The refusing and the silent server were each tried once, then left alone.
    served_problems = report["served"]["problems"]
    assert len([p for p in served_problems if "not asked again" in p]) == 2, served_problems
    assert 2.0 <= report["served_seconds"] < 30
    missing, seconds = report["unknown_build_id"]
    assert missing is None and seconds < 1.0
    assert report["cached"]["problems"] == []
    assert (cache / hex_id / "debuginfo").is_file()
    executable = report["executable"]
    assert executable == str(cache / hex_id / "executable")
    assert ElfImage(Path(executable).read_bytes()).build_id == build_id


# -- plain backtraces of stripped programs: names and CFI from the server -----------------------


def _build_id(path: Path) -> str:
    build_id = ElfImage(path.read_bytes()).build_id
    assert build_id is not None, path
    return build_id.hex()


def _sections(path: Path) -> set[str]:
    return set(ElfImage(path.read_bytes()).sections)


@pytest.fixture(scope="module")
def stripped_programs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """testprogs/lines built ``gcc -g`` four ways; bin/ holds the programs, srv/ the debug files.

    - ``stripped``: ``strip``ped (``.dynsym`` only), ``.eh_frame`` kept;
    - ``nocfi``: built without unwind tables (gcc -g writes ``.debug_frame``),
      stripped, ``.eh_frame`` of the C runtime's files removed too;
    - ``dwarfonly``: stripped, and its debug file has no ``.symtab`` either;
    - ``complete``: not stripped (its own ``.symtab`` and ``.eh_frame``);
    - ``linked``: stripped, with a ``.gnu_debuglink`` to its debug file beside
      it in bin/ (a local debug file, which comes before the server's copy).

    Each is built with other flags, so that no two share a build-id.
    """
    for tool in ("gcc", "objcopy", "strip"):
        _require(tool)
    root = tmp_path_factory.mktemp("stripped")
    built, programs, served = root / "build", root / "bin", root / "srv"
    for directory in (built, programs, served):
        directory.mkdir()
    flags = {
        "stripped": [],
        "nocfi": ["-fno-asynchronous-unwind-tables", "-fno-unwind-tables"],
        "dwarfonly": ["-fno-omit-frame-pointer"],
        "complete": ["-fno-inline-small-functions"],
        "linked": ["-fno-ipa-icf"],
    }
    for name, extra in flags.items():
        full = built / name
        compile_ = ["gcc", "-O2", "-g", "-pthread", "-Wl,--build-id", *extra, "-o", str(full)]
        subprocess.run([*compile_, *map(str, LINES_SOURCES)], check=True)
        if name == "complete":
            shutil.copy(full, programs / name)
            continue
        debug = served / f"{name}.debug"
        subprocess.run(["objcopy", "--only-keep-debug", str(full), str(debug)], check=True)
        strip = ["strip", "-o", str(programs / name), str(full)]
        if name == "nocfi":
            strip[1:1] = ["-R", ".eh_frame", "-R", ".eh_frame_hdr"]
        subprocess.run(strip, check=True)
        if name == "dwarfonly":  # objcopy keeps .symtab; strip drops it, and keeps DWARF so
            subprocess.run(
                ["strip", "--strip-all", "--keep-section=.debug_*", str(debug)], check=True
            )
        if name == "linked":
            shutil.copy(debug, programs / debug.name)
            link = f"--add-gnu-debuglink={programs / debug.name}"
            subprocess.run(["objcopy", link, str(programs / name)], check=True)
    # What each variant is said to be, checked.
    assert ".symtab" not in _sections(programs / "stripped")
    assert ".eh_frame" in _sections(programs / "stripped")
    assert not {".eh_frame", ".debug_frame", ".symtab"} & _sections(programs / "nocfi")
    assert ".debug_frame" in _sections(served / "nocfi.debug")
    assert ".symtab" not in _sections(served / "dwarfonly.debug")
    assert ".debug_info" in _sections(served / "dwarfonly.debug")
    assert {".symtab", ".eh_frame"} <= _sections(programs / "complete")
    return root


def _named_frames(thread: dict, module: str) -> list[tuple[int, int, str | None]]:
    """(index, pc, function) of a liveunwind JSON thread's frames in ``module``."""
    return [
        (index, frame["pc"], frame["function"])
        for index, frame in enumerate(thread["frames"])
        if Path(frame["module"] or "").name == module
    ]


def _oracle_name(name: str | None) -> str | None:
    return None if name in (None, "??") else name


def test_stripped_programs_are_named_through_debuginfod_as_gdb_and_eu_stack_name_them(
    stripped_programs: Path, tmp_path: Path
) -> None:
    for tool in ("debuginfod", "unshare", "ip", "gdb", "eu-stack"):
        _require(tool)
    names = ("stripped", "nocfi", "dwarfonly", "complete", "linked")
    programs = [start_program(stripped_programs / "bin", name) for name in names]
    try:
        probe = subprocess.run(
            ["unshare", "-n", sys.executable, str(ORACLES_PROBE), str(stripped_programs / "srv")]
            + [str(tmp_path)]
            + [str(program.pid) for program in programs],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    finally:
        for program in programs:
            program.stop()
    assert probe.returncode == 0, probe.stderr
    report = json.loads(probe.stdout.splitlines()[-1])

    for name, program in zip(names, programs):
        seen = report[str(program.pid)]
        assert seen["ours"] is not None, (name, seen["stderr"])
        assert "Traceback" not in seen["stderr"], seen["stderr"]
        found: set[str] = set()
        for thread in seen["ours"]["threads"]:
            gdb = seen["gdb"][str(thread["tid"])]
            physical = [frame for frame in gdb if frame[2] not in ("inline", "tailcall")]
            eu = seen["eu"][str(thread["tid"])]
            ours = _named_frames(thread, name)
            assert ours, (name, thread)
            for index, pc, function in ours:
                where = f"{name} thread {thread['tid']} #{index} {pc:#x}"
                assert physical[index][0] == pc, (where, physical)
                assert function == _oracle_name(physical[index][1]), (where, "gdb", physical)
                assert eu[index][0] == pc, (where, eu)
                # eu-stack names from symbol tables only: where there is none, nothing.
                eu_name = None if name == "dwarfonly" else function
                assert _oracle_name(eu[index][1]) == eu_name, (where, "eu-stack", eu)
                found.add(function or "??")
        assert found >= LINES_FUNCTIONS, (name, found)
    # A module with what it needs never asks, nor one whose local debug file has it; each
    # other stripped program asks once, for its own file (libc and the loader have theirs
    # locally: libc6-dbg).
    requests = {name: report[str(p.pid)]["requests"] for name, p in zip(names, programs)}
    expected = {"stripped": 1, "nocfi": 1, "dwarfonly": 1, "complete": 0, "linked": 0}
    assert requests == expected, requests
    # Unwound through the debug file's .debug_frame: the program has no CFI of its own.
    nocfi = report[str(programs[1].pid)]["ours"]
    methods = {
        frame["method"]
        for thread in nocfi["threads"]
        for frame in thread["frames"][1:]
        if Path(frame["module"] or "").name == "nocfi"
    }
    assert methods == {"cfi"}, methods


# -- a server that answers too slowly or with garbage -------------------------------------------

#: DEBUGINFOD_TIMEOUT of the fault cases, and what a run may vary by on a busy machine.
FAULT_TIMEOUT = 2.0
RUN_SLACK = 3.0
#: DEBUGINFOD_MAXSIZE of the fault cases: the stream that never ends stops here.
FAULT_MAXSIZE = 4 << 20


class _BadServer(http.server.ThreadingHTTPServer):
    """Answers every request the way ``mode`` says; ``good`` is the real debug file."""

    daemon_threads = True

    def __init__(self, good: bytes, other: bytes) -> None:
        super().__init__(("127.0.0.1", 0), _BadHandler)
        self.good, self.other = good, other
        self.mode = ""
        self.released = threading.Event()
        self.requests = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _BadHandler(http.server.BaseHTTPRequestHandler):
    server: _BadServer

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        server = self.server
        server.requests += 1
        mode = server.mode
        if mode == "silent":  # accepts, reads the request, never answers
            server.released.wait(60)
            return
        if mode == "not-http":
            self.wfile.write(b"SSH-2.0-OpenSSH_9.2\r\n\r\n")
            return
        body = {
            "not-elf": b"<html><body>debuginfod is down for maintenance</body></html>\n" * 50,
            "wrong-build-id": server.other,
            "cut-short": server.good,
            "whole-but-cut": server.good[: len(server.good) // 2],
            "trickle": server.good,
        }.get(mode, b"")
        self.send_response(200)
        if mode == "declared-huge":
            self.send_header("Content-Length", str(1 << 40))
            self.end_headers()
            return
        if mode == "endless":  # an ELF header, then zeros as fast as they go, no length
            self.end_headers()
            self.wfile.write(server.good[:64])
            chunk = bytes(1 << 16)
            while not server.released.is_set():
                try:
                    self.wfile.write(chunk)
                except OSError:
                    return
            return
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if mode == "cut-short":
            self.wfile.write(body[: len(body) // 2])
            return
        if mode == "trickle":
            for byte in body:
                if server.released.wait(0.2):
                    return
                try:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                except OSError:
                    return
            return
        self.wfile.write(body)

    def handle_one_request(self) -> None:
        with contextlib.suppress(OSError):  # the client hung up, as it should
            super().handle_one_request()


@pytest.fixture(scope="module")
def bad_server(stripped_programs: Path) -> Iterator[_BadServer]:
    served = stripped_programs / "srv"
    server = _BadServer(
        (served / "stripped.debug").read_bytes(), (served / "nocfi.debug").read_bytes()
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.released.set()
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def stripped_running(stripped_programs: Path) -> Iterator[RunningProgram]:
    with start_program(stripped_programs / "bin", "stripped") as running:
        yield running


FAULTS = {
    "silent": "no answer within DEBUGINFOD_TIMEOUT=2 s; not asked again",
    "trickle": "under 100 KiB per DEBUGINFOD_TIMEOUT=2 s; not asked again",
    "not-http": "not an HTTP answer",
    "not-elf": "sent something that is not an ELF file; ignored",
    "wrong-build-id": "sent build-id ",
    "cut-short": "cut short",
    "whole-but-cut": "sent a file cut short",
    "declared-huge": f"{1 << 40} bytes, larger than allowed ({FAULT_MAXSIZE})",
    "endless": f"sent more than allowed ({FAULT_MAXSIZE} bytes)",
}


@pytest.mark.parametrize("mode", FAULTS)
def test_a_debuginfod_that_answers_slowly_or_with_garbage_costs_one_note(
    mode: str, bad_server: _BadServer, stripped_running: RunningProgram, tmp_path: Path
) -> None:
    pid = str(stripped_running.pid)
    cache = tmp_path / "cache"
    started = time.monotonic()
    without = run_cli("pid", pid)
    baseline = time.monotonic() - started
    assert without.returncode == 0, without.stderr
    bad_server.mode = mode
    bad_server.requests = 0
    environment = {
        "DEBUGINFOD_URLS": bad_server.url,
        "DEBUGINFOD_TIMEOUT": str(FAULT_TIMEOUT),
        "DEBUGINFOD_MAXSIZE": str(FAULT_MAXSIZE),
        "DEBUGINFOD_CACHE_PATH": str(cache),
    }
    saved = {name: os.environ.get(name) for name in environment}
    os.environ.update(environment)
    try:
        started = time.monotonic()
        result = run_cli("pid", pid, timeout=60)
        seconds = time.monotonic() - started
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert bad_server.requests == 1
    notes = [line for line in result.stdout.splitlines() if line.startswith("note: debuginfod")]
    assert len(notes) == 1 and FAULTS[mode] in notes[0], notes
    # Within the timeout, never a hang: beyond a run without a server, at most the timeout
    # (twice it for a server that answered in time and then stalled), and some slack.
    assert seconds < baseline + 2 * FAULT_TIMEOUT + RUN_SLACK, (seconds, baseline)
    # The rest of the backtrace prints: the same frames as without a server, unnamed there.
    ours = [line for line in result.stdout.splitlines() if not line.startswith("note:")]
    theirs = without.stdout.splitlines()
    ours, theirs = ([line for line in lines if line] for lines in (ours, theirs))
    assert [line.split()[:2] for line in ours] == [line.split()[:2] for line in theirs]
    assert "worker_chain" not in result.stdout
    # Nothing enters the cache, and nothing partial is left there.
    leftovers = [path for path in cache.rglob("*") if path.is_file()] if cache.exists() else []
    assert leftovers == [], leftovers
