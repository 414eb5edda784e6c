"""``liveunwind.local_backtrace()`` on each platform: this Python process's own C frames.

The chain is testprogs/remote's libchain.so (chain_call -> chain_middle ->
chain_inner -> a Python callback), built here by the platform's gcc; the
arm64 container runs it under QEMU user mode, where neither ptrace nor
process_vm_readv exists and the thread samples itself on a signal.
"""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path

import pytest

import liveunwind
from liveunwind.frames import Backtrace
from tests.support.waits import blocked_in_read, wait_until

pytestmark = pytest.mark.integration

LIBCHAIN = Path(__file__).resolve().parents[2] / "testprogs" / "remote" / "build" / "libchain.so"
CHAIN = ["chain_inner", "chain_middle", "chain_call"]


@pytest.fixture(scope="module")
def library() -> ctypes.CDLL:
    if not LIBCHAIN.is_file():
        pytest.skip(f"{LIBCHAIN} is not built (make -C testprogs/remote)")
    return ctypes.CDLL(str(LIBCHAIN))


def names(backtrace: Backtrace) -> list[str]:
    return [frame.function or "??" for frame in backtrace.threads[0].frames]


def assert_chain(functions: list[str]) -> None:
    assert any(functions[i : i + 3] == CHAIN for i in range(len(functions))), functions


def test_calling_thread(platform_name: str, library: ctypes.CDLL) -> None:
    """From a ctypes callback: the C chain below it, the interpreter, down to _start."""
    found: list[Backtrace] = []

    @ctypes.CFUNCTYPE(ctypes.c_int)
    def callback() -> int:
        found.append(liveunwind.local_backtrace())
        return 0

    library.chain_call(callback)
    thread = found[0].threads[0]
    assert thread.tid == threading.get_native_id()
    assert thread.complete, thread.stop_text
    functions = names(found[0])
    assert_chain(functions)
    assert functions[-1] == "_start", functions


def test_another_thread(platform_name: str, library: ctypes.CDLL) -> None:
    """A thread parked in the chain, unwound from this one to its start; it runs on after."""
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
            60,
            "the worker parked in read() inside the chain",
        )
        backtrace = liveunwind.local_backtrace(thread=worker, timeout=60)
    finally:
        os.write(release, b"x")
        worker.join(timeout=60)
        os.close(parked)
        os.close(release)
    thread = backtrace.threads[0]
    assert thread.tid == worker.native_id
    assert thread.complete, thread.stop_text
    functions = names(backtrace)
    assert_chain(functions)
    # The thread's first frame is libc's clone (clone3, or clone where Docker's seccomp
    # profile refuses clone3; unnamed on arm64, a local label, without libc6-dbg).
    assert Path(thread.frames[-1].module or "").name == "libc.so.6", functions
    assert results == [10]  # 7, plus one per link: the thread finished its chain normally
