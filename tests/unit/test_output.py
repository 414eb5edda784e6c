"""Files the command writes whole or not at all (``liveunwind/cli/output.py``), in tmp_path.

A full disk against the real command is tests/system/test_full_disk.py.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from liveunwind.cli.output import AtomicFile
from liveunwind.errors import UsageError


def test_the_name_gets_the_whole_file_only_when_committed(tmp_path: Path) -> None:
    target = tmp_path / "stacks.folded"
    target.write_text("old\n")
    output = AtomicFile(str(target))
    (temporary,) = [path for path in tmp_path.iterdir() if path != target]
    assert temporary.name.startswith(".stacks.folded.") and temporary.name.endswith(".part")
    assert target.read_text() == "old\n"  # begun, not yet written: the old file stands
    output.commit("main;f 1\n")
    assert target.read_text() == "main;f 1\n"
    assert list(tmp_path.iterdir()) == [target]
    mask = os.umask(0)
    os.umask(mask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~mask


def test_discarded_leaves_the_old_file_and_nothing_else(tmp_path: Path) -> None:
    target = tmp_path / "flame.svg"
    target.write_text("<svg/>")
    output = AtomicFile(str(target))
    output.discard()
    output.discard()  # twice is harmless
    assert target.read_text() == "<svg/>" and list(tmp_path.iterdir()) == [target]


def test_a_folder_that_cannot_be_written_fails_at_once(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"cannot write .*missing/x\.svg"):
        AtomicFile(str(tmp_path / "missing" / "x.svg"))


def test_a_symbolic_link_keeps_pointing_at_the_file_it_names(tmp_path: Path) -> None:
    real, link = tmp_path / "real.folded", tmp_path / "link.folded"
    real.write_text("old\n")
    link.symlink_to(real)
    AtomicFile(str(link)).commit("new\n")
    assert link.is_symlink() and real.read_text() == "new\n"


def test_a_pipe_is_written_straight_through_not_replaced(tmp_path: Path) -> None:
    """``--collapsed-out >(flamegraph.pl)`` or /dev/stdout: no rename over it."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
    reader.start()
    output = AtomicFile(str(fifo))  # opens the pipe: the reader is there
    output.commit("main;f 1\n")
    reader.join(timeout=10)
    assert received == [b"main;f 1\n"]
    assert fifo.is_fifo() and sorted(tmp_path.iterdir()) == [fifo]
