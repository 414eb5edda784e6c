"""local_backtrace(): the calling process's own threads, sampled by a signal they handle.

The C call chain is testprogs/remote/libchain.so (chain_call -> chain_middle
-> chain_inner -> a Python callback); the oracle for a whole stack is gdb,
attached to a Python process whose thread sits still in that chain after
the process unwound the thread itself.  The same script runs under
``qemu-x86_64`` user mode, where neither ptrace nor process_vm_readv exists.
The signal handler's machine code is assembled again from its source and run
outside Python by testprogs/remote/capture.c, for aarch64 under qemu-aarch64.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import liveunwind.targets.local.process as local
from liveunwind.arch import arch_by_name
from liveunwind.backtrace.local import local_backtrace
from liveunwind.cli.report import format_json
from liveunwind.errors import MemoryReadError, TargetError, UsageError
from liveunwind.frames import Backtrace
from liveunwind.targets.local.capture import sample_thread
from tests.support.oracles import gdb_backtraces, pcs
from tests.support.paths import AARCH64_SYSROOT, ROOT
from tests.support.schema import VALIDATOR
from tests.support.waits import blocked_in_read, wait_until

#: The C chain as it appears in a backtrace taken inside the callback, innermost first.
CHAIN = ["chain_inner", "chain_middle", "chain_call"]
#: A Python script that unwinds its own threads inside the chain and prints them as JSON.
SCRIPT = r"""
import ctypes, json, os, sys, threading
sys.path.insert(0, sys.argv[2])
from liveunwind.backtrace.local import local_backtrace
from liveunwind.cli.report import format_json
import liveunwind.targets.local.process as local
from tests.support.waits import blocked_in_read, wait_until

chain = ctypes.CDLL(sys.argv[1])
callback_type = ctypes.CFUNCTYPE(ctypes.c_int)
parked, release = os.pipe()

def park():
    os.read(parked, 1)  # blocks in read(), the GIL given up: parked for good
    return 0

parker = callback_type(park)
worker = threading.Thread(target=lambda: chain.chain_call(parker), name="worker")
worker.start()
wait_until(lambda: blocked_in_read(worker.native_id, parked), 60, "the worker parked in read()")
found = {}

def mine():
    found["caller"] = local_backtrace()
    return 0

chain.chain_call(callback_type(mine))
found["worker"] = local_backtrace(thread=worker)
found["pipe"] = local._read_through_pipe(id(found), 8) is not None
found["unmapped"] = local._read_through_pipe(8, 8) is None
local.LocalProcess([]).read(id(found), 8)  # live memory: process_vm_readv, or the pipe
print(json.dumps({
    "tid": worker.native_id,
    "pipe": found["pipe"],
    "unmapped": found["unmapped"],
    "vm_readv": local._use_vm_readv,
    "threads": {
        key: {"complete": backtrace.threads[0].complete,
              "stop": backtrace.threads[0].stop_text,
              "frames": [[f.pc, f.function, f.module] for f in backtrace.threads[0].frames]}
        for key, backtrace in found.items() if key in ("caller", "worker")
    },
}), flush=True)
sys.stdin.readline()
os.write(release, b"x")
worker.join()
"""


@pytest.fixture(scope="module")
def chain_library(remote_build: Path) -> Path:
    return remote_build / "build" / "libchain.so"


def names(backtrace: Backtrace) -> list[str | None]:
    return [frame.function for frame in backtrace.threads[0].frames]


def assert_chain(functions: list[str | None]) -> None:
    """The C chain appears whole and in order."""
    assert any(functions[i : i + 3] == CHAIN for i in range(len(functions))), functions


# -- in this process --------------------------------------------------------------


def test_calling_thread_inside_a_c_chain(chain_library: Path) -> None:
    """From a ctypes callback: the C chain below, the interpreter's frames, down to _start."""
    library = ctypes.CDLL(str(chain_library))
    found: list[Backtrace] = []

    @ctypes.CFUNCTYPE(ctypes.c_int)
    def callback() -> int:
        found.append(local_backtrace())
        return 0

    library.chain_call(callback)
    backtrace = found[0]
    thread = backtrace.threads[0]
    assert thread.tid == threading.get_native_id()
    assert backtrace.pid is not None and thread.complete, thread.stop_text
    functions = names(backtrace)
    assert_chain(functions)
    assert "Py_BytesMain" in functions or "Py_Main" in functions, functions
    assert functions[-1] == "_start", functions
    # Above the chain: the callback's way into Python; below it: ctypes' call into C.
    inner = functions.index("chain_inner")
    assert "_CallPythonObject" in functions[:inner]
    assert "_ctypes_callproc" in functions[inner:]
    VALIDATOR.validate(json.loads(format_json(backtrace)))  # the --json contract holds


