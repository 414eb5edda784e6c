"""Work shared by forked worker processes, its results taken back in the order of a serial run.

``liveunwind perf`` walks samples that are independent of each other once
the process state at their time is known, so each of N workers reads the
whole recording (the records that set that state are few) and walks every
N-th sample.  The workers are forked after the file is opened and its
header read: each starts with what the parent had built, and shares its
pages until it writes them.  Item ``i`` of the merged results is item
``i // N`` of worker ``i % N``: what a serial run would have given ``i``-th.

``liveunwind pid`` over many processes (``cli/many.py``) gives each worker
every N-th process; :class:`Turns` lets one worker at a time stop its
process, so that no two targets are ever stopped together.

Each worker sends its items in batches through a pipe of its own, then
its summary, or an error: marshalled where the work says its items and
summary are plain values (numbers, strings, tuples, lists: a many-process
run's pieces), else pickled (``perf``'s items are objects of its own).
``pickle`` costs a cold command 6 ms to import (``re``, ``enum``): the
many-process run pays nothing of it before its workers start.  Marshal's
format is the interpreter's own, and both ends of a pipe are the same
interpreter, forked.  Every wait is bounded: a worker that sends nothing for
:data:`SILENCE` seconds is taken as hung.  A worker that dies, hangs or
fails ends the run with one :class:`WorkerError` line (exit 2); every
worker is then killed and reaped (none is left behind, none a zombie),
and so on every way out, Ctrl-C included.  A worker killed by a signal
ends the run as soon as its pipe closes, whichever worker's items are
awaited: it may have died holding the turn the others wait for.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # the C module under signal (signal.py makes enums)
import gc
import marshal
import os
import select
import struct
import time

from liveunwind.errors import LiveUnwindError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections import deque
    from collections.abc import Callable, Generator, Iterator
    from typing import Any

    #: A worker's work: given its index and the number of workers, its items, then its summary.
    Work = Callable[[int, int], Generator[object, None, object]]
    #: A message made bytes, and bytes made a message again (marshalled or pickled).
    Dumps = Callable[[object], bytes]
    Loads = Callable[[bytes], Any]
else:
    # The C module under collections: collections's body costs a cold command 1.2 ms.
    from _collections import deque

#: Seconds a worker may send nothing before it is taken as hung: far more than a batch
#: takes (a batch of cold samples opening large files: a few seconds).  With
#: DEBUGINFOD_URLS set a worker may be downloading debug files (each allowed 90 s of
#: silence by debuginfod's own rule, and there may be several): SILENCE_DEBUGINFOD.
SILENCE = 60.0
SILENCE_DEBUGINFOD = 600.0
#: Items a worker sends at once, and the seconds it holds a batch before sending it anyway.
BATCH = 512
BATCH_SECONDS = 0.5
#: A frame on a pipe: its length, then the message (marshalled or pickled, as the work says).
_LENGTH = struct.Struct("<I")
_ITEMS, _DONE, _FAILED = 0, 1, 2
#: Bytes read off a pipe at once.
_READ = 1 << 20
#: The signals held back while a worker is forked.
_HELD = {_signal.SIGINT, _signal.SIGTERM}


class WorkerError(LiveUnwindError):
    """A worker died, hung or failed: one line, exit 2 (its own error keeps its exit code)."""


class CannotFork(WorkerError):
    """No worker could be started (too many processes, no memory): the work can be done here."""


def worker_count(asked: int | None) -> int:
    """Workers to use: ``asked``, else one per CPU this process may run on that nothing else
    is running on now (1: none).

    On a machine whose CPUs are busy, workers only add their own reading of
    the file to the run (two workers where other programs kept 1.7 of 2 CPUs
    busy: 1.56 s where one process of main took 1.01).  Busy is what the kernel says
    this instant (``procs_running`` in /proc/stat, this process's thread
    among them): system-wide, so in a container on a busy host this errs
    towards fewer workers, never more.
    """
    if asked is not None:
        return asked
    cpus = len(os.sched_getaffinity(0))
    if cpus == 1:
        return 1
    # The least of three looks a millisecond apart: a thread running for a moment (a kernel
    # thread woken, the shell that started us, the other end of our pipe starting up) is not
    # a busy CPU.  Three looks back to back saw such a one in 2 of 10 runs of a shell loop.
    looks = []
    for look in range(_LOOKS):
        if look:
            time.sleep(_LOOK_APART)
        found = _running()
        if found is not None:
            looks.append(found)
        if found == 0:
            break  # nothing else runs: the least it can be
    return max(1, min(cpus, cpus - min(looks))) if looks else cpus


#: Looks at what runs before the CPUs are called busy, and the seconds between them.
_LOOKS = 3
_LOOK_APART = 0.001


def _running() -> int | None:
    """Threads running or waiting for a CPU now, this one left out (None: not known)."""
    from liveunwind.targets.files import read_kernel_file

    try:
        stat = read_kernel_file("/proc/stat")
    except OSError:
        return None
    for line in stat.splitlines():
        if line.startswith(b"procs_running "):
            try:
                return int(line.split()[1]) - 1
            except ValueError:
                return None
    return None


class Workers:
    """``count`` forked processes, each running ``work(index, count)`` and sending what it yields
    and, once done, what it returns.

    Use as a context manager: leaving it kills and reaps every worker still there.
    """

    def __init__(
        self, count: int, work: Work, *, items: str = "samples", plain: bool = False
    ) -> None:
        """``items``: what the work's items are, for the lines saying a worker failed;
        ``plain``: its items and summary are plain values, sent marshalled (else pickled)."""
        self.count = count
        self.items = items
        self._dumps: Dumps = _marshalled if plain else _pickled
        self._loads: Loads = marshal.loads if plain else _unpickled
        self.pids: list[int] = []
        #: The wait statuses of workers reaped when their pipes closed, by worker.
        self._ended: dict[int, int | None] = {}
        self._fds: list[int] = []
        self._buffers: list[bytearray] = []
        self._pending: list[deque[object]] = []
        #: What each worker's work returned, by worker, once :meth:`results` is done.
        self.summaries: dict[int, object] = {}
        # What the command built is left out of the collector's scans: a scan touches every
        # object, and a page touched is a page each worker copies (two workers on 10,700
        # samples: 5,640 page faults in them, frozen 5,180).
        gc.freeze()
        if len(os.listdir("/proc/self/task")) > 1:
            # A fork copies a lock another thread holds as held, for ever (--lines inflates
            # DWARF on threads of its own): the work is done here instead.
            raise CannotFork("this process runs other threads: a worker forked from it could hang")
        try:
            for index in range(count):
                self._fork(index, work)
        except BaseException:
            self.close()
            raise

    def _fork(self, index: int, work: Work) -> None:
        """Starts worker ``index``.  SIGINT and SIGTERM are blocked across the fork: one that
        came before the worker set its own handlers would run the command's in it."""
        try:
            read_end, write_end = os.pipe()
        except OSError as error:
            raise CannotFork(f"cannot start a worker: {error.strerror}") from None
        _signal.pthread_sigmask(_signal.SIG_BLOCK, _HELD)
        try:
            try:
                pid = os.fork()
            except OSError as error:
                raise CannotFork(f"cannot start a worker: {error.strerror}") from None
            if pid == 0:  # pragma: no cover - the child ends in _serve, never returns
                try:
                    os.close(read_end)
                    for fd in self._fds:
                        os.close(fd)
                    _serve(write_end, work, index, self.count, self._dumps)
                finally:
                    os._exit(70)  # _serve ends the process; this only if it could not start
            # Known before a signal held back can end the command: close() then kills it.
            self.pids.append(pid)
            self._fds.append(read_end)
            self._buffers.append(bytearray())
            self._pending.append(deque())
        except BaseException:
            os.close(read_end)
            raise
        finally:
            os.close(write_end)
            _signal.pthread_sigmask(_signal.SIG_UNBLOCK, _HELD)

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def results(self) -> Iterator[tuple[int, object]]:
        """(worker, item) of every item, item ``i`` from worker ``i % count``, until one runs out.

        Then every worker's summary is read (:attr:`summaries`).
        """
        index = 0
        while True:
            worker = index % self.count
            pending = self._pending[worker]
            while not pending:
                if not self._receive(worker):
                    self._collect_summaries()
                    return
            yield worker, pending.popleft()
            index += 1

    def _collect_summaries(self) -> None:
        """One worker ran out of items: so did every other, which now sends its summary."""
        for worker in range(self.count):
            while worker not in self.summaries:
                if self._pending[worker] or self._receive(worker):
                    raise WorkerError(
                        f"worker {worker + 1} of {self.count} walked more {self.items} than the "
                        "others: the workers did not read the same recording"
                    )

    def _receive(self, worker: int) -> bool:
        """Reads worker's next message: True for items, False for its summary.

        WorkerError when it failed, died, or sent nothing for SILENCE seconds.
        """
        buffer = self._buffers[worker]
        while len(buffer) < _LENGTH.size or len(buffer) < _LENGTH.size + _length(buffer):
            self._read(worker, buffer)
        size = _LENGTH.size + _length(buffer)
        kind, payload = self._loads(bytes(buffer[_LENGTH.size : size]))
        del buffer[:size]
        if kind == _ITEMS:
            self._pending[worker].extend(payload)
            return True
        if kind == _DONE:
            self.summaries[worker] = payload
            return False
        exit_code, message = payload
        error = WorkerError(message)
        error.exit_code = exit_code
        raise error

    def _read(self, worker: int, buffer: bytearray) -> None:
        """Reads what worker sent next into ``buffer``, meanwhile watching the others' pipes
        for their end (see :meth:`_another_ended`)."""
        fd = self._fds[worker]
        silence = SILENCE_DEBUGINFOD if os.environ.get("DEBUGINFOD_URLS") else SILENCE
        deadline = time.monotonic() + silence
        watch = select.poll()
        watch.register(fd, select.POLLIN)
        others = {}
        for other, other_fd in enumerate(self._fds):
            if other != worker and other not in self._ended:
                watch.register(other_fd, 0)  # only its end: POLLHUP, which poll always says
                others[other_fd] = other
        while True:
            left = deadline - time.monotonic()
            events = watch.poll(int(left * 1000) + 1) if left > 0 else []
            if not events:
                raise WorkerError(
                    f"worker {worker + 1} of {self.count} (pid {self.pids[worker]}) sent "
                    f"nothing for {silence:g} s: taken as hung, stopped"
                )
            for ready, _event in events:
                if ready in others:
                    watch.unregister(ready)
                    self._another_ended(others.pop(ready))
            if not any(ready == fd for ready, _event in events):
                continue
            try:
                data = os.read(fd, _READ)
            except InterruptedError:  # pragma: no cover - PEP 475 retries it
                continue
            if data:
                buffer += data
                return
            raise WorkerError(
                f"worker {worker + 1} of {self.count} (pid {self.pids[worker]}) ended "
                f"{self._how_it_ended(worker)} before its {self.items} were done"
            )

    def _another_ended(self, worker: int) -> None:
        """The pipe of a worker whose items are not awaited now closed: it is reaped.

        One that exited sent all it had (its summary, or its error) and is
        read in its turn; one killed by a signal ends the run now.
        """
        pid = self.pids[worker]
        status = self._reap(worker)
        if status is not None and os.WIFSIGNALED(status):
            raise WorkerError(
                f"worker {worker + 1} of {self.count} (pid {pid}) ended "
                f"{self._how_it_ended(worker)} before its {self.items} were done"
            )

    def _reap(self, worker: int) -> int | None:
        """The wait status of a worker whose pipe closed, reaped (None: it did not end)."""
        if worker not in self._ended:
            try:
                _pid, status = _wait(self.pids[worker], time.monotonic() + 1.0)
            except ChildProcessError:
                status = None
            self._ended[worker] = status
            if status is not None:
                self.pids[worker] = 0
        return self._ended[worker]

    def _how_it_ended(self, worker: int) -> str:
        """How a worker whose pipe closed ended (it is reaped)."""
        status = self._reap(worker)
        if status is None:
            return "(its pipe closed)"
        if os.WIFSIGNALED(status):
            import signal

            return f"(killed by {signal.Signals(os.WTERMSIG(status)).name})"
        return f"(exit {os.waitstatus_to_exitcode(status)})"

    def close(self) -> None:
        """Kills every worker still there, reaps it, closes the pipes."""
        for fd in self._fds:
            os.close(fd)
        self._fds = []
        for index, pid in enumerate(self.pids):
            if pid <= 0:
                continue
            try:
                os.kill(pid, _signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            self.pids[index] = 0


class Turns:
    """One worker at a time: a pipe holding one byte, read to take the turn, written to give it.

    Made before the workers are forked, which share it.  A worker that dies
    holding the turn takes the byte with it: the others wait (bounded by
    ``wait``), and the command, which sees that worker's pipe close
    (:meth:`Workers._another_ended`), ends the run first.
    """

    def __init__(self, wait: float = SILENCE) -> None:
        self.wait = wait
        self._read_end, self._write_end = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        os.write(self._write_end, b"T")
        self._held = False

    def take(self) -> None:
        """Waits (bounded) until this worker has the turn."""
        deadline = time.monotonic() + self.wait
        while True:
            try:
                if os.read(self._read_end, 1):
                    self._held = True
                    return
            except BlockingIOError:  # another worker has it (or took it first)
                pass
            left = deadline - time.monotonic()
            if left <= 0:
                raise WorkerError(
                    f"another worker held its turn for {self.wait:g} s: taken as hung"
                )
            select.select([self._read_end], [], [], left)

    def give(self) -> None:
        """Gives the turn back, if this worker holds it."""
        if self._held:
            self._held = False
            os.write(self._write_end, b"T")

    def close(self) -> None:
        for fd in (self._read_end, self._write_end):
            os.close(fd)


def _length(buffer: bytearray) -> int:
    return int(_LENGTH.unpack_from(buffer)[0])


def _wait(pid: int, deadline: float) -> tuple[int, int | None]:
    """(pid, its wait status), waiting until ``deadline`` at most (then status None)."""
    while True:
        found, status = os.waitpid(pid, os.WNOHANG)
        if found:
            return found, status
        if time.monotonic() >= deadline:
            return pid, None
        time.sleep(0.005)


def _serve(fd: int, work: Work, index: int, count: int, dumps: Dumps) -> None:
    """The worker: runs ``work``, sends its items in batches, then its summary; never returns."""
    status = 0
    parent = os.getppid()
    # Ctrl-C reaches the whole process group: the command alone says what it means (and
    # kills its workers); a SIGTERM sent to a worker ends it, as one sent to any process.
    _signal.signal(_signal.SIGINT, _signal.SIG_IGN)
    _signal.signal(_signal.SIGTERM, _signal.SIG_DFL)
    _signal.pthread_sigmask(_signal.SIG_UNBLOCK, _HELD)
    _end_with_parent(parent)
    try:
        batch: list[object] = []
        sent_at = time.monotonic()
        items = work(index, count)
        while True:
            try:
                batch.append(next(items))
            except StopIteration as done:
                summary = done.value
                break
            if len(batch) >= BATCH or time.monotonic() - sent_at > BATCH_SECONDS:
                _send(fd, dumps((_ITEMS, batch)))
                batch, sent_at = [], time.monotonic()
        if batch:
            _send(fd, dumps((_ITEMS, batch)))
        _send(fd, dumps((_DONE, summary)))
    except LiveUnwindError as error:
        status = error.exit_code
        _send_quietly(fd, dumps((_FAILED, (error.exit_code, str(error)))))
    except BaseException as error:  # a bug: still one line, not a worker's traceback
        status = 70
        _send_quietly(fd, dumps((_FAILED, (2, f"worker {index + 1} of {count} failed: {error!r}"))))
    finally:
        os._exit(status)


def _end_with_parent(parent: int) -> None:
    """The worker is killed when the command ends (even by SIGKILL), however busy it is."""
    # ctypes's CDLL made from _ctypes: the ctypes package costs each worker 2.5 ms
    from liveunwind.targets.live.ffi import CDLL

    pr_set_pdeathsig = 1
    prctl: Callable[[int, int], int] = CDLL(None, use_errno=True).prctl  # type: ignore[assignment]
    prctl(pr_set_pdeathsig, _signal.SIGKILL)
    if os.getppid() != parent:  # the command ended before that was asked
        os._exit(0)


def _marshalled(message: object) -> bytes:
    return marshal.dumps(message)  # type: ignore[arg-type]  # plain values, as the work said


def _pickled(message: object) -> bytes:
    import pickle

    return pickle.dumps(message, pickle.HIGHEST_PROTOCOL)


def _unpickled(data: bytes) -> object:
    import pickle

    return pickle.loads(data)


def _send(fd: int, message: bytes) -> None:
    """Writes one message, after its length."""
    data = _LENGTH.pack(len(message)) + message
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _send_quietly(fd: int, message: bytes) -> None:
    # Not contextlib.suppress: contextlib costs a cold command 2.2 ms to import.
    try:  # noqa: SIM105
        _send(fd, message)
    except OSError:
        pass  # the parent is gone or stopped reading: nothing to tell
