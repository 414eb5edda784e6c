"""riscv64 in a riscv64 VM: live ptrace and the kernel's own cores, frame for frame against gdb.

docker/run-vm riscv64-vm boots Debian's riscv64 kernel in ``qemu-system-riscv64 -M
virt`` (RV64GC, lp64d) with a Debian riscv64 root file system; this module runs
inside it. It is what QEMU user mode cannot give: ptrace of riscv64 programs
(QEMU 7.2 user mode emulates none) and cores written by a riscv64 kernel (QEMU
7.2 user mode writes no riscv64 core, and gdb-multiarch's ``gcore`` through its
stub writes one with x86_64-sized NT_PRSTATUS notes and no stacks).

The programs are testprogs/riscv64's (the host's threads.c, sighandler.c,
recurse.c and crash/crash.c in every variant), built here by the VM's own gcc:
the native toolchain a riscv64 user has. Every test compares the installed
``liveunwind`` command (``--json``) with the VM's gdb on the same stopped process
or the same core, every thread: the same pcs, the program's own functions under
the same names, every walk complete. The tests of the platform itself (the
machine is riscv64, gdb unwinds a live program and a kernel core here) do not
need liveunwind to support riscv64.

With ``LIVEUNWIND_VM_EXPORT`` set (docker/vm-init sets it), test_export_kernel_cores
leaves a few small cores there, xz-compressed, with their executables and gdb's
``thread apply all bt``; run-vm copies them out (docker/results/riscv64-vm-export/)
for tests/data/riscv64-cores/.
"""

from __future__ import annotations

import json
import lzma
import os
import platform
import resource
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import liveunwind
from tests.integration.oncpu import (
    BURNER,
    check_cut_walks,
    check_hottest_stack,
    check_sampled_frames,
    listing,
    require_sampling,
)
from tests.support.oracles import (
    Backtraces,
    describe,
    gdb_backtraces,
    gdb_core_backtraces,
    physical,
)
from tests.support.platform import (
    PLATFORM,
    backtrace_json,
    contains_chain,
    functions,
    require_ptrace,
    start_parked,
    wait_state,
)
from tests.support.programs import RunningProgram, start_program

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        PLATFORM != "riscv64-vm", reason="the riscv64 tests run in the riscv64 VM (riscv64-vm)"
    ),
]

ROOT = Path(__file__).resolve().parents[2]
RISCV64 = ROOT / "testprogs" / "riscv64"
EM_RISCV = 243
#: -O0 and -O2, each with the frame pointer kept (-fno-omit-frame-pointer) and left out.
FLAVOURS = ["O0-fp", "O0-nofp", "O2-fp", "O2-nofp"]
LIVE = ["threads", "sighandler", "recurse"]
#: profiled (testprogs/profile/profiled.c) for ``profile --on-cpu``: at -O0 with the frame
#: pointer, and at -O2 without it.
ONCPU_FLAVOURS = ["O0-fp", "O2-nofp"]
CRASH_VARIANTS = ["O0", "O2", "O2-static"]
MODES = ["leaf", "abort", "handler", "thread"]
#: The innermost frames crash.c promises the crashing thread, by mode.
CRASH_CHAINS = {
    "leaf": ["leaf_store", "leaf_caller", "main"],
    "abort": ["recurse_then_abort"] * 3,
    "handler": ["handler_fault", "on_usr1"],
    "thread": ["thread_fault", "thread_middle", "thread_main"],
}
CRASH_SIGNALS = {"leaf": "SIGSEGV", "abort": "SIGABRT", "handler": "SIGSEGV", "thread": "SIGSEGV"}
#: The cores kept for tests/data/riscv64-cores/: static (the host reads them without
#: sid's or trixie's libc), small, and between them a crash in a second thread and one
#: inside a signal handler (the vDSO's sigreturn trampoline on the stack).
EXPORTED = [("O2-static", "thread"), ("O2-static", "handler")]
#: threads.c's thread "deep", innermost first.
DEEP_CHAIN = [f"chain_{n:02d}" for n in range(30, 0, -1)]
#: Seconds a program may take to print "ready" and settle: under TCG a dynamic
#: program's start (the loader, relocations) takes a second or more.
READY_TIMEOUT = 120.0
RECURSE_DEPTH = 50


# -- the programs ---------------------------------------------------------------------


def _targets() -> list[str]:
    live = [f"{name}-{flavour}" for name in LIVE for flavour in FLAVOURS]
    oncpu = [f"profiled-{flavour}" for flavour in ONCPU_FLAVOURS]
    return [*live, *oncpu, *(f"crash-{variant}" for variant in CRASH_VARIANTS)]


