"""``liveunwind profile``: CPU per thread, samples, folded stacks, flame graph, on a real program.

testprogs/profile/profiled.c runs a thread burning a core (``spin_hot``), one
at about a third (``third_busy``, then a sleep) and one asleep.  The truth
of each thread's CPU time is the kernel's scheduler clock
(``/proc/PID/task/TID/schedstat``, nanoseconds on a CPU), read around the
command; liveunwind reads psutil's tick counts, another source.  The
program counts its own work (spin_hot calls) in a shared file, which is how
its speed is measured with and without the profiler.  The flame graph is
opened in a real headless browser (Debian's chromium), whose DOM after the
page's script ran shows the search and the zoom working.  The flame graph's
escaping and bounds, and the sampling schedule, are tests/unit/test_profile.py.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import pty
import shutil
import signal
import struct
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from importlib.resources import files
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from liveunwind.backtrace.profile import END_DURATION, Profile, record
from liveunwind.backtrace.session import Session
from liveunwind.cli.profile import SCHEMA_ID, SCHEMA_VERSION
from liveunwind.targets.live import procfs
from liveunwind.targets.live.ptrace import PtraceProcess
from tests.support.paths import ROOT
from tests.support.programs import RunningProgram, start_program
from tests.support.waits import wait_for_state, wait_until

SCHEMA = json.loads((files("liveunwind.cli") / "schemas" / "profile.schema.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
DURATION = 3.0
RATE = 100
BUSY = {"burner", "third"}


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "liveunwind", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def cpu_seconds(pid: int, tid: int) -> float:
    """The kernel's scheduler clock of one thread: seconds it spent on a CPU."""
    return int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0]) / 1e9


class Profiled:
    """The running test program, the counter it keeps, and its threads by role."""

    def __init__(self, program: RunningProgram, counter: Path) -> None:
        self.program = program
        self.counter = counter
        self.tids = {name: program.tid(name) for name in ("burner", "third", "sleeper")}

    @property
    def pid(self) -> int:
        return self.program.pid

    def chunks(self) -> int:
        return struct.unpack("<Q", self.counter.read_bytes()[:8])[0]

    def cpu(self) -> dict[str, float]:
        return {name: cpu_seconds(self.pid, tid) for name, tid in self.tids.items()}


@pytest.fixture(scope="module")
def profiled(testprogs_build: Path, tmp_path_factory: pytest.TempPathFactory):
    counter = tmp_path_factory.mktemp("profile") / "chunks"
    program = start_program(testprogs_build, "profiled", str(counter), busy=BUSY)
    with program:
        yield Profiled(program, counter)


class Run:
    """One ``profile --json`` run: its document, its files, and the truth measured around it.

    ``waited`` is the share of the run liveunwind spent waiting for a CPU
    (its scheduler clock): on a machine too busy to give it one, no sampler
    keeps a schedule, and the rate test says so instead of failing.
    """

    def __init__(
        self, document: dict[str, Any], folded: str, svg: Path, truth: dict, waited: float
    ) -> None:
        self.document = document
        self.folded = folded
        self.svg = svg
        self.truth = truth
        self.waited = waited

    def thread(self, tid: int) -> dict[str, Any]:
        (found,) = [thread for thread in self.document["threads"] if thread["tid"] == tid]
        return found


def run_watched(command: list[str]) -> tuple[subprocess.CompletedProcess[str], float]:
    """Runs ``command``; also the share of its run it waited for a CPU (its schedstat)."""
    started = time.monotonic()
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT
    )
    waited = 0
    with ThreadPoolExecutor(1) as pool:
        output = pool.submit(process.communicate, timeout=120)
        while not output.done():
            # Gone between the check and the read: the last reading stands.
            with contextlib.suppress(OSError, IndexError):
                waited = int(Path(f"/proc/{process.pid}/schedstat").read_text().split()[1])
            time.sleep(0.05)
        out, err = output.result()
    result = subprocess.CompletedProcess(command, process.returncode, out, err)
    return result, waited / 1e9 / (time.monotonic() - started)

    def thread(self, tid: int) -> dict[str, Any]:
        (found,) = [thread for thread in self.document["threads"] if thread["tid"] == tid]
        return found


