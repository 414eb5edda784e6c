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

A target may be hostile or just unlucky, and neither may hold liveunwind
or the rest of the target hostage:

- a thread that does not stop within ``stop_timeout`` (a main thread inside
  ``vfork()``, a thread in an uninterruptible wait) is reported as not
  stopped, with its kernel state and wait channel, and the others go on;
- every ptrace call is made from a thread of liveunwind's own
  (:class:`Tracer`) that ends when the target is let go with a thread
  it could not detach: the kernel then detaches whatever that thread still
  traces, which is the only way to let go of a thread that never stopped
  (PTRACE_DETACH needs a stopped tracee).  One that let go of every thread
  may be lent to the next stop (``tracer=``: a profile's samples);
- a thread that exits while being attached is simply gone, and "already
  traced" names the tracer of the thread that has one;
- the files the process maps are opened inside its own root, as regular
  files only, and only when they are the mapped ones (:mod:`.files`).
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # the C module under signal; no stub
import _thread
import errno
import os
import struct
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
from liveunwind.targets.base import AddressSpace, Mapping, ThreadState
from liveunwind.targets.files import read_kernel_file
from liveunwind.targets.live import procfs, syscalls

TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal
    from collections.abc import Callable
    from typing import Protocol, TypeVar

    from liveunwind.targets.files import RegularFile

    class Turn(Protocol):
        """What lets one stop at a time go ahead (``backtrace/workers.py``'s ``Turns``)."""

        def take(self) -> None: ...

        def give(self) -> None: ...

    Result = TypeVar("Result")

    #: What ``signal.signal`` returns and takes: a handler, SIG_DFL/SIG_IGN, or None.
    Handler = signal._HANDLER
else:
    # signal.py's C module, without the enums signal.py makes (0.7 ms of a cold start)
    import _signal as signal

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
_DEFERRED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: Rounds of "list /proc/PID/task, seize the new ones" before giving up on a
#: process that creates threads faster than we can stop them.
_MAX_ATTACH_ROUNDS = 100
#: Seconds a thread may take to stop after being interrupted before it is
#: reported as not stopped (a thread runs to its next return to user space first).
DEFAULT_STOP_TIMEOUT = 0.5
#: How long to look again at once for a thread that has not stopped yet, and
#: then the first and the longest pause between two looks.
_SPIN = 1e-3
_FIRST_POLL = 50e-6
_LONGEST_POLL = 2e-3
#: The first pause between two looks at sleepers (see _wait_for_stop); the tracer
#: thread's timer slack is cut to _TIMER_SLACK so that such a pause is about as asked.
_FIRST_SLEEPER_POLL = 20e-6
_TIMER_SLACK = 5e-6
#: How long a process whose held thread died is watched to tell an exit from an execve.
_SETTLE = 0.5
#: Seconds to wait for the kernel to let go of a thread that never stopped.
_RELEASE_TIMEOUT = 2.0
#: ``PF_EXITING`` in the flags field of /proc/PID/task/TID/stat.
_PF_EXITING = 0x4
#: The last maps text read, of one pid, and its mappings (see PtraceProcess.mappings).
_MAPS_SEEN: dict[int, tuple[bytes, list[Mapping]]] = {}
#: capability(7) number of CAP_SYS_PTRACE, a bit of the ``CapEff:`` mask in /proc/self/status.
_CAP_SYS_PTRACE = 19


class PtraceProcess(AddressSpace):
    """AddressSpace of a live process, valid while inside ``with``.

    ``stop_timeout`` bounds the wait for each thread to stop (seconds).
    """

    pid: int

    def __init__(
        self,
        pid: int,
        *,
        thread_ids: list[int] | None = None,
        stop_timeout: float = DEFAULT_STOP_TIMEOUT,
        tracer: Tracer | None = None,
        task_stats: procfs.TaskStatFiles | None = None,
        turn: Turn | None = None,
    ) -> None:
        """``tracer``: the thread to make the ptrace calls from, if it is still running
        (else one of this stop's own); it is ended if a thread could not be detached.
        ``task_stats``: the threads' ``stat`` files, kept open from one stop to the next
        (else this stop opens its own).  ``turn``: what lets one stop of a many-process
        run's workers go at a time (``backtrace/workers.py``'s ``Turns``), taken just
        before the first thread is seized and given back as the last is let go: held
        around the whole stop, the hand-overs to the tracer thread and back, the reads
        of the threads' ``stat`` files and the putting back of signal handlers doubled
        it (median held 1.0-1.6 ms against a freeze of 0.47-0.73 ms, 100 processes, 2
        workers), and the other worker waited through all of it."""
        self.pid = pid
        self._lent_tracer = tracer
        self._lent_task_stats = task_stats
        self._task_stats = task_stats or procfs.TaskStatFiles(pid)
        self.arch: Arch = host_arch()
        self.stop_timeout = stop_timeout
        self._wanted = set(thread_ids) if thread_ids else None
        self._stopped: dict[int, ThreadState] = {}
        #: The register blocks of stopped threads, as PTRACE_GETREGSET gave them, until
        #: :meth:`threads` decodes them into their ThreadStates.
        self._undecoded: dict[int, bytes] = {}
        #: Threads seized and interrupted that did not stop in time.
        self._not_stopped: dict[int, ThreadState] = {}
        self._attached: set[int] = set()
        #: Seized threads never seen stopped, left for the tracer thread's exit to let go.
        self._left_to_kernel: set[int] = set()
        #: Name and scheduler state of each thread, read just before stopping any.
        self._before_stop: dict[int, procfs.TaskStat] = {}
        self._pages: dict[int, bytes | None] = {}
        self._mappings: list[Mapping] | None = None
        self._memory_fd: int | None = None
        self._vm_readv_works = True
        self._held_signals: list[int] = []
        self._previous_handlers: dict[int, Handler] = {}
        self._tracer: Tracer | None = None
        #: The turn each stop takes before seizing, and whether it holds it.
        self._turn = turn
        self._holds_turn = False
        #: perf_counter() when the first thread was interrupted, and when the last was let go.
        self.stopped_at: float | None = None
        self.resumed_at: float | None = None

    # -- context management -------------------------------------------------

    def __enter__(self) -> PtraceProcess:
        self._stop(self._attach_all)
        return self

    def hold(self, work: Callable[[], Result]) -> Result:
        """Stops every thread, returns ``work()`` run on the tracer thread, lets them go.

        What ``with`` around a call of ``work`` does, in one hand-over to the
        tracer thread instead of two, and both of those inside the freeze (each
        wakes the other thread and passes the GIL: 10 µs, more on a busy machine).
        Every thread is let go before this returns or raises.
        """
        try:
            result = self._stop(lambda: self._held_for(work))  # if it raises, all are let go
            self.__exit__()
        finally:
            self._give_turn()  # however the stop ended (given back as it let go, normally)
        return result

    def _stop(self, job: Callable[[], Result]) -> Result:
        """Runs ``job`` (which stops every thread) on the tracer thread; lets go if it fails."""
        try:
            self._check_traceable()
        except BaseException:
            self._close_own_files()
            raise
        self._mappings = None
        self._pages = {}
        self._hold_signals()
        try:
            lent = self._lent_tracer
            self._tracer = lent if lent is not None and lent.running else Tracer()
            return self._tracer.call(job)
        except BaseException:
            try:
                self._let_go()
            finally:
                self._close_own_files()
                self._release_signals()
            raise

    def _held_for(self, work: Callable[[], Result]) -> Result:
        """On the tracer thread: stops every thread, runs ``work``, lets every thread go."""
        try:
            self._attach_all()
            return work()
        finally:
            self._detach_all()

    def __exit__(self, *exc_info: object) -> None:
        try:
            self._let_go()
        finally:
            if self._memory_fd is not None:
                if self._memory_fd >= 0:
                    os.close(self._memory_fd)
                self._memory_fd = None
            self._close_own_files()
            self._release_signals()

    def _close_own_files(self) -> None:
        if self._task_stats is not self._lent_task_stats:
            self._task_stats.close()

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
        """Every thread; one that did not stop has no registers and says so in its state.

        The registers are decoded here, not in the stop: a snapshot asks for
        them once the process runs again (3 µs a thread, a tenth of the
        freeze of 9 threads), having taken the stack pointers alone in it.
        """
        if self._undecoded:
            undecoded, self._undecoded = self._undecoded, {}
            for tid, raw in undecoded.items():
                self._stopped[tid].registers = self.arch.registers_from_user_regs(raw)
        every = {**self._not_stopped, **self._stopped}
        return [every[tid] for tid in sorted(every, key=self._thread_order)]

    def stack_pointers(self) -> list[tuple[int, int]]:
        """(tid, stack pointer) of every stopped thread, in the order of :meth:`threads`:
        one word of each register block, the rest left for ``threads`` to decode."""
        index = _stack_pointer_word(self.arch)
        found = []
        for tid in sorted(self._stopped, key=self._thread_order):
            raw = self._undecoded.get(tid)
            if raw is not None:
                found.append((tid, _unpack_word(raw, index * 8)[0]))
                continue
            sp = self._stopped[tid].registers.get(self.arch.sp)
            if sp is not None:
                found.append((tid, sp))
        return found

    def entry_point(self) -> int | None:
        return procfs.entry_point(str(self.pid))

    def mappings(self) -> list[Mapping]:
        """The process's mappings, read once before the stop and once in it.

        The text is parsed only when it differs from the last text read of
        this process: a session reads the same maps twice a sample, once in
        the stop, where parsing 423 lines (200 threads) took 0.67 ms of the freeze.
        """
        if self._mappings is None:
            try:
                text = read_kernel_file(f"/proc/{self.pid}/maps", procfs.MAX_MAPS_TEXT)
            except (FileNotFoundError, ProcessLookupError):
                raise NoSuchProcessError(f"process {self.pid} has exited") from None
            seen = _MAPS_SEEN.get(self.pid)
            if seen is not None and seen[0] == text:
                parsed = seen[1]
            else:
                parsed = procfs.parse_maps(text.decode("utf-8", "replace"))
                _MAPS_SEEN.clear()  # one process's: a many-process run moves on
                _MAPS_SEEN[self.pid] = (text, parsed)
            self._mappings = list(parsed)
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

    def read_many(self, ranges: list[tuple[int, int]]) -> list[bytes | None]:
        """Each range's bytes, or None if unreadable: the pages none read yet fetched in one call.

        The headers of every module a many-process run checks (a build-id
        each) cost one ``process_vm_readv`` (33 µs) instead of one each.
        """
        missing = {
            page
            for address, size in ranges
            if size > 0
            for page in range(address - address % PAGE_SIZE, address + size, PAGE_SIZE)
            if page not in self._pages
        }
        if missing:
            self._fetch_pages(sorted(missing))
        return super().read_many(ranges)

    def open_mapped_file(self, mapping: Mapping) -> RegularFile | None:
        """Opens the file behind ``mapping`` as the target sees it (see procfs.open_mapped_file)."""
        return procfs.open_mapped_file(str(self.pid), mapping)

    # -- attaching (on the tracer thread) -------------------------------------

    def _check_traceable(self) -> None:
        if self.pid == os.getpid():
            raise NotTraceableError("liveunwind cannot attach to itself; use local_backtrace()")
        try:
            # The main thread's stat says what /proc/PID/stat would (state, flags), from
            # the file kept open for the stop (saves an open and a close per sample).
            stat = self._task_stats.read(self.pid)
        except (FileNotFoundError, ProcessLookupError):
            raise NoSuchProcessError(f"no process with pid {self.pid}") from None
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
        """Seizes and interrupts every thread, including ones created meanwhile.

        The threads of one round are interrupted together and then waited
        for, each until ``stop_timeout`` after the round's interrupts.
        """
        seen: set[int] = set()
        for _ in range(_MAX_ATTACH_ROUNDS):
            if seen:
                self.check_still_held()
            candidates = self._candidate_tids()
            if not seen:
                self._task_stats.keep_only(candidates)
            fresh = [tid for tid in candidates if tid not in seen]
            if not fresh:
                return
            seen.update(fresh)  # a thread that is gone or a zombie is not looked at again
            # Read while nothing is stopped yet (in the first round): these reads
            # would otherwise lengthen the freeze by two files per thread.
            alive = [tid for tid in fresh if self._read_before_stop(tid)]
            # The turn is taken before seizing: a seized thread enters a stop at the
            # next signal it gets, and is traced (its TracerPid says so) until let go.
            self._take_turn()
            # Seizing does not stop a thread: every thread is seized first, and the
            # freeze begins with the first interrupt (200 threads: 1.3 ms less of it).
            seized = [tid for tid in alive if self._seize(tid)]
            # The threads that were asleep are stopped (and waited for) before those
            # that ran: a sleeper needs a CPU to reach its stop (120 µs for the first of
            # 9 on 2 busy cores), which a running thread then does not wait through.
            sleeping, running = self._sleeping_then_running(seized)
            for group, spin in ((sleeping, not running), (running, True)):
                for tid in group:
                    self._interrupt(tid)
                deadline = time.perf_counter() + self.stop_timeout
                for tid in group:
                    self._wait_for_stop(tid, deadline, spin=spin)
        raise AttachError(f"process {self.pid} keeps creating threads; could not stop them all")

    def _candidate_tids(self) -> list[int]:
        tids = procfs.list_tids(self.pid)
        if self._wanted is None:
            return tids
        unknown = self._wanted.difference(tids)
        if unknown.intersection(self._stopped):
            # A thread held in its stop left the list: an execve or the exit took
            # it, and its death is not yet in waitpid's answer that asked first.
            raise self._lost()
        if unknown:
            raise UsageError(
                f"process {self.pid} has no thread {', '.join(map(str, sorted(unknown)))}"
            )
        return sorted(self._wanted)

    def _was_running(self, tid: int) -> bool:
        """Whether the thread was on a CPU (or waiting for one) when last looked at, or ran
        since the stop before (a busy Python thread is often asleep on the GIL when looked at,
        its heartbeat thread running)."""
        before = self._before_stop.get(tid)
        return before is not None and (before.state == "R" or before.ran)

    def _sleeping_then_running(self, tids: list[int]) -> tuple[list[int], list[int]]:
        """The threads that were not running, and those that were, each in the given order."""
        running = [tid for tid in tids if self._was_running(tid)]
        if not running:
            return tids, []
        return [tid for tid in tids if not self._was_running(tid)], running

    def _read_before_stop(self, tid: int) -> bool:
        """Notes a thread's name and state; False if it is gone or a zombie."""
        try:
            stat = self._task_stats.read(tid)
        except OSError:
            return False
        if stat.state in ("Z", "X"):
            return False
        self._before_stop[tid] = stat
        return True

    def _seize(self, tid: int) -> bool:
        """Seizes one thread, which runs on; False if it is gone or on its way out."""
        try:
            syscalls.ptrace(syscalls.PTRACE_SEIZE, tid)
        except OSError as error:
            # The kernel refuses an exiting thread with EPERM, a vanished one with ESRCH.
            if error.errno == errno.ESRCH or _is_exiting(self.pid, tid):
                return False
            raise self._attach_failure(error, tid) from None
        self._attached.add(tid)
        return True

    def _interrupt(self, tid: int) -> None:
        """Stops a seized thread (it enters a ptrace stop when it next can)."""
        if self.stopped_at is None:
            self.stopped_at = time.perf_counter()
        try:
            syscalls.ptrace(syscalls.PTRACE_INTERRUPT, tid)
        except OSError as error:
            if error.errno != errno.ESRCH:
                raise AttachError(f"cannot interrupt thread {tid}: {error.strerror}") from None

    def _wait_for_stop(self, tid: int, deadline: float, *, spin: bool = True) -> None:
        """Waits until ``deadline`` for ``tid`` to enter a ptrace stop; records its registers.

        An interrupted thread normally stops within microseconds, so the
        first millisecond is spent yielding the CPU between looks; after
        that the looks are spaced out, up to :data:`_LONGEST_POLL` apart.
        Without ``spin`` (sleepers stopped while a thread that runs still
        runs) the looks are spaced out from the first: a sleeper has to
        wait for a CPU to reach its stop, and yielding to it again and
        again cost 35 looks a sample of 9 threads on 2 busy cores.
        """
        spin_until = time.perf_counter() + (_SPIN if spin else 0.0)
        pause = _FIRST_POLL if spin else _FIRST_SLEEPER_POLL
        while True:
            try:
                waited, status = os.waitpid(tid, syscalls.WALL | os.WNOHANG)
            except ChildProcessError:
                self._attached.discard(tid)
                return
            if waited == 0:
                now = time.perf_counter()
                if now >= deadline:
                    self._note_not_stopped(tid)
                    return
                if now < spin_until:
                    os.sched_yield()
                else:
                    if self._exited(tid):
                        raise self._lost()  # or another thread's execve killed it: which
                    time.sleep(min(pause, deadline - now))
                    pause = min(pause * 2, _LONGEST_POLL)
                continue
            if os.WIFEXITED(status) or os.WIFSIGNALED(status):
                self._attached.discard(tid)
                return
            if os.WIFSTOPPED(status):
                break
        self._record_stop(tid, status)

    def check_still_held(self) -> None:
        """Raises NoSuchProcessError if a thread stopped earlier is gone: the process exited,
        or replaced its program (execve) while the others were being stopped.

        An execve by a thread not yet stopped kills every other thread, the
        stopped ones too, and the process runs on under the same pid with
        another program: its maps and memory are no longer those of the
        registers recorded, and a walk of the one with the other would
        give wrong frames.  One ``waitpid`` per stopped thread, which says
        nothing for a thread still in its stop.
        """
        for tid in list(self._stopped):
            try:
                waited, _ = os.waitpid(tid, syscalls.WALL | os.WNOHANG)
            except ChildProcessError:
                waited = tid  # not ours any more: the pid of a program an execve put there
            if waited == 0:
                continue
            self._attached.discard(tid)
            raise self._lost()

    def _lost(self) -> NoSuchProcessError:
        """The error for a held thread that died: its process exited, or another thread execve'd.

        Both take a moment to be seen whole (every thread dead; the execve'd
        thread under the pid, after the old main thread died), so the
        process is looked at for up to :data:`_SETTLE` before saying which.
        """
        deadline = time.perf_counter() + _SETTLE
        dead_looks = 0
        while True:
            # Two looks in a row: in the middle of an execve the old threads are gone and
            # the new program's is not yet under the pid, for an instant.
            dead_looks = dead_looks + 1 if self._all_exited() else 0
            if dead_looks == 2:
                return NoSuchProcessError(f"process {self.pid} exited while it was being stopped")
            if _task_state(self.pid, self.pid) not in ("Z", "X", ""):
                return NoSuchProcessError(
                    f"process {self.pid} replaced its program (execve) while it was being "
                    "stopped; run liveunwind again"
                )
            if time.perf_counter() > deadline:
                return NoSuchProcessError(
                    f"process {self.pid} lost its threads while it was being stopped "
                    "(it exited or called execve)"
                )
            time.sleep(0.001)

    def _exited(self, tid: int) -> bool:
        """Whether the whole process has exited (killed, say) while ``tid`` was waited for.

        Asked between the looks at a thread slow to stop (one /proc read):
        a main thread that dies is reported to its tracer only once every
        other thread is reaped, which the waits for the others here never
        do, so without it a killed process would be waited for until the
        stop timeout, and reported as a thread that did not stop.
        """
        return _task_state(self.pid, tid) in ("Z", "X", "") and self._all_exited()

    def _all_exited(self) -> bool:
        """Whether no thread of the process is alive (each gone or a zombie)."""
        try:
            tids = procfs.list_tids(self.pid)
        except NoSuchProcessError:
            return True
        return all(_task_state(self.pid, other) in ("Z", "X", "") for other in tids)

    def _record_stop(self, tid: int, status: int) -> None:
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
        if len(raw) < self.arch.user_regs_size:
            raise NotTraceableError(
                f"process {self.pid} is a 32-bit process; only 64-bit is supported"
            )
        self._undecoded[tid] = raw
        before = self._before_stop.get(tid)
        self._stopped[tid] = ThreadState(
            tid=tid,
            name=before.name if before is not None else "",
            registers={},  # decoded by threads()
            state=procfs.state_word(before.state if before is not None else "?"),
            pending_signal=pending,
        )

    def _note_not_stopped(self, tid: int) -> None:
        """Records a thread that did not stop in time, with where the kernel holds it."""
        before = self._before_stop.get(tid)
        letter = _task_state(self.pid, tid) or (before.state if before is not None else "?")
        where = procfs.wchan(self.pid, tid)
        self._not_stopped[tid] = ThreadState(
            tid=tid,
            name=before.name if before is not None else "",
            registers={},
            state=(
                f"not stopped after {self.stop_timeout * 1000:.0f} ms: {procfs.state_word(letter)}"
                + (f" in {where}" if where else "")
            ),
            stopped=False,
        )

    def _attach_failure(self, error: OSError, tid: int | None = None) -> Exception:
        name = procfs.process_stat(self.pid).name
        if error.errno == errno.EPERM:
            tracer = procfs.tracer_of(self.pid, tid)
            if tracer:
                tracer_process = procfs.process_of(tracer) or tracer
                tracer_name = _process_name(tracer_process)
                thread = f"thread {tid} of " if tid is not None and tid != self.pid else ""
                return PermissionDeniedError(
                    f"cannot trace {thread}process {self.pid} ({name}): it is already traced by "
                    f"process {tracer_process} ({tracer_name}); detach that tracer first"
                )
            return PermissionDeniedError(
                f"cannot trace process {self.pid} ({name}): permission denied; run as root or "
                f"as its owner with CAP_SYS_PTRACE{_yama_advice()}{_capability_advice()}"
            )
        return AttachError(f"cannot attach to process {self.pid} ({name}): {error.strerror}")

    # -- letting go -----------------------------------------------------------

    def _let_go(self) -> None:
        """Detaches every stopped thread, then ends the tracer thread, which lets go of the rest.

        A lent tracer that detached every thread it seized runs on, for the
        next stop: starting and ending a thread per sample cost 0.15 ms of
        its 1.7 ms of CPU (9 threads, 2 cores).
        """
        tracer, self._tracer = self._tracer, None
        if tracer is None:
            return
        detached = False
        try:
            if self._attached:  # else let go already, by hold()
                tracer.call(self._detach_all)
            detached = not self._left_to_kernel
        finally:
            if not detached or tracer is not self._lent_tracer:
                tracer.finish()
            self._attached = set()
            if self.resumed_at is None:
                self.resumed_at = time.perf_counter()
        try:
            if self._left_to_kernel:
                self._wait_until_let_go(tracer.tid)
        finally:
            self._give_turn()

    def _take_turn(self) -> None:
        """Waits for this stop's turn (once), if it has one to take."""
        if self._turn is not None and not self._holds_turn:
            self._turn.take()
            self._holds_turn = True

    def _give_turn(self) -> None:
        if self._holds_turn:
            self._holds_turn = False
            assert self._turn is not None
            self._turn.give()

    def _detach_all(self) -> None:
        """Lets go of the sleepers first and the threads that ran last.

        Letting go of a thread that runs at once hands it the CPU of the
        thread letting go (the scheduler favours the woken): measured on 2
        cores, the PTRACE_DETACH of the busy thread of 9 took 2.3 ms on average,
        and every thread let go after it stayed stopped that much longer.

        :attr:`resumed_at` is when the last PTRACE_DETACH was made: the
        thread it wakes runs a few µs into the call, and the time after the
        call would count the CPU that thread then took from liveunwind as freeze.
        """
        sleeping, running = self._sleeping_then_running(sorted(self._attached))
        letting_go = None
        for tid in sleeping + running:
            thread = self._stopped.get(tid)
            late = None if thread is not None else self._late_stop(tid)
            if thread is None and late is None:
                # Not stopped: the tracer thread's exit lets it go.
                self._left_to_kernel.add(tid)
                continue
            pending = thread.pending_signal if thread is not None else late or 0
            letting_go = time.perf_counter()
            try:
                syscalls.ptrace(syscalls.PTRACE_DETACH, tid, 0, pending)
            except OSError as error:
                if error.errno == errno.ESRCH and self._late_stop(tid) is not None:
                    letting_go = time.perf_counter()
                    syscalls.ptrace(syscalls.PTRACE_DETACH, tid, 0, pending)
        self._attached = set()
        self.resumed_at = time.perf_counter() if letting_go is None else letting_go
        if not self._left_to_kernel:  # else once the tracer thread's end let go of them
            self._give_turn()

    @staticmethod
    def _late_stop(tid: int) -> int | None:
        """A thread seized but not seen stopped: the signal to hand back if it has stopped since.

        None while it is still not stopped (or is gone).
        """
        try:
            waited, status = os.waitpid(tid, syscalls.WALL | os.WNOHANG)
        except ChildProcessError:
            return None
        if waited == 0 or not os.WIFSTOPPED(status):
            return None
        return os.WSTOPSIG(status) if status >> 16 == 0 else 0

    def _wait_until_let_go(self, tracer_tid: int) -> None:
        """Waits (bounded) until the kernel has detached the threads that never stopped.

        That happens as the tracer thread exits, a moment after it said goodbye.
        """
        deadline = time.perf_counter() + _RELEASE_TIMEOUT
        left, self._left_to_kernel = self._left_to_kernel, set()
        for tid in sorted(left):
            while procfs.tracer_of(self.pid, tid) == tracer_tid:
                if time.perf_counter() > deadline:
                    return
                time.sleep(0.001)

    def _thread_order(self, tid: int) -> tuple[int, int]:
        return (tid != self.pid, tid)

    # -- signals ------------------------------------------------------------

    def _hold_signals(self) -> None:
        def hold(signum: int, _frame: object) -> None:
            self._held_signals.append(signum)

        for signum in _DEFERRED_SIGNALS:
            try:
                # _signal's own call: signal.signal wraps handlers in enums (10 µs a call
                # against 1.2, measured at load 14 on 2 cores), and a profile sets and
                # restores three handlers per sample.
                self._previous_handlers[signum] = _signal.signal(signum, hold)
            except ValueError:  # not the main thread: cannot install handlers
                return

    def _release_signals(self) -> None:
        for signum, handler in self._previous_handlers.items():
            _signal.signal(signum, handler)
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
        """/proc/PID/mem, then PTRACE_PEEKDATA word by word (from the tracer thread).

        /proc/PID/mem is the kernel's window on the target's memory, not a
        file the target names: it is opened by its fixed path and read with
        pread at addresses, without the regular-file rules of :mod:`.files`.
        """
        if self._memory_fd is None:
            try:
                self._memory_fd = os.open(f"/proc/{self.pid}/mem", os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                self._memory_fd = -1
        if self._memory_fd >= 0:
            try:
                data = os.pread(self._memory_fd, PAGE_SIZE, page)
            except OSError:
                return None
            if len(data) == PAGE_SIZE:
                return data
        if self._tracer is None:
            return None
        return self._tracer.call(self._peek_page, page)

    def _peek_page(self, page: int) -> bytes | None:
        tid = next(iter(self._stopped), None)
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


class Tracer:
    """The thread that makes a PtraceProcess's ptrace calls, one call at a time.

    The kernel ties a tracee to the tracer *thread*, and detaches every
    tracee of a thread when that thread exits — also one that never reached
    a stop, which nothing else can let go of (PTRACE_DETACH needs a stopped
    tracee).  So the seizing, waiting, register reads and detaching happen
    on this thread, which ends when the target is let go: no thread of the
    target stays traced by liveunwind, whether it is a command that exits
    at once or a long-running program that uses the API.  Built on
    ``_thread`` (``threading`` costs milliseconds to import).
    """

    def __init__(self) -> None:
        self._wake = _thread.allocate_lock()
        self._wake.acquire()
        self._done = _thread.allocate_lock()
        self._done.acquire()
        self._job: tuple[Callable[..., object], tuple[object, ...]] | None = None
        self._outcome: tuple[bool, object] = (True, None)
        #: The tracer thread's id (TracerPid of the threads it traces).
        self.tid = 0
        self._running = True
        _thread.start_new_thread(self._serve, ())

    def call(self, function: Callable[..., Result], *args: object) -> Result:
        """Runs ``function(*args)`` on the tracer thread; its exception is raised here.

        Called on the tracer thread itself (by work ``PtraceProcess.hold`` runs
        there), it runs the function at once.
        """
        if not self._running:
            raise AttachError("the tracer thread has ended")
        if _thread.get_native_id() == self.tid:
            return function(*args)
        self._job = (function, args)
        self._wake.release()
        self._done.acquire()
        succeeded, value = self._outcome
        self._outcome = (True, None)
        if not succeeded:
            assert isinstance(value, BaseException)
            raise value
        return value  # type: ignore[return-value]

    @property
    def running(self) -> bool:
        """Whether the thread still takes calls (it has not been ended)."""
        return self._running

    def finish(self) -> None:
        """Ends the tracer thread: the kernel detaches whatever it still traces."""
        if self._running:
            self._running = False
            self._job = None
            self._wake.release()
            self._done.acquire()

    def retire(self) -> None:
        """Ends an idle tracer thread (it traces nothing) without waiting for it to end.

        Safe where waiting is not: while the interpreter shuts down, a thread
        cannot run again to say it ended.
        """
        if self._running:
            self._running = False
            self._job = None
            self._wake.release()

    def _run(self, function: Callable[..., object], args: tuple[object, ...]) -> None:
        try:
            self._outcome = (True, function(*args))
        except BaseException as error:  # handed to the caller's thread
            self._outcome = (False, error)

    def _serve(self) -> None:
        self.tid = _thread.get_native_id()
        syscalls.set_timer_slack(round(_TIMER_SLACK * 1e9))
        while True:
            self._wake.acquire()
            job, self._job = self._job, None
            if job is None:
                break
            self._run(*job)
            del job  # an idle tracer keeps nothing of the last job (a session, its files)
            self._done.release()
        self._done.release()


def _stack_pointer_word(arch: Arch) -> int:
    """Which word of ``arch``'s register block holds the stack pointer.

    Found by decoding a block whose every word is its own index, so no
    layout is written twice (every architecture's decoding moves words).
    """
    index = _SP_WORDS.get(arch)
    if index is None:
        count = arch.user_regs_size // 8
        probe = arch.registers_from_user_regs(struct.pack(f"<{count}Q", *range(count)))
        index = _SP_WORDS[arch] = probe[arch.sp]
    return index


#: Architecture → the word of its register block that holds the stack pointer.
_SP_WORDS: dict[Arch, int] = {}
_unpack_word = struct.Struct("<Q").unpack_from


def _is_exiting(pid: int, tid: int) -> bool:
    """True if thread ``tid`` is gone, a zombie, or on its way out (PF_EXITING)."""
    try:
        stat = procfs.read_stat(f"/proc/{pid}/task/{tid}/stat")
    except (OSError, IndexError, ValueError):
        return True
    return stat.state in ("Z", "X") or bool(stat.flags & _PF_EXITING)


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


def _capability_advice() -> str:
    """Root without CAP_SYS_PTRACE is what a container started without it looks like from inside.

    Root is refused another user's process only when it lacks the capability,
    and Docker drops it unless asked: name the option that gives it back.
    """
    if os.geteuid() != 0 or _has_cap_sys_ptrace():
        return ""
    return (
        "; root here lacks CAP_SYS_PTRACE, as in a container started without it: "
        "docker run --cap-add=SYS_PTRACE"
    )


def _has_cap_sys_ptrace() -> bool:
    """Whether CAP_SYS_PTRACE is in this process's effective set; True when unknown (no advice)."""
    try:
        status = read_kernel_file("/proc/self/status", 1 << 16).decode(errors="replace")
    except OSError:
        return True
    for line in status.splitlines():
        if line.startswith("CapEff:"):
            fields = line.split()
            try:
                return bool(int(fields[1], 16) >> _CAP_SYS_PTRACE & 1)
            except (IndexError, ValueError):
                return True
    return True


def _yama_advice() -> str:
    """The end of the permission message: check Yama only where it can be the cause."""
    try:
        scope = read_kernel_file("/proc/sys/kernel/yama/ptrace_scope", 64).decode().strip()
    except OSError:
        return " (Yama is not enabled: there is no kernel.yama.ptrace_scope)"
    if scope == "0":
        return " (kernel.yama.ptrace_scope is 0: Yama adds no restriction)"
    return f", and check kernel.yama.ptrace_scope (now {scope})"
