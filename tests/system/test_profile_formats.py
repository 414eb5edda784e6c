"""``profile --pprof`` and ``--speedscope`` on a real program, read by the formats' own tools.

The pprof file is read by ``go tool pprof`` (Debian's golang-go): its
``-traces`` must show every stack of the folded stacks written by the same
run, with the same counts and thread; its ``-top`` the same flat counts
per function; its ``-raw`` the mappings with the build-ids ``readelf -n``
reads from the files, and a location of the hot function at an address
inside that function as ``nm`` gives it.  With ``--lines``, the hot
function's line is the one ``addr2line`` gives for its address.  The
speedscope file is validated against the schema speedscope publishes
(tests/data/speedscope, vendored: no network in tests) and its weights
compared with the folded stacks.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections import Counter
from pathlib import Path

import jsonschema
import pytest

from tests.support.paths import ROOT
from tests.support.pprof import first_mapping, needs_go, pprof
from tests.support.programs import start_program
from tests.system.test_profile import BUSY, Profiled, cli

SPEEDSCOPE_SCHEMA = json.loads(
    (ROOT / "tests" / "data" / "speedscope" / "file-format-schema.json").read_text()
)
#: One stack of ``go tool pprof -traces``: a line of dashes, then its labels, then the count.
#: A mapping of ``go tool pprof -raw``: id: start/limit/offset file build-id.
MAPPING = re.compile(r"^\s*(\d+): (0x[0-9a-f]+)/(0x[0-9a-f]+)/(0x[0-9a-f]+) (\S+) (\S*)")
TRACE_SEPARATOR = re.compile(r"^-+\+-+$", re.MULTILINE)


@pytest.fixture(scope="module")
def profiled(testprogs_build: Path, tmp_path_factory: pytest.TempPathFactory):
    counter = tmp_path_factory.mktemp("formats") / "chunks"
    program = start_program(testprogs_build, "profiled", str(counter), busy=BUSY)
    with program:
        yield Profiled(program, counter)


class Run:
    """One ``profile`` run writing folded stacks, pprof and speedscope side by side."""

    def __init__(self, folder: Path, stdout: str, lines: bool) -> None:
        self.pprof = folder / "profile.pb.gz"
        self.speedscope = folder / "profile.speedscope.json"
        self.stdout = stdout
        self.lines = lines
        self.folded: Counter[tuple[str, ...]] = Counter()
        for line in (folder / "profile.folded").read_text().splitlines():
            stack, count = line.rsplit(" ", 1)
            self.folded[tuple(stack.split(";"))] += int(count)


def profile_run(profiled: Profiled, folder: Path, *extra: str) -> Run:
    result = cli(
        "profile", str(profiled.pid), "--duration", "2", "--rate", "100",
        "--collapsed-out", str(folder / "profile.folded"),
        "--pprof", str(folder / "profile.pb.gz"),
        "--speedscope", str(folder / "profile.speedscope.json"),
        *extra,
    )  # fmt: skip
    # 1: a walk ended early (on a loaded machine, a thread that did not stop
    # in time); the files hold those stacks as the folded stacks do.
    assert result.returncode in (0, 1), result.stderr
    return Run(folder, result.stdout, "--lines" in extra)


@pytest.fixture(scope="module")
def run(profiled: Profiled, tmp_path_factory: pytest.TempPathFactory) -> Run:
    return profile_run(profiled, tmp_path_factory.mktemp("formats-run"))


@pytest.fixture(scope="module")
def lines_run(profiled: Profiled, tmp_path_factory: pytest.TempPathFactory) -> Run:
    return profile_run(profiled, tmp_path_factory.mktemp("formats-lines"), "--lines", "--json")


def traces(path: Path, *arguments: str) -> Counter[tuple[str, ...]]:
    """``go tool pprof -traces``: (thread, outermost, …, innermost) → samples."""
    found: Counter[tuple[str, ...]] = Counter()
    for block in TRACE_SEPARATOR.split(pprof("-traces", *arguments, str(path)))[1:]:
        if not block.strip():
            continue  # after the last stack's closing line
        thread, count, frames = None, 0, []
        for line in block.splitlines():
            label = re.match(r"^\s+thread:\s+(\S+)$", line)
            counted = re.match(r"^\s+(\d+)\s{3}(\S.*)$", line)
            if label:
                thread = label.group(1)
            elif counted:
                count = int(counted.group(1))
                frames.append(counted.group(2))
            elif line.strip():
                frames.append(line.strip())
        assert thread is not None and count, block
        found[(thread, *reversed(frames))] += count
    return found


def function_of(name: str) -> str:
    """A folded stack's name without its ``(file:line)``: pprof's function name."""
    return re.sub(r" \([^()]*\)$", "", name)


def by_function(folded: Counter[tuple[str, ...]]) -> Counter[tuple[str, ...]]:
    """Folded stacks with ``--lines`` as functions only: the lines of one function add up."""
    counts: Counter[tuple[str, ...]] = Counter()
    for stack, count in folded.items():
        counts[tuple(function_of(name) for name in stack)] += count
    return counts


# -- pprof, read by go tool pprof -----------------------------------------------------------


@needs_go
def test_go_tool_pprof_shows_our_stacks_threads_and_counts(run: Run) -> None:
    assert sum(run.folded.values()) > 0
    assert traces(run.pprof) == run.folded
    assert f"pprof: {run.pprof}" in run.stdout
    assert f"speedscope: {run.speedscope}" in run.stdout


@needs_go
def test_go_tool_pprof_top_counts_each_innermost_function_as_the_folded_stacks_do(
    run: Run,
) -> None:
    innermost: Counter[str] = Counter()
    for stack, count in run.folded.items():
        innermost[stack[-1]] += count
    top = pprof("-top", "-nodecount=100000", "-nodefraction=0", str(run.pprof))
    flat = {}
    for line in top.splitlines():
        row = re.match(r"^\s*(\d+)\s+[\d.]+%\s+[\d.]+%\s+\d+\s+[\d.]+%\s+(\S.*)$", line)
        if row and int(row.group(1)):
            flat[row.group(2)] = int(row.group(1))
    assert flat == dict(innermost)
    # The thread label picks one thread: the burner is in its hot function.
    burner = pprof("-top", "-tagfocus=thread=burner", str(run.pprof))
    rows = re.findall(r"^\s*\d+\s+[\d.]+%\s+[\d.]+%\s+\d+\s+[\d.]+%\s+(\S+)$", burner, re.M)
    assert rows[0] == "spin_hot", burner


@needs_go
def test_the_raw_profile_has_our_sample_types_mappings_and_addresses(
    run: Run, profiled: Profiled, testprogs_build: Path
) -> None:
    raw = pprof("-raw", str(run.pprof))
    assert "PeriodType: wall nanoseconds" in raw
    assert "Period: 10000000" in raw
    assert "samples/count[dflt] cpu/nanoseconds" in raw
    program = str(testprogs_build / "profiled")
    mappings = {}
    for line in raw.split("Mappings\n", 1)[1].splitlines():
        mapping = re.match(
            r"^\s*(\d+): (0x[0-9a-f]+)/(0x[0-9a-f]+)/(0x[0-9a-f]+) (\S+) (\S*)", line
        )
        if mapping:
            mappings[mapping.group(5)] = (int(mapping.group(2), 16), int(mapping.group(3), 16))
            build_id = mapping.group(6)
            # The oracle: the build-id note readelf reads from the file.
            notes = subprocess.run(
                ["readelf", "-n", mapping.group(5)], capture_output=True, text=True
            ).stdout
            if mapping.group(5).startswith("/"):
                assert f"Build ID: {build_id}" in notes, mapping.group(5)
    start, limit = mappings[program]
    # pprof takes the first mapping for the program profiled ("File:" in its reports).
    assert first_mapping(raw) == program
    # The program's load address from the kernel's map; spin_hot's extent from nm.
    base = min(
        int(line.split("-")[0], 16)
        for line in Path(f"/proc/{profiled.pid}/maps").read_text().splitlines()
        if line.endswith(program)
    )
    assert start == base
    symbol = next(
        line.split()
        for line in subprocess.run(
            ["nm", "-S", program], capture_output=True, text=True
        ).stdout.splitlines()
        if line.endswith(" spin_hot")
    )
    low = base + int(symbol[0], 16)
    high = low + int(symbol[1], 16)
    (address,) = [
        int(location.group(1), 16)
        for location in re.finditer(r"^\s*\d+: (0x[0-9a-f]+) M=\d+ spin_hot ", raw, re.MULTILINE)
    ]
    assert low <= address < high <= limit


@needs_go
def test_with_lines_the_hot_line_is_the_one_addr2line_gives(
    lines_run: Run, profiled: Profiled, testprogs_build: Path
) -> None:
    assert traces(lines_run.pprof) == by_function(lines_run.folded)
    program = str(testprogs_build / "profiled")
    raw = pprof("-raw", str(lines_run.pprof))
    location = re.search(r"^\s*\d+: (0x[0-9a-f]+) M=\d+ spin_hot \S+:(\d+) ", raw, re.MULTILINE)
    assert location, raw
    base = min(
        int(line.split("-")[0], 16)
        for line in Path(f"/proc/{profiled.pid}/maps").read_text().splitlines()
        if line.endswith(program)
    )
    address = int(location.group(1), 16) - base
    # The leaf's pc is where it stopped (not a return address): addr2line's own line.
    where = (
        subprocess.run(
            ["addr2line", "-e", program, f"{address:#x}"], capture_output=True, text=True
        )
        .stdout.split(" (discriminator")[0]
        .strip()
    )
    assert where.endswith(f"profiled.c:{location.group(2)}"), (where, location.group(0))


@needs_go
def test_the_cpu_values_share_each_threads_cpu_time_among_its_running_stacks(
    lines_run: Run,
) -> None:
    """Per thread, the ``cpu`` values add up to the CPU time the document gives it."""
    document = json.loads(lines_run.stdout)
    raw = pprof("-raw", str(lines_run.pprof))
    cpu: Counter[str] = Counter()
    stacks: Counter[str] = Counter()
    samples = raw.split("Samples:\n", 1)[1].split("Locations\n", 1)[0]
    for values, thread in re.findall(r"^\s+\d+\s+(\d+):[^\n]*\n\s+thread:\[(\S+)\]", samples, re.M):
        cpu[thread] += int(values)
        stacks[thread] += 1
    for thread in document["threads"]:
        name = thread["name"]
        if thread["cpu_percent"] is None or not thread["running"]:
            assert cpu[name] == 0, thread
            continue
        expected = thread["cpu_percent"] / 100 * document["duration"] * 1e9
        assert abs(cpu[name] - expected) <= stacks[name], (name, cpu[name], expected)
    assert cpu["burner"] > 0


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


threading.Thread(target=worker, daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
"""


