"""Attach torture (issue 14 item 7): targets that never hold still, and liveunwind killed mid-way.

The targets: ``testprogs/churn`` (threads created and exiting all the
time), a program whose threads fork and exec in a loop (one with vfork, so
a thread is often in the kernel's uninterruptible vfork wait), and one with
1000 threads.  liveunwind runs against each, to its end or until a SIGKILL
or SIGINT at a random instant.  After every run each thread of the target
is checked: traced by nobody, and not stopped (no ``t`` tracing stop, no
``T`` group stop) — the kernel lets a dead tracer's threads go, and a live
one must have let them go itself.  A run that ends on its own exits 0 or 1,
never 2, within 5 s, with no traceback.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from liveunwind.targets.live import procfs
from tests.support.interrupts import assert_let_go, python_start_up
from tests.support.paths import ROOT, TESTPROGS
from tests.support.programs import RunningProgram, start_command

FORK_EXEC = r"""
#include "tp.h"
#include <sys/wait.h>
#include <unistd.h>

/* Forks (or vforks) and execs /bin/true, over and over. */
static void *forker(void *use_vfork)
{
    char *const argv[] = {"true", NULL};
    tp_arrive();
    for (;;) {
        pid_t child = use_vfork ? vfork() : fork();
        if (child == 0) {
            execv("/bin/true", argv);
            _exit(127);
        }
        if (child > 0)
            waitpid(child, NULL, 0);
    }
    return NULL;
}

int main(void)
{
    tp_allow_tracing();
    tp_spawn("forker", forker, NULL);
    tp_spawn("forker", forker, NULL);
    tp_spawn("vforker", forker, (void *)1);
    tp_announce(3);
    for (;;)
        pause();
}
"""

MANY_THREADS = r"""
#include "tp.h"
#include <unistd.h>

static void *parked(void *unused)
{
    (void)unused;
    tp_arrive();
    for (;;)
        pause();
    return NULL;
}

int main(int argc, char **argv)
{
    int count = atoi(argv[1]);
    pthread_attr_t small;
    tp_allow_tracing();
    pthread_attr_init(&small);
    pthread_attr_setstacksize(&small, 64 << 10);
    for (int i = 0; i < count; i++) {
        pthread_t thread;
        if (pthread_create(&thread, &small, parked, NULL) != 0)
            tp_die("pthread_create");
    }
    tp_announce(count);
    for (;;)
        pause();
}
"""


@pytest.fixture(scope="module")
def programs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("torture")
    built = {}
    for name, source in (("forkexec", FORK_EXEC), ("many", MANY_THREADS)):
        (folder / f"{name}.c").write_text(source)
        subprocess.run(
            ["gcc", "-O2", "-pthread", f"-I{TESTPROGS}", "-o", folder / name, folder / f"{name}.c"],
            check=True,
        )
        built[name] = folder / name
    return built


def liveunwind(pid: int, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "liveunwind", "pid", str(pid), "--no-symbols", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd="/",
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )


def run_to_the_end(pid: int, *args: str) -> subprocess.CompletedProcess[str]:
    started = time.monotonic()
    runner = liveunwind(pid, *args)
    _, stderr = runner.communicate(timeout=60)
    took = time.monotonic() - started
    assert runner.returncode in (0, 1), stderr
    assert "Traceback" not in stderr, stderr
    assert took < 5, f"took {took:.1f} s"
    return subprocess.CompletedProcess(runner.args, runner.returncode, "", stderr)


def kill_at_random(pid: int, rng: random.Random, *args: str) -> str:
    """Runs liveunwind and sends it SIGKILL or SIGINT 0-400 ms in; what it printed."""
    runner = liveunwind(pid, *args)
    time.sleep(rng.uniform(0, 0.4))
    sent = rng.choice((signal.SIGKILL, signal.SIGINT))
    runner.send_signal(sent)
    _, stderr = runner.communicate(timeout=60)
    status = runner.returncode
    if sent == signal.SIGKILL:
        assert status in (-signal.SIGKILL, 0, 1), (status, stderr)
    elif not python_start_up(stderr):
        assert "Traceback" not in stderr, stderr
        assert status in (130, -signal.SIGINT, 0, 1), (status, stderr)
        # Silent when it came while Python was still importing liveunwind (__main__.py).
        assert status != 130 or stderr.strip() in ("", "liveunwind: interrupted"), stderr
    return stderr


@pytest.fixture
def churn(testprogs_build: Path) -> Iterator[RunningProgram]:
    with start_command([str(testprogs_build / "churn"), "8"]) as program:
        yield program


def test_a_hundred_runs_against_churning_threads_never_exit_2(churn: RunningProgram) -> None:
    codes = [run_to_the_end(churn.pid).returncode for _ in range(100)]
    assert set(codes) <= {0, 1}
    assert_let_go(churn.pid)


def test_killed_at_random_instants_while_threads_churn(churn: RunningProgram) -> None:
    rng = random.Random()
    for _ in range(30):
        kill_at_random(churn.pid, rng, *rng.choice(((), ("--no-snapshot",))))
        assert_let_go(churn.pid)


def test_threads_that_fork_and_exec_in_a_loop(programs: dict[str, Path]) -> None:
    rng = random.Random()
    with start_command([str(programs["forkexec"])]) as program:
        for _ in range(20):
            run_to_the_end(program.pid)
            assert_let_go(program.pid)
        for _ in range(20):
            kill_at_random(program.pid, rng)
            assert_let_go(program.pid)
        assert program.popen.poll() is None


def test_a_thousand_threads(programs: dict[str, Path]) -> None:
    rng = random.Random()
    with start_command([str(programs["many"]), "1000"], timeout=60) as program:
        assert len(procfs.list_tids(program.pid)) == 1001
        for extra in ((), ("--no-snapshot",)):
            run_to_the_end(program.pid, *extra)
            assert_let_go(program.pid)
        for _ in range(5):
            kill_at_random(program.pid, rng)
            assert_let_go(program.pid)
        # Each thread goes back to its sleep; on a busy machine some take a moment to
        # get a CPU on the way (R), so their states are read until they all sleep.
        deadline = time.monotonic() + 20
        while (states := _thread_states(program.pid)) != {"S"} and time.monotonic() < deadline:
            time.sleep(0.05)
        assert states == {"S"}


def _thread_states(pid: int) -> set[str]:
    """The states of every thread of ``pid``, as /proc says now."""
    return {procfs.read_stat(f"/proc/{pid}/task/{tid}/stat").state for tid in procfs.list_tids(pid)}
