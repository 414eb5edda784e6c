"""Files a target or a core names are opened only if they are regular files, inside the right root.

Every path liveunwind opens on a target's or a core's word goes through
``targets/files.py``.  These tests hand it the files an attacker would: a
FIFO (``open`` would block forever), a device (``open`` would run its
driver: a watch on the node says whether anything opened it), a directory,
a socket, symlinks that lead out of a root, and cores whose headers point
at 2^63 or ask for 2^22 program headers (crafted from a real kernel core).
"""

from __future__ import annotations

import ctypes
import errno
import gzip
import os
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from liveunwind.backtrace.api import open_core
from liveunwind.errors import CoreFileError
from liveunwind.targets import files
from liveunwind.targets.cores.elfcore import ElfCore
from liveunwind.targets.cores.machocore import MachOCore
from liveunwind.targets.filefinder import open_image
from tests.assertions import assert_one_line_error
from tests.test_core import CRASH, crash, crash_build  # noqa: F401 (crash_build is a fixture)

ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def within(seconds: float) -> Iterator[None]:
    """Fails the test (instead of hanging it) if the block blocks longer than ``seconds``."""

    def expire(_signum: int, _frame: object) -> None:
        raise TimeoutError(f"blocked for more than {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class OpenWatch:
    """inotify IN_OPEN on one path: did anything open it (O_PATH does not count)?"""

    IN_OPEN = 0x20

    def __init__(self, path: Path) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self.fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        assert self.fd >= 0, os.strerror(ctypes.get_errno())
        watch = libc.inotify_add_watch(self.fd, os.fsencode(path), self.IN_OPEN)
        assert watch >= 0, os.strerror(ctypes.get_errno())

    def opened(self) -> bool:
        try:
            return bool(os.read(self.fd, 4096))
        except BlockingIOError:
            return False

    def close(self) -> None:
        os.close(self.fd)


@pytest.fixture
def odd_files(tmp_path: Path) -> Iterator[dict[str, Path]]:
    """One of each kind of file that is not a regular file, by kind."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    device = tmp_path / "null"
    os.mknod(device, stat.S_IFCHR | 0o600, os.makedev(1, 3))  # /dev/null's numbers
    listening = socket.socket(socket.AF_UNIX)
    listening.bind(str(tmp_path / "socket"))
    (tmp_path / "folder").mkdir()
    yield {
        "a FIFO": fifo,
        "a character device": device,
        "a socket": tmp_path / "socket",
        "a directory": tmp_path / "folder",
    }
    listening.close()


# -- the helper ----------------------------------------------------------------------------------


def test_only_regular_files_are_opened(odd_files: dict[str, Path]) -> None:
    for kind, path in odd_files.items():
        with within(2), pytest.raises(files.NotRegularFileError) as raised:
            files.open_file(str(path))
        assert raised.value.kind == kind
        assert str(path) in str(raised.value) and kind in str(raised.value)


def test_a_device_is_never_opened(odd_files: dict[str, Path]) -> None:
    device = odd_files["a character device"]
    watch = OpenWatch(device)
    try:
        with open(device, "rb"):  # the watch sees a real open: it can fail
            pass
        assert watch.opened()
        with pytest.raises(files.NotRegularFileError):
            files.open_file(str(device))
        with pytest.raises(files.NotRegularFileError):
            files.open_in_root(str(device.parent), "/null")
        assert not watch.opened()
    finally:
        watch.close()


def test_reads_are_bounded_by_the_limit_and_by_the_size_fstat_reports(tmp_path: Path) -> None:
    path = tmp_path / "data"
    path.write_bytes(b"x" * 10000)
    with files.open_file(str(path)) as file:
        assert file.read(100) == b"x" * 100
        assert file.read(1 << 30) == b"x" * 10000
        assert file.pread(10, 1 << 63) == b""  # an offset past the end, even past off_t
    # A kernel file says it is empty: read as an untrusted file, it is.
    with files.open_file("/proc/self/status") as status:
        assert status.read(1 << 20) == b""
    assert b"TracerPid" in files.read_kernel_file("/proc/self/status")


def test_an_empty_file_maps_as_empty_bytes(tmp_path: Path) -> None:
    path = tmp_path / "empty"
    path.write_bytes(b"")
    with files.open_file(str(path)) as file:
        assert file.map() == b""
    assert open_image(str(path)) is None


def test_missing_and_unreadable_files_are_file_errors(tmp_path: Path) -> None:
    with pytest.raises(files.FileError) as raised:
        files.open_file(str(tmp_path / "nothing"))
    assert raised.value.errno == errno.ENOENT and "nothing" in str(raised.value)


# -- resolving inside a root ---------------------------------------------------------------------


@pytest.fixture(params=["openat2", "by hand"])
def resolver(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each root test runs with the kernel's RESOLVE_IN_ROOT and with the walk by hand."""
    monkeypatch.setattr(files, "use_openat2", request.param == "openat2")
    return str(request.param)


@pytest.fixture
def planted_root(tmp_path: Path) -> Path:
    """A root whose links try to lead out of it, next to a host file they aim at."""
    (tmp_path / "host-only").write_text("host\n")
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "inside").write_text("inside\n")
    (root / "tmp").mkdir()
    os.mkfifo(root / "tmp" / "fifo")
    links = {
        "to-host": str(tmp_path / "host-only"),  # absolute, names a host file
        "to-inside": "/etc/inside",  # absolute, names a file in the root
        "up-and-out": "../../../../../../../etc/inside",  # .. stops at the root
        "to-fifo": "/tmp/fifo",
        "loop": "/tmp/loop",
        "through-proc": "/proc/self/root" + str(tmp_path / "host-only"),
    }
    for name, target in links.items():
        os.symlink(target, root / "tmp" / name)
    return root


