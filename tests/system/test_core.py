"""ELF core files: real kernel, gcore and QEMU cores unwound frame for frame like gdb.

Cores come from the programs in testprogs/crash (kernel and QEMU cores of a
crash) and from live test programs and python3 (gdb's gcore).  gdb, on the
same core, is the oracle: every thread's physical frames must have the same
pcs.  Where gdb cannot unwind — QEMU cores of PIE executables, whose ELF
headers QEMU does not dump, so gdb cannot relocate them — the test compares
with the call chain crash.c documents instead.
"""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import os
import shutil
import struct
import subprocess
import sys
from itertools import takewhile
from pathlib import Path

import pytest

from liveunwind.backtrace.api import open_core
from liveunwind.frames import Backtrace
from liveunwind.modules.modulemap import ModuleMap
from liveunwind.targets.cores.coredata import BLOCK_SIZE, CompressedCoreData
from liveunwind.targets.cores.elfcore import ElfCore
from liveunwind.targets.filefinder import FileFinder, open_image
from tests.support.assertions import assert_matches_gdb, assert_one_line_error
from tests.support.cores import crash
from tests.support.oracles import gdb_core_backtraces, gdb_gcore, pcs
from tests.support.paths import AARCH64_SYSROOT, ROOT, TESTPROGS

CRASH = TESTPROGS / "crash"
MODES = ["leaf", "abort", "handler", "thread"]
#: The innermost frames of the crashing thread that crash.c promises, per mode.
CHAINS = {
    "leaf": ["leaf_store", "leaf_caller", "main"],
    "abort": ["recurse_then_abort"] * 3,
    "handler": ["handler_fault", "on_usr1"],
    "thread": ["thread_fault", "thread_middle", "thread_main"],
}
SIGNALS = {"leaf": "SIGSEGV", "abort": "SIGABRT", "handler": "SIGSEGV", "thread": "SIGSEGV"}

# -- the oracle for aarch64 cores ------------------------------------------------------


@pytest.fixture(scope="session")
def gdb_multiarch() -> str:
    path = shutil.which("gdb-multiarch")
    if path is None:
        pytest.skip("gdb-multiarch is not installed")
    return path


# -- comparing ----------------------------------------------------------------------


def functions(backtrace: Backtrace, index: int = 0) -> list[str | None]:
    return [frame.function for frame in backtrace.threads[index].frames]


def pcs_by_tid(backtrace: Backtrace) -> dict[int, list[int]]:
    return {thread.tid: [frame.pc for frame in thread.frames] for thread in backtrace.threads}


def assert_crash_chain(backtrace: Backtrace, mode: str) -> None:
    """The crashing thread comes first and shows the call chain crash.c promises."""
    names = [name for name in functions(backtrace) if name and not name.endswith(".cold")]
    chain = CHAINS[mode]
    start = names.index(chain[0])
    assert names[start : start + len(chain)] == chain, names
    assert backtrace.crash is not None
    assert backtrace.crash.signal_name == SIGNALS[mode]
    assert backtrace.crash.tid == backtrace.threads[0].tid


# -- kernel cores ---------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("variant", ["crash-O0", "crash-O2", "crash-O2-static"])
def test_kernel_core_matches_gdb(kernel_core, gdb, variant, mode) -> None:
    core = kernel_core(variant, mode)
    exe = CRASH / "build" / variant
    backtrace = open_core(str(core), str(exe))
    assert_matches_gdb(backtrace, gdb_core_backtraces(core, exe, gdb=gdb))
    assert_crash_chain(backtrace, mode)
    assert backtrace.problems == []
    crash_info = backtrace.crash
    assert crash_info is not None
    assert crash_info.executable == str(exe)
    assert crash_info.arguments == f"{exe} {mode}"
    if mode == "abort":
        assert (crash_info.code_name, crash_info.fault_address) == ("SI_TKILL", None)
    else:
        assert (crash_info.code_name, crash_info.fault_address) == ("SEGV_MAPERR", 0)
    if mode == "thread":
        assert backtrace.threads[0].tid != backtrace.pid
        assert len(backtrace.threads) == 3
    if mode == "handler":
        assert any(frame.signal_frame for frame in backtrace.threads[0].frames)


