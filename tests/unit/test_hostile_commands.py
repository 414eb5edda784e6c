"""The API facing hostile files it is handed, and Ctrl-C at an awkward moment: nothing run.

A Mach-O image or a separate debug file that is a FIFO or a device is never
opened (an inotify watch says so), ``open_elf`` says what is wrong, and a
Ctrl-C while a class is defined is an interrupt.  The same through the
command, and targets that cannot stop, are tests/system/test_hostile_commands.py.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from liveunwind.errors import FormatError
from liveunwind.modules import debuginfo
from liveunwind.targets import files
from tests.support.hostile import OpenWatch, planted_fifo_and_device, within


@pytest.fixture
def fifo_and_device(tmp_path: Path) -> Iterator[tuple[Path, Path, OpenWatch]]:
    """A FIFO, a device with /dev/null's numbers, and a watch on the device."""
    with planted_fifo_and_device(tmp_path) as planted:
        yield planted


def test_a_mach_o_image_that_is_not_a_regular_file(
    fifo_and_device: tuple[Path, Path, OpenWatch],
) -> None:
    from liveunwind.modules.macho import MachOImage

    fifo, device, watch = fifo_and_device
    for path, kind in ((fifo, "a FIFO"), (device, "a character device")):
        with within(2), pytest.raises(FormatError, match=f"is {kind}, not a regular file"):
            MachOImage(str(path))
    assert not watch.opened()


def test_a_device_where_a_debug_file_should_be_is_never_opened(
    fifo_and_device: tuple[Path, Path, OpenWatch], tmp_path: Path
) -> None:
    _, device, watch = fifo_and_device
    build_id = bytes.fromhex("0123456789abcdef")
    planted = tmp_path / "debug" / ".build-id" / "01" / "23456789abcdef.debug"
    planted.parent.mkdir(parents=True)
    os.rename(device, planted)
    problems: list[str] = []
    assert debuginfo.by_build_id(build_id, [str(tmp_path / "debug")], problems) is None
    assert problems == [f"{planted}: is a character device, not a regular file"]
    assert not watch.opened()
    # Absent files are how a search ends: no problem said.
    problems.clear()
    assert debuginfo.by_build_id(build_id, [str(tmp_path / "nowhere")], problems) is None
    assert problems == []


def test_open_elf_says_what_is_wrong(tmp_path: Path) -> None:
    (tmp_path / "text").write_text("hello\n")
    (tmp_path / "empty").write_bytes(b"")
    with pytest.raises(FormatError, match="not an ELF file"):
        files.open_elf(str(tmp_path / "text"))
    with pytest.raises(FormatError, match="not an ELF file"):
        files.open_elf(str(tmp_path / "empty"))
    with pytest.raises(files.FileError) as raised:
        files.open_elf(str(tmp_path / "missing"))
    assert raised.value.errno in files.ABSENT


# -- Ctrl-C -------------------------------------------------------------------------------------


def test_ctrl_c_while_a_class_is_defined_is_an_interrupt(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Python 3.11 wraps it in a RuntimeError (a lazy import defining a class with a
    cached_property, as ModuleMap does); it printed a traceback before."""
    from liveunwind import cli

    def interrupted_class_body(argv: object) -> int:
        class Interrupting:
            def __set_name__(self, owner: type, name: str) -> None:
                raise KeyboardInterrupt

        class Owner:
            attribute = Interrupting()

        return 0

    monkeypatch.setattr(cli, "_run", interrupted_class_body)
    assert cli.main([]) == cli.EXIT_INTERRUPTED
    assert capsys.readouterr().err == "liveunwind: interrupted\n"

    def other_runtime_error(argv: object) -> int:
        raise RuntimeError("not an interrupt")

    monkeypatch.setattr(cli, "_run", other_runtime_error)
    with pytest.raises(RuntimeError, match="not an interrupt"):
        cli.main([])
