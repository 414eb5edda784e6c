"""A thread of this process copies its own registers and stack when it receives a signal.

Without ptrace (which a process cannot use on itself, and which QEMU user
mode does not have) the only way to learn another thread's registers is to
have that thread report them.  liveunwind installs, once, a handler for one
free real-time signal and sends it to the thread with ``tgkill``; the kernel
saves the thread's registers in a ``ucontext`` on its stack, and the handler
copies from that ``ucontext`` up to the end of the thread's stack into a
buffer and returns.  The copy is one instant of the stack — the thread runs
on meanwhile — and the unwinder reads it instead of the live stack.

The handler must be async-signal-safe and must not need the GIL (the thread
may hold it), so it cannot be Python: it is machine code (104 bytes on
x86_64, 208 on aarch64) that each architecture keeps with the assembly it
was assembled from (``Arch.self_capture()``; the slot it shares with this
module is laid out in :mod:`liveunwind.arch.selfcapture`).  It copies only
if the thread is the one asked for and the request is still armed
(compare-and-swap), and only between the ucontext and the end of the stack
the caller named, at most the buffer's size; a ucontext outside that stack
(a thread on a signal stack) gets only the ucontext itself copied.  The
waiting side gives up after a timeout; a signal that arrives later finds the
request disarmed and copies nothing.

What stays in the process: one page of code, one page of state, a buffer
of reserved (touched only as far as copies reach) memory, and the handler
on its signal.  The sampled thread sees one signal: a system call it was
blocked in restarts (``SA_RESTART``), or returns EINTR where the kernel does
not restart it (``nanosleep``, ``select``), as with any profiler's signal.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from collections import namedtuple

from liveunwind.arch import Arch, host_arch
from liveunwind.arch.selfcapture import (
    ARMED,
    BUFFER,
    CAPACITY,
    DONE,
    IDLE,
    LENGTH,
    PLACEHOLDER,
    STACK_END,
    STACK_START,
    START,
    TID,
)
from liveunwind.errors import TargetError

#: Bytes reserved for one stack copy; a deeper stack is copied this far and read live beyond.
BUFFER_SIZE = 16 << 20
#: Default seconds to wait for the thread to take the signal.
DEFAULT_TIMEOUT = 2.0

_PROT_READ, _PROT_WRITE, _PROT_EXEC = 1, 2, 4
_MAP_PRIVATE, _MAP_ANONYMOUS, _MAP_NORESERVE = 0x02, 0x20, 0x4000
_SA_SIGINFO, _SA_RESTART = 4, 0x10000000
_PAGE = 4096


class ThreadSample(namedtuple("ThreadSample", "tid registers stack_start stack")):
    """One thread at one instant: its registers and the copy of its stack from the ucontext up."""

    __slots__ = ()
    tid: int
    #: DWARF register number → value, as the signal interrupted the thread.
    registers: dict[int, int]
    #: Address of the first copied byte (the ucontext the kernel saved).
    stack_start: int
    stack: bytes


class _SigAction(ctypes.Structure):
    """glibc's ``struct sigaction`` on x86_64, aarch64 and the other generic 64-bit ABIs."""

    _fields_ = [
        ("handler", ctypes.c_void_p),
        ("mask", ctypes.c_ulong * 16),
        ("flags", ctypes.c_int),
        ("restorer", ctypes.c_void_p),
    ]