def test_kernel_core_without_exe_argument_finds_the_executable(kernel_core) -> None:
    core = kernel_core("crash-O2", "leaf")
    with_exe = open_core(str(core), str(CRASH / "build" / "crash-O2"))
    without = open_core(str(core))
    assert pcs_by_tid(without) == pcs_by_tid(with_exe)
    assert functions(without) == functions(with_exe)


def test_json_of_a_core_says_what_crashed(kernel_core) -> None:
    core = kernel_core("crash-O2", "leaf")
    exe = str(CRASH / "build" / "crash-O2")
    result = run_cli(str(core), exe, "--json")
    document = json.loads(result.stdout)
    crash = open_core(str(core), exe).crash
    assert crash is not None and crash.signal_name == "SIGSEGV"
    assert document["crash"] == {
        "executable": crash.executable,
        "arguments": crash.arguments,
        "signal": crash.signal,
        "signal_name": "SIGSEGV",
        "code": crash.code,
        "code_name": crash.code_name,
        "fault_address": crash.fault_address,
        "tid": document["threads"][0]["tid"],
    }


def _without_file_note(core: Path, copy: Path) -> Path:
    """A copy of ``core`` whose NT_FILE note is renamed, as in cores that have none."""
    data = bytearray(core.read_bytes())
    marker = struct.pack("<I", 0x46494C45) + b"CORE\0"
    position = data.find(marker)
    assert position > 0, "the core has no NT_FILE note"
    data[position : position + 4] = struct.pack("<I", 0x12345678)
    copy.write_bytes(bytes(data))
    return copy


@pytest.mark.parametrize(("variant", "mode"), [("crash-O2", "thread"), ("crash-O2-static", "leaf")])
def test_core_without_file_note_uses_link_map(kernel_core, tmp_path, variant, mode) -> None:
    """Without NT_FILE the modules come from auxv, DT_DEBUG and link_map (none when static)."""
    core = kernel_core(variant, mode)
    exe = str(CRASH / "build" / variant)
    reference = open_core(str(core), exe)
    stripped = _without_file_note(core, tmp_path / "core")
    space = ElfCore.open(str(stripped), exe)
    assert space.notes.files is None
    paths = {mapping.path for mapping in space.mappings() if mapping.path}
    assert exe in paths and "[vdso]" in paths
    if variant == "crash-O2":
        assert any(os.path.basename(path).startswith("libc.so") for path in paths), paths
    else:
        assert len(paths) == 2, paths
    backtrace = open_core(str(stripped), exe)
    assert pcs_by_tid(backtrace) == pcs_by_tid(reference)
    assert backtrace.complete


# -- gcore cores ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "args"),
    [("threads-O2", ()), ("threads-O0", ()), ("recurse", ("100",)), ("sighandler", ())],
    ids=["threads-O2", "threads-O0", "recurse", "sighandler"],
)
def test_gcore_of_test_program_matches_gdb(run_program, gdb, tmp_path, name, args) -> None:
    program = run_program(name, *args)
    core = tmp_path / "core"
    gdb_gcore(program.pid, core, gdb=gdb)
    program.stop()
    backtrace = open_core(str(core), str(program.path))
    assert_matches_gdb(backtrace, gdb_core_backtraces(core, program.path, gdb=gdb))
    assert backtrace.pid == program.pid
    assert backtrace.problems == []


def test_gcore_names_the_kernel_pages_so_they_are_not_taken_for_jit_code(
    run_program, gdb, tmp_path
) -> None:
    """gcore dumps the vsyscall page unnamed; as anonymous code it would make the core look
    like a JIT process and send liveunwind searching every module for registry roots."""
    program = run_program("threads-O2")
    live = {line.split()[-1] for line in Path(f"/proc/{program.pid}/maps").read_text().splitlines()}
    core = tmp_path / "core"
    gdb_gcore(program.pid, core, gdb=gdb)
    with ElfCore.open(str(core), str(program.path)) as target:
        names = {mapping.path for mapping in target.mappings()}
        modules = ModuleMap(target)
    assert "[vdso]" in names
    if "[vsyscall]" in live:
        assert "[vsyscall]" in names
    assert not modules.jit_possible


