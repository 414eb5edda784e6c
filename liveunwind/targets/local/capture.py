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
may hold it), so it cannot be Python: it is 104 bytes of x86_64 or 208 bytes
of aarch64 machine code, written out below with the assembly it was
assembled from (``tests/test_local.py`` assembles that source again and
compares).  It copies only if the thread is the one asked for and the
request is still armed (compare-and-swap), and only between the ucontext
and the end of the stack the caller named, at most the buffer's size; a
ucontext outside that stack (a thread on a signal stack) gets only the
ucontext itself copied.  The waiting side gives up after a timeout; a signal
that arrives later finds the request disarmed and copies nothing.

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
from liveunwind.errors import TargetError

#: Bytes reserved for one stack copy; a deeper stack is copied this far and read live beyond.
BUFFER_SIZE = 16 << 20
#: Default seconds to wait for the thread to take the signal.
DEFAULT_TIMEOUT = 2.0

# The state word at the start of the slot.
_IDLE, _ARMED, _COPYING, _DONE = 0, 1, 2, 3
# The slot (one page): state u32, tid u32, buffer, capacity, stack end, copied start,
# copied length, stack start (u64 each, at these offsets).
_TID, _BUFFER, _CAPACITY, _STACK_END, _START, _LENGTH, _STACK_START = 4, 8, 16, 24, 32, 40, 48
#: Stands in the code for the slot's address; replaced when the code is installed.
_PLACEHOLDER = bytes.fromhex("8877665544332211")

_X86_64_SOURCE = """
    .intel_syntax noprefix
    .text
handler:                            # (int signal, siginfo_t *info, ucontext_t *uc)
    mov     r9, rdx
    mov     eax, 186                # gettid
    syscall
    movabs  r8, 0x1122334455667788  # the slot
    cmp     eax, dword ptr [r8 + 4]
    jne     done                    # not the thread asked for
    mov     eax, 1
    mov     ecx, 2
    lock cmpxchg dword ptr [r8], ecx
    jne     done                    # not armed (given up on, or done)
    mov     rsi, r9
    mov     ecx, 1024               # the ucontext alone, when it is not on the stack
    cmp     r9, qword ptr [r8 + 48]
    jb      copy
    mov     rax, qword ptr [r8 + 24]
    cmp     r9, rax
    jae     copy
    sub     rax, r9                 # up to the end of the stack
    mov     rcx, rax
    cmp     rcx, qword ptr [r8 + 16]
    jbe     copy
    mov     rcx, qword ptr [r8 + 16] # at most the buffer
copy:
    mov     qword ptr [r8 + 32], rsi
    mov     qword ptr [r8 + 40], rcx
    mov     rdi, qword ptr [r8 + 8]
    rep movsb
    mov     dword ptr [r8], 3
done:
    ret
cas:                                # int cas(int *word, int expected, int desired)
    mov     eax, esi
    lock cmpxchg dword ptr [rdi], edx
    ret
"""
_X86_64_CODE = bytes.fromhex(
    "4989d1b8ba0000000f0549b88877665544332211413b4004754db801000000b902000000f0410fb108"
    "753c4c89ceb9000400004d3b48307219498b40184939c173104c29c84889c1493b48107604498b4810"
    "4989702049894828498b7808f3a441c70003000000c389f0f00fb117c3"
)
_AARCH64_SOURCE = """
    .text
handler:                            // (int signal, siginfo_t *info, ucontext_t *uc)
    mov     x10, x2
    mov     x8, #178                // gettid
    svc     #0
    ldr     x9, slot
    ldr     w11, [x9, #4]
    cmp     w0, w11
    b.ne    done                    // not the thread asked for
arm:
    ldaxr   w11, [x9]
    cmp     w11, #1
    b.ne    busy                    // not armed (given up on, or done)
    mov     w12, #2
    stxr    w13, w12, [x9]
    cbnz    w13, arm
    mov     x1, x10
    mov     x3, #1024               // the ucontext alone, when it is not on the stack
    ldr     x4, [x9, #48]
    cmp     x10, x4
    b.lo    copy
    ldr     x4, [x9, #24]
    cmp     x10, x4
    b.hs    copy
    sub     x3, x4, x10             // up to the end of the stack
    ldr     x4, [x9, #16]
    cmp     x3, x4
    csel    x3, x3, x4, ls          // at most the buffer
    and     x3, x3, #~7
copy:
    str     x1, [x9, #32]
    str     x3, [x9, #40]
    ldr     x4, [x9, #8]
    lsr     x5, x3, #3
word:
    cbz     x5, copied
    ldr     x6, [x1], #8
    str     x6, [x4], #8
    sub     x5, x5, #1
    b       word
copied:
    mov     w11, #3
    stlr    w11, [x9]
done:
    ret
busy:
    clrex
    ret
cas:                                // int cas(int *word, int expected, int desired)
    ldaxr   w3, [x0]
    cmp     w3, w1
    b.ne    differs
    stlxr   w4, w2, [x0]
    cbnz    w4, cas
    mov     w0, w3
    ret
differs:
    clrex
    mov     w0, w3
    ret
    .balign 8
slot:
    .quad   0x1122334455667788
"""
_AARCH64_CODE = bytes.fromhex(
    "ea0302aa481680d2010000d4e90500582b0540b91f000b6be10300542bfd5f887f050071a10300544c"
    "0080522c7d0d886dffff35e1030aaa038080d2241940f95f0104eb23010054240d40f95f0104ebc200"
    "005483000acb240940f97f0004eb6390849a63f07d92211100f9231500f9240540f965fc43d3a50000"
    "b4268440f8868400f8a50400d1fcffff176b0080522bfd9f88c0035fd65f3f03d5c0035fd603fc5f88"
    "7f00016ba100005402fc048884ffff35e003032ac0035fd65f3f03d5e003032ac0035fd68877665544"
    "332211"
)
#: Per architecture: the code, the offset of ``cas`` in it, and the ucontext's offset in
#: the kernel's signal frame (where ``Arch.signal_frame_reader`` starts reading).
MACHINE_CODE = {
    "x86_64": (_X86_64_SOURCE, _X86_64_CODE, 0x68, 0),
    "aarch64": (_AARCH64_SOURCE, _AARCH64_CODE, 0xA0, 128),
}

