"""End to end through JIT code: libunwind DYNAMIC and REMOTE_TABLE, the GDB JIT interface.

Each program in testprogs/jit copies two functions into anonymous executable
memory (whose frames neither frame pointers nor any file's CFI describe),
registers them one of three ways, and prints the true call chain it built:
``chain: blocker jit_inner jit_outer main``.  Run with ``scramble``, a program
undoes and overwrites its registrations the moment a tracer lets it run
again: the backtrace must still be the one of the instant it was stopped.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import liveunwind
from liveunwind.backtrace.backtracer import Backtracer
from liveunwind.backtrace.session import Session
from liveunwind.errors import MemoryReadError
from liveunwind.formats.unwind.perfmap import PerfMapView
from liveunwind.frames import Method, ThreadBacktrace
from liveunwind.modules.modulemap import ModuleMap
from liveunwind.modules.perfmapfile import PerfMapFile
from liveunwind.targets.live import procfs
from liveunwind.targets.live.ptrace import PtraceProcess
from liveunwind.targets.live.snapshot import Snapshot
from tests.support.oracles import gdb_backtraces, gdb_gcore, pcs
from tests.support.programs import RunningProgram, start_program
from tests.support.startup import HEAVY, modules_a_backtrace_loaded

PROGRAMS = {"jit-dynamic": "libunwind", "jit-table": "perf-map", "jit-gdb": "gdb-jit"}


@pytest.fixture
def jit_program(jit_build: Path, request: pytest.FixtureRequest) -> Iterator[tuple[int, list[str]]]:
    """Starts a JIT program; yields its pid, once it sleeps, and the chain it says it built."""
    with start_program(jit_build, request.param) as program:
        lines = program.output.decode().splitlines()
        chain = next(line.split()[1:] for line in lines if line.startswith("chain:"))
        try:
            yield program.pid, chain
        finally:
            Path(f"/tmp/perf-{program.pid}.map").unlink(missing_ok=True)


CHAIN = ["blocker", "jit_inner", "jit_outer", "main"]


def assert_through_jit_frames(thread: ThreadBacktrace) -> None:
    """The thread holds the programs' chain, unwound through the JIT frames as they registered."""
    assert thread.complete, thread.stop_text
    names = [frame.function for frame in thread.frames]
    start = names.index("blocker")
    assert names[start : start + 4] == CHAIN
    jit_frames = thread.frames[start + 1 : start + 3]
    assert all((frame.module or "").startswith("[jit ") for frame in jit_frames)
    # jit_inner's and jit_outer's callers are found by what was registered.
    assert [frame.method for frame in thread.frames[start + 2 : start + 4]] == [Method.DYNAMIC] * 2


@pytest.mark.parametrize("jit_program", sorted(PROGRAMS), indirect=True)
def test_backtrace_goes_through_jit_frames(jit_program: tuple[int, list[str]]) -> None:
    pid, chain = jit_program
    assert chain == CHAIN
    assert_through_jit_frames(liveunwind.attach(pid).threads[0])


@pytest.mark.parametrize("jit_program", ["jit-gdb"], indirect=True)
def test_gdb_agrees_on_the_gdb_jit_program(jit_program: tuple[int, list[str]], gdb: str) -> None:
    pid, _ = jit_program
    ours = [frame.pc for frame in liveunwind.attach(pid).threads[0].frames]
    assert ours == pcs(gdb_backtraces(pid, gdb=gdb)[pid])


@pytest.mark.parametrize("jit_program", ["jit-dynamic"], indirect=True)
def test_without_the_registry_the_walk_stops_in_jit_code(
    jit_program: tuple[int, list[str]],
) -> None:
    pid, _ = jit_program
    thread = liveunwind.attach(pid, unwinders=("cfi",)).threads[0]
    assert not thread.complete
    assert thread.frames[-1].function == "jit_inner"


@pytest.mark.parametrize("jit_program", sorted(PROGRAMS), indirect=True)
def test_the_same_from_a_gcore_core(
    jit_program: tuple[int, list[str]], gdb: str, tmp_path: Path
) -> None:
    pid, _ = jit_program
    live = liveunwind.attach(pid).threads[0]
    core = tmp_path / "jit.core"
    gdb_gcore(pid, core, gdb=gdb)
    from_core = liveunwind.open_core(str(core)).threads[0]
    assert [frame.pc for frame in from_core.frames] == [frame.pc for frame in live.frames]
    assert [frame.method for frame in from_core.frames[1:]] == [
        frame.method for frame in live.frames[1:]
    ]
    assert from_core.complete, from_core.stop_text
    jit = [frame for frame in from_core.frames if (frame.module or "").startswith("[jit ")]
    assert len(jit) == 2