@pytest.fixture(scope="module")
def run(profiled: Profiled, tmp_path_factory: pytest.TempPathFactory) -> Run:
    folder = tmp_path_factory.mktemp("profile-run")
    svg, folded = folder / "profile.svg", folder / "profile.folded"
    before, started = profiled.cpu(), time.monotonic()
    result, waited = run_watched([
        sys.executable, "-m", "liveunwind", "profile", str(profiled.pid),
        "--duration", str(DURATION), "--rate", str(RATE),
        "--json", "--svg", str(svg), "--collapsed-out", str(folded),
    ])  # fmt: skip
    wall = time.monotonic() - started
    after = profiled.cpu()
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""  # not a terminal: no progress line
    truth = {name: 100.0 * (after[name] - before[name]) / wall for name in before}
    return Run(json.loads(result.stdout), folded.read_text(), svg, truth, waited)


# -- the document -----------------------------------------------------------------------


def test_the_document_follows_the_schema(run: Run) -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    VALIDATOR.validate(run.document)
    assert run.document["$schema"] == SCHEMA_ID == SCHEMA["$id"]
    assert (
        run.document["schema_version"]
        == SCHEMA_VERSION
        == SCHEMA["properties"]["schema_version"]["const"]
    )
    broken = dict(run.document, threads=[dict(run.document["threads"][0], cpu=1)])
    assert not VALIDATOR.is_valid(broken)


def test_the_cpu_column_is_within_15_points_of_the_kernels_clock(
    run: Run, profiled: Profiled
) -> None:
    for name, tid in profiled.tids.items():
        measured = run.thread(tid)["cpu_percent"]
        assert abs(measured - run.truth[name]) <= 15, (name, measured, run.truth)
    assert run.truth["sleeper"] < 5  # the program did what it says
    threads = run.document["threads"]
    assert threads[0]["tid"] == profiled.tids["burner"]
    assert [t["cpu_percent"] for t in threads] == sorted(
        (t["cpu_percent"] for t in threads), reverse=True
    )
    assert run.document["cpu_percent"] >= run.thread(profiled.tids["burner"])["cpu_percent"]


def test_at_least_80_percent_of_the_asked_samples_are_taken(run: Run) -> None:
    document = run.document
    assert document["end"] == END_DURATION
    assert document["duration"] == pytest.approx(DURATION, abs=0.05)
    if document["samples"] < 0.8 * DURATION * RATE and run.waited > 0.1:
        pytest.skip(
            f"the machine is busy: liveunwind waited for a CPU {run.waited:.0%} of its run "
            f"and took {document['samples']} of {DURATION * RATE:.0f} samples"
        )
    assert document["samples"] >= 0.8 * DURATION * RATE, (document["samples"], run.waited)
    assert document["samples"] <= DURATION * RATE
    assert document["rate"] == pytest.approx(document["samples"] / document["duration"])
    for thread in document["threads"]:
        assert thread["samples"] == document["samples"]


def test_the_burning_thread_is_in_its_hot_function(run: Run, profiled: Profiled) -> None:
    burner = run.thread(profiled.tids["burner"])
    assert burner["top_function"] == "spin_hot"
    assert burner["running"] >= 0.9 * burner["samples"]
    third = run.thread(profiled.tids["third"])
    assert 0 < third["running"] < third["samples"]
    sleeper = run.thread(profiled.tids["sleeper"])
    assert sleeper["top_function"] in ("clock_nanosleep", "__GI___clock_nanosleep")