_PROT_READ, _PROT_WRITE, _PROT_EXEC = 1, 2, 4
_MAP_PRIVATE, _MAP_ANONYMOUS, _MAP_NORESERVE = 0x02, 0x20, 0x4000
_SA_SIGINFO, _SA_RESTART = 4, 0x10000000
_TGKILL = {"x86_64": 234, "aarch64": 131}
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
    """glibc's ``struct sigaction`` on x86_64 and aarch64."""

    _fields_ = [
        ("handler", ctypes.c_void_p),
        ("mask", ctypes.c_ulong * 16),
        ("flags", ctypes.c_int),
        ("restorer", ctypes.c_void_p),
    ]


class _Sampler:
    """The installed handler: its code, its slot and buffer, its signal; one sample at a time."""

    def __init__(self, arch: Arch) -> None:
        if arch.name not in MACHINE_CODE:
            raise TargetError(f"local backtraces are not supported on {arch.name}")
        self.arch = arch
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
        _, code, cas_offset, _ = MACHINE_CODE[arch.name]
        code = code.replace(_PLACEHOLDER, self._slot.to_bytes(8, "little"))
        self._code = self._map(_PAGE, _PROT_READ | _PROT_WRITE)
        ctypes.memmove(self._code, code, len(code))
        if self._libc.mprotect(self._code, _PAGE, _PROT_READ | _PROT_EXEC) != 0:
            raise self._os_error("cannot make the signal handler's page executable")
        self._cas = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_int)(
            self._code + cas_offset
        )
        self._signal = 0

    def sample(self, tid: int, stack: tuple[int, int] | None, timeout: float) -> ThreadSample:
        with self._lock:
            self._install()
            slot = self._slot
            _store(slot + _TID, tid, 4)
            _store(slot + _BUFFER, self._buffer, 8)
            _store(slot + _CAPACITY, BUFFER_SIZE, 8)
            _store(slot + _STACK_START, stack[0] if stack else 0, 8)
            _store(slot + _STACK_END, stack[1] if stack else 0, 8)
            _store(slot, _ARMED, 4)
            self._send(tid)
            state = self._wait(timeout)
            if state != _DONE and self._cas(slot, _ARMED, _IDLE) == _ARMED:
                raise TargetError(
                    f"thread {tid} did not take signal {self._signal} within {timeout:g} s "
                    "(it may be blocking signals)"
                )
            if self._wait(max(timeout, 1.0)) != _DONE:  # it was copying when we gave up
                raise TargetError(f"thread {tid} did not finish copying its stack")
            start = _load(slot + _START, 8)
            stack_copy = ctypes.string_at(self._buffer, _load(slot + _LENGTH, 8))
            _store(slot, _IDLE, 4)
        return ThreadSample(tid, self._registers(start, stack_copy), start, stack_copy)

    def _registers(self, ucontext: int, copy: bytes) -> dict[int, int]:
        """The interrupted registers, read by the architecture's own signal-frame reader."""
        frame = ucontext - MACHINE_CODE[self.arch.name][3]

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
            if state == _DONE or time.monotonic() > deadline:
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
        result = self._libc.syscall(_TGKILL[self.arch.name], os.getpid(), tid, self._signal)
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