@pytest.fixture(scope="session")
def riscv64_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """testprogs/riscv64's variants that these tests run, built by the VM's gcc."""
    for tool in ("make", "gcc"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    build = tmp_path_factory.mktemp("riscv64-build")
    result = subprocess.run(
        ["make", "-C", str(RISCV64), "-j2", "RISCV64_CC=gcc", f"BUILD={build}"]
        + [str(build / target) for target in _targets()],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        pytest.fail(f"building testprogs/riscv64 failed:\n{result.stdout}\n{result.stderr}")
    return build


def elf_header(path: Path) -> tuple[int, int]:
    """(e_machine, e_flags) of an ELF file."""
    header = path.read_bytes()[:52]
    assert header[:5] == b"\x7fELF\x02", f"{path} is not a 64-bit ELF file"
    return int.from_bytes(header[18:20], "little"), int.from_bytes(header[48:52], "little")


# -- comparing with gdb -----------------------------------------------------------------


def validated(document: dict[str, Any]) -> dict[str, Any]:
    """The document, checked against the JSON Schema the installed package ships."""
    from tests.support.schema import VALIDATOR  # jsonschema: Debian's python3-jsonschema

    VALIDATOR.validate(document)
    return document


def program_symbols(exe: Path) -> set[str]:
    """The function names the program itself defines (its own source, not libc's)."""
    from elftools.elf.elffile import ELFFile  # python3-pyelftools

    with exe.open("rb") as stream:
        table = ELFFile(stream).get_section_by_name(".symtab")
        assert table is not None, f"{exe} has no symbol table"
        return {
            symbol.name
            for symbol in table.iter_symbols()
            if symbol["st_info"]["type"] == "STT_FUNC"
            and symbol["st_info"]["bind"] == "STB_LOCAL"
            and symbol["st_shndx"] != "SHN_UNDEF"
        } | {"main"}


def assert_json_matches_gdb(document: dict[str, Any], oracle: Backtraces, exe: Path) -> None:
    """Every thread: gdb's physical pcs, the program's own functions under gdb's
    names, gdb's signal frames as signal frames, and a complete walk."""
    ours = {thread["tid"]: thread for thread in document["threads"]}
    assert set(ours) == set(oracle), "liveunwind and gdb saw different threads"
    symbols = program_symbols(exe)
    for tid, gdb_frames in oracle.items():
        thread = ours[tid]
        frames = physical(gdb_frames)
        got = [frame["pc"] for frame in thread["frames"]]
        listing = (
            f"thread {tid} ({thread['name']}) differs from gdb\n"
            f"liveunwind ({thread['stop_reason']}):\n"
            + "\n".join(
                f"#{index:<3} {frame['pc']:#x} {frame['function'] or '??'} "
                f"[{frame['method']}{' signal' if frame['signal_frame'] else ''}]"
                for index, frame in enumerate(thread["frames"])
            )
            + f"\ngdb:\n{describe(frames)}"
        )
        assert got == [frame.pc for frame in frames], listing
        # Names compared for the program's own functions only: libc's are aliases
        # (clock_nanosleep / __clock_nanosleep) that each tool may pick differently.
        ours_named = [name if name in symbols else None for name in functions(thread)]
        assert ours_named == [f.name if f.name in symbols else None for f in frames], listing
        signal_frames = [frame["signal_frame"] for frame in thread["frames"]]
        assert signal_frames == [frame.kind == "sigtramp" for frame in frames], listing
        assert thread["complete"], listing


# -- the platform ------------------------------------------------------------------------


def test_the_vm_is_riscv64(riscv64_build: Path) -> None:
    """uname, the interpreter, the programs built here: riscv64, on a riscv64 kernel."""
    assert platform.machine() == "riscv64"
    assert elf_header(Path(sys.executable).resolve())[0] == EM_RISCV
    machine, flags = elf_header(riscv64_build / "threads-O2-fp")
    assert machine == EM_RISCV
    assert flags & 0x7 == 0x5, f"e_flags {flags:#x}: not RVC with the double-float ABI (lp64d)"
    cpu = Path("/proc/cpuinfo").read_text()
    isa = next(line for line in cpu.splitlines() if line.startswith("isa"))
    assert "rv64imafdc" in isa, isa
    # The kernel's own riscv64 /proc/cpuinfo: an MMU line (QEMU user mode shows the host's).
    assert any(line.startswith("mmu") for line in cpu.splitlines()), cpu
    # The installed package, not a checkout beside the tests.
    assert "site-packages" in str(Path(liveunwind.__file__).resolve())


def test_liveunwind_knows_the_host_arch() -> None:
    from liveunwind.arch import host_arch

    assert host_arch().name == "riscv64"


def test_gdb_unwinds_a_live_program(riscv64_build: Path, gdb: str) -> None:
    """ptrace works here, and gdb (the oracle) walks every thread of a riscv64 program."""
    require_ptrace()
    program = start_parked(riscv64_build / "threads-O2-fp", timeout=READY_TIMEOUT)
    try:
        oracle = gdb_backtraces(program.pid, gdb=gdb)
        assert set(oracle) == set(program.threads())
        deep = [frame.name or "??" for frame in physical(oracle[program.tid("deep")])]
        assert contains_chain(deep, ["block_in_nanosleep", *DEEP_CHAIN, "start"]), deep
    finally:
        program.stop()


def test_gdb_reads_a_kernel_core(riscv64_build: Path, core_of: Any, gdb: str) -> None:
    """The riscv64 kernel writes cores here, and gdb (the oracle) reads them."""
    core = core_of("O2", "thread")
    oracle = gdb_core_backtraces(core, riscv64_build / "crash-O2", gdb=gdb)
    assert len(oracle) == 3
    names = [[frame.name or "??" for frame in physical(frames)] for frames in oracle.values()]
    assert any(contains_chain(chain, CRASH_CHAINS["thread"]) for chain in names), names


# -- live -----------------------------------------------------------------------------------


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("name", LIVE)
def test_live_matches_gdb(riscv64_build: Path, gdb: str, name: str, flavour: str) -> None:
    """``liveunwind pid PID`` of a parked program, thread by thread against gdb -p."""
    require_ptrace()
    exe = riscv64_build / f"{name}-{flavour}"
    args = [str(RECURSE_DEPTH)] if name == "recurse" else []
    program = start_parked(exe, *args, timeout=READY_TIMEOUT)
    try:
        if name == "sighandler":
            # Each thread sits in its handler: stopped, neither tool races the other.
            os.kill(program.pid, signal.SIGSTOP)
            wait_state(program.pid, "T")
        document = validated(backtrace_json("pid", str(program.pid), "--max-frames", "0"))
        oracle = gdb_backtraces(program.pid, gdb=gdb)
        threads = program.threads()
    finally:
        program.stop()
    assert document["arch"] == "riscv64"
    assert_json_matches_gdb(document, oracle, exe)
    by_name = {threads[thread["tid"]]: thread for thread in document["threads"]}
    if name == "threads":
        assert contains_chain(functions(by_name["deep"]), DEEP_CHAIN), functions(by_name["deep"])
    elif name == "sighandler":
        for role in ("busy", "syscall"):
            frames = by_name[role]["frames"]
            index = [i for i, frame in enumerate(frames) if frame["signal_frame"]]
            assert len(index) == 1, functions(by_name[role])
            assert frames[index[0] - 1]["function"] == "on_signal", functions(by_name[role])
    else:
        recursion = [n for n in functions(by_name["recursion"]) if n in ("rec_a", "rec_b", "rec_c")]
        assert len(recursion) == RECURSE_DEPTH, functions(by_name["recursion"])


# -- on-CPU sampling (perf_event_open, never stopping the target) ---------------------------


@pytest.fixture(params=ONCPU_FLAVOURS)
def burner(
    request: pytest.FixtureRequest, riscv64_build: Path, tmp_path: Path
) -> Iterator[RunningProgram]:
    """profiled-FLAVOUR, its burner spinning in spin_hot; the riscv64 kernel must sample it."""
    require_ptrace()  # the oracles park the burner with ptrace (gdb, liveunwind pid)
    with start_program(
        riscv64_build,
        f"profiled-{request.param}",
        str(tmp_path / "chunks"),
        busy={"burner", "third"},
        timeout=READY_TIMEOUT,
    ) as program:
        require_sampling(program.pid)
        yield program


def test_on_cpu_hottest_stack_is_the_burners_own_chain(
    burner: RunningProgram, record_seen: Callable[[str, object], None]
) -> None:
    """``profile --on-cpu``'s hottest stack is the chain of the burner parked in spin_hot;
    the target is never stopped or traced; the document is valid against the shipped schema."""
    from importlib.resources import files

    import jsonschema  # Debian's python3-jsonschema

    hottest, document = check_hottest_stack(burner.pid, burner.tid(BURNER))
    record_seen("hottest_stack", f"{hottest} of {document['samples']} samples")
    schema = (files("liveunwind.cli") / "schemas" / "profile.schema.json").read_text()
    jsonschema.Draft202012Validator(json.loads(schema)).validate(document)


def test_on_cpu_sampled_frames_are_gdbs(
    burner: RunningProgram,
    monkeypatch: pytest.MonkeyPatch,
    record_seen: Callable[[str, object], None],
) -> None:
    """Samples in spin_hot: gdb's pcs, and ``liveunwind pid``'s names, methods, trust, sp
    and CFA frame for frame (the kernel's riscv64 perf_regs read in their order)."""
    frames = check_sampled_frames(burner.pid, burner.tid(BURNER), monkeypatch)
    record_seen("sample", listing(frames))


def test_on_cpu_walk_beyond_the_stack_copy_ends_there_saying_so(
    burner: RunningProgram, record_seen: Callable[[str, object], None]
) -> None:
    """16 bytes of stack per sample: the walks end inside the chain, saying why."""
    record_seen("cut_stacks", check_cut_walks(burner.pid, burner.tid(BURNER)))


# -- kernel cores ---------------------------------------------------------------------------


def _unlimited_core() -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))