def prstatus_signals(core: Path) -> dict[int, tuple[int, int]]:
    """Each thread's pr_cursig and its file offset, read straight from the NT_PRSTATUS notes."""
    data = core.read_bytes()
    phoff = struct.unpack_from("<Q", data, 32)[0]
    phentsize, phnum = struct.unpack_from("<HH", data, 54)
    signals = {}
    for index in range(phnum):
        ptype, _flags, offset, _vaddr, _paddr, filesz = struct.unpack_from(
            "<IIQQQQ", data, phoff + index * phentsize
        )
        position = offset
        while ptype == 4 and position < offset + filesz:
            namesz, descsz, ntype = struct.unpack_from("<III", data, position)
            desc = position + 12 + (namesz + 3) // 4 * 4
            if ntype == 1:
                (signal,) = struct.unpack_from("<h", data, desc + 12)
                (tid,) = struct.unpack_from("<i", data, desc + 32)
                signals[tid] = (signal, desc + 12)
            position = desc + (descsz + 3) // 4 * 4
    return signals


def gcore_of_a_crash(gdb: str, folder: Path) -> Path:
    """gdb runs crash-O2 thread, catches its SIGSEGV and writes a gcore of it (all-stop)."""
    core = folder / "gcore"
    exe = CRASH / "build" / "crash-O2"
    argv = [gdb, "-batch", "-nx", "-iex", "set debuginfod enabled off"]
    argv += ["-ex", "run", "-ex", f"gcore {core}", "-ex", "kill", "--args", str(exe), "thread"]
    subprocess.run(argv, capture_output=True, timeout=120, check=False, cwd=folder)
    if not core.is_file():
        pytest.skip("gdb could not run crash-O2 to its signal here")
    return core


