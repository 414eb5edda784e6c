"""Many cores in one run: a folder laid out as systemd-coredump's store, grouped and listed.

The cores are real: testprogs/crash crashing in different places (SIGSEGV
from two call chains, SIGFPE, abort() at two depths, SIGSEGV in a second
thread), each written by the kernel (core_pattern ``core``).  systemd-coredump
itself cannot write them here: the kernel hands it a core only through
``kernel.core_pattern`` (a pipe), which is one setting for the whole machine
and the other tests need it to be ``core``, and it forwards each core to
systemd's socket, which needs systemd as PID 1.  So the store is built the
way it does: each core compressed by the real ``zstd``, ``xz`` or ``lz4``
tool (or left plain), named ``core.COMM.UID.BOOTID.PID.TIMESTAMP.EXT`` and
given its ``user.coredump.*`` extended attributes.  Beside them: a text
file, a core cut inside its headers, a FIFO, a subfolder and a hidden
half-written core.  gdb is the oracle of every signature: its frames of the
crashing thread of each example core (the plain core the kernel wrote),
kept where the executable's own symbol table (nm) defines the function.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from liveunwind.backtrace.api import open_core
from tests.support.cli import run_cli
from tests.support.cores import crash, kernel_writes_cores_here
from tests.support.oracles import gdb_core_backtraces, physical
from tests.support.schema import VALIDATOR

#: Each crash: crash.c's mode and its argument, and the tool that packs its core.
CRASHES = [
    (["leaf"], "zstd"),
    (["leaf"], None),
    (["other"], "xz"),
    (["fpe"], "lz4"),
    (["fpe"], "zstd"),
    (["abort", "5"], None),
    (["abort", "50"], "zstd"),
    (["thread"], "xz"),
]
#: The signatures these crashes make: the mode(s) of each, and how many cores.
EXPECTED_COUNTS = {"leaf": 2, "fpe": 2, "abort": 2, "other": 1, "thread": 1}
SUFFIX = {"zstd": ".zst", "xz": ".xz", "lz4": ".lz4", None: ""}
VARIANT = "crash-O2"


class Store:
    """The folder, the plain core behind each stored one, and the executable."""

    def __init__(self, folder: Path, plain: dict[str, Path], modes: dict[str, str], exe: Path):
        self.folder = folder
        self.plain = plain
        self.modes = modes
        self.exe = exe


@pytest.fixture(scope="module")
def store(crash_build: Path, tmp_path_factory: pytest.TempPathFactory) -> Store:
    reason = kernel_writes_cores_here()
    if reason is not None:
        pytest.skip(reason)
    for tool in ("zstd", "xz", "lz4"):
        if shutil.which(tool) is None:
            pytest.skip(f"the {tool} command is not installed")
    exe = crash_build / "build" / VARIANT
    folder = tmp_path_factory.mktemp("coredump")
    boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip().replace("-", "")
    plain: dict[str, Path] = {}
    modes: dict[str, str] = {}
    for number, (arguments, tool) in enumerate(CRASHES):
        core = crash(
            tmp_path_factory.mktemp(f"crash-{number}"), [str(exe), *arguments], glob="core*"
        )
        pid = int(core.name.split(".")[1]) if "." in core.name else 10_000 + number
        stamp = int(time.time() * 1_000_000) + number
        name = f"core.{VARIANT}.0.{boot_id}.{pid}.{stamp}{SUFFIX[tool]}"
        stored = folder / name
        if tool is None:
            shutil.copyfile(core, stored)
        else:
            subprocess.run([tool, "-q", "-c", str(core)], stdout=stored.open("wb"), check=True)
        for attribute, value in {
            "exe": str(exe), "comm": VARIANT, "pid": str(pid), "uid": "0", "gid": "0",
            "signal": "0", "timestamp": str(stamp),
        }.items():  # fmt: skip
            os.setxattr(stored, f"user.coredump.{attribute}", value.encode())
        plain[str(stored)] = core
        modes[str(stored)] = arguments[0]
    (folder / "notes.txt").write_text("not a core\n")
    (folder / "core.cut").write_bytes(next(iter(plain.values())).read_bytes()[:200])
    os.mkfifo(folder / "core.fifo")
    (folder / "old").mkdir()
    (folder / ".#core.half-written").write_bytes(b"\x7fELF")
    return Store(folder, plain, modes, exe)


def own_functions(exe: Path) -> set[str]:
    """The functions the executable defines (nm: text symbols), however gdb names them."""
    listing = subprocess.run(["nm", "--defined-only", str(exe)], capture_output=True, text=True)
    return {line.split()[2] for line in listing.stdout.splitlines() if line.split()[1] in "tT"}


def gdb_signature(core: Path, exe: Path, gdb: str, depth: int) -> list[str]:
    """gdb's first ``depth`` frames of the crashing thread in the executable's own code.

    gdb selects the thread that received the signal; its frames come first
    in the oracle only by tid, so the crashing tid is asked of the core.
    """
    crashed = open_core(str(core), str(exe)).crash
    assert crashed is not None and crashed.tid is not None
    frames = physical(gdb_core_backtraces(core, exe, gdb=gdb)[crashed.tid])
    own = own_functions(exe)
    names = [frame.name for frame in frames if frame.kind != "sigtramp" and frame.name in own]
    return [name for name in names if name is not None][:depth]


@pytest.mark.parametrize("depth", [3, 5])
def test_groups_are_counted_and_match_gdb(store: Store, gdb: str, depth: int) -> None:
    result = run_cli("core", str(store.folder), "--group", "--group-frames", str(depth), "--json")
    assert result.returncode == 2, result.stderr  # three entries are not cores
    document = json.loads(result.stdout)
    VALIDATOR.validate(document)
    groups = document["groups"]
    assert len(groups) == len(EXPECTED_COUNTS), groups
    by_mode: dict[str, int] = {}
    for group in groups:
        modes = {store.modes[path] for path in group["examples"]}
        assert len(modes) == 1, group  # one signature, one place of crashing
        by_mode[modes.pop()] = group["count"]
        assert group["program"] == str(store.exe)  # user.coredump.exe
        for example in group["examples"]:
            expected = gdb_signature(store.plain[example], store.exe, gdb, depth)
            assert group["frames"] == expected, (example, group, expected)
    assert by_mode == EXPECTED_COUNTS
    assert [group["count"] for group in groups] == sorted(
        (group["count"] for group in groups), reverse=True
    )
    entries = {entry["path"]: entry for entry in document["cores"]}
    for path, mode in store.modes.items():
        entry = entries[path]
        assert entry["error"] is None and entry["group"] is not None
        assert store.modes[groups[entry["group"]]["examples"][0]] == mode
    signals = {store.modes[group["examples"][0]]: group["signal"] for group in groups}
    assert signals == {
        "leaf": "SIGSEGV", "other": "SIGSEGV", "thread": "SIGSEGV",
        "fpe": "SIGFPE", "abort": "SIGABRT",
    }  # fmt: skip


def test_what_is_not_a_core_is_a_line_and_the_rest_still_print(store: Store) -> None:
    result = run_cli("core", str(store.folder), "--group", timeout=120)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert result.stdout.startswith(f"{len(EXPECTED_COUNTS)} crash signatures in 8 cores:")
    failed = result.stdout.split("cores not read (3):\n", 1)[1].splitlines()
    assert sorted(line.split(": ", 1)[0].strip() for line in failed) == [
        str(store.folder / name) for name in ("core.cut", "core.fifo", "notes.txt")
    ]
    assert "not a regular file" in result.stdout or "FIFO" in result.stdout
    assert ".#core" not in result.stdout and "/old" not in result.stdout


def test_each_core_is_printed_as_alone_and_files_are_shared(store: Store) -> None:
    result = run_cli("core", str(store.folder), "--stats", timeout=120)
    assert result.returncode == 2, result.stderr
    assert result.stdout.startswith("Core ")
    blocks = result.stdout[len("Core ") :].split("\n\nCore ")
    assert len(blocks) == len(store.plain) + 3
    by_path = dict(block.split(":", 1) for block in blocks)
    for path in store.plain:
        alone = run_cli("core", path)
        assert alone.returncode in (0, 1), alone.stderr
        assert by_path[path].strip("\n") == alone.stdout.strip("\n")
    assert by_path[str(store.folder / "notes.txt")].startswith(" not read: ")
    shared = re.search(r"(\d+) modules taken from another core", result.stderr)
    assert shared is not None and int(shared.group(1)) >= len(store.plain) - 1, result.stderr


def test_one_document_and_collapsed_stacks_across_cores(store: Store) -> None:
    document = json.loads(run_cli("core", str(store.folder), "--json").stdout)
    VALIDATOR.validate(document)
    read = [entry for entry in document["cores"] if entry["backtrace"] is not None]
    assert len(read) == len(store.plain) and document["complete"] is False
    assert all(entry["group"] is None for entry in document["cores"])
    for entry in read:
        alone = open_core(store.plain[entry["path"]].as_posix(), str(store.exe))
        assert [frame.pc for frame in alone.threads[0].frames] == [
            frame["pc"] for frame in entry["backtrace"]["threads"][0]["frames"]
        ]
    folded = run_cli("core", str(store.folder), "--collapsed")
    assert folded.returncode == 2
    counts = [int(line.rsplit(" ", 1)[1]) for line in folded.stdout.splitlines()]
    threads = sum(len(entry["backtrace"]["threads"]) for entry in read)
    assert sum(counts) == threads
    assert all(line.startswith(f"{VARIANT};") for line in folded.stdout.splitlines())
    assert folded.stderr.count("not read:") == 3


def test_a_core_and_its_program_keep_their_meaning(store: Store) -> None:
    core = next(iter(store.plain.values()))
    alone = run_cli("core", str(core), str(store.exe), "--json")
    assert alone.returncode in (0, 1) and "threads" in json.loads(alone.stdout)
    wrong = run_cli("core", str(store.folder), str(store.exe))
    assert wrong.returncode == 64 and "goes with one core" in wrong.stderr
    empty = run_cli("core")
    assert empty.returncode == 64
    grouped = run_cli("core", str(core), str(store.exe), "--group")
    assert grouped.returncode == 0 and grouped.stdout.startswith("1 crash signatures in 1 cores")
    both = run_cli("core", str(store.folder), "--group", "--collapsed")
    assert both.returncode == 64 and "choose one" in both.stderr
