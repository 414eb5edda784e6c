"""Bad targets get one clear line and the documented exit code; targets are left as found."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from liveunwind.targets.live import procfs
from liveunwind.targets.live.ptrace import PtraceProcess
from tests.support.assertions import assert_one_line_error
from tests.support.cli import run_cli
from tests.support.paths import ROOT
from tests.support.programs import start_sleeper
from tests.support.waits import signal_pending, wait_for_state, wait_until


def test_pid_that_does_not_exist() -> None:
    with open("/proc/sys/kernel/pid_max") as stream:
        missing = int(stream.read()) + 1
    assert_one_line_error(run_cli("pid", str(missing)), 2, "no process", str(missing))


def test_usage_errors_exit_64() -> None:
    assert_one_line_error(run_cli("pid", "abc"), 64, "not a process id")
    assert_one_line_error(run_cli(), 64)
    assert_one_line_error(run_cli("pid", "1", "--unwinder", "bogus"), 64, "bogus")
    assert_one_line_error(run_cli("pid", "1", "--max-frames", "-3"), 64)


def test_kernel_thread() -> None:
    kernel_thread = next(
        (
            pid
            for pid in (int(entry) for entry in os.listdir("/proc") if entry.isdigit())
            if _is_kernel_thread(pid)
        ),
        None,
    )
    if kernel_thread is None:
        pytest.skip("no kernel thread is visible in this pid namespace")
    assert_one_line_error(run_cli("pid", str(kernel_thread)), 2, "kernel thread")


def _is_kernel_thread(pid: int) -> bool:
    try:
        return procfs.process_stat(pid).is_kernel_thread
    except Exception:
        return False


def test_zombie() -> None:
    child = subprocess.Popen(["true"])
    wait_for_state(child.pid, "Z")
    try:
        assert_one_line_error(run_cli("pid", str(child.pid)), 2, "zombie")
    finally:
        child.wait()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a process of root")
@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv (util-linux)")
def test_process_the_user_may_not_trace() -> None:
    # The checkout may sit in a directory only root can read: give the
    # unprivileged user its own copy of the package, in a directory it can read.
    copy = Path(tempfile.mkdtemp(prefix="liveunwind-nobody-", dir="/tmp"))
    shutil.copytree(ROOT / "liveunwind", copy / "liveunwind")
    for path in [copy, *copy.rglob("*")]:
        path.chmod(0o755)
    target = start_sleeper()
    try:
        result = run_cli("pid", str(target.pid), user=65534, package_root=copy)
        assert_one_line_error(result, 2, "permission denied", "CAP_SYS_PTRACE", "ptrace_scope")
        assert "--cap-add" not in result.stderr  # Docker's option is advice for root only
        assert procfs.process_stat(target.pid).state == "S"
    finally:
        target.kill()
        target.wait()
        shutil.rmtree(copy)


def test_process_already_traced() -> None:
    target = start_sleeper()
    try:
        with PtraceProcess(target.pid):
            result = run_cli("pid", str(target.pid))
        assert_one_line_error(result, 2, "already traced", str(os.getpid()))
    finally:
        target.kill()
        target.wait()


def test_running_process_keeps_running_and_is_not_traced() -> None:
    target = start_sleeper()
    try:
        result = run_cli("pid", str(target.pid))
        assert result.returncode == 0, result.stderr
        assert procfs.tracer_of(target.pid) == 0
        wait_for_state(target.pid, "S")
    finally:
        target.kill()
        target.wait()


def test_stopped_process_stays_stopped() -> None:
    target = start_sleeper()
    try:
        os.kill(target.pid, signal.SIGSTOP)
        wait_for_state(target.pid, "T")
        result = run_cli("pid", str(target.pid))
        assert result.returncode == 0, result.stderr
        assert "nanosleep" in result.stdout
        # liveunwind has exited: whatever it left the target to do has been done (a
        # wrongly resumed target is runnable at once), so the state is final now.
        assert procfs.process_stat(target.pid).state == "T"
        assert procfs.tracer_of(target.pid) == 0
        os.kill(target.pid, signal.SIGCONT)
        wait_for_state(target.pid, "S")
    finally:
        target.kill()
        target.wait()


SIGNAL_COUNTER = """
import os, signal, sys, time
count = 0
def handler(signum, frame):
    global count
    count += 1
    print("got", count, flush=True)
signal.signal(signal.SIGUSR1, handler)
print("ready", flush=True)
while True:
    time.sleep(0.05)
"""


def test_signal_sent_while_stopped_is_delivered_once_after_detach() -> None:
    target = subprocess.Popen(
        [sys.executable, "-c", SIGNAL_COUNTER], stdout=subprocess.PIPE, text=True
    )
    try:
        assert target.stdout is not None
        assert target.stdout.readline().strip() == "ready"
        with PtraceProcess(target.pid) as process:
            os.kill(target.pid, signal.SIGUSR1)
            wait_until(
                lambda: signal_pending(target.pid, signal.SIGUSR1),
                10,
                "SIGUSR1 pending for the stopped target",
            )
            assert process.threads()
        assert target.stdout.readline().strip() == "got 1"
        os.kill(target.pid, signal.SIGUSR1)
        assert target.stdout.readline().strip() == "got 2"
    finally:
        target.kill()
        target.wait()


def test_reader_that_goes_away_early_gets_no_traceback(run_program) -> None:
    """``liveunwind pid PID | head -1``: the output is cut short, quietly, and the target runs."""
    program = run_program("recurse", "2000")
    command = [sys.executable, "-m", "liveunwind", "pid", str(program.pid), "--max-frames", "0"]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd="/", env=env
    ) as process:
        assert process.stdout is not None and process.stderr is not None
        assert process.stdout.readline().startswith(b"Thread ")
        process.stdout.close()
        errors = process.stderr.read()
        status = process.wait(timeout=60)
    assert errors == b"" and status == 0
    wait_for_state(program.pid, "S")
