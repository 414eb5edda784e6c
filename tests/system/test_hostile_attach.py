"""Hostile or unlucky live targets: nothing they do holds liveunwind or their other threads hostage.

Real programs (testprogs/vforker, churn, deepstacks, anonexec-static) in
the situations issue 14 found: a main thread inside vfork() that cannot
stop, threads that exit while being attached, another tracer on one
thread, mapped files and perf maps replaced by FIFOs or by symlinks that
lead out of the target's root (a target in its own mount namespace and
root), a library emptied under the process, and many threads parked at the
bottom of big stacks.  After every run each thread of the target must be
as it was: same state, traced by nobody.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from liveunwind.backtrace.api import attach
from liveunwind.errors import LiveUnwindError
from liveunwind.modules.perfmapfile import PerfMapFile
from liveunwind.targets import files
from liveunwind.targets.live import procfs
from liveunwind.targets.live.ptrace import PtraceProcess
from liveunwind.targets.live.snapshot import Snapshot
from tests.support.builds import build
from tests.support.hostile import assert_untraced, states, within
from tests.support.paths import ROOT, TESTPROGS
from tests.support.programs import RunningProgram, start_command
from tests.support.waits import wait_until


def run_cli(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "liveunwind", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd="/",
        env=env,
    )


# -- a thread that cannot stop --------------------------------------------------------------------


@pytest.fixture
def vforker(testprogs_build: Path) -> Iterator[RunningProgram]:
    """vforker: the main thread inside vfork() (state D) while its child sleeps 30 s."""
    program = start_command([str(testprogs_build / "vforker"), "30"])
    try:
        wait_until(lambda: states(program.pid).get(program.pid, ("",))[0] == "D", what="vfork")
        yield program
    finally:
        program.stop()


def test_a_thread_inside_vfork_is_reported_not_stopped(vforker: RunningProgram) -> None:
    before = states(vforker.pid)
    started = time.monotonic()
    result = run_cli("pid", str(vforker.pid))
    assert time.monotonic() - started < 5
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    main = result.stdout.split("\n\n")[0]
    assert f"Thread {vforker.pid}" in main and "not stopped after 500 ms: disk sleep" in main
    assert "block_in_nanosleep" in result.stdout  # the other thread was walked
    assert states(vforker.pid) == before  # main still in vfork, nobody traced


def test_a_thread_that_never_stopped_is_let_go(testprogs_build: Path) -> None:
    """Released by the tracer thread's exit: when vfork() returns, the thread runs on.

    Were it still traced, it would enter the stop it was asked for as soon
    as the child exits, and stay there.
    """
    with start_command([str(testprogs_build / "vforker"), "1"]) as program:
        wait_until(lambda: states(program.pid)[program.pid][0] == "D", what="vfork")
        with within(1), PtraceProcess(program.pid, stop_timeout=0.1) as process:
            threads = {thread.tid: thread for thread in process.threads()}
        main = threads[program.pid]
        assert not main.stopped and main.registers == {}
        assert main.state.startswith("not stopped after 100 ms: disk sleep")
        assert all(thread.stopped and thread.registers for thread in threads.values()
                   if thread.tid != program.pid)  # fmt: skip
        assert_untraced(program.pid)
        # The child sleeps 1 s, then the parent returns from vfork() into pause().  A
        # stop still asked of it would have caught it on the way (state t, traced),
        # before it could sleep there: asleep and untraced after D, it was let go.
        wait_until(lambda: states(program.pid)[program.pid] == ("S", 0), what="pause()")


# -- threads that come and go ---------------------------------------------------------------------


def test_threads_exiting_during_attach_never_abort_it(testprogs_build: Path) -> None:
    with start_command([str(testprogs_build / "churn"), "8"]) as program:
        failures = []
        for _ in range(100):
            try:
                attach(program.pid, symbols=False)
            except LiveUnwindError as error:
                failures.append(f"exit {error.exit_code}: {error}")
        assert not failures, failures[:3]
        for _ in range(10):
            result = run_cli("pid", str(program.pid))
            assert result.returncode in (0, 1), result.stderr
        assert_untraced(program.pid)


def test_a_thread_that_is_already_exiting_is_gone(testprogs_build: Path, tmp_path: Path) -> None:
    """The kernel refuses PTRACE_SEIZE of a zombie thread with EPERM: that is 'gone'."""
    source = tmp_path / "leader.c"
    source.write_text(
        '#include "tp.h"\n#include <unistd.h>\n'
        "static void *sleeper(void *unused) { (void)unused; tp_arrive(); for (;;) pause(); }\n"
        'int main(void) { tp_allow_tracing(); tp_spawn("sleeper", sleeper, NULL);\n'
        "  tp_announce(1); pthread_exit(NULL); }\n"
    )
    exe = tmp_path / "leader"
    subprocess.run(["gcc", "-pthread", f"-I{TESTPROGS}", "-o", exe, source], check=True)
    with start_command([str(exe)]) as program:
        wait_until(lambda: states(program.pid)[program.pid][0] == "Z", what="a zombie leader")
        process = PtraceProcess(program.pid)
        assert process._seize(program.pid) is False  # EPERM, and not "permission denied"
        backtrace = attach(program.pid)
        assert [thread.name for thread in backtrace.threads] == ["sleeper"]
        assert_untraced(program.pid)


SEIZE_AND_WAIT = """
import ctypes, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
assert libc.ptrace(0x4206, int(sys.argv[1]), None, None) == 0, ctypes.get_errno()
print("seized", flush=True)
time.sleep(60)
"""


def test_another_tracer_of_one_thread_is_named(run_program) -> None:
    program = run_program("threads-O2")
    sleeper = program.tid("sleeper")
    other = subprocess.Popen(
        [sys.executable, "-c", SEIZE_AND_WAIT, str(sleeper)], stdout=subprocess.PIPE
    )
    try:
        assert other.stdout is not None and other.stdout.readline() == b"seized\n"
        result = run_cli("pid", str(program.pid))
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        assert f"thread {sleeper} of process {program.pid}" in result.stderr
        assert f"already traced by process {other.pid} (python" in result.stderr
        traced = {tid: tracer for tid, (_, tracer) in states(program.pid).items() if tracer}
        assert traced == {sleeper: other.pid}
    finally:
        other.kill()
        other.wait()
    assert_untraced(program.pid)


# -- files the target chooses ---------------------------------------------------------------------


def test_a_mapped_executable_replaced_by_a_fifo(testprogs_build: Path, tmp_path: Path) -> None:
    exe = tmp_path / "threads"
    shutil.copy(testprogs_build / "threads-O2", exe)
    with start_command([str(exe)]) as program:
        wait_until(lambda: all(s == "S" for s, _ in states(program.pid).values()), what="sleep")
        exe.unlink()
        os.mkfifo(exe)
        for extra in ([], ["--no-snapshot"]):
            result = run_cli("pid", str(program.pid), *extra, timeout=10)
            assert result.returncode == 0, result.stderr
            assert "block_in_nanosleep" in result.stdout  # read from /proc/PID/map_files
        assert all(state == ("S", 0) for state in states(program.pid).values())


def test_a_perf_map_that_is_a_fifo(run_program) -> None:
    program = run_program("threads-O2")
    perf_map = Path(f"/tmp/perf-{program.pid}.map")
    os.mkfifo(perf_map)
    try:
        with within(2):
            assert (
                PerfMapFile(f"/proc/{program.pid}/root", procfs.perf_map_path(program.pid)).update(
                    1 << 24
                )
                == ""
            )
        result = run_cli("pid", str(program.pid), timeout=10)
        assert result.returncode == 0, result.stderr
    finally:
        perf_map.unlink()


def test_a_library_emptied_under_the_process(testprogs_build: Path, tmp_path: Path) -> None:
    for name in ("plt", "libtpshared.so"):
        shutil.copy(testprogs_build / name, tmp_path / name)
    with start_command([str(tmp_path / "plt")]) as program:
        wait_until(lambda: all(s == "S" for s, _ in states(program.pid).values()), what="sleep")
        os.truncate(tmp_path / "libtpshared.so", 0)
        result = run_cli("pid", str(program.pid), "--verbose", timeout=10)
        assert result.returncode in (0, 1) and "Traceback" not in result.stderr, result.stderr
        assert "libtpshared.so: is empty" in result.stdout
        assert_untraced(program.pid)


@pytest.fixture
def chrooted(testprogs_build: Path, tmp_path: Path) -> Iterator[tuple[RunningProgram, Path, str]]:
    """anonexec-static in its own mount namespace and root: (program, root, "ADDRESS SIZE")."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is not installed")
    build("testprogs", "static")
    root = tmp_path / "root"
    (root / "tmp").mkdir(parents=True)
    shutil.copy(testprogs_build / "anonexec-static", root / "prog")
    program = start_command(["/usr/bin/unshare", "--mount", f"--root={root}", "/prog"])
    try:
        assert Path(f"/proc/{program.pid}/cmdline").read_bytes().startswith(b"/prog")
        maps = Path(f"/proc/{program.pid}/maps").read_text()
        anonymous = next(line for line in maps.splitlines() if " rwxp " in line)
        start_address, _, end_address = anonymous.split()[0].partition("-")
        yield program, root, f"{start_address} {int(end_address, 16) - int(start_address, 16):x}"
    finally:
        program.stop()


