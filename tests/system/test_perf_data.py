"""``liveunwind perf``: real ``perf record --call-graph dwarf`` files against ``perf script``.

testprogs/profile/profiled.c burns a core in ``spin_hot`` (thread ``burner``),
a third of one in ``third_busy`` (thread ``third``, which also calls
``clock_gettime``: libc and the vDSO), and sleeps in a third thread.  It is
recorded twice by the real ``perf record``: attached to the running process
(``-p``: perf synthesizes its mappings from /proc) and started by perf
through ``timeout`` (``--``: a fork, an exec, the loader's start-up, every
mmap as the kernel reports it).  Each sample's walk is compared with
``perf script``'s on the same file, by address (tests/support/perfscript.py):

- equal;
- perf's shorter and ours goes on to the end of the stack: perf's libdw walk
  stops at ``start_thread`` in the process it started, where ``__clone3``'s
  CFI is the outermost frame (ours is right: the thread began there);
- differing, where perf's walk left the program (a frame in no function,
  ``[unknown]``) and ours is complete: perf is wrong.

Those are the only differences allowed; samples of the main thread in the
loader's start-up are counted apart (ld.so's ``_start`` has no CFI).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from importlib.resources import files
from pathlib import Path
from types import SimpleNamespace

import jsonschema
import pytest

from liveunwind.backtrace.options import BacktraceOptions
from liveunwind.cli.perf import replay
from liveunwind.frames import Frame, ThreadBacktrace
from liveunwind.targets.sample.perfdata import PerfDataFile
from tests.support.builds import build
from tests.support.paths import ROOT
from tests.support.perfscript import Compared
from tests.support.pprof import first_mapping, needs_go, pprof
from tests.support.programs import start_program

pytestmark = pytest.mark.skipif(shutil.which("perf") is None, reason="perf is not installed")

RATE = 1500
BUSY = {"burner", "third"}
SCHEMA = json.loads((files("liveunwind.cli") / "schemas" / "profile.schema.json").read_text())


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "liveunwind", "perf", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )


def perf_record(output: Path, *target: str) -> None:
    result = subprocess.run(
        ["perf", "record", "--call-graph", "dwarf", "-F", str(RATE), "-o", str(output), *target],
        capture_output=True,
        text=True,
        timeout=120,
    )
    # perf exits as its command did: timeout's 124 when it ended the program.
    assert result.returncode in (0, 124) and output.stat().st_size > 0, result.stderr


#: The burner's share of a CPU while ``attached`` recorded, from the kernel's scheduler clock.
BURNER_CPU: list[float] = []


def cpu_nanoseconds(pid: int, tid: int) -> int:
    """Nanoseconds the thread ran, as the scheduler counts them (the truth for CPU shares)."""
    return int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])


@pytest.fixture(scope="module")
def attached(testprogs_build: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``perf record -p`` of the running program for 2 s."""
    folder = tmp_path_factory.mktemp("perfdata")
    with start_program(testprogs_build, "profiled", str(folder / "chunks"), busy=BUSY) as program:
        burner = next(t for t, (name, _) in program.thread_states().items() if name == "burner")
        before, started = cpu_nanoseconds(program.pid, burner), time.monotonic_ns()
        perf_record(folder / "attached.data", "-p", str(program.pid), "--", "sleep", "2")
        ran = cpu_nanoseconds(program.pid, burner) - before
        BURNER_CPU.append(100.0 * ran / (time.monotonic_ns() - started))
    return folder / "attached.data"