@needs_go
def test_python_frames_are_functions_with_their_lines(tmp_path: Path) -> None:
    if not Path("/usr/bin/python3").exists():
        pytest.skip("needs Debian's python3")
    script = tmp_path / "spinning.py"
    script.write_text(SPINNING)
    program = subprocess.Popen(["/usr/bin/python3", str(script)], stdout=subprocess.PIPE)
    try:
        assert program.stdout is not None and program.stdout.readline() == b"ready\n"
        result = cli(
            "profile", str(program.pid), "--python", "--duration", "1", "--per-thread",
            "--collapsed-out", str(tmp_path / "profile.folded"),
            "--pprof", str(tmp_path / "profile.pb.gz"),
            "--speedscope", str(tmp_path / "profile.speedscope.json"),
        )  # fmt: skip
    finally:
        program.kill()
        program.wait()
    assert result.returncode in (0, 1), result.stderr
    written = Run(tmp_path, result.stdout, lines=False)
    assert traces(written.pprof) == by_function(written.folded)
    raw = pprof("-raw", str(written.pprof))
    # worker's line is the call of spin_in_python (line 14 of the script).
    assert re.search(
        rf"^\s*\d+: 0x[0-9a-f]+ M=\d+ worker {re.escape(str(script))}:14 ", raw, re.M
    ), raw
    document = json.loads(written.speedscope.read_text())
    jsonschema.Draft7Validator(SPEEDSCOPE_SCHEMA).validate(document)
    assert {"name": "worker", "file": str(script), "line": 14} in document["shared"]["frames"]


