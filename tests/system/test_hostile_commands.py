"""The commands and the API facing hostile inputs: the cases of issue 14 round 1 left to them.

Every path a command is given or finds goes through ``targets/files.py``:
``liveunwind core`` and ``unwind-info`` on a FIFO end at once (they blocked
in ``open`` before looking for a Mach-O magic), a device is never opened
(an inotify watch says so), and so for Mach-O images and separate debug
files.  A thread that cannot stop is reported as such — no invented frame —
and the caps on stack copies are flags whose cuts the report states.  The
API alone on such files, and Ctrl-C inside the command, are
tests/unit/test_hostile_commands.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest

from liveunwind.backtrace.api import attach
from liveunwind.frames import StopReason
from tests.support.assertions import assert_one_line_error
from tests.support.hostile import (
    OpenWatch,
    assert_untraced,
    planted_fifo_and_device,
    states,
    within,
)
from tests.support.paths import ROOT
from tests.support.programs import RunningProgram, start_command
from tests.support.waits import wait_until

SCHEMA = json.loads((ROOT / "liveunwind/cli/schemas/backtrace.schema.json").read_text())


def run_cli(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "liveunwind", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd="/",
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )


@pytest.fixture
def fifo_and_device(tmp_path: Path) -> Iterator[tuple[Path, Path, OpenWatch]]:
    """A FIFO, a device with /dev/null's numbers, and a watch on the device."""
    with planted_fifo_and_device(tmp_path) as planted:
        yield planted


# -- files given on the command line --------------------------------------------------------------


@pytest.mark.parametrize("command", ["core", "unwind-info"])
def test_a_fifo_or_a_device_given_to_a_command(
    fifo_and_device: tuple[Path, Path, OpenWatch], command: str
) -> None:
    fifo, device, watch = fifo_and_device
    for path, kind in ((fifo, "a FIFO"), (device, "a character device")):
        started = time.monotonic()
        result = run_cli(command, str(path), timeout=10)
        assert time.monotonic() - started < 5
        assert_one_line_error(result, 2, str(path), f"is {kind}, not a regular file")
    assert not watch.opened()


def test_unwind_info_on_an_unknown_machine_is_a_bad_file_not_a_usage_error(
    testprogs_build: Path, tmp_path: Path
) -> None:
    data = bytearray((testprogs_build / "threads-O2").read_bytes())
    data[18:20] = (0x9999).to_bytes(2, "little")  # e_machine
    path = tmp_path / "foreign"
    path.write_bytes(data)
    assert_one_line_error(run_cli("unwind-info", str(path)), 2, "unsupported ELF machine 39321")


def test_a_mach_o_image_is_read_through_the_inode_that_was_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The image is read from the file that was checked, not from whatever is at its path after."""
    from liveunwind.modules import macho

    binary = ROOT / "testprogs/macho/build/chain-x86_64"
    if not binary.exists():
        pytest.skip("testprogs/macho is not built (make testprogs)")
    copy = tmp_path / "chain"
    shutil.copy(binary, copy)
    opened = []
    real_open = macho.open_file

    def open_then_swap(name: str) -> object:
        file = real_open(name)
        opened.append(name)
        copy.unlink()  # swapped for a FIFO after the check: the reader must not notice
        os.mkfifo(copy)
        return file

    monkeypatch.setattr(macho, "open_file", open_then_swap)
    with within(5):
        image = macho.MachOImage(str(copy))
    assert opened == [str(copy)] and copy.is_fifo()
    assert image.arch.name == "x86_64" and image.compact_table is not None
    assert len(image.symbols) > 0


# -- a thread that cannot stop --------------------------------------------------------------------


@pytest.fixture
def vforker(testprogs_build: Path) -> Iterator[RunningProgram]:
    program = start_command([str(testprogs_build / "vforker"), "30"])
    try:
        wait_until(lambda: states(program.pid).get(program.pid, ("",))[0] == "D", what="vfork")
        yield program
    finally:
        program.stop()


def test_a_thread_that_did_not_stop_has_no_frames(vforker: RunningProgram) -> None:
    before = states(vforker.pid)
    result = run_cli("pid", str(vforker.pid), "--stop-timeout", "0.1")
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    main = result.stdout.split("\n\n")[0]
    assert main.splitlines() == [
        main.splitlines()[0],
        "  -- thread did not stop: no registers, so no frames (INCOMPLETE)",
    ]
    assert "(not stopped after 100 ms: disk sleep" in main.splitlines()[0]
    document = json.loads(run_cli("pid", str(vforker.pid), "--json").stdout)
    jsonschema.Draft202012Validator(SCHEMA).validate(document)
    thread = next(t for t in document["threads"] if t["tid"] == vforker.pid)
    assert thread["stop_reason"] == "thread did not stop" and thread["frames"] == []
    assert thread["stop_detail"].startswith("not stopped after 500 ms: disk sleep")
    assert not thread["complete"] and not document["complete"]
    others = [t for t in document["threads"] if t["tid"] != vforker.pid]
    assert others and all(t["complete"] for t in others)
    backtrace = attach(vforker.pid, stop_timeout=0.05)
    main_thread = next(t for t in backtrace.threads if t.tid == vforker.pid)
    assert main_thread.stop_reason is StopReason.NOT_STOPPED and not main_thread.frames
    assert "not stopped after 50 ms" in main_thread.stop_detail
    assert states(vforker.pid) == before


@pytest.mark.parametrize(
    ("flag", "value", "words"),
    [
        ("--stop-timeout", "0", "more than 0 seconds"),
        ("--stop-timeout", "-1", "must not be negative"),
        ("--stop-timeout", "soon", "not a number of seconds"),
        ("--total-stack-cap", "0", "at least 1 byte"),
        ("--total-stack-cap", "lots", "not a number"),
    ],
)
def test_bad_flag_values_are_usage_errors(flag: str, value: str, words: str) -> None:
    assert_one_line_error(run_cli("pid", str(os.getpid()), flag, value), 64, flag, words)


# -- the total stack cap --------------------------------------------------------------------------


def test_what_the_total_stack_cap_cut_is_in_the_report(run_program) -> None:
    program = run_program("threads-O2")
    backtrace = attach(program.pid, total_cap=8192)
    cut = [problem for problem in backtrace.problems if "for all threads together" in problem]
    assert len(cut) == len(backtrace.threads), backtrace.problems
    assert all("the rest was read from the process after it ran again" in p for p in cut)
    assert backtrace.complete  # the rest of each stack was read live: nothing lost here
    assert not any("together" in p for p in attach(program.pid).problems)
    result = run_cli("pid", str(program.pid), "--total-stack-cap", "8192")
    assert result.returncode == 0, result.stderr
    notes = [line for line in result.stdout.splitlines() if line.startswith("note: thread ")]
    assert len(notes) == len(backtrace.threads)
    assert "(the cap of 8 KiB for all threads together)" in notes[0]
    assert_untraced(program.pid)