@pytest.fixture(scope="module")
def started(testprogs_build: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``perf record -- timeout 2 profiled``: perf starts it, through a fork and an exec."""
    folder = tmp_path_factory.mktemp("perfdata")
    program = str(testprogs_build / "profiled")
    counter = str(folder / "chunks")
    perf_record(folder / "started.data", "--", "timeout", "-s", "INT", "2", program, counter)
    return folder / "started.data"


@pytest.fixture(scope="module")
def compared_attached(attached: Path) -> Compared:
    return Compared(attached, BUSY)


@pytest.fixture(scope="module")
def compared_started(started: Path) -> Compared:
    return Compared(started, BUSY)


def test_every_sample_is_perf_scripts_where_perf_is_right_attached(
    compared_attached: Compared,
) -> None:
    compared = compared_attached
    print("attached:", dict(compared.kinds), "other threads:", dict(compared.startup))
    assert compared.missing == 0
    assert not compared.unexplained, compared.unexplained[:5]
    total = sum(compared.kinds.values())
    assert total > 300  # 2 s at 1500 Hz, of threads burning one core and a third (load permitting)
    assert compared.kinds["equal"] >= 0.95 * total
    burner = ("spin_hot", "burner_main", "start_thread", "__clone3")
    third = ("spin_hot", "third_busy", "third_main", "start_thread", "__clone3")
    assert compared.stacks[burner] > 0.4 * total
    assert compared.stacks[third] > 0.1 * total


def test_every_sample_is_perf_scripts_where_perf_is_right_started(
    compared_started: Compared,
) -> None:
    """Through a fork and an exec: the mappings follow the process perf started."""
    compared = compared_started
    print("started:", dict(compared.kinds), "other threads:", dict(compared.startup))
    assert compared.missing == 0
    assert not compared.unexplained, compared.unexplained[:5]
    total = sum(compared.kinds.values())
    assert total > 200
    burner = ("spin_hot", "burner_main", "start_thread", "__clone3")
    assert compared.stacks[burner] > 0.4 * total


def test_the_command_gives_profiles_outputs(attached: Path, tmp_path: Path) -> None:
    folded, pprof = tmp_path / "folded.txt", tmp_path / "profile.pb.gz"
    result = cli(str(attached), "--json", "--collapsed-out", str(folded), "--pprof", str(pprof))
    assert result.returncode in (0, 1), result.stderr
    document = json.loads(result.stdout)
    jsonschema.validate(document, SCHEMA)
    assert document["source"] == "perf.data" and document["rate_asked"] == RATE
    counts = [int(line.rpartition(" ")[2]) for line in folded.read_text().splitlines()]
    assert sum(counts) == document["samples"] > 300
    busiest = max(document["threads"], key=lambda thread: thread["samples"])
    assert busiest["name"] == "burner" and busiest["top_function"] == "spin_hot"
    # From the samples' periods (cpu-clock nanoseconds) over the recording; the scheduler's
    # count over the whole perf record run (its start and end included) is the truth.
    assert 0.7 * BURNER_CPU[0] < busiest["cpu_percent"] < 1.3 * BURNER_CPU[0]
    assert pprof.read_bytes()[:2] == b"\x1f\x8b"
    burner = next(thread for thread in document["threads"] if thread["name"] == "burner")
    only = json.loads(cli(str(attached), "--json", "--tid", str(burner["tid"])).stdout)
    assert [thread["name"] for thread in only["threads"]] == ["burner"]


@needs_go
def test_the_pprof_files_program_is_the_recorded_one(tmp_path: Path) -> None:
    """pprof's first mapping is the program, though its hot code and first samples are not.

    xz (Debian's, in every installation) spends its time in liblzma, and
    ld.so runs before it: neither is the program pprof should name.
    """
    data = tmp_path / "data"
    data.write_bytes(os.urandom(3 << 20))
    recording, output = tmp_path / "xz.data", tmp_path / "xz.pb.gz"
    xz = shutil.which("xz")
    assert xz is not None
    perf_record(recording, "--", xz, "-6", "-T1", "-k", "-f", str(data))
    result = cli(str(recording), "--pprof", str(output))
    assert result.returncode in (0, 1), result.stderr
    assert "liblzma" in pprof("-top", str(output)).split("flat%", 1)[1].splitlines()[1]
    assert first_mapping(pprof("-raw", str(output))) == os.path.realpath(xz)


def warm_against_cold(path: Path) -> tuple[int, int]:
    """Every sample of ``path`` as ``liveunwind perf`` walks it (one stepper per process, its
    cache warm: remembered suffixes) and as a stepper with an empty cache walks it: the
    same frames, each slot, and the same end.  Returns (samples, walks ending in a suffix)."""
    from liveunwind.targets.sample.space import SampleSpace
    from liveunwind.unwinder.cache import UnwindCache
    from liveunwind.unwinder.stepper import Stepper

    arguments = SimpleNamespace(pid=None, threads=None, sysroot=None, search_path="")
    samples = suffixed = 0
    with PerfDataFile(str(path)) as recording:
        replayed, unwound = replay(recording, arguments, BacktraceOptions())
        perf = replayed.arch.perf_registers
        assert perf is not None
        for each in unwound:
            sample, ours = each.sample, each.backtrace.threads[0]
            process = replayed.process(sample.pid)
            registers = perf.registers(replayed.attr.sample_regs_user, sample.registers)
            space = SampleSpace(process, sample.tid, each.name, registers, sample.stack)
            cold = Stepper(space, each.modules, cache=UnwindCache()).backtrace(space.threads()[0])
            assert walk_facts(ours) == walk_facts(cold), sample.time
            for frame in ours.frames:  # frames taken from a suffix are made without __init__
                assert all(hasattr(frame, slot) for slot in Frame.__slots__)
            samples += 1
            suffixed += replayed.unwinder._warm[process].backtracer.cache.suffixed
    return samples, suffixed


def walk_facts(thread: ThreadBacktrace) -> tuple[object, ...]:
    """All a stepper says of a walk (the symbolizer names it after)."""
    return (
        thread.stop_reason,
        thread.stop_detail,
        [
            (
                frame.index,
                frame.pc,
                frame.sp,
                frame.cfa,
                frame.method,
                frame.signal_frame,
                frame.exact_pc,
                frame.module,
                frame.module_offset,
                frame.notes,
            )
            for frame in thread.frames
        ],
    )


@pytest.mark.parametrize("recording", ["attached", "started"])
def test_every_sample_walk_equals_a_cold_steppers(
    recording: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Remembered suffixes (UnwindCache.suffixes) change no frame of any sample, through a
    fork and an exec too; and most walks end in one (the burner spins in one loop).

    Remembering is kept on throughout: whether it pays is timed (RememberingChoice), and
    this test is of what it gives, not of which way a loaded machine's clock chose.
    """
    from liveunwind.unwinder.remembered import RememberingChoice

    monkeypatch.setattr(RememberingChoice, "began", lambda self: None)
    samples, suffixed = warm_against_cold(request.getfixturevalue(recording))
    print(recording, samples, "samples,", suffixed, "ended in a remembered suffix")
    assert samples > 200
    assert suffixed > samples // 2


@pytest.mark.parametrize("recording", ["attached", "started"])
def test_stacks_of_walks_left_without_frames_are_a_cold_walks_named(
    recording: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With stacks_only (the profile of ``liveunwind perf``), a walk taken whole from a
    remembered one comes without its frames (Stepper.frameless) and its stack is found by that
    walk: every sample's stack is still the one a cold stepper's walk of it gives, named; and
    most samples' walks came without frames."""
    from liveunwind.backtrace.profile import stack_of
    from liveunwind.backtrace.symbolizer import symbolize
    from liveunwind.targets.sample.space import SampleSpace
    from liveunwind.unwinder.cache import UnwindCache
    from liveunwind.unwinder.remembered import RememberingChoice
    from liveunwind.unwinder.stepper import Stepper

    monkeypatch.setattr(RememberingChoice, "began", lambda self: None)
    arguments = SimpleNamespace(pid=None, threads=None, sysroot=None, search_path="")
    samples = frameless = 0
    with PerfDataFile(str(request.getfixturevalue(recording))) as data:
        replayed, unwound = replay(data, arguments, BacktraceOptions())
        replayed.unwinder.stacks_only = True
        perf = replayed.arch.perf_registers
        assert perf is not None
        for each in unwound:
            sample, ours = each.sample, each.backtrace.threads[0]
            process = replayed.process(sample.pid)
            registers = perf.registers(replayed.attr.sample_regs_user, sample.registers)
            space = SampleSpace(process, sample.tid, each.name, registers, sample.stack)
            cache = UnwindCache()
            cold = Stepper(space, each.modules, cache=cache).backtrace(space.threads()[0])
            symbolize([cold], each.modules, cache)
            assert each.stacks == [stack_of(cold)], sample.time
            assert (ours.stop_reason, ours.stop_detail) == (cold.stop_reason, cold.stop_detail)
            samples += 1
            frameless += not ours.frames and bool(cold.frames)
    print(recording, samples, "samples,", frameless, "walks without frames")
    assert samples > 200
    assert frameless > samples // 2


def test_a_file_that_is_not_perf_data_is_one_line(tmp_path: Path) -> None:
    other = tmp_path / "not.data"
    other.write_bytes(b"\x7fELF" + bytes(200))
    result = cli(str(other))
    assert result.returncode == 2
    assert result.stderr == f"liveunwind: {other}: not a perf.data file (no PERFILE2 magic)\n"


def test_a_truncated_file_gives_what_it_holds(attached: Path, tmp_path: Path) -> None:
    cut = tmp_path / "cut.data"
    cut.write_bytes(attached.read_bytes()[: attached.stat().st_size // 2])
    result = cli(str(cut), "--json")
    assert result.returncode == 1, result.stderr
    document = json.loads(result.stdout)
    assert document["samples"] > 100
    assert any("it is truncated" in problem for problem in document["problems"])
    tiny = tmp_path / "tiny.data"
    tiny.write_bytes(attached.read_bytes()[:40])
    result = cli(str(tiny))
    assert result.returncode == 2
    assert "shorter than perf.data's header" in result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_a_recording_without_stack_copies_is_refused(testprogs_build: Path, tmp_path: Path) -> None:
    data, program = tmp_path / "fp.data", str(testprogs_build / "profiled")
    command = ["timeout", "-s", "INT", "0.5", program, str(tmp_path / "chunks")]
    recorded = subprocess.run(
        ["perf", "record", "-g", "-o", str(data), "--", *command], capture_output=True, timeout=60
    )
    assert data.stat().st_size > 0, recorded.stderr
    result = cli(str(data))
    assert result.returncode == 2
    assert result.stderr.endswith(
        "its samples hold no user registers and stack copy: "
        "record with perf record --call-graph dwarf\n"
    )


def test_files_are_the_recordings_by_build_id_under_the_sysroot(
    testprogs_build: Path, tmp_path: Path
) -> None:
    """The program is rebuilt after the recording: its frames go unnamed, said, never misnamed;
    its recorded copy under ``--sysroot`` names them again."""
    program = tmp_path / "bin" / "profiled"
    program.parent.mkdir()
    shutil.copy(testprogs_build / "profiled", program)
    data = tmp_path / "rebuilt.data"
    perf_record(data, "--", "timeout", "-s", "INT", "1", str(program), str(tmp_path / "chunks"))
    sysroot = tmp_path / "sysroot"
    (sysroot / program.parent.relative_to("/")).mkdir(parents=True)
    shutil.copy(program, sysroot / program.relative_to("/"))
    shutil.copy(testprogs_build / "threads-O2", program)  # another build-id at the same path

    rebuilt = json.loads(cli(str(data), "--json").stdout)
    functions = {name for stack in rebuilt["stacks"] for name in stack["frames"]}
    assert "spin_hot" not in functions
    assert any(name.startswith("profiled+0x") for name in functions)  # named by offset
    assert any(
        str(program) in problem and "build-id" in problem and "differs" in problem
        for problem in rebuilt["problems"]
    ), rebuilt["problems"]

    found = json.loads(cli(str(data), "--json", "--sysroot", str(sysroot)).stdout)
    top = max(found["threads"], key=lambda thread: thread["samples"])
    assert top["name"] == "burner" and top["top_function"] == "spin_hot"
    assert not any("differs" in problem for problem in found["problems"])


def test_a_compressed_recording_is_perf_scripts(testprogs_build: Path, tmp_path: Path) -> None:
    """``perf record -z``: the records are pieces of one zstd stream, no build-ids are listed."""
    data, program = tmp_path / "z.data", str(testprogs_build / "profiled")
    command = ["timeout", "-s", "INT", "1", program, str(tmp_path / "chunks")]
    perf_record(data, "-z", "--", *command)
    compared = Compared(data, BUSY)
    print("compressed:", dict(compared.kinds), "other threads:", dict(compared.startup))
    assert compared.missing == 0
    assert not compared.unexplained, compared.unexplained[:5]
    assert sum(compared.kinds.values()) > 100


def test_jit_code_is_named_from_the_perf_map_and_walked_through(tmp_path: Path) -> None:
    """testprogs/jit/jit-entry spins on the first instruction of code in anonymous memory
    that only its perf map names: perf's walk ends there (no CFI), ours goes on to the
    thread's start, the chain the program documents."""
    program = build("jit") / "jit-entry"
    data = tmp_path / "jit.data"
    perf_record(data, "--", "timeout", "-s", "INT", "1", str(program))
    compared = Compared(data, {"spinner"})
    print("jit:", dict(compared.kinds), "other threads:", dict(compared.startup))
    assert not compared.unexplained, compared.unexplained[:5]
    total = sum(compared.kinds.values())
    assert total > 100 and compared.kinds["perf shorter"] == total
    chain = ("jit_entry", "call_jit", "spin", "start_thread", "__clone3")
    assert compared.stacks[chain] >= 0.95 * total


def test_a_sample_space_reads_the_copy_and_unchanging_file_bytes_only() -> None:
    """This process as a sampled one: its stack copy, its files inside its root (``RootFiles``,
    what a live sampler uses), and "not in the sample" for the rest."""
    from liveunwind.arch import host_arch
    from liveunwind.errors import MemoryReadError
    from liveunwind.targets.live.procfs import read_maps
    from liveunwind.targets.sample.process import RootFiles, SampledProcess
    from liveunwind.targets.sample.space import SampleSpace

    arch, problems = host_arch(), []
    process = SampledProcess(arch, os.getpid(), RootFiles(f"/proc/{os.getpid()}/root", problems))
    maps = read_maps("self")
    for mapping in maps:
        prot = (4 if mapping.executable else 0) | (2 if mapping.writable else 0) | 1
        process.map(mapping.start, mapping.end, mapping.offset, mapping.path, prot=prot)
    code = next(m for m in maps if m.executable and "libc.so" in m.path)
    heap = next(m for m in maps if m.path == "[heap]")
    stack = bytes(range(256)) * 4
    space = SampleSpace(process, 1, "t", {arch.sp: 0x1000, arch.pc: code.start}, stack)

    assert space.read(0x1010, 4) == stack[16:20]
    assert space.read_word(0x1008) == int.from_bytes(stack[8:16], "little")
    with open(f"/proc/{os.getpid()}/mem", "rb") as memory:  # the live bytes, the truth
        memory.seek(code.start + 0x100)
        assert space.read(code.start + 0x100, 64) == memory.read(64)
    for address in (heap.start, 0x1000 + len(stack) - 4):  # the heap, past the copy's end
        with pytest.raises(MemoryReadError, match="not in the sample"):
            space.read(address, 8)
    assert not problems

    process.build_ids[code.path] = bytes(20)  # a recording naming another build-id
    process.files = RootFiles(f"/proc/{os.getpid()}/root", problems)
    with pytest.raises(MemoryReadError, match="not in the sample"):
        process.read(code.start + 0x100, 64)
    assert len(problems) == 1 and "differs from 0000" in problems[0]


def test_the_recordings_vdso_is_this_processes_own(attached: Path) -> None:
    """A recording made here names the vDSO this process has: it is read, byte for byte the
    one the kernel's auxiliary vector points this process at (AT_SYSINFO_EHDR), its build-id
    the recording's; a recording naming another build-id gets none."""
    import ctypes

    from liveunwind.arch import host_arch
    from liveunwind.cli.perf import _own_vdso
    from liveunwind.formats.elf import ElfImage

    with PerfDataFile(str(attached)) as recording:
        named = {entry.path: entry.build_id for entry in recording.build_ids}["[vdso]"]
        found = _own_vdso(recording, host_arch(), named)
        assert _own_vdso(recording, host_arch(), bytes(20)) is None
    assert found is not None and ElfImage(found, origin="[vdso]").build_id == named
    libc = ctypes.CDLL(None)
    libc.getauxval.restype = ctypes.c_ulong
    at_sysinfo_ehdr = 33
    assert ctypes.string_at(libc.getauxval(at_sysinfo_ehdr), len(found)) == found