def test_the_folded_file_puts_the_burners_samples_under_its_hot_function(
    run: Run, profiled: Profiled
) -> None:
    label = "burner"  # threads are counted by name (--per-thread: burner-TID)
    under: Counter[str] = Counter()
    for line in run.folded.splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        if frames[0] == label:
            under["all"] += int(count)
            if frames[-2:] == ["burner_main", "spin_hot"]:
                under["spin_hot"] += int(count)
    assert under["all"] == run.document["samples"]
    assert under["spin_hot"] >= 0.9 * under["all"], under
    threads = {line.partition(";")[0] for line in run.folded.splitlines()}
    assert threads == {t["name"] for t in run.document["threads"]}


# -- the flame graph --------------------------------------------------------------------


def test_the_svg_names_the_hot_functions(run: Run, profiled: Profiled) -> None:
    root = ElementTree.parse(run.svg).getroot()  # well-formed XML
    namespace = "{http://www.w3.org/2000/svg}"
    titles = [element.text or "" for element in root.iter(f"{namespace}title")]
    names = {title[: title.rindex(" (")] for title in titles}
    assert {"spin_hot", "burner_main", "third_busy", "sleep_forever"} <= names
    assert "burner" in names
    (everything,) = [title for title in titles if title.startswith("all (")]
    assert everything.startswith(f"all ({run.document['samples'] * 4} samples, 100.00%)")
    assert "http" not in run.svg.read_text().replace("http://www.w3.org/2000/svg", "")