@pytest.mark.parametrize("resolver", ["openat2", "by hand"])
def test_a_perf_map_link_out_of_the_targets_root(
    chrooted: tuple[RunningProgram, Path, str],
    tmp_path: Path,
    resolver: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(files, "use_openat2", resolver == "openat2")
    program, root, code = chrooted
    host_map = tmp_path / "host.map"
    host_map.write_text(f"{code} HOST_ONLY_NAME\n")
    (root / "maps").mkdir()
    (root / "maps" / "inside.map").write_text(f"{code} IN_ROOT_NAME\n")
    link = root / "tmp" / f"perf-{program.pid}.map"
    os.symlink(host_map, link)  # absolute: names a host file the target cannot see
    frames = [frame.function for frame in attach(program.pid).threads[0].frames]
    assert "HOST_ONLY_NAME" not in frames and "main" in frames
    assert "HOST_ONLY_NAME" not in run_cli("pid", str(program.pid)).stdout
    link.unlink()
    os.symlink("/maps/inside.map", link)  # absolute inside the target's root
    assert attach(program.pid).threads[0].frames[0].function == "IN_ROOT_NAME"
    assert "IN_ROOT_NAME" in run_cli("pid", str(program.pid)).stdout


def test_a_mapped_file_link_to_a_host_fifo(
    chrooted: tuple[RunningProgram, Path, str], tmp_path: Path
) -> None:
    """maps names the executable by its host path; the target plants that path in its root."""
    program, root, _ = chrooted
    host_fifo = tmp_path / "host-fifo"
    os.mkfifo(host_fifo)
    mapped = next(
        line.split(maxsplit=5)[5]
        for line in Path(f"/proc/{program.pid}/maps").read_text().splitlines()
        if line.endswith("/prog")
    )
    planted = root / mapped.lstrip("/")
    planted.parent.mkdir(parents=True)
    os.symlink(host_fifo, planted)
    for extra in ([], ["--no-snapshot"]):
        result = run_cli("pid", str(program.pid), *extra, timeout=10)
        assert result.returncode in (0, 1), result.stderr
        assert "main" in result.stdout
    assert_untraced(program.pid)


# -- memory a target can force --------------------------------------------------------------------

CAPTURE = """
import resource, sys
from liveunwind.targets.live.ptrace import PtraceProcess
from liveunwind.targets.live.snapshot import Snapshot
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
with PtraceProcess(int(sys.argv[1])) as process:
    snapshot = Snapshot.capture(process, total_cap=int(sys.argv[2]))
grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(grown >> 10, len(snapshot.problems), snapshot.problems[0] if snapshot.problems else "")
"""


def test_stack_copies_are_bounded_in_total(testprogs_build: Path) -> None:
    """16 threads at the bottom of 32 MiB stacks: 256 MiB of stack copies, cut to 64 MiB."""
    with start_command([str(testprogs_build / "deepstacks"), "16", "32"], timeout=60) as program:
        result = subprocess.run(
            [sys.executable, "-c", CAPTURE, str(program.pid), str(64 << 20)],
            capture_output=True,
            text=True,
            timeout=60,
            env=dict(os.environ, PYTHONPATH=str(ROOT)),
        )
        assert result.returncode == 0, result.stderr
        grown, cut, first = result.stdout.split(maxsplit=2)
        assert int(grown) < 64 + 32, f"the copy grew liveunwind by {grown} MiB"
        assert int(cut) == 16
        assert "copied 4.0 MiB of its" in first and "cap of 64.0 MiB for all threads" in first
        assert_untraced(program.pid)


def test_a_stack_copy_is_held_once(run_program) -> None:
    """The copy is the buffer the kernel wrote into: its bytes are not copied again."""
    program = run_program("threads-O2")
    with PtraceProcess(program.pid) as process:
        snapshot = Snapshot.capture(process)
    blocks = snapshot._copies._pieces
    assert blocks and all(isinstance(data, bytearray) for _, data in blocks)
    thread = snapshot.threads()[0]
    sp = thread.registers[snapshot.arch.sp]
    assert isinstance(snapshot.read(sp, 16), bytes)


def test_peekdata_is_asked_of_the_tracer_thread(run_program) -> None:
    """The last fallback for memory is PTRACE_PEEKDATA, which only the tracer thread may make."""
    program = run_program("threads-O2")
    with PtraceProcess(program.pid) as process:
        thread = process.threads()[0]
        sp = thread.registers[process.arch.sp]
        expected = process.read(sp, 64)
        process._pages = {}
        process._vm_readv_works = False  # as under an LSM that refuses process_vm_readv
        process._memory_fd = -1  # and /proc/PID/mem
        assert process.read(sp, 64) == expected
    assert_untraced(program.pid)