class _Sampler:
    """The installed handler: its code, its slot and buffer, its signal; one sample at a time."""

    def __init__(self, arch: Arch) -> None:
        handler = arch.self_capture()
        if handler is None:
            raise TargetError(f"local backtraces are not supported on {arch.name}")
        self.arch = arch
        self._handler = handler
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._libc.mmap.restype = ctypes.c_void_p
        self._libc.mmap.argtypes = [
            ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
            ctypes.c_long,
        ]  # fmt: skip
        self._libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        self._lock = threading.Lock()
        self._slot = self._map(_PAGE, _PROT_READ | _PROT_WRITE)
        self._buffer = self._map(BUFFER_SIZE, _PROT_READ | _PROT_WRITE, _MAP_NORESERVE)
        code = handler.code.replace(PLACEHOLDER, self._slot.to_bytes(8, "little"))
        self._code = self._map(_PAGE, _PROT_READ | _PROT_WRITE)
        ctypes.memmove(self._code, code, len(code))
        if self._libc.mprotect(self._code, _PAGE, _PROT_READ | _PROT_EXEC) != 0:
            raise self._os_error("cannot make the signal handler's page executable")
        self._cas = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_int)(
            self._code + handler.cas_offset
        )
        self._signal = 0

    def sample(self, tid: int, stack: tuple[int, int] | None, timeout: float) -> ThreadSample:
        with self._lock:
            self._install()
            slot = self._slot
            _store(slot + TID, tid, 4)
            _store(slot + BUFFER, self._buffer, 8)
            _store(slot + CAPACITY, BUFFER_SIZE, 8)
            _store(slot + STACK_START, stack[0] if stack else 0, 8)
            _store(slot + STACK_END, stack[1] if stack else 0, 8)
            _store(slot, ARMED, 4)
            self._send(tid)
            state = self._wait(timeout)
            if state != DONE and self._cas(slot, ARMED, IDLE) == ARMED:
                raise TargetError(
                    f"thread {tid} did not take signal {self._signal} within {timeout:g} s "
                    "(it may be blocking signals)"
                )
            if self._wait(max(timeout, 1.0)) != DONE:  # it was copying when we gave up
                raise TargetError(f"thread {tid} did not finish copying its stack")
            start = _load(slot + START, 8)
            stack_copy = ctypes.string_at(self._buffer, _load(slot + LENGTH, 8))
            _store(slot, IDLE, 4)
        return ThreadSample(tid, self._registers(start, stack_copy), start, stack_copy)

    def _registers(self, ucontext: int, copy: bytes) -> dict[int, int]:
        """The interrupted registers, read by the architecture's own signal-frame reader."""
        frame = ucontext - self._handler.ucontext_offset

        def read(address: int, size: int) -> bytes:
            offset = address - ucontext
            if offset < 0 or offset + size > len(copy):
                raise TargetError("the signal frame was not copied")
            return copy[offset : offset + size]

        return self.arch.signal_frame_reader(read, frame)

    def _wait(self, timeout: float) -> int:
        """Polls the state word until the copy is done or ``timeout`` passes (yielding the GIL)."""
        deadline = time.monotonic() + timeout
        spins = 0
        while True:
            state = _load(self._slot, 4)
            if state == DONE or time.monotonic() > deadline:
                return state
            spins += 1
            time.sleep(0 if spins < 200 else 0.0005)

    def _install(self) -> None:
        """Puts the handler on a free real-time signal, again if someone took that signal over."""
        if self._signal and self._handler_of(self._signal) == self._code:
            return
        import signal

        for number in range(signal.SIGRTMAX - 2, signal.SIGRTMIN + 1, -1):
            if self._handler_of(number) == 0:  # SIG_DFL: nobody uses it
                action = _SigAction()
                action.handler = self._code
                action.flags = _SA_SIGINFO | _SA_RESTART
                if self._libc.sigaction(number, ctypes.byref(action), None) != 0:
                    raise self._os_error(f"cannot install a handler for signal {number}")
                self._signal = number
                return
        raise TargetError("no free real-time signal for liveunwind's sampling handler")

    def _handler_of(self, number: int) -> int:
        old = _SigAction()
        if self._libc.sigaction(number, None, ctypes.byref(old)) != 0:
            return -1
        return int(old.handler or 0)

    def _send(self, tid: int) -> None:
        result = self._libc.syscall(self._handler.tgkill, os.getpid(), tid, self._signal)
        if result != 0:
            raise self._os_error(f"cannot signal thread {tid}")

    def _map(self, size: int, protection: int, flags: int = 0) -> int:
        address = self._libc.mmap(
            None, size, protection, _MAP_PRIVATE | _MAP_ANONYMOUS | flags, -1, 0
        )
        if address in (None, ctypes.c_void_p(-1).value):
            raise self._os_error(f"cannot map {size} bytes")
        return int(address)

    @staticmethod
    def _os_error(what: str) -> TargetError:
        code = ctypes.get_errno()
        return TargetError(f"{what}: {os.strerror(code)}")


def _store(address: int, value: int, size: int) -> None:
    ctypes.memmove(address, value.to_bytes(size, "little"), size)


def _load(address: int, size: int) -> int:
    return int.from_bytes(ctypes.string_at(address, size), "little")


_sampler: _Sampler | None = None
_sampler_lock = threading.Lock()


def sample_thread(
    tid: int, stack: tuple[int, int] | None = None, *, timeout: float = DEFAULT_TIMEOUT
) -> ThreadSample:
    """Registers and stack of thread ``tid`` of this process, as one instant.

    ``stack`` is the thread's stack as (lowest address, end); without it only
    the registers are copied (the stack is then found from them and the
    caller samples again).  Must not be called by thread ``tid`` itself: it
    waits for that thread to run the handler.
    """
    global _sampler
    if tid == threading.get_native_id():
        raise TargetError("a thread cannot sample itself; sample it from another thread")
    with _sampler_lock:
        if _sampler is None:
            _sampler = _Sampler(host_arch())
    return _sampler.sample(tid, stack, timeout)


def pthread_stack(pthread_id: int) -> tuple[int, int] | None:
    """The stack of the thread whose ``pthread_t`` (``threading.Thread.ident``) this is."""
    libc = ctypes.CDLL(None)
    attributes = ctypes.create_string_buffer(256)  # pthread_attr_t is 56 or 64 bytes
    if libc.pthread_getattr_np(ctypes.c_ulong(pthread_id), attributes) != 0:
        return None
    try:
        address, size = ctypes.c_void_p(), ctypes.c_size_t()
        if libc.pthread_attr_getstack(attributes, ctypes.byref(address), ctypes.byref(size)):
            return None
    finally:
        libc.pthread_attr_destroy(attributes)
    start = address.value or 0
    return (start, start + size.value) if size.value else None