def chromium_dom(svg: Path, query: str, profile_dir: Path) -> str:
    """The DOM of ``svg`` after its script ran in headless chromium, with ``?query``."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("chromium is not installed (Debian: apt-get install chromium)")
    result = subprocess.run(
        [
            browser, "--headless", "--no-sandbox", "--disable-gpu",
            f"--user-data-dir={profile_dir}", "--dump-dom", f"{svg.as_uri()}?{query}",
        ],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def test_the_svg_renders_in_a_browser_with_search_and_zoom(run: Run, tmp_path: Path) -> None:
    dom = chromium_dom(run.svg, "s=spin_hot&zoom=burner_main", tmp_path / "chromium")
    root = ElementTree.fromstring(dom)
    namespace = "{http://www.w3.org/2000/svg}"
    by_title = {}
    for group in root.iter(f"{namespace}g"):
        title = group.find(f"{namespace}title")
        if title is not None and title.text:
            by_title.setdefault(title.text[: title.text.rindex(" (")], []).append(group)
    # The search ran: spin_hot boxes are marked and the share they cover is shown.
    assert all("match" in g.get("class", "") for g in by_title["spin_hot"])
    matched = next(t.text for t in root.iter(f"{namespace}text") if t.get("id") == "matched")
    assert matched.startswith("Matched: ") and float(matched.split()[1].rstrip("%")) > 10
    # The zoom ran: burner_main fills the width, other threads' boxes are hidden.
    (burner_main,) = by_title["burner_main"]
    assert float(burner_main.find(f"{namespace}rect").get("width")) == pytest.approx(1180)
    assert all("hidden" in g.get("class", "") for g in by_title["sleep_forever"])
    assert "parent" in by_title["all"][0].get("class", "")


# -- the command ------------------------------------------------------------------------


def wait_for_samples(pid: int, count: int, timeout: float = 60.0) -> None:
    """Until a profiler has stopped ``pid`` and let it go ``count`` times: samples taken.

    Each sample seizes the process and detaches (TracerPid set, then 0); a
    sample this poll misses only makes the wait longer.
    """
    seen, held = 0, False

    def sampled() -> bool:
        nonlocal seen, held
        now = procfs.tracer_of(pid) != 0
        seen += held and not now
        held = now
        return seen >= count

    wait_until(sampled, timeout, f"{count} samples of process {pid}", interval=0.001)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_ends_sampling_and_everything_is_still_written(
    profiled: Profiled, tmp_path: Path, signum: int
) -> None:
    svg, folded = tmp_path / "p.svg", tmp_path / "p.folded"
    command = [
        sys.executable, "-m", "liveunwind", "profile", str(profiled.pid),
        "--svg", str(svg), "--collapsed-out", str(folded),
    ]  # fmt: skip
    if signum == signal.SIGTERM:
        command.append("--json")
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    wait_for_samples(profiled.pid, 20)
    process.send_signal(signum)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    if signum == signal.SIGTERM:
        document = json.loads(out)
        VALIDATOR.validate(document)
        assert document["end"] == "interrupted" and document["samples"] > 0
    else:
        text = out.decode()
        assert "Sampling ended early (interrupted)." in text
        table = text.split("\n\n")[1].splitlines()
        assert table[0].split() == ["TID", "NAME", "CPU", "%", "SAMPLES", "TOP", "FUNCTION"]
        assert table[1].split()[:2] == [str(profiled.tids["burner"]), "burner"]
        assert "spin_hot <- burner_main" in text
        assert f"Flame graph: {svg}" in text
    assert "spin_hot" in svg.read_text() and "spin_hot" in folded.read_text()
    status = Path(f"/proc/{profiled.pid}/status").read_text()
    assert "TracerPid:\t0\n" in status  # let go, and running on
    before = profiled.chunks()
    wait_until(lambda: profiled.chunks() > before, 10, "the burner to work on, let go")


def test_a_process_that_exits_ends_sampling(tmp_path: Path) -> None:
    sleeper = subprocess.Popen(["sleep", "1"])
    try:
        result = cli("profile", str(sleeper.pid), "--duration", "10", "--json")
    finally:
        sleeper.wait()
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    VALIDATOR.validate(document)
    assert document["end"] == "target lost" and document["end_detail"]
    assert document["samples"] > 0 and document["duration"] < 5


def test_lines_and_merge(profiled: Profiled, tmp_path: Path) -> None:
    folded = tmp_path / "merged.folded"
    result = cli(
        "profile", str(profiled.pid), "--duration", "1", "--lines", "--merge",
        "--collapsed-out", str(folded), "--threads", str(profiled.tids["burner"]),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = folded.read_text().splitlines()
    assert lines and not any(line.startswith("burner-") for line in lines)
    hot = [line for line in lines if "spin_hot (profiled.c:" in line]
    assert hot and "burner_main (profiled.c:" in hot[0]
    assert f"  {profiled.tids['burner']}  burner" in result.stdout
    assert "sleeper" not in result.stdout


def test_per_thread_keeps_each_thread_apart(profiled: Profiled, tmp_path: Path) -> None:
    folded = tmp_path / "per-thread.folded"
    result = cli(
        "profile", str(profiled.pid), "--duration", "0.5", "--per-thread", "--json",
        "--collapsed-out", str(folded),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    VALIDATOR.validate(document)
    assert document["per_thread"] and document["threads_folded"] == 0
    labels = {line.partition(";")[0] for line in folded.read_text().splitlines()}
    assert labels == {f"{t['name']}-{t['tid']}" for t in document["threads"]}
    assert f"burner-{profiled.tids['burner']}" in labels


SPINNING = """
import threading


def spin_in_python(n):
    total = 0
    for i in range(n):
        total += i * i
    return total


def worker():
    while True:
        spin_in_python(10000)


