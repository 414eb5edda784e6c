"""The ``--json`` document follows the JSON Schema shipped in the package.

Real output is validated: ``pid`` of a live program with several threads
(plain, ``--verbose``, ``--no-symbols``, cut short, ``--repeat``), a kernel
core, a QEMU core of an aarch64 program and a Mach-O core; documents that
break the contract are shown to fail, so the validation can fail.  The
schema against the code is tests/unit/test_schema.py.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from liveunwind.cli.report import SCHEMA_ID, SCHEMA_VERSION
from tests.support.cores import crash, kernel_writes_cores_here
from tests.support.macho import TOOLS, make_core
from tests.support.paths import AARCH64_SYSROOT, ROOT
from tests.support.pythons import PYTHONS, Parked, available
from tests.support.schema import VALIDATOR


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "liveunwind", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


def documents(text: str) -> list[dict[str, Any]]:
    """Every JSON document in ``text``, one after another (``--repeat`` prints several)."""
    decoder = json.JSONDecoder()
    found, position = [], 0
    while text[position:].strip():
        position += len(text[position:]) - len(text[position:].lstrip())
        document, position = decoder.raw_decode(text, position)
        found.append(document)
    return found


def valid_documents(result: subprocess.CompletedProcess[str], count: int = 1) -> list[dict]:
    """The documents a run printed, each checked against the schema."""
    assert result.returncode in (0, 1), result.stderr
    found = documents(result.stdout)
    assert len(found) == count
    for document in found:
        VALIDATOR.validate(document)
    return found


# -- real documents ---------------------------------------------------------------------


def test_pid_of_a_program_with_threads(run_program) -> None:
    program = run_program("threads-O2")
    (document,) = valid_documents(cli("pid", str(program.pid), "--json"))
    assert document["schema_version"] == SCHEMA_VERSION and document["$schema"] == SCHEMA_ID
    assert len(document["threads"]) == len(program.threads()) > 1
    assert document["complete"] and document["crash"] is None
    (bare,) = valid_documents(cli("pid", str(program.pid), "--json", "--no-symbols"))
    assert {frame["function"] for thread in bare["threads"] for frame in thread["frames"]} == {None}


def test_pid_verbose_carries_the_notes(run_program) -> None:
    program = run_program("threads-O2")
    result = cli("pid", str(program.pid), "--json", "--verbose", "--unwinder", "sframe,cfi")
    (document,) = valid_documents(result)
    notes = [
        note for thread in document["threads"] for f in thread["frames"] for note in f["notes"]
    ]
    assert any(note.startswith("no sframe entry") for note in notes)


def test_pid_cut_short_and_repeated(run_program) -> None:
    program = run_program("recurse", "50")
    result = cli("pid", str(program.pid), "--json", "--max-frames", "5", "--repeat", "3")
    assert result.returncode == 1
    samples = valid_documents(result, count=3)
    for document in samples:
        assert not document["complete"]
        assert "frame limit" in {thread["stop_reason"] for thread in document["threads"]}


def test_pid_with_python_frames(tmp_path: Path) -> None:
    """--python: a CPython program's eval-loop frames carry the Python frames they run."""
    python = PYTHONS[0]
    available(python)
    program = Parked(python, tmp_path / "parked")
    try:
        (document,) = valid_documents(cli("pid", str(program.pid), "--json", "--python"))
    finally:
        program.stop()
    placed = {
        thread["tid"]: [
            (place["function"], place["file"], place["line"])
            for frame in thread["frames"]
            for place in frame["python"]
        ]
        for thread in document["threads"]
    }
    assert {tid: placed[tid] for tid in program.truth} == program.truth
    assert all(thread["python_unplaced"] == [] for thread in document["threads"])


