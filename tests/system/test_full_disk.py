"""A full output disk (issue 29 item 7): one line, exit 74, no partial file, the target as found.

A tmpfs of 64 KiB is mounted for the test and filled to the last block;
liveunwind writes its outputs there — profile's folded stacks and flame
graph (each written beside its name and renamed when whole), and
``pid --json`` whose stdout the test points at a file there.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.interrupts import assert_let_go
from tests.support.paths import ROOT
from tests.support.programs import RunningProgram, start_program

#: docs/cli.md: an output could not be written.
EXIT_OUTPUT = 74


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs with no block left, holding ``old.folded`` written before it filled."""
    folder = tmp_path / "full"
    folder.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        (folder / "old.folded").write_text("main;old 1\n")
        filler = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            while True:
                os.write(filler, b"\0" * 4096)
        except OSError as error:
            assert error.errno == errno.ENOSPC
        finally:
            os.close(filler)
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=True)


@pytest.fixture(scope="module")
def target(testprogs_build: Path) -> Iterator[RunningProgram]:
    with start_program(testprogs_build, "threads-O2") as program:
        yield program


def liveunwind(
    *arguments: str, stdout: int | object = subprocess.PIPE
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "liveunwind", *arguments],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=60,
        cwd="/",
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )


def test_profile_files_on_a_full_disk(full_disk: Path, target: RunningProgram) -> None:
    folded, svg = full_disk / "old.folded", full_disk / "flame.svg"
    result = liveunwind(
        "profile", str(target.pid), "--duration", "0.2",
        "--collapsed-out", str(folded), "--svg", str(svg),
    )  # fmt: skip
    assert result.returncode == EXIT_OUTPUT, result.stderr
    assert result.stderr == (
        f"liveunwind: cannot write {folded}: No space left on device (nothing was written there)\n"
    )
    assert result.stdout == ""  # no report that would name files not written
    # What the name held before is still there, whole; nothing else was left.
    assert folded.read_text() == "main;old 1\n"
    assert sorted(path.name for path in full_disk.iterdir()) == ["filler", "old.folded"]
    assert_let_go(target.pid)
    assert target.thread_states()[target.pid][1] == "S"


def test_pid_stdout_on_a_full_disk(full_disk: Path, target: RunningProgram) -> None:
    output = full_disk / "backtrace.json"
    with open(output, "w") as stream:
        result = liveunwind("pid", str(target.pid), "--json", stdout=stream)
    assert result.returncode == EXIT_OUTPUT, result.stderr
    assert result.stderr == "liveunwind: cannot write the output: No space left on device\n"
    assert output.stat().st_size == 0  # the shell's file: nothing of the document got in
    assert_let_go(target.pid)
    assert target.thread_states()[target.pid][1] == "S"