thread = threading.Thread(target=worker, daemon=True)
thread.start()
print("ready", flush=True)
thread.join()
"""


def test_python_frames_sit_on_the_eval_loop_that_runs_them(tmp_path: Path) -> None:
    if not Path("/usr/bin/python3").exists():
        pytest.skip("needs Debian's python3")
    script, folded = tmp_path / "spinning.py", tmp_path / "python.folded"
    script.write_text(SPINNING)
    program = subprocess.Popen(["/usr/bin/python3", str(script)], stdout=subprocess.PIPE)
    try:
        assert program.stdout is not None and program.stdout.readline() == b"ready\n"
        result = cli(
            "profile", str(program.pid), "--python", "--duration", "1",
            "--collapsed-out", str(folded), "--json", "--per-thread",
        )  # fmt: skip
    finally:
        program.kill()
        program.wait()
    assert result.returncode in (0, 1), result.stderr
    document = json.loads(result.stdout)
    VALIDATOR.validate(document)
    # How many samples there are depends on the machine's load; where they fall does not.
    # (Both threads are named python3: --per-thread keeps the worker apart from main.)
    threads = document["threads"]
    worker = sum(thread["samples"] for thread in threads if thread["tid"] != program.pid)
    spinning = 0
    for line in folded.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        spin = [index for index, name in enumerate(frames) if name.startswith("spin_in_python (")]
        if spin:
            spinning += int(count)
            (index,) = spin
            assert frames[index].startswith("spin_in_python (spinning.py:")
            assert frames[index - 1] == "worker (spinning.py:14)"
            # The Python frames follow the native frame of the eval loop that runs them.
            assert frames[index - 2].startswith("_PyEval_EvalFrameDefault"), frames
    assert worker >= 20, threads  # of about 100 asked for
    assert spinning >= 0.8 * worker  # the busy thread is nearly always inside spin_in_python


def test_progress_is_shown_on_a_terminal_only(profiled: Profiled) -> None:
    controller, terminal = pty.openpty()
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "liveunwind", "profile", str(profiled.pid), "--duration", "1"],
            stdout=subprocess.PIPE,
            stderr=terminal,
            cwd=ROOT,
        )
        os.close(terminal)
        out, _ = process.communicate(timeout=60)
        shown = b""
        while True:
            try:
                chunk = os.read(controller, 4096)
            except OSError:  # the terminal closed: everything was read
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(controller)
    assert process.returncode == 0
    assert b"\r\x1b[Kprofiling " in shown and b"samples" in shown and b"Hz" in shown
    assert shown.endswith(b"\r\x1b[K")  # the line is cleared at the end
    assert b"profiling" not in out


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--rate", "0"], "--rate: must be more than 0"),
        (["--rate", "5000"], "at most 1000"),
        (["--duration", "0"], "--duration: must be more than 0"),
        (["--svg", "/nonexistent/dir/x.svg"], "cannot write /nonexistent/dir/x.svg"),
    ],
)
def test_bad_arguments_are_refused_before_sampling(arguments: list[str], message: str) -> None:
    result = cli("profile", str(os.getpid()), *arguments)
    assert result.returncode == 64
    assert message in result.stderr and result.stderr.count("\n") == 1


# -- overhead ---------------------------------------------------------------------------


class Window:
    """The burner over a stretch of time, from its work counter and its scheduler clock."""

    def __init__(self, profiled: Profiled) -> None:
        self.profiled = profiled
        self.tid = profiled.tids["burner"]
        self.start = self._now()

    def _now(self) -> tuple[float, int, int, int]:
        stat = Path(f"/proc/{self.profiled.pid}/task/{self.tid}/schedstat").read_text().split()
        return time.perf_counter(), self.profiled.chunks(), int(stat[0]), int(stat[1])

    def close(self) -> Speed:
        began, chunks, ran, waited = self.start
        ended, chunks_now, ran_now, waited_now = self._now()
        return Speed(
            ended - began, chunks_now - chunks, (ran_now - ran) / 1e9, (waited_now - waited) / 1e9
        )


class Speed:
    """What the burner did over a window: chunks per second, per CPU second, and time shares."""

    def __init__(self, wall: float, chunks: int, ran: float, waited: float) -> None:
        self.rate = chunks / wall
        self.per_cpu_second = chunks / ran
        #: The share of the time it waited for a CPU, and was stopped (it never sleeps).
        self.waiting = waited / wall
        self.stopped = max(0.0, 1.0 - (ran + waited) / wall)

    def kept_of(self, alone: Speed) -> tuple[float, float]:
        """The speed kept against ``alone``: by the clock, and with a CPU to itself.

        With a CPU to itself the burner loses only the time liveunwind
        stopped it and whatever its stops cost the work per CPU second; on
        a machine busy with other work, each stop also lets another process
        take the burner's CPU for a time slice, which the clock counts too.
        """
        clock = self.rate / alone.rate
        free = (1.0 - max(self.stopped - alone.stopped, 0.0)) * (
            self.per_cpu_second / alone.per_cpu_second
        )
        return clock, free


def burner_profiled(profiled: Profiled) -> Speed:
    """The burner while sampled at 100 Hz for 2 s, from the first (cold) sample on."""
    windows: list[Window] = []

    def first(profile: Profile, elapsed: float) -> None:
        if not windows:
            windows.append(Window(profiled))

    record(Session(profiled.pid), rate=100, duration=2.0, on_sample=first)
    return windows[0].close()


@pytest.mark.slow
def test_the_burning_thread_keeps_85_percent_of_its_speed_at_100_hz(profiled: Profiled) -> None:
    """Its own work counter, unprofiled then profiled, three tries.

    On a machine with a CPU to spare, by the clock.  On one busy with other
    work (the burner waited for a CPU more than a tenth of the time even
    unprofiled), every stop also hands the burner's CPU to another process
    for a time slice, which measures the machine rather than liveunwind:
    there the speed it keeps with a CPU to itself counts (see Speed.kept_of).
    """
    tries = []
    for _ in range(3):
        window = Window(profiled)
        time.sleep(2.0)
        alone = window.close()
        clock, free = burner_profiled(profiled).kept_of(alone)
        busy = alone.waiting > 0.1
        tries.append(f"{clock:.0%} by the clock, {free:.0%} on a free CPU" + " (busy)" * busy)
        if clock >= 0.85 or (busy and free >= 0.85):
            return
    pytest.fail(f"the burner kept only {tries} of its speed")


def test_the_running_thread_is_stopped_last_and_let_go_last(
    profiled: Profiled, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The burner, on a CPU, is interrupted once every sleeper is in its stop (registers
    read) and let go after them: the sleepers' way to their stops is not in its stop."""
    from liveunwind.targets.live import syscalls

    calls: list[tuple[int, int]] = []
    ptrace = syscalls.ptrace

    def recorded(request: int, tid: int, address: int = 0, data: int = 0) -> int:
        calls.append((request, tid))
        return ptrace(request, tid, address, data)

    monkeypatch.setattr(syscalls, "ptrace", recorded)
    # Which threads the stop took for running: on a loaded machine a sleeper may have run
    # since the last look too, and is then stopped with the running ones.
    splits: list[tuple[list[int], list[int]]] = []
    split = PtraceProcess._sleeping_then_running

    def spied(process: PtraceProcess, tids: list[int]) -> tuple[list[int], list[int]]:
        splits.append(split(process, tids))
        return splits[-1]

    monkeypatch.setattr(PtraceProcess, "_sleeping_then_running", spied)
    burner = profiled.tids["burner"]
    session = Session(profiled.pid)
    for _ in range(5):
        calls.clear()
        splits.clear()
        session.backtrace()
        sleepers, running = splits[0]  # the stop's (the second is the letting go's)
        if burner not in running or not sleepers:
            continue  # the burner was not seen running at this stop, or nothing slept
        for late in running:
            interrupted = calls.index((syscalls.PTRACE_INTERRUPT, late))
            let_go = calls.index((syscalls.PTRACE_DETACH, late))
            for tid in sleepers:
                assert calls.index((syscalls.PTRACE_GETREGSET, tid)) < interrupted, calls
                assert calls.index((syscalls.PTRACE_DETACH, tid)) < let_go, calls
        return
    pytest.fail("the burner was never seen running")