@needs_go
def test_stacks_beyond_the_bound_are_one_stack_that_pprof_reads(
    profiled: Profiled, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from liveunwind.backtrace import profile as profile_module
    from liveunwind.backtrace.session import Session
    from liveunwind.cli.profile import render_pprof

    monkeypatch.setattr(profile_module, "MAX_STACKS", 2)
    sampled = profile_module.record(Session(profiled.pid), rate=50, duration=0.5)
    assert sampled.overflowed > 0
    path = tmp_path / "bounded.pb.gz"
    path.write_bytes(render_pprof(sampled))
    assert traces(path) == sampled.folded()
    assert any(profile_module.OVERFLOW[0] in stack for stack in sampled.folded())


# -- speedscope --------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["run", "lines_run"])
def test_the_speedscope_file_follows_the_published_schema_and_our_counts(
    which: str, request: pytest.FixtureRequest
) -> None:
    written: Run = request.getfixturevalue(which)
    document = json.loads(written.speedscope.read_text())
    jsonschema.Draft7Validator(SPEEDSCOPE_SCHEMA).validate(document)
    frames = document["shared"]["frames"]
    seen: Counter[tuple[str, ...]] = Counter()
    for profile in document["profiles"]:
        thread = profile["name"].split(" ")[0]
        assert profile["endValue"] == sum(profile["weights"])
        for sample, weight in zip(profile["samples"], profile["weights"], strict=True):
            seen[(thread, *(frames[index]["name"] for index in sample))] += weight
    assert seen == by_function(written.folded)
    if written.lines:
        assert {"name": "spin_hot", "file": str(ROOT / "testprogs/profile/profiled.c")}.items() <= {
            key: value
            for frame in frames
            if frame["name"] == "spin_hot"
            for key, value in frame.items()
            if key != "line"
        }.items()


# -- bad paths ----------------------------------------------------------------------------


@pytest.mark.parametrize("option", ["--pprof", "--speedscope"])
def test_a_path_that_cannot_be_written_is_refused_before_sampling(option: str) -> None:
    result = cli("profile", str(os.getpid()), option, "/nonexistent/dir/out")
    assert result.returncode == 64
    assert "cannot write /nonexistent/dir/out" in result.stderr
    assert result.stderr.count("\n") == 1