def test_absolute_links_and_dotdot_stay_inside_the_root(planted_root: Path, resolver: str) -> None:
    root = str(planted_root)
    for name in ("to-inside", "up-and-out"):
        with files.open_in_root(root, f"/tmp/{name}") as file:
            assert file.read(100) == b"inside\n", (resolver, name)
    with files.open_in_root(root, "/../../etc/inside") as file:
        assert file.read(100) == b"inside\n"
    for name in ("to-host", "through-proc"):
        with pytest.raises(files.FileError) as raised:
            files.open_in_root(root, f"/tmp/{name}")
        assert raised.value.errno == errno.ENOENT, (resolver, name)
    # Without the root, the same link does lead out: the test can fail.
    assert Path(root, "tmp", "to-host").read_text() == "host\n"


def test_links_in_a_root_to_a_fifo_or_in_a_loop(planted_root: Path, resolver: str) -> None:
    with within(2), pytest.raises(files.NotRegularFileError):
        files.open_in_root(str(planted_root), "/tmp/to-fifo")
    with pytest.raises(files.FileError) as raised:
        files.open_in_root(str(planted_root), "/tmp/loop")
    assert raised.value.errno == errno.ELOOP


# -- cores ---------------------------------------------------------------------------------------


def run_core(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "liveunwind", "core", *args],
        capture_output=True,
        text=True,
        timeout=30,
        cwd="/",
        env=env,
    )


def test_a_core_that_is_not_a_regular_file(odd_files: dict[str, Path]) -> None:
    for kind, path in odd_files.items():
        with within(2), pytest.raises(CoreFileError, match=kind):
            ElfCore.open(str(path))
        with within(2), pytest.raises(CoreFileError, match=kind):
            MachOCore(str(path))


def test_a_core_of_kernel_memory_reads_as_empty() -> None:
    with pytest.raises(CoreFileError, match="empty"):
        ElfCore.open("/proc/self/mem")
    assert_one_line_error(run_core("/proc/self/mem"), 2, "empty")


def test_an_empty_mach_o_core(tmp_path: Path) -> None:
    path = tmp_path / "empty"
    path.write_bytes(b"")
    with pytest.raises(CoreFileError, match="too short"):
        MachOCore(str(path))