def test_another_thread_like_a_watchdog(chain_library: Path) -> None:
    """A thread parked in the chain, unwound from this thread to its start; it runs on after."""
    library = ctypes.CDLL(str(chain_library))
    parked, release = os.pipe()

    @ctypes.CFUNCTYPE(ctypes.c_int)
    def park() -> int:
        os.read(parked, 1)  # blocks in read(), the GIL given up: parked for good
        return 7

    results: list[int] = []
    worker = threading.Thread(target=lambda: results.append(library.chain_call(park)))
    worker.start()
    try:
        wait_until(
            lambda: worker.native_id is not None and blocked_in_read(worker.native_id, parked),
            10,
            "the worker parked in read() inside the chain",
        )
        by_thread = local_backtrace(thread=worker)
        by_id = local_backtrace(thread=worker.native_id)
    finally:
        os.write(release, b"x")
        worker.join(10)
        os.close(parked)
        os.close(release)
    assert results == [10]  # 7, plus one per link: the thread finished its chain normally
    for backtrace in (by_thread, by_id):
        thread = backtrace.threads[0]
        assert thread.tid == worker.native_id and thread.complete, thread.stop_text
        functions = names(backtrace)
        assert_chain(functions)
        assert "start_thread" in functions[-3:], functions
    assert [f.pc for f in by_thread.threads[0].frames][1:] == [
        f.pc for f in by_id.threads[0].frames
    ][1:]


def test_a_thread_that_blocks_the_signal_times_out_and_stays_well() -> None:
    """Bounded wait; the signal delivered later finds the request withdrawn and copies nothing."""
    import signal

    release, blocked = threading.Event(), threading.Event()

    def run() -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, set(range(signal.SIGRTMIN, signal.SIGRTMAX + 1)))
        blocked.set()
        release.wait()
        # The pending signal is this thread's (tgkill): its handler runs before the call returns.
        signal.pthread_sigmask(signal.SIG_SETMASK, set())

    worker = threading.Thread(target=run)
    worker.start()
    try:
        assert blocked.wait(10)
        started = time.monotonic()
        with pytest.raises(TargetError, match="did not take signal"):
            local_backtrace(thread=worker, timeout=0.3)
        assert time.monotonic() - started < 3
    finally:
        release.set()
        worker.join(10)
    assert not worker.is_alive()
    # The sampler is usable again.
    assert local_backtrace().threads[0].complete


def test_thread_arguments() -> None:
    with pytest.raises(UsageError):
        local_backtrace(thread=0)
    with pytest.raises(UsageError):
        local_backtrace(thread=1 << 30)
    done = threading.Thread(target=lambda: None)
    done.start()
    done.join()
    with pytest.raises(UsageError):
        local_backtrace(thread=done)
    with pytest.raises(TargetError):
        sample_thread(threading.get_native_id())


def test_own_memory_is_read_without_faulting() -> None:
    data = ctypes.create_string_buffer(b"liveunwind", 16)
    space = local.LocalProcess([])
    assert space.read(ctypes.addressof(data), 10) == b"liveunwind"
    with pytest.raises(MemoryReadError):
        space.read(8, 8)
    assert local._read_through_pipe(ctypes.addressof(data), 10) == b"liveunwind"
    assert local._read_through_pipe(8, 8) is None
    # liveunwind's own read-only file mappings are not taken for loaded code.
    assert not [m for m in space.mappings() if m.perms == "r--s"]


# -- in another process: gdb, QEMU ------------------------------------------------