def test_each_thread_says_its_own_signal(crash_build, gdb, kernel_core, tmp_path) -> None:
    """The kernel and gdb's gcore put the process's signal in every thread's pr_cursig: only
    the first thread says it received it; a thread whose pr_cursig differs says its own."""
    exe = str(CRASH / "build" / "crash-O2")
    kernel = kernel_core("crash-O2", "thread")
    gcore = gcore_of_a_crash(gdb, tmp_path)
    for core in (kernel, gcore):
        signals = prstatus_signals(core)
        assert len(signals) == 3 and {signal for signal, _ in signals.values()} == {11}
        backtrace = open_core(str(core), exe)
        assert [thread.state for thread in backtrace.threads] == ["received SIGSEGV", "", ""]
        assert backtrace.crash is not None and backtrace.crash.tid == backtrace.threads[0].tid
    # gdb's core says the same: the signal, and the thread that got it (the current one).
    result = subprocess.run(
        [gdb, "-batch", "-nx", "-ex", "info threads", exe, str(gcore)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "Program terminated with signal SIGSEGV" in result.stdout
    current = next(line for line in result.stdout.splitlines() if line.startswith("* "))
    assert f"LWP {backtrace.threads[0].tid})" in current
    # A writer that records each thread's own signal: SIGUSR1 in the second thread's note.
    data = bytearray(gcore.read_bytes())
    second = backtrace.threads[1].tid
    offset = prstatus_signals(gcore)[second][1]
    data[offset : offset + 2] = struct.pack("<h", 10)
    edited = tmp_path / "edited"
    edited.write_bytes(data)
    assert prstatus_signals(edited)[second][0] == 10
    backtrace = open_core(str(edited), exe)
    states = {thread.tid: thread.state for thread in backtrace.threads}
    assert states[second] == "received SIGUSR1"
    assert sorted(states.values()) == ["", "received SIGSEGV", "received SIGUSR1"]


PYTHON_THREADS = """
import threading, time
ready = threading.Barrier(4)
def work():
    ready.wait()
    time.sleep(3600)
for _ in range(3):
    threading.Thread(target=work, daemon=True).start()
ready.wait()
print("ready", flush=True)
time.sleep(3600)
"""


def test_gcore_of_python_with_threads_matches_gdb(gdb, tmp_path) -> None:
    python = "/usr/bin/python3"
    if not os.path.exists(python):
        pytest.skip("/usr/bin/python3 is not installed")
    process = subprocess.Popen(
        [python, "-c", PYTHON_THREADS], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline() == b"ready\n"
        core = tmp_path / "core"
        gdb_gcore(process.pid, core, gdb=gdb)
    finally:
        process.kill()
        process.wait()
        if process.stdout is not None:
            process.stdout.close()
    backtrace = open_core(str(core))
    assert len(backtrace.threads) == 4
    assert_matches_gdb(backtrace, gdb_core_backtraces(core, os.path.realpath(python), gdb=gdb))


# -- QEMU aarch64 cores -------------------------------------------------------------------


@pytest.mark.parametrize("mode", [mode for mode in MODES if mode != "handler"])
@pytest.mark.parametrize("variant", ["crash-O0-nopie", "crash-O2-nopie", "crash-O2-static"])
def test_qemu_core_matches_gdb_multiarch(qemu_core, gdb_multiarch, variant, mode) -> None:
    """The crashing thread matches gdb exactly.

    Not the handler mode: gdb-multiarch 13 hangs unwinding past QEMU's signal
    trampoline (it has no symbol and no CFI); test_qemu_core_call_chain covers it.

    QEMU records the registers of the other threads as of their last exit
    from translated code — often a PLT stub or the middle of a system call
    wrapper that has no unwind entry there — so gdb and liveunwind may both
    stop early in them; they are compared as far as gdb gets.  Caught in the
    middle of lazy binding, gdb's next frame can be a pc outside all code
    (liveunwind refuses such a rule and falls back); gdb's frames are compared
    up to there.
    """
    core = qemu_core(variant, mode)
    exe = CRASH / "build-aarch64" / variant
    backtrace = open_core(str(core), str(exe), sysroot=str(AARCH64_SYSROOT))
    assert backtrace.arch == "aarch64"
    oracle = gdb_core_backtraces(
        core, exe, sysroot=AARCH64_SYSROOT, solib_search_path=AARCH64_SYSROOT / "lib",
        gdb=gdb_multiarch,
    )  # fmt: skip
    crashing = backtrace.threads[0].tid
    assert_matches_gdb(backtrace, oracle, only={crashing})
    with ElfCore.open(str(core), str(exe)) as target:
        code = [mapping for mapping in target.mappings() if mapping.executable]
    for thread in backtrace.threads[1:]:
        theirs = list(
            takewhile(lambda pc: any(pc in mapping for mapping in code), pcs(oracle[thread.tid]))
        )
        ours = [frame.pc for frame in thread.frames]
        assert ours[: len(theirs)] == theirs or theirs[: len(ours)] == ours
    assert_crash_chain(backtrace, mode)


QEMU_WITHOUT_GDB = [(variant, mode) for variant in ("crash-O0", "crash-O2") for mode in MODES]
QEMU_WITHOUT_GDB += [(variant, "handler") for variant in ("crash-O0-nopie", "crash-O2-nopie")]


@pytest.mark.parametrize(("variant", "mode"), QEMU_WITHOUT_GDB)
def test_qemu_core_call_chain(qemu_core, variant, mode) -> None:
    """Cores gdb cannot unwind, compared with crash.c's call chain.

    gdb cannot relocate a PIE executable in a QEMU core (its ELF headers are
    not in the core), and hangs at QEMU's signal trampoline.
    """
    core = qemu_core(variant, mode)
    exe = CRASH / "build-aarch64" / variant
    backtrace = open_core(str(core), str(exe), sysroot=str(AARCH64_SYSROOT))
    assert_crash_chain(backtrace, mode)
    assert backtrace.threads[0].complete, backtrace.threads[0].stop_text
    names = functions(backtrace)
    if mode != "thread":
        assert names[-2:] == ["main", "_start"] or names[-4:-3] == ["main"], names
    if mode == "handler":
        frames = backtrace.threads[0].frames
        signal_index = next(i for i, frame in enumerate(frames) if frame.signal_frame)
        assert names[signal_index - 1] == "on_usr1"
        assert "raise_usr1" in names[signal_index:]
        assert frames[signal_index + 1].exact_pc


def test_qemu_core_finds_relative_executable(qemu_core) -> None:
    """Without EXE the program comes from AT_EXECFN, libraries from link_map under the sysroot."""
    core = qemu_core("crash-O2-nopie", "thread")
    exe = CRASH / "build-aarch64" / "crash-O2-nopie"
    given = open_core(str(core), str(exe), sysroot=str(AARCH64_SYSROOT))
    found = open_core(str(core), sysroot=str(AARCH64_SYSROOT))
    assert pcs_by_tid(found) == pcs_by_tid(given)
    assert found.crash is not None and found.crash.executable == str(exe)


# -- files found elsewhere, and the wrong files ---------------------------------------------


@pytest.fixture(scope="module")
def private_copy_core(kernel_core, tmp_path_factory) -> tuple[Path, Path]:
    """A crash of private copies of the program, libc and the dynamic linker.

    Returns (core, folder the copies were moved to): none of the paths the
    core records exists any more.
    """
    kernel_core("crash-O2", "leaf")  # skips when the kernel writes no cores here
    base = tmp_path_factory.mktemp("moved")
    bin_dir, lib_dir = base / "bin", base / "lib"
    bin_dir.mkdir()
    lib_dir.mkdir()
    shutil.copy(CRASH / "build" / "crash-O2", bin_dir / "crash")
    libraries = subprocess.run(
        ["ldd", str(bin_dir / "crash")], capture_output=True, text=True, check=True
    ).stdout
    loader = None
    for line in libraries.splitlines():
        path = line.split("=>")[-1].split("(")[0].strip()
        if path.startswith("/"):
            shutil.copy(path, lib_dir / os.path.basename(path))
            if "ld-linux" in path:
                loader = lib_dir / os.path.basename(path)
    assert loader is not None
    core = crash(
        base / "run",
        [str(loader), "--library-path", str(lib_dir), str(bin_dir / "crash"), "leaf"],
        glob="core*",
    )
    moved = base / "moved"
    moved.mkdir()
    for folder in (bin_dir, lib_dir):
        for path in folder.iterdir():
            path.rename(moved / path.name)
    return core, moved


def test_moved_files_found_with_search_path(private_copy_core, kernel_core) -> None:
    core, moved = private_copy_core
    lost = open_core(str(core))
    assert not lost.complete
    assert any("file not found" in problem for problem in lost.problems)
    found = open_core(str(core), search_path=[str(moved)])
    assert found.problems == []
    assert found.complete
    reference = open_core(str(kernel_core("crash-O2", "leaf")))
    assert functions(found) == functions(reference)


def test_build_id_mismatch_is_reported_and_file_not_used(private_copy_core, tmp_path) -> None:
    core, moved = private_copy_core
    impostor = tmp_path / "crash"
    shutil.copy(CRASH / "build" / "crash-O0", impostor)
    theirs = open_image(str(impostor)).build_id
    ours = open_image(str(moved / "crash")).build_id
    assert theirs and ours and theirs != ours
    backtrace = open_core(str(core), search_path=[str(tmp_path), str(moved)])
    assert backtrace.complete  # the impostor was passed over for the real file
    backtrace = open_core(str(core), search_path=[str(tmp_path)])
    text = " ".join(backtrace.problems)
    assert theirs.hex() in text and ours.hex() in text
    assert not backtrace.complete
    assert backtrace.threads[0].frames[0].function is None


# -- compressed cores ---------------------------------------------------------------------------


def test_gzip_and_xz_cores_give_the_same_backtrace(kernel_core, tmp_path) -> None:
    core = kernel_core("crash-O2", "thread")
    exe = str(CRASH / "build" / "crash-O2")
    plain = open_core(str(core), exe)
    raw = core.read_bytes()
    gz = tmp_path / "core.gz"
    gz.write_bytes(gzip.compress(raw, compresslevel=1))
    xz = tmp_path / "core.xz"
    xz.write_bytes(lzma.compress(raw, preset=0))
    for packed in (gz, xz):
        backtrace = open_core(str(packed), exe)
        assert pcs_by_tid(backtrace) == pcs_by_tid(plain)
        assert backtrace.crash == plain.crash
        assert backtrace.problems == plain.problems


def test_zstd_core_gives_the_same_backtrace(kernel_core, tmp_path) -> None:
    """What systemd-coredump writes: a zstd stream, read without unpacking it to disk."""
    if shutil.which("zstd") is None:
        pytest.skip("the zstd command is not installed")
    core = kernel_core("crash-O2", "thread")
    exe = str(CRASH / "build" / "crash-O2")
    plain = open_core(str(core), exe)
    packed = tmp_path / "core.zst"
    subprocess.run(["zstd", "-q", "-1", str(core), "-o", str(packed)], check=True)
    backtrace = open_core(str(packed), exe)
    assert pcs_by_tid(backtrace) == pcs_by_tid(plain)
    assert backtrace.crash == plain.crash
    assert backtrace.problems == plain.problems
    result = subprocess.run(
        [sys.executable, "-m", "liveunwind", "core", str(packed), exe],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode in (0, 1) and "Signal: SIGSEGV" in result.stdout, result.stderr


def test_bzip2_core_gives_the_same_backtrace(kernel_core, tmp_path) -> None:
    """A core packed by the real bzip2 tool, told by its magic bytes, not its name."""
    if shutil.which("bzip2") is None:
        pytest.skip("the bzip2 command is not installed")
    core = kernel_core("crash-O2", "thread")
    exe = str(CRASH / "build" / "crash-O2")
    plain = open_core(str(core), exe)
    packed = tmp_path / "core.bz2"
    with open(packed, "wb") as out:
        subprocess.run(["bzip2", "-1", "-c", str(core)], stdout=out, check=True)
    unnamed = tmp_path / "core-without-suffix"
    shutil.copy(packed, unnamed)
    for path in (packed, unnamed):
        backtrace = open_core(str(path), exe)
        assert pcs_by_tid(backtrace) == pcs_by_tid(plain)
        assert backtrace.crash == plain.crash
        assert backtrace.problems == plain.problems
    result = run_cli(str(packed), exe)
    assert result.returncode in (0, 1) and "Signal: SIGSEGV" in result.stdout, result.stderr
    assert result.stdout == run_cli(str(core), exe).stdout


def test_lz4_core_gives_the_same_backtrace(kernel_core, tmp_path) -> None:
    """systemd-coredump's older default: an lz4 frame made by the real lz4 tool, by its magic."""
    if shutil.which("lz4") is None:
        pytest.skip("the lz4 command is not installed")
    core = kernel_core("crash-O2", "thread")
    exe = str(CRASH / "build" / "crash-O2")
    plain = open_core(str(core), exe)
    packed = tmp_path / "core.lz4"
    subprocess.run(["lz4", "-q", "-1", str(core), str(packed)], check=True)
    # The frame's other options: 64 KiB linked blocks, the content size in the header.
    linked = tmp_path / "core-linked.lz4"
    options = ["-B4", "-BD", "--content-size"]
    subprocess.run(["lz4", "-q", *options, str(core), str(linked)], check=True)
    unnamed = tmp_path / "core-without-suffix"
    shutil.copy(packed, unnamed)
    for path in (packed, linked, unnamed):
        backtrace = open_core(str(path), exe)
        assert pcs_by_tid(backtrace) == pcs_by_tid(plain)
        assert backtrace.crash == plain.crash
        assert backtrace.problems == plain.problems
    result = run_cli(str(packed), exe)
    assert result.returncode in (0, 1) and "Signal: SIGSEGV" in result.stdout, result.stderr
    assert result.stdout == run_cli(str(core), exe).stdout


def test_cut_or_corrupt_lz4_core(kernel_core, tmp_path) -> None:
    """A bad lz4 frame ends the core where it became unreadable: one line or a truncated core."""
    if shutil.which("lz4") is None:
        pytest.skip("the lz4 command is not installed")
    core = kernel_core("crash-O2", "thread")
    exe = str(CRASH / "build" / "crash-O2")
    packed = subprocess.run(["lz4", "-q", "-1", "-c", str(core)], capture_output=True, check=True)
    raw = packed.stdout
    early = tmp_path / "early.lz4"
    early.write_bytes(raw[:30])
    assert_one_line_error(run_cli(str(early), exe), 2, "lz4-compressed", "cut or corrupt")
    smashed = tmp_path / "smashed.lz4"
    smashed.write_bytes(raw[:4] + bytes(64) + raw[68:])
    assert_one_line_error(run_cli(str(smashed), exe), 2, "lz4-compressed", "cut or corrupt")
    half = len(raw) // 2
    corrupt = bytearray(raw)
    corrupt[half : half + 100] = bytes(100)
    for name, data in (("cut.lz4", raw[:half]), ("corrupt.lz4", bytes(corrupt))):
        path = tmp_path / name
        path.write_bytes(data)
        result = run_cli(str(path), exe)
        assert result.returncode == 1 and result.stderr == "", result.stderr
        assert "Signal: SIGSEGV" in result.stdout
        assert "note: the core is truncated" in result.stdout


def test_a_file_in_no_form_read_names_every_form(tmp_path) -> None:
    """The refusal lists plain and every compression a core may come in."""
    path = tmp_path / "core.7z"
    path.write_bytes(b"7z\xbc\xaf\x27\x1c" + bytes(100))
    words = ("not an ELF file", "plain", ".gz", ".xz", ".zst", ".bz2", ".lz4")
    assert_one_line_error(run_cli(str(path)), 2, *words)


def test_cut_or_corrupt_bzip2_core(kernel_core, tmp_path) -> None:
    """A bad bzip2 stream ends the core where it became unreadable: never a traceback."""
    if shutil.which("bzip2") is None:
        pytest.skip("the bzip2 command is not installed")
    core = kernel_core("crash-O2", "thread")
    exe = str(CRASH / "build" / "crash-O2")
    packed = subprocess.run(["bzip2", "-1", "-c", str(core)], capture_output=True, check=True)
    raw = packed.stdout
    # Cut or corrupt before the first block is whole: nothing decompresses.
    early = tmp_path / "early.bz2"
    early.write_bytes(raw[:200])
    assert_one_line_error(run_cli(str(early), exe), 2, "bzip2-compressed", "cut or corrupt")
    smashed = tmp_path / "smashed.bz2"
    smashed.write_bytes(raw[:4] + bytes(64) + raw[68:])
    assert_one_line_error(run_cli(str(smashed), exe), 2, "bzip2-compressed", "cut or corrupt")
    # Cut, or corrupt, halfway: the headers are there, the rest reads as a truncated core.
    half = len(raw) // 2
    corrupt = bytearray(raw)
    corrupt[half : half + 100] = bytes(100)
    for name, data in (("cut.bz2", raw[:half]), ("corrupt.bz2", bytes(corrupt))):
        path = tmp_path / name
        path.write_bytes(data)
        result = run_cli(str(path), exe)
        assert result.returncode == 1 and result.stderr == "", result.stderr
        assert "Signal: SIGSEGV" in result.stdout
        assert "note: the core is truncated" in result.stdout
    # A bzip2 stream of something that is not a core.
    text = tmp_path / "text.bz2"
    text.write_bytes(bz2.compress(b"not a core\n" * 100))
    assert_one_line_error(run_cli(str(text)), 2, "bzip2-compressed", "not a core")


def test_compressed_core_with_a_tiny_cache(kernel_core, tmp_path) -> None:
    """With room for one block, reads behind the stream restart it: slower, same answer."""
    core = kernel_core("crash-O2", "thread")
    exe = str(CRASH / "build" / "crash-O2")
    gz = tmp_path / "core.gz"
    gz.write_bytes(gzip.compress(core.read_bytes(), compresslevel=1))
    reference = ElfCore.open(str(core), exe)
    data = CompressedCoreData(str(gz), "gzip", budget=BLOCK_SIZE)
    tiny = ElfCore(data, exe, FileFinder())
    for thread, expected in zip(tiny.threads(), reference.threads()):
        assert thread.registers == expected.registers
        sp = thread.registers[tiny.arch.sp]
        # At most a page, and not past the stack: with ASLR the main thread's sp
        # can sit closer than a page to the top of its stack.
        stack_end = next(m.end for m in reference.mappings() if m.start <= sp < m.end)
        size = min(4096, stack_end - sp)
        assert tiny.read(sp, size) == reference.read(sp, size)
    assert len(data._blocks) == 1


# -- bad input ------------------------------------------------------------------------------------


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "liveunwind", "core", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd="/",
        env=env,
    )


def test_not_an_elf_file(tmp_path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("not a core\n")
    assert_one_line_error(run_cli(str(path)), 2, "not an ELF file")


def test_missing_core_file(tmp_path) -> None:
    assert_one_line_error(run_cli(str(tmp_path / "nothing")), 2, "cannot open core")


def test_elf_that_is_not_a_core(crash_build) -> None:
    exe = str(crash_build / "build" / "crash-O2")
    assert_one_line_error(run_cli(exe), 2, "not a core file")


def test_exe_that_does_not_match_the_core(kernel_core) -> None:
    core = kernel_core("crash-O2", "leaf")
    wrong = str(CRASH / "build" / "crash-O0")
    result = run_cli(str(core), wrong)
    assert_one_line_error(result, 64, "does not match the core", str(CRASH / "build" / "crash-O2"))


def test_exe_that_does_not_match_a_qemu_core(qemu_core) -> None:
    """No build-id in a QEMU core: the auxiliary vector's entry point tells them apart."""
    core = qemu_core("crash-O2-nopie", "leaf")
    wrong = str(CRASH / "build-aarch64" / "crash-O2-static")
    result = run_cli(str(core), wrong, "--sysroot", str(AARCH64_SYSROOT))
    assert_one_line_error(result, 64, "does not match the core", "entry point")


def test_exe_of_another_machine_for_a_qemu_core(qemu_core) -> None:
    """An x86_64 EXE for an aarch64 core is turned down naming both machines."""
    core = qemu_core("crash-O2", "leaf")
    wrong = str(CRASH / "build" / "crash-O2")
    result = run_cli(str(core), wrong, "--sysroot", str(AARCH64_SYSROOT))
    assert_one_line_error(result, 64, "does not match the core", "x86_64, the core is aarch64")


def test_core_of_unknown_architecture(kernel_core, tmp_path) -> None:
    data = bytearray(kernel_core("crash-O2", "leaf").read_bytes())
    data[18:20] = struct.pack("<H", 21)  # EM_PPC64
    path = tmp_path / "core"
    path.write_bytes(bytes(data))
    assert_one_line_error(run_cli(str(path)), 2, "unsupported architecture", "PowerPC64")


def test_core_cut_inside_its_headers(kernel_core, tmp_path) -> None:
    path = tmp_path / "core"
    path.write_bytes(kernel_core("crash-O2", "leaf").read_bytes()[:200])
    assert_one_line_error(run_cli(str(path)), 2, "truncated")


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_truncated_core_names_the_missing_segment_and_unwinds_what_is_there(
    kernel_core, tmp_path, suffix
) -> None:
    core = kernel_core("crash-O2", "thread")
    exe = str(CRASH / "build" / "crash-O2")
    space = ElfCore.open(str(core), exe)
    crashing_sp = space.threads()[0].registers[space.arch.sp]
    # Cut the core just past the crashing thread's stack: later segments are lost.
    segment = next(s for s in space._segments if s.vaddr <= crashing_sp < s.end)
    cut = segment.offset + segment.filesz
    raw = core.read_bytes()[:cut]
    path = tmp_path / f"core{suffix}"
    path.write_bytes(gzip.compress(raw, compresslevel=1) if suffix else raw)
    result = run_cli(str(path), exe)
    assert result.returncode in (0, 1), result.stderr
    assert result.stderr == ""
    assert "note: the core is truncated: LOAD segment" in result.stdout
    assert "thread_fault" in result.stdout and "thread_middle" in result.stdout