# ---------------------------------------------------------------------------------------------
# The registries are copied while the process is stopped


@pytest.fixture
def scrambling(jit_build: Path) -> Iterator[Callable[[str], RunningProgram]]:
    """Starts JIT programs with ``scramble``, once all their threads sleep; stops them after."""
    started: list[RunningProgram] = []

    def run(name: str) -> RunningProgram:
        program = start_program(jit_build, name, "scramble")
        started.append(program)
        return program

    yield run
    for program in started:
        program.stop()
        Path(f"/tmp/perf-{program.pid}.map").unlink(missing_ok=True)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_registrations_undone_right_after_the_stop_do_not_change_the_backtrace(
    name: str, scrambling: Callable[[str], RunningProgram], monkeypatch: pytest.MonkeyPatch
) -> None:
    program = scrambling(name)
    walk = Backtracer.backtrace

    def walk_once_scrambled(self: Backtracer, *args: object, **kwargs: object) -> object:
        # The walk starts only once the resumed program has scrambled its
        # registrations: whatever of them it read from the process now is wrong.
        program.wait_for_line(b"scrambled\n", time.monotonic() + 10)
        return walk(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Backtracer, "backtrace", walk_once_scrambled)
    session = Session(program.pid)
    backtrace = session.backtrace()
    assert_through_jit_frames(backtrace.threads[0])
    assert backtrace.problems == []
    monkeypatch.undo()
    # The same session's next backtrace sees the registrations as they are now:
    # gone, and no rule of the first backtrace is kept for the JIT code.
    after = session.backtrace().threads[0]
    assert Method.DYNAMIC not in [frame.method for frame in after.frames]