@pytest.fixture(scope="module")
def crash_cores(crash_build: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A kernel core of testprogs/crash (a crash in a thread) and, with QEMU, an aarch64 one."""
    reason = kernel_writes_cores_here()
    if reason is not None:
        pytest.skip(reason)
    folder = tmp_path_factory.mktemp("schema-cores")
    cores = {
        "x86_64": crash(
            folder / "kernel", [str(crash_build / "build" / "crash-O2"), "thread"], glob="core*"
        )
    }
    if shutil.which("qemu-aarch64") and (crash_build / "build-aarch64" / "crash-O2").exists():
        (folder / "qemu" / "core").mkdir(parents=True)
        command = [
            "qemu-aarch64",
            "-L",
            str(AARCH64_SYSROOT),
            str(crash_build / "build-aarch64" / "crash-O2"),
            "thread",
        ]
        cores["aarch64"] = crash(folder / "qemu", command, glob="qemu_*.core")
    return cores


def test_kernel_core(crash_cores: dict[str, Path]) -> None:
    (document,) = valid_documents(cli("core", str(crash_cores["x86_64"]), "--json"))
    assert document["arch"] == "x86_64" and len(document["threads"]) > 1
    assert document["crash"]["signal_name"] == "SIGSEGV"
    assert document["crash"]["tid"] == document["threads"][0]["tid"]


def test_qemu_core_of_an_aarch64_program(crash_cores: dict[str, Path]) -> None:
    if "aarch64" not in crash_cores:
        pytest.skip("needs qemu-aarch64 and testprogs/crash/build-aarch64")
    (document,) = valid_documents(cli("core", str(crash_cores["aarch64"]), "--json"))
    assert document["arch"] == "aarch64" and document["crash"] is not None


@pytest.mark.skipif(
    any(shutil.which(tool) is None for tool in TOOLS), reason="needs clang-16, lld-16, llvm-16"
)
def test_mach_o_core(macho_build: Path, tmp_path: Path) -> None:
    core, truth = make_core(macho_build / "chain-arm64", tmp_path)
    result = cli("core", str(core), "--search-path", str(macho_build), "--json")
    (document,) = valid_documents(result)
    assert document["pid"] is None and document["crash"] is None
    (thread,) = document["threads"]
    assert [frame["pc"] for frame in thread["frames"]] == [frame["pc"] for frame in truth["frames"]]


# -- the contract can fail --------------------------------------------------------------


def test_documents_that_break_the_contract_are_refused(run_program) -> None:
    program = run_program("threads-O2")
    (document,) = valid_documents(cli("pid", str(program.pid), "--json"))

    def broken(change) -> dict:
        changed = copy.deepcopy(document)
        change(changed)
        return changed

    breakages = {
        "unknown field": lambda d: d.update(extra=1),
        "missing field": lambda d: d.pop("problems"),
        "other version": lambda d: d.update(schema_version=SCHEMA_VERSION + 1),
        "unknown method": lambda d: d["threads"][0]["frames"][0].update(method="guess"),
        "trust not the method's": lambda d: d["threads"][0]["frames"][1].update(trust="low"),
        "address beyond 64 bits": lambda d: d["threads"][0]["frames"][0].update(pc=1 << 64),
        "complete but stopped early": lambda d: d["threads"][0].update(stop_reason="frame limit"),
        "field in a frame": lambda d: d["threads"][0]["frames"][0].update(column=3),
        "no python frames": lambda d: d["threads"][0]["frames"][0].pop("python"),
        "field in a python frame": lambda d: d["threads"][0]["frames"][0].update(
            python=[{"function": "f", "file": "f.py", "line": 1, "column": 2}]
        ),
        "python frame without a line": lambda d: d["threads"][0].update(
            python_unplaced=[{"function": "f", "file": "f.py"}]
        ),
    }
    for name, change in breakages.items():
        assert not VALIDATOR.is_valid(broken(change)), name


def test_kernel_core_with_source_lines(crash_cores: dict[str, Path]) -> None:
    (document,) = valid_documents(cli("core", str(crash_cores["x86_64"]), "--json", "--lines"))
    located = [
        frame for thread in document["threads"] for frame in thread["frames"] if frame["file"]
    ]
    assert any(frame["file"].endswith("crash.c") and frame["line"] for frame in located)
