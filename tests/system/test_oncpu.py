"""``liveunwind profile --on-cpu``: the kernel samples a real process, which is never stopped.

testprogs/profile/profiled.c burns a core in ``spin_hot`` (under
``burner_main``) and counts its own chunks of work in a shared file;
latecomer.c starts a thread on SIGUSR1 — after sampling began — that
dlopens libburnlate.so (not mapped before) and burns in it; noperf.c runs a
command under a seccomp filter refusing perf_event_open (Docker's default
profile does).  Python: CPython 3.14 of the sid root runs
tests/data/python_burn.py with and without ``-X perf``.

The truth: the hottest stack names the burning function and its callers
(the program's own structure); the target is never stopped — every thread's
``/proc`` status, read every few milliseconds while sampling, never shows a
tracer nor a stopped state — and its work per CPU-second (its counter over
its scheduler clock, so that a busy machine does not count as a slowdown)
stays what it was before.  ``perf script`` of ``perf record --call-graph
dwarf`` on the same program names the same stack.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
from collections import Counter
from importlib.resources import files
from pathlib import Path

import jsonschema
import pytest

from tests.support.assertions import assert_one_line_error
from tests.support.cli import start_cli
from tests.support.paths import DATA, ROOT
from tests.support.programs import RunningProgram, start_program
from tests.support.pythons import SID_ROOT
from tests.support.stopwatcher import StopWatcher

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="sampling other processes needs root")

PARANOID = Path("/proc/sys/kernel/perf_event_paranoid")
PROFILE_SCHEMA = json.loads(
    (files("liveunwind.cli") / "schemas" / "profile.schema.json").read_text()
)


def cli(
    *args: str, timeout: float = 120, prefix: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*prefix, sys.executable, "-m", "liveunwind", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd="/",
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )


def folded(path: Path) -> Counter[str]:
    counts: Counter[str] = Counter()
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        counts[stack] += int(count)
    return counts


def cpu_seconds(pid: int, tid: int) -> float:
    return int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0]) / 1e9


def test_the_hottest_stack_names_the_burner_and_the_target_never_stops(
    testprogs_build: Path, tmp_path: Path
) -> None:
    counter = tmp_path / "chunks"
    with start_program(
        testprogs_build, "profiled", str(counter), busy={"burner", "third"}
    ) as program:
        burner = program.tid("burner")

        def speed(seconds: float) -> float:
            """The burner's chunks per second of its CPU time, over ``seconds``."""
            chunks = struct.unpack("<Q", counter.read_bytes()[:8])[0]
            cpu = cpu_seconds(program.pid, burner)
            time.sleep(seconds)
            chunks = struct.unpack("<Q", counter.read_bytes()[:8])[0] - chunks
            return chunks / max(cpu_seconds(program.pid, burner) - cpu, 1e-9)

        before = speed(2.0)
        watcher = StopWatcher(program.pid)
        watcher.start()
        out = tmp_path / "out.folded"
        result: list[subprocess.CompletedProcess[str]] = []
        runner = threading.Thread(
            target=lambda: result.append(
                cli(
                    "profile",
                    str(program.pid),
                    "--on-cpu",
                    "--duration",
                    "4",
                    "--collapsed-out",
                    str(out),
                    "--json",
                )
            )
        )
        runner.start()
        time.sleep(1.0)  # the events are open by now
        during = speed(2.5)
        runner.join()
        watcher.stop()
    (run,) = result
    assert run.returncode == 0, run.stderr
    document = json.loads(run.stdout)
    jsonschema.Draft202012Validator(PROFILE_SCHEMA).validate(document)
    assert document["source"] == "perf_event"
    assert not watcher.seen, watcher.seen
    assert watcher.reads > 100
    # The kernel copies a stack at each sample: the burner's work per CPU-second keeps its pace.
    assert during >= 0.9 * before, (before, during)
    stacks = folded(out)
    hottest, count = stacks.most_common(1)[0]
    assert hottest == "burner;__clone3;start_thread;burner_main;spin_hot", stacks
    assert count >= 10, stacks
    burner_row = next(thread for thread in document["threads"] if thread["name"] == "burner")
    assert burner_row["top_function"] == "spin_hot"
    assert any("on-CPU samples" in problem for problem in document["problems"])