@pytest.mark.parametrize("jit_program", sorted(PROGRAMS), indirect=True)
def test_after_the_resume_the_registry_reads_only_its_copy(
    jit_program: tuple[int, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    pid, _ = jit_program
    process = PtraceProcess(pid)
    with process:
        snapshot = Snapshot.capture(process)
        registry = ModuleMap(
            snapshot,
            perf_map=PerfMapFile(f"/proc/{pid}/root", procfs.perf_map_path(pid)).update(1 << 24),
        ).registry
        assert registry is not None
        copied = registry.read_all()
    assert copied and not process.stopped

    def live_read(address: int, size: int) -> bytes:
        raise AssertionError(f"{size} bytes at {address:#x} read from the running process")

    monkeypatch.setattr(process, "read", live_read)
    registered = [entry for entry in registry.ranges() if entry.source != "perf-map"]
    assert {"jit_outer", "jit_inner"} <= {entry.name for entry in registered} or [
        entry.name for entry in registered
    ] == ["jit-table"]
    rules = [registry.rule_for(pc) for entry in registered for pc in range(entry.start, entry.end)]
    assert sum(rule is not None for rule in rules) >= 0x2B + 0x18  # every byte of both functions
    assert registry.problems == []
    first = snapshot.mappings()[0]
    with pytest.raises(MemoryReadError, match="not copied while the process was stopped"):
        snapshot.read_frozen(first.start, 8)


@pytest.mark.parametrize("jit_program", ["jit-dynamic"], indirect=True)
def test_reads_while_stopped_are_kept_and_joined(jit_program: tuple[int, list[str]]) -> None:
    pid, _ = jit_program
    process = PtraceProcess(pid)
    with process:
        snapshot = Snapshot.capture(process)
        start = snapshot.mappings()[0].start
        pieces = [snapshot.read_frozen(start, 16), snapshot.read_frozen(start + 8, 16)]
        pieces.append(snapshot.read_frozen(start + 24, 8))  # touches the one before
        whole = process.read(start, 32)
    assert pieces == [whole[:16], whole[8:24], whole[24:]]
    assert snapshot.read_frozen(start, 32) == whole == snapshot.read(start, 32)
    with pytest.raises(MemoryReadError, match="beyond the copied part"):
        snapshot.read_frozen(start + 16, 32)
    with pytest.raises(MemoryReadError, match="not copied"):
        snapshot.read_frozen(start + 32, 8)


def test_roots_found_before_the_stop_are_not_used_for_modules_mapped_elsewhere_at_it(
    jit_build: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Roots are looked for before the stop; a module mapped otherwise at the stop is searched anew.

    The look before the stop is made, here, at another instance of the
    program: its modules lie elsewhere (address-space randomization), as
    if they had been remapped between that look and the stop.
    """
    with (
        start_program(jit_build, "jit-dynamic") as other,
        start_program(jit_build, "jit-dynamic") as program,
    ):
        try:
            session = Session(program.pid)
            map_running = session._map_running

            def map_elsewhere(process: PtraceProcess, perf_map: PerfMapView) -> ModuleMap | None:
                return map_running(PtraceProcess(other.pid), perf_map)

            monkeypatch.setattr(session, "_map_running", map_elsewhere)
            backtrace = session.backtrace()
        finally:
            for pid in (other.pid, program.pid):
                Path(f"/tmp/perf-{pid}.map").unlink(missing_ok=True)
    assert_through_jit_frames(backtrace.threads[0])
    assert backtrace.problems == []


@pytest.mark.parametrize("jit_program", ["jit-dynamic"], indirect=True)
def test_jit_memory_unseen_before_the_stop_is_not_read_after_it(
    jit_program: tuple[int, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process that maps its first JIT code just before the stop: its registry is not copied.

    It is not read from the running process either; the backtrace says so
    and unwinds the JIT frames by the fallbacks.
    """
    pid, _ = jit_program
    session = Session(pid)
    monkeypatch.setattr(session, "_find_registry_roots", lambda running: False)
    backtrace = session.backtrace()
    assert any("not copied while the process was stopped" in text for text in backtrace.problems)
    assert Method.DYNAMIC not in [frame.method for frame in backtrace.threads[0].frames]


@pytest.mark.parametrize("jit_program", sorted(PROGRAMS), indirect=True)
def test_a_jit_process_costs_no_heavy_import(jit_program: tuple[int, list[str]]) -> None:
    """Reading a registry is on the hot path of every process with JIT code."""
    loaded = modules_a_backtrace_loaded(jit_program[0])
    assert "liveunwind.formats.unwind.dynamic" in loaded
    # These programs write perf maps, whose columns are arrays: ``array`` registers
    # itself with collections.abc, which imports collections (and operator).
    heavy = HEAVY - {"collections", "operator"}
    assert not heavy & loaded, f"imported: {sorted(heavy & loaded)}"


@pytest.mark.parametrize("jit_program", ["jit-table"], indirect=True)
def test_a_growing_perf_map_is_read_on_and_its_tail_read_in_the_stop(
    jit_program: tuple[int, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """jit-table's functions are named by its perf map, which the test appends to as a JIT would.

    The session reads only what was appended since its last backtrace; a
    line appended after that read but before the stop is read in the stop.
    """
    pid, _ = jit_program
    perf_map = Path(f"/tmp/perf-{pid}.map")
    inner = next(text for text in perf_map.read_text().splitlines() if text.endswith(" jit_inner"))
    start, size = inner.split()[:2]
    session = Session(pid)

    def names() -> list[str]:
        backtrace = session.backtrace()
        assert backtrace.problems == []
        return [frame.function or "" for frame in backtrace.threads[0].frames]

    assert "jit_inner" in names()
    with perf_map.open("a") as appending:  # code elsewhere, then jit_inner's code renamed
        appending.write(
            "".join(f"{0x10000000 + n * 0x100:x} 80 elsewhere{n}\n" for n in range(40_000))
        )
        appending.write(f"{start} {size} jit_inner_renamed\n")
    found = names()
    assert "jit_inner_renamed" in found and "jit_inner" not in found
    assert len(session.modules.registry.ranges()) >= 40_003  # type: ignore[union-attr]

    find_roots = session._find_registry_roots

    def append_then_find_roots(running: ModuleMap) -> bool:  # after the read ahead, before the stop
        with perf_map.open("a") as appending:
            appending.write(f"{start} {size} jit_inner_appended_just_before_the_stop\n")
        return find_roots(running)

    monkeypatch.setattr(session, "_find_registry_roots", append_then_find_roots)
    assert "jit_inner_appended_just_before_the_stop" in names()
