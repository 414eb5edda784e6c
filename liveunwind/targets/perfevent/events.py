"""The kernel's sampling events of one process: ``perf_event_open(2)`` through ctypes.

What is asked for (``perf_event_attr``): the software CPU clock
(``PERF_COUNT_SW_CPU_CLOCK``) at a frequency, user space only, each sample
with its ip, pid/tid, time, CPU, period, the user registers (a mask of the
architecture's perf register numbers) and a copy of the user stack from the
stack pointer up (``sample_stack_user`` bytes); and the side records a
later unwind needs: ``mmap2`` (a file mapped, with its inode and build-id
or device), ``comm`` (a thread's name) and ``task`` (fork and exit).

Every thread of the process, and every thread started later, must be
sampled.  ``inherit`` gives new threads the event of the thread that
started them, but the kernel refuses to map the ring buffer of an inherited
event opened for any CPU (``cpu == -1``: every child would write into one
buffer; ``perf_mmap`` returns EINVAL).  So, as ``perf record -p`` does, one
event is opened per thread *and CPU*, inherited; on each CPU the first
event's buffer is mapped and every other event of that CPU writes into it
(``PERF_EVENT_IOC_SET_OUTPUT``, allowed between events of one CPU).  An
inherited event writes into its parent's buffer, so a new thread's samples
reach the ring of the CPU it runs on.  A thread started while the events
are being opened is found by listing the threads again until the list
holds no thread without events (at most LIST_ROUNDS times).

Events are opened disabled and enabled together once every ring exists.
Each file descriptor is closed by :meth:`ProcessEvents.close`, also when
opening fails half-way.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import resource
import struct

from liveunwind.errors import NoSuchProcessError, PermissionDeniedError, TargetError
from liveunwind.formats import perfevents
from liveunwind.targets.files import read_kernel_file
from liveunwind.targets.live.procfs import list_tids

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

#: What every sample holds, in the order the kernel writes it.
SAMPLE_TYPE = (
    perfevents.SAMPLE_IP
    | perfevents.SAMPLE_TID
    | perfevents.SAMPLE_TIME
    | perfevents.SAMPLE_CPU
    | perfevents.SAMPLE_PERIOD
    | perfevents.SAMPLE_REGS_USER
    | perfevents.SAMPLE_STACK_USER
)

# The flag bits of perf_event_attr's bit field (its ninth 64-bit word).
_DISABLED = 1 << 0
_INHERIT = 1 << 1
_EXCLUDE_KERNEL = 1 << 5
_EXCLUDE_HV = 1 << 6
_MMAP = 1 << 8
_COMM = 1 << 9
_TASK = 1 << 13
_WATERMARK = 1 << 14
_MMAP2 = 1 << 23
_FLAGS = (
    _DISABLED
    | _INHERIT
    | _EXCLUDE_KERNEL
    | _EXCLUDE_HV
    | _MMAP
    | _COMM
    | perfevents.FLAG_FREQ
    | _TASK
    | _WATERMARK
    | perfevents.FLAG_SAMPLE_ID_ALL
    | _MMAP2
)
#: PERF_ATTR_SIZE_VER5 (Linux 4.1): every field used here, and accepted by every kernel since.
ATTR_SIZE = 112

# ioctls: _IO('$', n).
IOC_ENABLE = 0x2400
IOC_DISABLE = 0x2401
IOC_SET_OUTPUT = 0x2405
PERF_FLAG_FD_CLOEXEC = 1 << 3

#: Bytes of stack each sample copies unless asked otherwise: perf's default
#: (``--call-graph dwarf``).
DEFAULT_STACK_SIZE = 8192
#: The most a sample can copy: a record's size is a 16-bit field, and the
#: registers and the other fields need their share of it.
MAX_STACK_SIZE = 65528
#: Times the thread list is read again for threads started while their
#: siblings' events were being opened.
LIST_ROUNDS = 10
#: Events (threads × CPUs) one profile opens at most: a file descriptor each.
MAX_EVENTS = 65536

_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long


def attr_bytes(*, rate: int, regs_mask: int, stack_size: int, wakeup_bytes: int) -> bytes:
    """The ``perf_event_attr`` of the CPU-clock sampling event, packed (ATTR_SIZE bytes)."""
    return struct.pack(
        "<IIQQQQQIIQQQQIiQIHH",
        perfevents.TYPE_SOFTWARE,
        ATTR_SIZE,
        perfevents.SW_CPU_CLOCK,
        rate,  # sample_freq (freq is set)
        SAMPLE_TYPE,
        0,  # read_format
        _FLAGS,
        wakeup_bytes,  # wakeup_watermark: poll says readable once this much is written
        0,  # bp_type
        0,  # config1
        0,  # config2
        0,  # branch_sample_type
        regs_mask,  # sample_regs_user
        stack_size,  # sample_stack_user
        0,  # clockid
        0,  # sample_regs_intr
        0,  # aux_watermark
        0,  # sample_max_stack
        0,  # reserved
    )


def check_stack_size(size: int) -> int:
    """``--stack-size``: a multiple of 8 from 8 to MAX_STACK_SIZE (the kernel's rules)."""
    if not 8 <= size <= MAX_STACK_SIZE or size % 8:
        raise ValueError(f"must be a multiple of 8 from 8 to {MAX_STACK_SIZE}")
    return size


def online_cpus() -> list[int]:
    """The CPUs the kernel has online (``/sys/devices/system/cpu/online``: ``0-3,8``)."""
    text = read_kernel_file("/sys/devices/system/cpu/online", 4096).decode("ascii", "replace")
    cpus: list[int] = []
    for part in text.strip().split(","):
        first, _, last = part.partition("-")
        if first.isdigit() and (not last or last.isdigit()):
            cpus.extend(range(int(first), int(last or first) + 1))
    if not cpus:
        raise TargetError(f"cannot read the online CPUs from /sys: {text.strip()!r}")
    return cpus[:MAX_EVENTS]


class ProcessEvents:
    """The events of every thread of ``pid`` on every online CPU, one output per CPU.

    ``leaders`` maps each CPU to the descriptor whose ring its events write
    into; ``map_ring(fd)`` maps it as soon as it is opened (the kernel
    redirects another event only into a buffer that exists).  The events
    start disabled: :meth:`enable` once all are open.
    """

    def __init__(
        self, pid: int, attr: bytes, syscall_number: int, map_ring: Callable[[int], None]
    ) -> None:
        self.pid = pid
        self._map_ring = map_ring
        self._attr = ctypes.create_string_buffer(attr, len(attr))
        self._syscall_number = syscall_number
        self.fds: list[int] = []
        self.leaders: dict[int, int] = {}
        self._threads: set[int] = set()
        try:
            self._cpus = online_cpus()
            _allow_descriptors(len(self._cpus) * (len(list_tids(pid)) + 8))
            self._open_every_thread()
        except BaseException:
            self.close()
            raise

    @property
    def threads(self) -> int:
        """Threads events were opened for (those started later inherit them)."""
        return len(self._threads)

    def _open_every_thread(self) -> None:
        for _ in range(LIST_ROUNDS):
            new = [tid for tid in list_tids(self.pid) if tid not in self._threads]
            if not new:
                return
            for tid in new:
                if self._open_thread(tid):
                    self._threads.add(tid)
        # Still new threads after LIST_ROUNDS: each was started by a thread that
        # already had events by the last round, so it inherited them.

    def _open_thread(self, tid: int) -> bool:
        """Opens ``tid``'s event on every CPU; False if the thread ended first."""
        for cpu in self._cpus:
            if len(self.fds) >= MAX_EVENTS:
                raise TargetError(
                    f"process {self.pid} has too many threads to sample: at most "
                    f"{MAX_EVENTS} events (threads × CPUs)"
                )
            fd = _syscall(
                self._syscall_number,
                self._attr,
                ctypes.c_int(tid),
                ctypes.c_int(cpu),
                ctypes.c_int(-1),
                ctypes.c_ulong(PERF_FLAG_FD_CLOEXEC),
            )
            if fd < 0:
                code = ctypes.get_errno()
                if code == errno.ESRCH and tid != self.pid:
                    return False  # the thread ended: its siblings go on
                raise open_error(code, self.pid)
            self.fds.append(fd)
            leader = self.leaders.setdefault(cpu, fd)
            if leader == fd:
                self._map_ring(fd)  # SET_OUTPUT needs the buffer to exist
            else:
                fcntl.ioctl(fd, IOC_SET_OUTPUT, leader)
        return True

    def enable(self) -> None:
        for fd in self.fds:
            fcntl.ioctl(fd, IOC_ENABLE, 0)

    def disable(self) -> None:
        """Stops sampling (what is in the rings stays there to be read)."""
        for fd in self.fds:
            fcntl.ioctl(fd, IOC_DISABLE, 0)

    def close(self) -> None:
        fds, self.fds, self.leaders = self.fds, [], {}
        for fd in fds:
            os.close(fd)


def _allow_descriptors(wanted: int) -> None:
    """Raises the soft limit of open files towards the hard one when ``wanted`` more are needed."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and wanted + 64 > soft:
        target = hard if hard == resource.RLIM_INFINITY else min(hard, max(soft, wanted + 64))
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def paranoid_level() -> str:
    """``kernel.perf_event_paranoid``, or "?" where it cannot be read."""
    try:
        return read_kernel_file("/proc/sys/kernel/perf_event_paranoid", 64).decode().strip()
    except OSError:
        return "?"


def open_error(code: int, pid: int) -> TargetError:
    """The one line a refused ``perf_event_open`` gives, naming the fix."""
    if code == errno.ESRCH:
        return NoSuchProcessError(f"process {pid} has exited")
    if code in (errno.EACCES, errno.EPERM):
        return PermissionDeniedError(
            f"the kernel refused to sample process {pid} (perf_event_open: "
            f"{os.strerror(code)}; kernel.perf_event_paranoid is {paranoid_level()}): sample "
            "it as its own user with kernel.perf_event_paranoid at most 2, or as root (with "
            "CAP_PERFMON, and CAP_SYS_PTRACE for another user's process); in a container, "
            "allow perf_event_open in its seccomp profile and add CAP_PERFMON"
        )
    if code == errno.ENOSYS:
        return TargetError(
            "perf_event_open is not implemented here (ENOSYS: a kernel built without "
            "CONFIG_PERF_EVENTS, or an emulator such as QEMU's user mode): use the "
            "wall-clock mode (profile without --on-cpu)"
        )
    if code in (errno.ENOENT, errno.EOPNOTSUPP, errno.ENODEV):
        return TargetError(
            f"this kernel cannot sample user stacks (perf_event_open: {os.strerror(code)}): "
            "it needs CONFIG_PERF_EVENTS with user register and stack sampling; "
            "use the wall-clock mode (profile without --on-cpu)"
        )
    if code in (errno.EMFILE, errno.ENFILE):
        return TargetError(
            f"too many open files to sample process {pid} (one per thread and CPU): "
            "raise the limit (ulimit -n)"
        )
    return TargetError(f"cannot sample process {pid}: perf_event_open: {os.strerror(code)}")