@pytest.mark.skipif(shutil.which("perf") is None, reason="needs perf (linux-perf)")
def test_perf_script_names_the_same_hottest_stack(testprogs_build: Path, tmp_path: Path) -> None:
    counter = tmp_path / "chunks"
    with start_program(
        testprogs_build, "profiled", str(counter), busy={"burner", "third"}
    ) as program:
        data = tmp_path / "perf.data"
        subprocess.run(
            [
                "perf",
                "record",
                "-q",
                "--call-graph",
                "dwarf",
                "-F",
                "100",
                "-p",
                str(program.pid),
                "-o",
                str(data),
                "--",
                "sleep",
                "2",
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
        ours = tmp_path / "ours.folded"
        run = cli(
            "profile", str(program.pid), "--on-cpu", "--duration", "2", "--collapsed-out", str(ours)
        )
        assert run.returncode == 0, run.stderr
    script = subprocess.run(
        ["perf", "script", "-i", str(data), "-F", "comm,tid,ip,sym"],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    theirs: Counter[str] = Counter()
    for block in script.split("\n\n"):
        head, *frames = block.strip().splitlines() or [""]
        names = [frame.split(None, 1)[1] for frame in frames if len(frame.split(None, 1)) == 2]
        if head.startswith("burner ") and names:
            theirs[";".join(reversed(names))] += 1
    perf_top = theirs.most_common(1)[0][0]
    # perf's stack ends where its libdw does: compare the frames both name, innermost first.
    ours_top = folded(ours).most_common(1)[0][0].split(";")[1:]
    assert perf_top.split(";")[-3:] == ours_top[-3:], (theirs.most_common(3), ours_top)


def test_a_thread_started_and_a_library_dlopened_while_sampling_are_named(
    testprogs_build: Path, tmp_path: Path
) -> None:
    library = testprogs_build / "libburnlate.so"
    program = RunningProgram(testprogs_build / "latecomer", [str(library), str(tmp_path / "c")])
    with program:
        program.wait_for_line(b"ready\n", time.monotonic() + 30)
        assert str(library) not in Path(f"/proc/{program.pid}/maps").read_text()
        out = tmp_path / "out.folded"
        runner = start_cli(
            "profile", str(program.pid), "--on-cpu", "--duration", "5", "--collapsed-out", str(out)
        )
        time.sleep(1.5)
        program.popen.send_signal(signal.SIGUSR1)
        program.wait_for_line(b"late\n", time.monotonic() + 30)
        _, err = runner.communicate(timeout=120)
        assert runner.returncode == 0, err
    stacks = folded(out)
    late = {stack: count for stack, count in stacks.items() if stack.startswith("latecomer;")}
    assert late, stacks
    hottest = max(late, key=late.__getitem__)
    assert hottest.endswith("start_thread;late_main;late_library_spin;late_chunk"), stacks
    assert any(stack.startswith("early;") and stack.endswith("early_spin") for stack in stacks)


def _sid_python(tmp_name: str, *flags: str) -> subprocess.Popen[bytes]:
    executable = SID_ROOT / "usr/bin/python3.14"
    if not executable.exists():
        pytest.skip(f"no {executable} (make sid-rootfs builds the sid root with it)")
    inside = Path("/tmp") / tmp_name
    shutil.copy(DATA / "python_burn.py", SID_ROOT / inside.relative_to("/"))
    process = subprocess.Popen(
        ["chroot", str(SID_ROOT), "/usr/bin/python3.14", *flags, str(inside)],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    assert process.stdout is not None
    assert process.stdout.readline() == b"ready\n"
    return process


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.kill()
    process.wait()
    for leftover in SID_ROOT.glob(f"tmp/perf-{process.pid}.map"):
        leftover.unlink()


def test_python_functions_are_named_with_x_perf(tmp_path: Path) -> None:
    process = _sid_python("liveunwind-oncpu-burn.py", "-X", "perf")
    try:
        out = tmp_path / "out.folded"
        runner = start_cli(
            "profile", str(process.pid), "--on-cpu", "--duration", "4", "--collapsed-out", str(out)
        )
        time.sleep(2.0)
        # A function first called now: its trampoline joins the perf map while we sample,
        # in memory already mapped (no mmap record says anything changed).
        process.send_signal(signal.SIGUSR1)
        stdout, err = runner.communicate(timeout=120)
    finally:
        _stop(process)
    assert runner.returncode in (0, 1), err
    stacks = folded(out)
    python = [stack for stack in stacks if "py::" in stack]
    assert sum(stacks[stack] for stack in python) >= 0.5 * sum(stacks.values()), stacks
    # Called by outer_caller, called by the module: the Python callers are there too.
    for function in ("py::burn_python_cpu", "py::late_python_burner"):
        assert any(
            stack.index("py::<module>") < stack.index("py::outer_caller") < stack.index(function)
            for stack in python
            if function in stack and "py::<module>" in stack and "py::outer_caller" in stack
        ), (function, python)
    assert "without -X perf" not in stdout


def test_python_without_x_perf_is_said_to_need_the_wall_clock_mode() -> None:
    process = _sid_python("liveunwind-oncpu-burn-plain.py")
    try:
        run = cli("profile", str(process.pid), "--on-cpu", "--duration", "1")
        asked = cli("profile", str(process.pid), "--on-cpu", "--duration", "1", "--python")
    finally:
        _stop(process)
    assert run.returncode in (0, 1), run.stderr
    assert f"process {process.pid} runs CPython without -X perf" in run.stdout
    assert "wall-clock mode" in run.stdout
    assert asked.returncode in (0, 1), asked.stderr
    assert "--python reads its frames only in the wall-clock mode" in asked.stdout


def test_a_small_ring_wraps_around_and_every_record_comes_out_whole(
    testprogs_build: Path, tmp_path: Path
) -> None:
    # 4 pages of 4 KiB and samples of about 1.2 KiB: the kernel wraps around the end of
    # the ring every few samples, and each drain joins the records cut by the end.
    from liveunwind.arch import host_arch
    from liveunwind.formats.perfevents import EventAttr, Lost, Sample, decode
    from liveunwind.targets.perfevent.recorder import Recorder

    perf = host_arch().perf_registers
    assert perf is not None
    program = start_program(
        testprogs_build, "profiled", str(tmp_path / "c"), busy={"burner", "third"}
    )
    with program:
        burner = program.tid("burner")
        cpu = cpu_seconds(program.pid, burner)
        samples: Counter[int] = Counter()
        lost = 0
        with Recorder(program.pid, rate=100, regs_mask=perf.unwind_mask, stack_size=1024,
                      data_pages=4) as recorder:  # fmt: skip
            attr = EventAttr.from_bytes(recorder.attr)
            for batch in recorder.batches(3.0):
                for raw in batch:
                    record, size = decode(attr, raw)
                    assert size == len(raw)
                    if isinstance(record, Sample):
                        assert record.pid == program.pid and record.dyn_size > 0
                        samples[record.tid] += 1
                    elif isinstance(record, Lost):
                        lost += record.lost
            assert recorder.corrupt == 0
        ran = cpu_seconds(program.pid, burner) - cpu
    # The burner's samples (and any the kernel dropped) are its CPU time at 100 Hz.
    expected = ran * 100
    assert samples[burner] * 1400 > 4 * 4096, samples  # more than the ring holds: it wrapped
    assert 0.7 * expected <= samples[burner] + lost <= 1.2 * expected + 2, (samples, lost, ran)


def test_a_refused_perf_event_open_is_one_line_naming_the_fix(testprogs_build: Path) -> None:
    with RunningProgram(Path("/bin/sleep"), ["60"]) as target:
        run = cli("profile", str(target.pid), "--on-cpu", "--duration", "1",
                  prefix=(str(testprogs_build / "noperf"),))  # fmt: skip
    assert_one_line_error(
        run, 2, "refused to sample", "perf_event_paranoid", "CAP_PERFMON", "seccomp"
    )


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv (util-linux)")
def test_paranoid_3_without_cap_perfmon(testprogs_build: Path) -> None:
    saved = PARANOID.read_text()
    with RunningProgram(Path("/bin/sleep"), ["60"]) as target:
        try:
            PARANOID.write_text("3\n")
            run = cli("profile", str(target.pid), "--on-cpu", "--duration", "1",
                      prefix=("setpriv", "--bounding-set=-perfmon,-sys_admin"))  # fmt: skip
        finally:
            PARANOID.write_text(saved)
    if run.returncode == 0:
        # Mainline Linux reads 3 as 2 (user space of one's own processes is allowed);
        # Debian's and Android's kernels refuse every unprivileged perf_event_open at 3.
        pytest.skip("this kernel does not refuse at perf_event_paranoid 3 (mainline reads it as 2)")
    assert_one_line_error(run, 2, "refused to sample", "perf_event_paranoid is 3", "CAP_PERFMON")


def test_the_process_exiting_ends_the_run_cleanly(testprogs_build: Path, tmp_path: Path) -> None:
    program = start_program(
        testprogs_build, "profiled", str(tmp_path / "c"), busy={"burner", "third"}
    )
    with program:
        runner = start_cli("profile", str(program.pid), "--on-cpu", "--duration", "60", "--json")
        time.sleep(2.0)
        program.popen.kill()
        program.popen.wait()
        started = time.monotonic()
        out, err = runner.communicate(timeout=30)
    assert time.monotonic() - started < 10
    assert runner.returncode == 0, err
    document = json.loads(out)
    assert document["end"] == "target lost"
    assert document["end_detail"] == f"process {program.pid} exited"
    assert document["samples"] > 0


def test_sigint_ends_sampling_and_everything_is_written(
    testprogs_build: Path, tmp_path: Path
) -> None:
    program = start_program(
        testprogs_build, "profiled", str(tmp_path / "c"), busy={"burner", "third"}
    )
    with program:
        out = tmp_path / "out.folded"
        runner = start_cli("profile", str(program.pid), "--on-cpu", "--collapsed-out", str(out))
        time.sleep(2.5)
        runner.send_signal(signal.SIGINT)
        stdout, err = runner.communicate(timeout=30)
    assert runner.returncode == 0, err
    assert "Sampling ended early (interrupted)" in stdout
    assert "spin_hot" in out.read_text()


def test_a_walk_beyond_the_stack_copy_ends_there_saying_so(
    testprogs_build: Path, tmp_path: Path
) -> None:
    program = start_program(
        testprogs_build, "profiled", str(tmp_path / "c"), busy={"burner", "third"}
    )
    with program:
        out = tmp_path / "out.folded"
        run = cli("profile", str(program.pid), "--on-cpu", "--duration", "2", "--stack-size", "16",
                  "--collapsed-out", str(out))  # fmt: skip
    # 16 bytes hold spin_hot's return address, not burner_main's frame: the walk stops
    # short of start_thread's caller instead of guessing past the copy.
    assert run.returncode == 1, run.stderr
    assert "why they ended early: unreadable memory" in run.stdout
    assert "walks needed memory the sample does not hold" in run.stdout
    assert all("__clone3" not in stack for stack in folded(out) if stack.startswith("burner;"))
    assert any(stack.startswith("burner;") and stack.endswith("spin_hot") for stack in folded(out))