@pytest.fixture(scope="session")
def core_of(riscv64_build: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """core_of(variant, mode) -> the core the VM's kernel wrote of crash-VARIANT MODE."""
    pattern = Path("/proc/sys/kernel/core_pattern").read_text().strip()
    if pattern.startswith("|") or "/" in pattern:
        pytest.skip(f"kernel.core_pattern sends cores elsewhere ({pattern})")
    made: dict[tuple[str, str], Path] = {}

    def make(variant: str, mode: str) -> Path:
        if (variant, mode) not in made:
            folder = tmp_path_factory.mktemp(f"core-{variant}-{mode}")
            exe = riscv64_build / f"crash-{variant}"
            result = subprocess.run(
                [str(exe), mode],
                cwd=folder,
                preexec_fn=_unlimited_core,
                capture_output=True,
                timeout=300,
                check=False,
            )
            assert result.returncode < 0, f"crash-{variant} {mode} did not die: {result}"
            cores = [path for path in folder.iterdir() if path.name.startswith("core")]
            assert len(cores) == 1, f"cores in {folder}: {cores}"
            made[variant, mode] = cores[0]
        return made[variant, mode]

    return make


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("variant", CRASH_VARIANTS)
def test_kernel_core_matches_gdb(
    riscv64_build: Path, core_of: Any, gdb: str, variant: str, mode: str
) -> None:
    """``liveunwind core CORE EXE`` of a core the riscv64 kernel wrote, every thread against gdb."""
    core = core_of(variant, mode)
    exe = riscv64_build / f"crash-{variant}"
    document = validated(backtrace_json("core", str(core), str(exe), "--max-frames", "0"))
    assert document["arch"] == "riscv64"
    crash = document["crash"]
    assert crash["signal_name"] == CRASH_SIGNALS[mode], crash
    assert crash["tid"] == document["threads"][0]["tid"], crash
    names = [name for name in functions(document["threads"][0]) if not name.endswith(".cold")]
    assert contains_chain(names, CRASH_CHAINS[mode]), names
    if mode == "handler":
        assert any(frame["signal_frame"] for frame in document["threads"][0]["frames"]), names
    if mode == "thread":
        assert len(document["threads"]) == 3
    assert_json_matches_gdb(document, gdb_core_backtraces(core, exe, gdb=gdb), exe)


def test_export_kernel_cores(riscv64_build: Path, core_of: Any, gdb: str) -> None:
    """A few real riscv64 kernel cores for the host's tests (tests/data/riscv64-cores/)."""
    export = os.environ.get("LIVEUNWIND_VM_EXPORT")
    if not export:
        pytest.skip("LIVEUNWIND_VM_EXPORT is not set: nowhere to leave the cores")
    folder = Path(export)
    kernel = platform.release()
    for variant, mode in EXPORTED:
        exe = riscv64_build / f"crash-{variant}"
        core = core_of(variant, mode)
        stem = f"crash-{variant}-{mode}"
        with lzma.open(folder / f"{stem}.core.xz", "wb", preset=9 | lzma.PRESET_EXTREME) as out:
            out.write(core.read_bytes())
        with lzma.open(folder / f"{stem}.xz", "wb", preset=9 | lzma.PRESET_EXTREME) as out:
            out.write(exe.read_bytes())
        bt_command = ["-ex", "thread apply all bt", str(exe), str(core)]
        bt = subprocess.run(
            [gdb, "-batch", "-nx", "-iex", "set debuginfod enabled off", *bt_command],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        (folder / f"{stem}.gdb-vm.txt").write_text(bt.stdout)
        gcc = subprocess.run(["gcc", "--version"], capture_output=True, text=True, check=True)
        (folder / f"{stem}.made").write_text(
            f"program: testprogs/crash/crash.c, built by testprogs/riscv64/Makefile "
            f"(crash-{variant}) with the VM's {gcc.stdout.splitlines()[0]}\n"
            f"run: crash-{variant} {mode}, RLIMIT_CORE unlimited, core_pattern "
            f"{Path('/proc/sys/kernel/core_pattern').read_text().strip()}\n"
            f"kernel: {platform.system()} {kernel} {platform.machine()} "
            f"({Path('/proc/version').read_text().strip()})\n"
            f"core: {core.stat().st_size} bytes; executable: {exe.stat().st_size} bytes\n"
        )
        assert "thread_fault" in bt.stdout or "handler_fault" in bt.stdout, bt.stdout
