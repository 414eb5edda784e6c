"""Many cores, without a core: crash signatures of made-up backtraces, systemd-coredump's names
and attributes on files this test writes, and the cores document against the schema.

Real kernel cores in a systemd-coredump layout, grouped against gdb, are
tests/system/test_core_many.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import jsonschema
import pytest

from liveunwind.cli.cores import core_arguments
from liveunwind.cli.group import Groups, signature
from liveunwind.cli.report import CoreResult, to_cores_document
from liveunwind.errors import UsageError
from liveunwind.frames import Backtrace, CrashInfo, Frame, Method, StopReason, ThreadBacktrace
from liveunwind.targets.cores.store import core_entries, describe, list_folder
from tests.support.schema import VALIDATOR

PROGRAM = "/opt/app/bin/server"
LIBC = "/usr/lib/x86_64-linux-gnu/libc.so.6"


def frame(index: int, function: str | None, module: str | None, *, signal: bool = False) -> Frame:
    made = Frame(index, 0x1000 + index, 0x7000 + index, Method.CFI, signal_frame=signal)
    made.function, made.module, made.offset = function, module, 4 if function else None
    made.module_offset = 0x40 + index
    return made


def backtrace(frames: list[Frame], signal: str = "SIGABRT", tid: int = 7) -> Backtrace:
    other = ThreadBacktrace(8, "worker", [frame(0, "poll", LIBC)], StopReason.END_OF_STACK)
    crashed = ThreadBacktrace(tid, "server", frames, StopReason.END_OF_STACK)
    crash = CrashInfo(executable=PROGRAM, signal=6, signal_name=signal, tid=tid)
    return Backtrace(42, [other, crashed], "x86_64", crash=crash)


def test_libc_frames_and_the_trampoline_are_skipped_and_offsets_dropped() -> None:
    trace = backtrace(
        [
            frame(0, "__pthread_kill_implementation", LIBC),
            frame(1, "raise", LIBC),
            frame(2, "abort", LIBC),
            frame(3, "check.cold", PROGRAM),
            frame(4, None, "[vdso]", signal=True),
            frame(5, None, "/opt/app/lib/libplugin.so"),
            frame(6, "qsort", LIBC),
            frame(7, "main", PROGRAM),
        ]
    )
    found = signature(trace, PROGRAM, 3)
    assert (found.program, found.signal) == (PROGRAM, "SIGABRT")
    assert found.frames == ("check", "?? (libplugin.so)", "main")
    assert found.text() == "server  SIGABRT  check < ?? (libplugin.so) < main"
    assert signature(trace, PROGRAM, 1).frames == ("check",)


def test_a_crash_with_no_frame_of_its_own_keeps_its_first_frames() -> None:
    trace = backtrace([frame(0, "memcpy", LIBC), frame(1, None, None)], "SIGSEGV")
    assert signature(trace, PROGRAM, 3).frames == ("memcpy", "??")


def test_groups_are_counted_and_sorted_most_first() -> None:
    one = signature(backtrace([frame(0, "a", PROGRAM)]), PROGRAM, 3)
    two = signature(backtrace([frame(0, "b", PROGRAM)]), PROGRAM, 3)
    other_signal = signature(backtrace([frame(0, "a", PROGRAM)], "SIGSEGV"), PROGRAM, 3)
    groups = Groups()
    for number, each in enumerate([one, two, two, other_signal, two, two]):
        groups.add(each, f"core.{number}")
    ordered = groups.sorted()
    assert [(group.count, group.signature) for group in ordered] == [
        (4, two), (1, one), (1, other_signal),
    ]  # fmt: skip
    assert ordered[0].examples == ["core.1", "core.2", "core.4"]


def test_the_cores_document_follows_the_schema() -> None:
    read = CoreResult("/c/core.1", PROGRAM, backtrace([frame(0, "a", PROGRAM)]))
    read.group = 0
    failed = CoreResult("/c/notes.txt", "", None, "not an ELF file", 2)
    groups = Groups()
    groups.add(signature(read.backtrace, PROGRAM, 3), read.path)  # type: ignore[arg-type]
    document = to_cores_document([read, failed], groups.sorted())
    VALIDATOR.validate(document)
    assert document["complete"] is False and document["groups"][0]["count"] == 1
    VALIDATOR.validate(to_cores_document([read], None) | {"complete": True})
    read.group = None
    with pytest.raises(jsonschema.ValidationError):
        VALIDATOR.validate(to_cores_document([read], None) | {"groups": [], "pid": 1})


def test_systemd_coredump_names_and_attributes(tmp_path: Path) -> None:
    name = "core.my\\x2eserver.1000.0123456789abcdef0123456789abcdef.4242.1700000000000000.zst"
    core = tmp_path / name
    core.write_bytes(b"\x28\xb5\x2f\xfd")
    plain = describe(str(core))
    assert (plain.comm, plain.pid, plain.timestamp) == ("my.server", 4242, 1700000000000000)
    try:
        os.setxattr(core, "user.coredump.exe", b"/usr/sbin/my.server")
        os.setxattr(core, "user.coredump.comm", b"my.server")
    except OSError as error:
        pytest.skip(f"this file system keeps no user extended attributes: {error}")
    assert describe(str(core)).executable == "/usr/sbin/my.server"
    other = tmp_path / "core.12"
    other.write_bytes(b"")
    os.setxattr(other, "user.coredump.exe", b"/not/read")  # not systemd's name: not asked
    assert (describe(str(other)).executable, describe(str(other)).pid) == (None, None)


def test_a_folder_is_one_level_in_name_order_without_hidden_names(tmp_path: Path) -> None:
    for name in ("core.b", "core.a", ".#core.writing", "notes"):
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "core.c").write_bytes(b"x")
    os.mkfifo(tmp_path / "fifo")
    expected = [str(tmp_path / name) for name in ("core.a", "core.b", "fifo", "notes")]
    assert list_folder(str(tmp_path)) == expected
    missing = str(tmp_path / "gone")
    paths = [entry.path for entry in core_entries([missing, str(tmp_path)])]
    assert paths == [missing, *expected]


def test_a_second_argument_that_is_a_program_is_the_executable(tmp_path: Path) -> None:
    program = tmp_path / "prog"
    program.write_bytes(b"\x7fELF\x02\x01\x01" + bytes(9) + b"\x03\x00" + bytes(46))
    core = tmp_path / "core"
    core.write_bytes(b"\x7fELF\x02\x01\x01" + bytes(9) + b"\x04\x00" + bytes(46))
    assert core_arguments([str(core), str(program)]) == ([str(core)], str(program))
    assert core_arguments([str(core), str(core)]) == ([str(core), str(core)], None)
    assert core_arguments([str(tmp_path)]) == ([str(tmp_path)], None)
    missing = str(tmp_path / "gone")  # as before: the executable, refused in its own words
    assert core_arguments([str(core), missing]) == ([str(core)], missing)
    packed = tmp_path / "core.zst"
    packed.write_bytes(b"\x28\xb5\x2f\xfd" + bytes(8))
    assert core_arguments([str(core), str(packed)]) == ([str(core), str(packed)], None)
    assert core_arguments([str(core), str(tmp_path)]) == ([str(core), str(tmp_path)], None)
    with pytest.raises(UsageError, match="goes with one core"):
        core_arguments([str(tmp_path), str(program)])
    with pytest.raises(UsageError, match="name a core"):
        core_arguments([])