def run_script(command: list[str], chain_library: Path) -> tuple[subprocess.Popen[str], dict]:
    script = [*command, "-c", SCRIPT, str(chain_library), str(ROOT)]
    process = subprocess.Popen(
        script, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line:
        process.kill()
        _, errors = process.communicate()
        pytest.fail(f"the script failed:\n{errors}")
    return process, json.loads(line)


def finish(process: subprocess.Popen[str]) -> None:
    process.communicate("\n", timeout=60)
    assert process.returncode == 0


def test_worker_thread_matches_gdb(chain_library: Path, gdb: str) -> None:
    """The worker the process unwound itself, as gdb sees it still parked there afterwards."""
    process, report = run_script([sys.executable], chain_library)
    try:
        oracle = gdb_backtraces(process.pid, gdb=gdb)
    finally:
        finish(process)
    assert report["vm_readv"] is True
    worker = report["threads"]["worker"]
    assert worker["complete"], worker["stop"]
    ours = [pc for pc, _, _ in worker["frames"]]
    theirs = pcs(oracle[report["tid"]])
    assert ours[1:] == theirs[1:]
    # Frame 0 is the read system call: a signal handler sees the pc of the
    # syscall instruction (the kernel backs it up to restart the call), gdb
    # the pc after it.
    assert theirs[0] - ours[0] in (0, 2)


def test_under_qemu_user_mode(chain_library: Path) -> None:
    """The host's python3 under qemu-x86_64: no ptrace, no process_vm_readv, QEMU's /proc maps."""
    qemu = shutil.which("qemu-x86_64")
    python = Path("/usr/bin/python3")
    if qemu is None or not python.is_file():
        pytest.skip("qemu-x86_64 and /usr/bin/python3 are needed")
    process, report = run_script([qemu, str(python)], chain_library)
    finish(process)
    assert report["pipe"] and report["unmapped"]
    assert report["vm_readv"] is False  # QEMU has no process_vm_readv: the pipe read it
    for key, thread in report["threads"].items():
        assert thread["complete"], (key, thread["stop"])
        functions = [name for _, name, _ in thread["frames"]]
        assert_chain(functions)
    caller = [name for _, name, _ in report["threads"]["caller"]["frames"]]
    worker = [name for _, name, _ in report["threads"]["worker"]["frames"]]
    assert caller[-3:] == ["__libc_start_call_main", "__libc_start_main", "_start"], caller
    assert "start_thread" in worker[-3:], worker


def test_process_vm_readv_is_missing_under_qemu() -> None:
    """What makes the pipe necessary: QEMU 7.2 answers process_vm_readv with ENOSYS."""
    qemu = shutil.which("qemu-x86_64")
    if qemu is None:
        pytest.skip("qemu-x86_64 is needed")
    code = (
        "import os, sys; sys.path.insert(0, sys.argv[1]);"
        "from liveunwind.targets.live import syscalls;"
        "import errno\n"
        "try:\n syscalls.read_remote(os.getpid(), [(id(sys), 8)]); print('works')\n"
        "except OSError as e:\n print(errno.errorcode[e.errno])"
    )
    result = subprocess.run(
        [qemu, "/usr/bin/python3", "-c", code, str(ROOT)],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert result.stdout.strip() == "ENOSYS"


# -- the machine code -------------------------------------------------------------


@pytest.mark.parametrize(("arch", "prefix"), [("x86_64", ""), ("aarch64", "aarch64-linux-gnu-")])
def test_machine_code_is_its_source(arch: str, prefix: str, tmp_path: Path) -> None:
    assembler, objcopy, nm = (prefix + tool for tool in ("as", "objcopy", "nm"))
    if not all(shutil.which(tool) for tool in (assembler, objcopy, nm)):
        pytest.skip(f"{assembler} and binutils are needed")
    handler = arch_by_name(arch).self_capture()
    assert handler is not None
    source, code, cas_offset = handler.source, handler.code, handler.cas_offset
    (tmp_path / "handler.s").write_text(source)
    subprocess.run([assembler, "-o", "handler.o", "handler.s"], cwd=tmp_path, check=True)
    subprocess.run(
        [objcopy, "-O", "binary", "-j", ".text", "handler.o", "handler.bin"],
        cwd=tmp_path, check=True,
    )  # fmt: skip
    assert (tmp_path / "handler.bin").read_bytes() == code
    symbols = subprocess.run(
        [nm, "handler.o"], cwd=tmp_path, capture_output=True, text=True, check=True
    ).stdout
    offsets = {line.split()[2]: int(line.split()[0], 16) for line in symbols.splitlines()}
    assert offsets["cas"] == cas_offset


#: Where the saved stack pointer (then the pc) sits in a copied ucontext.
_SP_IN_UCONTEXT = {"x86_64": 40 + 15 * 8, "aarch64": 176 + 8 + 31 * 8}


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_machine_code_samples_a_c_thread(arch: str, tmp_path: Path) -> None:
    """capture.c runs the handler bytes on a parked thread (aarch64 under qemu-aarch64)."""
    compiler = "gcc" if arch == "x86_64" else "aarch64-linux-gnu-gcc"
    runner = [] if arch == "x86_64" else ["qemu-aarch64", "-L", str(AARCH64_SYSROOT)]
    for tool in (compiler, *runner[:1]):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    handler = arch_by_name(arch).self_capture()
    assert handler is not None
    code, cas_offset = handler.code, handler.cas_offset
    (tmp_path / "handler.h").write_text(
        "#define HANDLER_CODE {" + ",".join(map(str, code)) + "}\n"
        f"#define CAS_OFFSET {cas_offset}\n#define REGS_OFFSET {_SP_IN_UCONTEXT[arch]}\n"
    )
    source = ROOT / "testprogs" / "remote" / "capture.c"
    subprocess.run(
        [compiler, "-O2", "-Wall", "-pthread", "-I", str(tmp_path), "-o", "capture", str(source)],
        cwd=tmp_path, check=True,
    )  # fmt: skip
    result = subprocess.run(
        [*runner, str(tmp_path / "capture")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.stdout.startswith("ok"), result.stdout + result.stderr