def test_liveunwind_killed_while_sampling_leaves_the_target_running_untraced(
    profiled: Profiled,
) -> None:
    """SIGKILL at instants spread over the first second of sampling at 200 Hz (the tracer
    thread lives from sample to sample): the kernel lets go of every thread, each time."""
    from tests.support.interrupts import assert_let_go

    for delay in (0.35, 0.5, 0.65, 0.8, 0.95, 1.1):
        runner = subprocess.Popen(
            [sys.executable, "-m", "liveunwind", "profile", str(profiled.pid), "--rate", "200"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=ROOT,
        )
        time.sleep(delay)
        runner.kill()
        runner.wait()
        assert_let_go(profiled.pid)
        _wait_for_work(profiled)


def _wait_for_work(profiled: Profiled) -> None:
    """Waits until the burner did more work than it had done so far."""
    before = profiled.chunks()
    wait_until(lambda: profiled.chunks() > before, 10, "the burner to work on")


def test_sampling_sets_the_garbage_collector_off_rarely(
    profiled: Profiled, capsys: pytest.CaptureFixture[str]
) -> None:
    """A sample's objects (a frame and its notes per frame) go at the next sample, none in a
    cycle: the collector, set off every 700 objects, would scan them every few samples (26
    times in 200 samples of this program); it is set off only once the objects kept grow
    by cli/profile.py's SAMPLING_GC_THRESHOLD, and its threshold is Python's again after."""
    from liveunwind.cli import main

    collections: list[int] = []

    def counted(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    thresholds = gc.get_threshold()
    gc.collect()
    gc.callbacks.append(counted)
    try:
        status = main(["profile", str(profiled.pid), "--duration", "2", "--rate", "100", "--json"])
    finally:
        gc.callbacks.remove(counted)
    document = json.loads(capsys.readouterr().out)
    assert status == 0
    assert document["samples"] >= 100
    assert len(collections) <= 5, collections
    assert gc.get_threshold() == thresholds


def test_a_warm_sample_leaves_nothing_for_the_garbage_collector(profiled: Profiled) -> None:
    """Every object of a warm sample goes by its reference count: none is in a cycle, which
    would keep the sample's snapshot (its stack copies) and module map until the collector
    ran (the stepper's walk held the stepper's methods: 221 objects in 5 samples; the stack
    copies' and the registers' ctypes array types, classes made anew)."""
    session = Session(profiled.pid, counts_stacks=True)
    profile = Profile(profiled.pid, RATE)
    session.backtrace()  # the cold one: what it reads and keeps is not a sample's
    gc.collect()
    gc.disable()
    try:
        for _ in range(5):
            assert session.backtrace().threads
        assert gc.collect() == 0
        for _ in range(5):  # counted as record() counts them: stacks kept with the walks
            profile.add(session.backtrace(), session.modules, walks=session.replayable_walks())
        assert gc.collect() == 0
    finally:
        gc.enable()
        session.close()


def _wait_until_every_thread_stopped(pid: int) -> None:
    for tid in os.listdir(f"/proc/{pid}/task"):
        wait_for_state(pid, "T", tid=int(tid))


def _stopped_samples(
    pid: int,
    kept: Session,
    fresh: Session,
    with_walks: Profile,
    plain: Profile,
    frameless: Counter[str],
) -> None:
    """Three samples of the process held with SIGSTOP, counted by a session that keeps its
    replays' stacks (``with_walks``) and by one whose every walk is named (``plain``).

    Held, every thread's walk is walked (its stack kept), then replayed without frames.
    Counts in ``frameless`` ``kept``'s walks without frames: "replayed" (the walk of the
    last backtrace again), "suffix" (taken whole from a remembered suffix)."""
    os.kill(pid, signal.SIGSTOP)
    try:
        for _ in range(3):
            _wait_until_every_thread_stopped(pid)
            backtrace = kept.backtrace()
            walks = kept.replayable_walks()
            assert walks is not None
            frameless.update(
                "replayed" if walk is kept.cache.walks.get(walked.tid) else "suffix"
                for walked in backtrace.threads
                if not walked.frames and (walk := walks.get(walked.tid)) is not None
                if walk.given is walked
            )
            with_walks.add(backtrace, kept.modules, walks=walks)
            # Let go by a tracer, a thread in the group stop runs for a moment to stop again.
            _wait_until_every_thread_stopped(pid)
            plain.add(fresh.backtrace(), fresh.modules)
    finally:
        os.kill(pid, signal.SIGCONT)


def _assert_same_outputs(profile: Profile, expected: Profile) -> None:
    from liveunwind.cli.profile import (
        format_folded,
        format_json,
        render_pprof,
        render_speedscope,
        render_svg,
    )

    for each in (profile, expected):
        each.timings.clear()  # the seconds of each phase: the only output that differs
    assert {name: thread.stacks for name, thread in profile.threads.items()} == {
        name: thread.stacks for name, thread in expected.threads.items()
    }
    assert format_folded(profile) == format_folded(expected)
    assert render_svg(profile) == render_svg(expected)
    assert render_pprof(profile) == render_pprof(expected)
    assert render_speedscope(profile) == render_speedscope(expected)
    assert format_json(profile) == format_json(expected)


def test_kept_stacks_of_replayed_walks_give_the_outputs_of_named_walks(
    profiled: Profiled,
) -> None:
    """A profile that counts a kept stack for a walk that comes without frames (replayed, or
    taken whole from a remembered suffix) gives every output a profile naming every walk
    gives, while threads move between the samples: held by SIGSTOP, every thread is parked
    and its walk replayed; let go, the burner and ``third`` move, and a stack kept by the
    thread instead of by its walk (or reused for a walk that does not replay it) would
    count where they were (a profile that counted the stack kept with each thread's last
    walk, not asking whether this walk was the one given, counted ``third``'s wrong).  A
    second profile of the same session counts stacks the first one kept, whose frames'
    sites it never had: made of the walks' facts (made of one frame less, a KeyError).

    Both sessions see each sample with the process held, so they walk the same stacks; the
    second one's profile counts stacks named from frames (main's way)."""
    kept, fresh = Session(profiled.pid, counts_stacks=True), Session(profiled.pid)
    with_walks, plain = Profile(profiled.pid, RATE), Profile(profiled.pid, RATE)
    again, plain_again = Profile(profiled.pid, RATE), Profile(profiled.pid, RATE)
    frameless: Counter[str] = Counter()
    try:
        for _ in range(25):
            _stopped_samples(profiled.pid, kept, fresh, with_walks, plain, frameless)
            time.sleep(0.007)  # third runs 10 ms in 30: it moves between most samples
        for _ in range(3):
            _stopped_samples(profiled.pid, kept, fresh, again, plain_again, Counter())
            time.sleep(0.007)
    finally:
        kept.close()
        fresh.close()
    # Every thread in the later samples of a stop, but while walking is timed against
    # remembering (RememberingChoice); and in the first, a thread whose registers changed
    # where the rest of its walk did not (the sleeper: 28-37 of 25 stops in 4 runs).
    assert frameless["replayed"] >= 40 and frameless["suffix"] >= 10
    # third moved from sleeping to working and back (the burner stays in spin_hot's stack)
    assert len(plain.threads["third"].stacks) >= 2
    _assert_same_outputs(with_walks, plain)
    _assert_same_outputs(again, plain_again)


def test_a_session_profiled_then_read_frame_by_frame_keeps_its_frames(profiled: Profiled) -> None:
    """Walks come without frames only for a session made to count stacks: a library user's
    session that a profile recorded, then backtraced, gets every thread's frames."""
    session = Session(profiled.pid)
    try:
        profile = record(session, rate=100, duration=0.5)
        assert profile.samples > 10
        for _ in range(3):
            threads = session.backtrace().threads
            assert threads and all(thread.frames for thread in threads), [
                (thread.tid, thread.stop_text) for thread in threads
            ]
    finally:
        session.close()