@pytest.fixture(scope="module")
def real_core(crash_build: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: F811
    """A core the kernel wrote of crash-O2 leaf, to corrupt."""
    pattern = Path("/proc/sys/kernel/core_pattern").read_text().strip()
    if pattern.startswith("|") or "/" in pattern:
        pytest.skip(f"kernel.core_pattern does not write cores here ({pattern})")
    folder = tmp_path_factory.mktemp("hostile-core")
    return crash(folder, [str(crash_build / "build" / "crash-O2"), "leaf"], glob="core*")


def corrupted(core: Path, folder: Path, edits: dict[int, bytes]) -> Path:
    """A copy of ``core`` with bytes replaced at file offsets."""
    data = bytearray(core.read_bytes())
    for offset, raw in edits.items():
        data[offset : offset + len(raw)] = raw
    path = folder / "corrupt.core"
    path.write_bytes(data)
    return path


def program_headers(core: Path) -> list[tuple[int, int]]:
    """(file offset of the header, p_type) of every program header of ``core``."""
    data = core.read_bytes()
    phoff = struct.unpack_from("<Q", data, 32)[0]
    phentsize, phnum = struct.unpack_from("<HH", data, 54)
    return [
        (phoff + index * phentsize, struct.unpack_from("<I", data, phoff + index * phentsize)[0])
        for index in range(phnum)
    ]


HUGE = struct.pack("<Q", 1 << 63)


def test_offsets_at_and_past_two_to_the_63(real_core: Path, tmp_path: Path) -> None:
    # e_phoff at 2^63: the table is past the end of the file.
    core = corrupted(real_core, tmp_path, {32: HUGE})
    with pytest.raises(CoreFileError, match="truncated inside its program header table"):
        ElfCore.open(str(core))
    assert_one_line_error(run_core(str(core)), 2, "program header table")
    # p_offset of the note segment at 2^63: no notes, so no threads.
    headers = program_headers(real_core)
    note = next(offset for offset, kind in headers if kind == 4)
    core = corrupted(real_core, tmp_path, {note + 8: HUGE})
    with pytest.raises(CoreFileError, match="no thread registers"):
        ElfCore.open(str(core))
    # p_offset of every LOAD at 2^63 - 1: the memory is missing, and said to be.
    loads = [offset for offset, kind in headers if kind == 1]
    core = corrupted(
        real_core, tmp_path, {at + 8: struct.pack("<Q", (1 << 63) - 1) for at in loads}
    )
    with ElfCore.open(str(core)) as space:
        assert any("truncated" in problem for problem in space.problems)
    result = run_core(str(core))
    assert result.returncode in (0, 1) and "Traceback" not in result.stderr, result.stderr


def test_a_compressed_core_with_offsets_past_its_end(real_core: Path, tmp_path: Path) -> None:
    data = bytearray(real_core.read_bytes())
    data[32:40] = HUGE
    path = tmp_path / "core.gz"
    path.write_bytes(gzip.compress(bytes(data), compresslevel=1))
    with pytest.raises(CoreFileError, match="truncated inside its program header table"):
        ElfCore.open(str(path))


def test_pn_xnum_cannot_make_us_allocate_the_table_it_claims(
    real_core: Path, tmp_path: Path
) -> None:
    """PN_XNUM puts the header count in section header 0: 2^22, or 2^20 of 56 bytes."""
    size = real_core.stat().st_size
    shoff = (size + 7) // 8 * 8
    for count, reason in ((1 << 22, "corrupt program header table"), (1 << 20, "truncated")):
        data = bytearray(real_core.read_bytes())
        data[56:58] = struct.pack("<H", 0xFFFF)  # e_phnum = PN_XNUM
        data[40:48] = struct.pack("<Q", shoff)  # e_shoff
        data += bytes(shoff - size) + bytes(44) + struct.pack("<I", count) + bytes(16)
        path = tmp_path / f"xnum-{count}.core"
        path.write_bytes(data)
        tracemalloc.start()
        try:
            with pytest.raises(CoreFileError, match=reason):
                ElfCore.open(str(path))
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 4 << 20, f"{count} headers claimed: {peak} bytes allocated"
        assert_one_line_error(run_core(str(path)), 2, reason)


def test_library_paths_that_are_fifos_or_devices(real_core: Path, tmp_path: Path) -> None:
    """Under --sysroot every file of the core is a FIFO or a device: none is opened."""
    sysroot = tmp_path / "sysroot"
    with ElfCore.open(str(real_core)) as space:
        paths = sorted({m.path for m in space.mappings() if m.is_file})
    assert paths
    watches = []
    for index, path in enumerate(paths):
        planted = sysroot / path.lstrip("/")
        planted.parent.mkdir(parents=True, exist_ok=True)
        if index % 2:
            os.mkfifo(planted)
        else:
            os.mknod(planted, stat.S_IFCHR | 0o600, os.makedev(1, 3))
            watches.append(OpenWatch(planted))
    try:
        with within(10):
            backtrace = open_core(str(real_core), sysroot=str(sysroot))
        assert backtrace.threads[0].frames  # the host's files were used instead
        assert not any(watch.opened() for watch in watches)
    finally:
        for watch in watches:
            watch.close()


@pytest.mark.parametrize("kind", ["a FIFO", "a character device"])
def test_an_executable_replaced_by_a_fifo_or_a_device(
    crash_build: Path,  # noqa: F811
    tmp_path: Path,
    kind: str,
) -> None:
    """The core's own executable path now names a FIFO or a device: said, and not opened."""
    pattern = Path("/proc/sys/kernel/core_pattern").read_text().strip()
    if pattern.startswith("|") or "/" in pattern:
        pytest.skip(f"kernel.core_pattern does not write cores here ({pattern})")
    exe = tmp_path / "crash"
    shutil.copy(crash_build / "build" / "crash-O2", exe)
    core = crash(tmp_path / "cores", [str(exe), "leaf"], glob="core*")
    exe.unlink()
    if kind == "a FIFO":
        os.mkfifo(exe)
    else:
        os.mknod(exe, stat.S_IFCHR | 0o600, os.makedev(1, 3))
    watch = OpenWatch(exe)
    try:
        with within(10):
            backtrace = open_core(str(core))
        assert not watch.opened()
    finally:
        watch.close()
    assert any(f"{exe}: is {kind}, not a regular file" in p for p in backtrace.problems), (
        backtrace.problems
    )
    result = run_core(str(core))
    assert result.returncode in (0, 1) and "Traceback" not in result.stderr, result.stderr
