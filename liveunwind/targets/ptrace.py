"""A live process, stopped with PTRACE_SEIZE + PTRACE_INTERRUPT.

Inside ``with PtraceProcess(pid) as process:`` every thread is in a ptrace
stop; on exit every thread is detached and the process is exactly as it was
found: running if it ran, still stopped if it was group-stopped (the kernel
re-enters the group stop on detach), and any signal that reached a thread
while we held it is handed back on detach.  Signals that would end
liveunwind (SIGINT, SIGTERM, SIGHUP) are held back while the target is stopped
and re-raised after detaching, so liveunwind never dies with a thread still
traced by it.

Before ``with``, :meth:`PtraceProcess.mappings` and ``open_mapped_file`` see the
running process (a session looks through its files ahead of the stop);
entering forgets what was read, so inside everything is of the stopped one.
"""

from __future__ import annotations

import errno
import os
import signal
import stat
import time

from liveunwind.arch import Arch, host_arch
from liveunwind.errors import (
    AttachError,
    MemoryReadError,
    NoSuchProcessError,
    NotTraceableError,
    PermissionDeniedError,
    UsageError,
)
from liveunwind.targets import procfs, syscalls
from liveunwind.targets.base import AddressSpace, Mapping, ThreadState

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import BinaryIO

    #: What ``signal.signal`` returns and takes: a handler, SIG_DFL/SIG_IGN, or None.
    Handler = signal._HANDLER
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
_DEFERRED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: Rounds of "list /proc/PID/task, seize the new ones" before giving up on a
#: process that creates threads faster than we can stop them.
_MAX_ATTACH_ROUNDS = 100


