"""Files a target or a core names are opened only if they are regular files, inside the right root.

Every path liveunwind opens on a target's or a core's word goes through
``targets/files.py``.  These tests hand it the files an attacker would: a
FIFO (``open`` would block forever), a device (``open`` would run its
driver: a watch on the node says whether anything opened it), a directory,
a socket, symlinks that lead out of a root.  Cores whose headers point at
2^63 or ask for 2^22 program headers (crafted from a real kernel core) are
tests/system/test_hostile_files.py.
"""

from __future__ import annotations

import errno
import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from liveunwind.errors import CoreFileError
from liveunwind.targets import files
from liveunwind.targets.cores.elfcore import ElfCore
from liveunwind.targets.cores.machocore import MachOCore
from liveunwind.targets.filefinder import open_image
from tests.support.hostile import OpenWatch, within


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


def test_an_empty_file_reads_as_empty_bytes(tmp_path: Path) -> None:
    path = tmp_path / "empty"
    path.write_bytes(b"")
    contents = files.FileContents(files.open_file(str(path)))
    contents.fill(0, 100)
    assert contents.data == b""
    assert open_image(str(path)) is None


def test_file_contents_are_read_as_far_as_asked(tmp_path: Path) -> None:
    path = tmp_path / "data"
    chunk = files.FileContents.CHUNK
    payload = bytes(range(256)) * (chunk * 3 // 256) + b"tail"
    path.write_bytes(payload)
    contents = files.FileContents(files.open_file(str(path)))
    assert len(contents.data) == len(payload)
    contents.fill(chunk + 10, 20)  # the second chunk only
    assert contents.data[chunk : 2 * chunk] == payload[chunk : 2 * chunk]
    assert contents.data[:chunk] == bytes(chunk)  # not read: still zeros
    contents.fill(0, 1 << 40)  # clipped to the file
    assert contents.data[:] == payload


def test_a_file_truncated_after_it_was_opened_is_an_error_not_sigbus(tmp_path: Path) -> None:
    """A mapping of the file would have raised SIGBUS here and killed the test process."""
    path = tmp_path / "shrinks"
    chunk = files.FileContents.CHUNK
    path.write_bytes(b"a" * chunk + b"b" * chunk * 2)
    contents = files.FileContents(files.open_file(str(path)))
    contents.fill(0, 10)
    os.truncate(path, chunk + 100)
    with pytest.raises(files.FileChangedError, match="truncated to 65636 bytes"):
        contents.fill(2 * chunk, 10)
    assert contents.data[:10] == b"a" * 10  # what was read stays
    os.truncate(path, 0)
    with pytest.raises(files.FileChangedError):  # and every later read fails the same way
        contents.fill(chunk, 10)


def test_a_file_written_in_place_after_it_was_opened_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "rewritten"
    path.write_bytes(b"a" * 1000)
    contents = files.FileContents(files.open_file(str(path)))
    with open(path, "r+b") as writer:  # same size, same inode: only the mtime tells
        writer.write(b"b" * 1000)
    os.utime(path, ns=(1, 1))  # whatever the clock's granularity, the mtime differs
    with pytest.raises(files.FileChangedError, match="written to"):
        contents.fill(0, 10)


def test_an_elf_image_of_a_file_truncated_under_it_raises_format_error(tmp_path: Path) -> None:
    """ElfImage reads the section headers through the file's contents: a FormatError, not SIGBUS."""
    import struct

    from liveunwind.errors import FormatError

    shoff = 4 * files.FileContents.CHUNK
    # ident; type, machine, version, entry, phoff, shoff, flags, sizes and counts.
    ident = struct.pack("<4sBBBB8x", b"\x7fELF", 2, 1, 1, 0)
    header = ident + struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, shoff, 0, 64, 0, 0, 64, 2, 1)
    names = b"\0.text\0"
    sections = bytes(64) + struct.pack(
        "<IIQQQQIIQQ", 1, 3, 0, 0, shoff - 64, len(names), 0, 0, 1, 0
    )
    path = tmp_path / "lib.so"
    path.write_bytes(header.ljust(shoff - 64, b"\0") + names.ljust(64, b"\0") + sections)
    assert list(files.open_elf(str(path)).sections) == [".text"]
    image = files.open_elf(str(path))
    os.truncate(path, 4096)
    with pytest.raises(FormatError, match="truncated"):
        image.sections  # noqa: B018 (read for its exception)


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


def test_a_core_that_is_not_a_regular_file(odd_files: dict[str, Path]) -> None:
    for kind, path in odd_files.items():
        with within(2), pytest.raises(CoreFileError, match=kind):
            ElfCore.open(str(path))
        with within(2), pytest.raises(CoreFileError, match=kind):
            MachOCore(str(path))


def test_an_empty_mach_o_core(tmp_path: Path) -> None:
    path = tmp_path / "empty"
    path.write_bytes(b"")
    with pytest.raises(CoreFileError, match="too short"):
        MachOCore(str(path))