class PtraceProcess(AddressSpace):
    """AddressSpace of a live process, valid while inside ``with``."""

    pid: int

    def __init__(self, pid: int, *, thread_ids: list[int] | None = None) -> None:
        self.pid = pid
        self.arch: Arch = host_arch()
        self._wanted = set(thread_ids) if thread_ids else None
        self._stopped: dict[int, ThreadState] = {}
        self._attached: set[int] = set()
        #: Name and scheduler state of each thread, read just before stopping any.
        self._before_stop: dict[int, procfs.TaskStat] = {}
        self._pages: dict[int, bytes | None] = {}
        self._mappings: list[Mapping] | None = None
        self._memory_fd: int | None = None
        self._vm_readv_works = True
        self._held_signals: list[int] = []
        self._previous_handlers: dict[int, Handler] = {}
        #: perf_counter() when the first thread was interrupted, and when the last was let go.
        self.stopped_at: float | None = None
        self.resumed_at: float | None = None

    # -- context management -------------------------------------------------

    def __enter__(self) -> PtraceProcess:
        self._check_traceable()
        self._mappings = None
        self._pages = {}
        self._hold_signals()
        try:
            self._attach_all()
        except BaseException:
            self._detach_all()
            self._release_signals()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        try:
            self._detach_all()
        finally:
            if self._memory_fd is not None:
                os.close(self._memory_fd)
                self._memory_fd = None
            self._release_signals()

    @property
    def stopped(self) -> bool:
        """True from stopping the first thread until letting them all go again."""
        return self.stopped_at is not None and self.resumed_at is None

    @property
    def interrupted(self) -> bool:
        """True once the user asked us to stop (checked between frames)."""
        return bool(self._held_signals)

    # -- AddressSpace -------------------------------------------------------

    def threads(self) -> list[ThreadState]:
        return [self._stopped[tid] for tid in sorted(self._stopped, key=self._thread_order)]

    def mappings(self) -> list[Mapping]:
        if self._mappings is None:
            try:
                with open(f"/proc/{self.pid}/maps") as stream:
                    self._mappings = procfs.parse_maps(stream.read())
            except FileNotFoundError:
                raise NoSuchProcessError(f"process {self.pid} has exited") from None
        return self._mappings

    def read(self, address: int, size: int) -> bytes:
        if size <= 0:
            return b""
        first = address - address % PAGE_SIZE
        last = address + size - 1
        last -= last % PAGE_SIZE
        missing = [page for page in range(first, last + 1, PAGE_SIZE) if page not in self._pages]
        if missing:
            self._fetch_pages(missing)
        chunks = []
        for page in range(first, last + 1, PAGE_SIZE):
            data = self._pages[page]
            if data is None:
                raise MemoryReadError(max(page, address), size, "not mapped or not readable")
            chunks.append(data)
        joined = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        offset = address - first
        return joined[offset : offset + size]

    def open_mapped_file(self, mapping: Mapping) -> BinaryIO | None:
        """Opens the file behind ``mapping`` as the target sees it.

        The path is resolved inside the target's root (containers, chroots);
        when that file is gone or is not the mapped one (deleted or replaced
        on disk), the kernel's own handle in /proc/PID/map_files is used.
        """
        if not mapping.is_file:
            return None
        path = mapping.path.removesuffix(" (deleted)")
        for candidate in (
            f"/proc/{self.pid}/root{path}",
            f"/proc/{self.pid}/map_files/{mapping.start:x}-{mapping.end:x}",
        ):
            stream = _open_if_same_file(candidate, mapping.inode)
            if stream is not None:
                return stream
        return None

    # -- attaching ----------------------------------------------------------

    def _check_traceable(self) -> None:
        if self.pid == os.getpid():
            raise NotTraceableError("liveunwind cannot attach to itself; use local_backtrace()")
        stat = procfs.process_stat(self.pid)
        if stat.is_kernel_thread:
            raise NotTraceableError(
                f"process {self.pid} ({stat.name}) is a kernel thread: it has no user-space stack"
            )
        if stat.state in ("Z", "X"):
            tids = procfs.list_tids(self.pid)
            live = [tid for tid in tids if _task_state(self.pid, tid) not in ("Z", "X", "")]
            if not live:
                raise NotTraceableError(
                    f"process {self.pid} ({stat.name}) is a zombie: it has exited and "
                    "has no stack left"
                )

    def _attach_all(self) -> None:
        """Seizes and interrupts every thread, including ones created meanwhile."""
        seen: set[int] = set()
        for _ in range(_MAX_ATTACH_ROUNDS):
            fresh = [tid for tid in self._candidate_tids() if tid not in seen]
            if not fresh:
                return
            seen.update(fresh)  # a thread that is gone or a zombie is not looked at again
            # Read while nothing is stopped yet (in the first round): these reads
            # would otherwise lengthen the freeze by two files per thread.
            alive = [tid for tid in fresh if self._read_before_stop(tid)]
            seized = [tid for tid in alive if self._seize(tid)]
            for tid in seized:
                self._wait_for_stop(tid)
        raise AttachError(f"process {self.pid} keeps creating threads; could not stop them all")

    def _candidate_tids(self) -> list[int]:
        tids = procfs.list_tids(self.pid)
        if self._wanted is None:
            return tids
        unknown = self._wanted.difference(tids)
        if unknown:
            raise UsageError(
                f"process {self.pid} has no thread {', '.join(map(str, sorted(unknown)))}"
            )
        return sorted(self._wanted)

    def _read_before_stop(self, tid: int) -> bool:
        """Notes a thread's name and state; False if it is gone or a zombie."""
        try:
            stat = procfs.read_stat(f"/proc/{self.pid}/task/{tid}/stat")
        except OSError:
            return False
        if stat.state in ("Z", "X"):
            return False
        self._before_stop[tid] = stat
        return True

    def _seize(self, tid: int) -> bool:
        """Seizes and interrupts one thread; False if it is gone."""
        try:
            syscalls.ptrace(syscalls.PTRACE_SEIZE, tid)
        except OSError as error:
            if error.errno == errno.ESRCH:
                return False
            raise self._attach_failure(error) from None
        self._attached.add(tid)
        if self.stopped_at is None:
            self.stopped_at = time.perf_counter()
        try:
            syscalls.ptrace(syscalls.PTRACE_INTERRUPT, tid)
        except OSError as error:
            if error.errno != errno.ESRCH:
                raise AttachError(f"cannot interrupt thread {tid}: {error.strerror}") from None
        return True

    def _wait_for_stop(self, tid: int) -> None:
        """Waits for ``tid`` to enter a ptrace stop and records its registers."""
        while True:
            try:
                _, status = os.waitpid(tid, syscalls.WALL)
            except ChildProcessError:
                self._attached.discard(tid)
                return
            if os.WIFEXITED(status) or os.WIFSIGNALED(status):
                self._attached.discard(tid)
                return
            if os.WIFSTOPPED(status):
                break
        pending = 0
        event = status >> 16
        if event == 0:
            # A signal-delivery stop: the signal arrived before our interrupt.
            # Keep it, and give it back when we detach.
            pending = os.WSTOPSIG(status)
        try:
            raw = syscalls.get_regset(tid, 512)
        except OSError as error:
            if error.errno == errno.ESRCH:
                self._attached.discard(tid)
                return
            raise AttachError(f"cannot read registers of thread {tid}: {error.strerror}") from None
        before = self._before_stop.get(tid)
        self._stopped[tid] = ThreadState(
            tid=tid,
            name=before.name if before is not None else "",
            registers=_decode_registers(self.arch, raw, self.pid),
            state=procfs.state_word(before.state if before is not None else "?"),
            pending_signal=pending,
        )

    def _attach_failure(self, error: OSError) -> Exception:
        name = procfs.process_stat(self.pid).name
        if error.errno == errno.EPERM:
            tracer = procfs.tracer_of(self.pid)
            if tracer:
                tracer_name = _process_name(tracer)
                return PermissionDeniedError(
                    f"cannot trace process {self.pid} ({name}): it is already traced by "
                    f"process {tracer} ({tracer_name}); detach that tracer first"
                )
            return PermissionDeniedError(
                f"cannot trace process {self.pid} ({name}): permission denied; run as root or "
                f"as its owner with CAP_SYS_PTRACE{_yama_advice()}"
            )
        return AttachError(f"cannot attach to process {self.pid} ({name}): {error.strerror}")

    def _detach_all(self) -> None:
        for tid in sorted(self._attached):
            thread = self._stopped.get(tid)
            pending = thread.pending_signal if thread else 0
            try:
                syscalls.ptrace(syscalls.PTRACE_DETACH, tid, 0, pending)
            except OSError as error:
                if error.errno == errno.ESRCH and self._stop_if_running(tid):
                    syscalls.ptrace(syscalls.PTRACE_DETACH, tid, 0, pending)
        self._attached = set()
        self.resumed_at = time.perf_counter()

    @staticmethod
    def _stop_if_running(tid: int) -> bool:
        """A seized thread whose interrupt we never waited for: stop it so it can be detached."""
        try:
            _, status = os.waitpid(tid, syscalls.WALL)
        except ChildProcessError:
            return False
        return os.WIFSTOPPED(status)

    def _thread_order(self, tid: int) -> tuple[int, int]:
        return (tid != self.pid, tid)

    # -- signals ------------------------------------------------------------

    def _hold_signals(self) -> None:
        def hold(signum: int, _frame: object) -> None:
            self._held_signals.append(signum)

        for signum in _DEFERRED_SIGNALS:
            try:
                self._previous_handlers[signum] = signal.signal(signum, hold)
            except ValueError:  # not the main thread: cannot install handlers
                return

    def _release_signals(self) -> None:
        for signum, handler in self._previous_handlers.items():
            signal.signal(signum, handler)
        self._previous_handlers = {}
        held, self._held_signals = self._held_signals, []
        for signum in dict.fromkeys(held):
            signal.raise_signal(signum)

    # -- memory -------------------------------------------------------------

    def _fetch_pages(self, pages: list[int]) -> None:
        if self._vm_readv_works:
            try:
                results = syscalls.read_remote(self.pid, [(page, PAGE_SIZE) for page in pages])
            except OSError:
                self._vm_readv_works = False  # e.g. EPERM under some LSMs, ENOSYS
            else:
                self._pages.update(zip(pages, results))
                return
        for page in pages:
            self._pages[page] = self._read_page_slowly(page)

    def _read_page_slowly(self, page: int) -> bytes | None:
        """/proc/PID/mem, then PTRACE_PEEKDATA word by word."""
        if self._memory_fd is None:
            try:
                self._memory_fd = os.open(f"/proc/{self.pid}/mem", os.O_RDONLY)
            except OSError:
                self._memory_fd = -1
        if self._memory_fd >= 0:
            try:
                data = os.pread(self._memory_fd, PAGE_SIZE, page)
            except OSError:
                return None
            if len(data) == PAGE_SIZE:
                return data
        return self._peek_page(page)

    def _peek_page(self, page: int) -> bytes | None:
        tid = next(iter(self._attached), None)
        if tid is None:
            return None
        from ptrace.binding.func import PtraceError, ptrace_peekdata

        words = []
        try:
            for address in range(page, page + PAGE_SIZE, 8):
                words.append((ptrace_peekdata(tid, address) & (2**64 - 1)).to_bytes(8, "little"))
        except PtraceError:
            return None
        return b"".join(words)


def _decode_registers(arch: Arch, raw: bytes, pid: int) -> dict[int, int]:
    if arch.name == "x86_64":
        from liveunwind.arch import x86_64

        if len(raw) < x86_64.USER_REGS_SIZE:
            raise NotTraceableError(f"process {pid} is a 32-bit process; only 64-bit is supported")
        return x86_64.registers_from_user_regs(raw)
    from liveunwind.arch import aarch64

    if len(raw) < aarch64.USER_REGS_SIZE:
        raise NotTraceableError(f"process {pid} is a 32-bit process; only 64-bit is supported")
    return aarch64.registers_from_user_regs(raw)


def _open_if_same_file(path: str, inode: int) -> BinaryIO | None:
    """Opens ``path`` only if it is a regular file with the mapped inode."""
    try:
        stream = open(path, "rb")  # noqa: SIM115 - handed to the caller
    except OSError:
        return None
    info = os.fstat(stream.fileno())
    if not stat.S_ISREG(info.st_mode) or info.st_ino != inode:
        stream.close()
        return None
    return stream


def _task_state(pid: int, tid: int) -> str:
    try:
        return procfs.read_stat(f"/proc/{pid}/task/{tid}/stat").state
    except OSError:
        return ""


def _process_name(pid: int) -> str:
    try:
        return procfs.process_stat(pid).name
    except NoSuchProcessError:
        return "?"


def _yama_advice() -> str:
    """The end of the permission message: check Yama only where it can be the cause."""
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as stream:
            scope = stream.read().strip()
    except OSError:
        return " (Yama is not enabled: there is no kernel.yama.ptrace_scope)"
    if scope == "0":
        return " (kernel.yama.ptrace_scope is 0: Yama adds no restriction)"
    return f", and check kernel.yama.ptrace_scope (now {scope})"
