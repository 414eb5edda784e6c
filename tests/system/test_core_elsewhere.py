"""Cores made elsewhere: NT_FILE paths that are relative, or name no file on this machine.

Each core is a real kernel core of testprogs/crash whose NT_FILE note is
rewritten in place (tests/support/corenotes.py: the names only, every other
byte the kernel's), as a core made in a container or passed through tools
records them.  liveunwind must find the files through the EXE given,
``--search-path`` and ``--sysroot``, by build-id where the core holds the
first page of the file, else by name and size, and say which; gdb, on the
original core, is the oracle.  (gdb and eu-stack find the libraries of such
a core through the loader's list in its memory, which holds absolute
paths; gdb given the program with ``file`` and ``set solib-search-path``
unwinds the rewritten core exactly as the original.)
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from liveunwind.backtrace.api import open_core
from liveunwind.targets.cores.elfcore import ElfCore
from tests.support.assertions import assert_matches_gdb, assert_one_line_error
from tests.support.cli import run_cli
from tests.support.corenotes import rewrite_file_note
from tests.support.cores import crash
from tests.support.oracles import gdb_core_backtraces
from tests.support.paths import TESTPROGS

EXE = TESTPROGS / "crash" / "build" / "crash-O2"
#: The note every module left as anonymous memory ends with.
ANONYMOUS = "so its mappings are anonymous memory"


def library_folders(core: Path) -> list[str]:
    """The folders of the libraries the (original) core maps, as it records them."""
    with ElfCore.open(str(core)) as space:
        paths = {m.path for m in space.mappings() if m.is_file and ".so" in m.path}
    return sorted({os.path.dirname(path) for path in paths})


@pytest.fixture(scope="module")
def thread_core(kernel_core) -> Path:
    return kernel_core("crash-O2", "thread")


@pytest.fixture(scope="module")
def headerless_core(crash_build, tmp_path_factory) -> Path:
    """A kernel core without the files' first pages (coredump_filter 0x23): no build-ids."""
    folder = tmp_path_factory.mktemp("headerless")
    command = ["sh", "-c", f"echo 0x23 > /proc/self/coredump_filter && exec {EXE} thread"]
    return crash(folder, command, glob="core*")


def test_relative_paths_use_the_exe_and_the_search_path(thread_core, gdb, tmp_path) -> None:
    """Names only: the EXE stands for the program, --search-path finds the libraries."""
    rewritten = tmp_path / "core"
    names = rewrite_file_note(thread_core, rewritten, os.path.basename)
    assert "libc.so.6" in names and EXE.name in names
    folders = library_folders(thread_core)
    backtrace = open_core(str(rewritten), str(EXE), search_path=folders, verbose=True)
    assert_matches_gdb(backtrace, gdb_core_backtraces(thread_core, EXE, gdb=gdb))
    matched = [p for p in backtrace.problems if "matched by build-id" in p]
    assert {p.split(":", 1)[0] for p in matched} == set(names), backtrace.problems
    assert len(matched) == len(backtrace.problems), backtrace.problems
    assert backtrace.crash is not None and backtrace.crash.executable == str(EXE)
    # Without --verbose nothing is said: every file was found and checked.
    assert open_core(str(rewritten), str(EXE), search_path=folders).problems == []
    # gdb given the program reads the rewritten core as the original.
    theirs = gdb_core_backtraces(rewritten, EXE, solib_search_path=":".join(folders), gdb=gdb)
    assert theirs == gdb_core_backtraces(thread_core, EXE, gdb=gdb)


def test_paths_relative_to_the_root_found_under_the_sysroot(thread_core, gdb, tmp_path) -> None:
    """``usr/lib/…/libc.so.6``: found under --sysroot, the program too, without an EXE."""
    rewritten = tmp_path / "core"
    names = rewrite_file_note(thread_core, rewritten, lambda path: path.lstrip("/"))
    assert all(not name.startswith("/") for name in names)
    backtrace = open_core(str(rewritten), sysroot="/", verbose=True)
    assert_matches_gdb(backtrace, gdb_core_backtraces(thread_core, EXE, gdb=gdb))
    assert all("matched by build-id" in p for p in backtrace.problems), backtrace.problems


def test_relative_paths_with_nothing_to_find_them_say_why(thread_core, tmp_path) -> None:
    """No EXE, no search path: each module is anonymous memory, and a note says so and why."""
    rewritten = tmp_path / "core"
    names = set(rewrite_file_note(thread_core, rewritten, os.path.basename))
    backtrace = open_core(str(rewritten))
    assert not backtrace.complete
    said = {p.split(":", 1)[0]: p for p in backtrace.problems if ANONYMOUS in p}
    assert set(said) == names, backtrace.problems
    assert all("--search-path" in note for note in said.values())


def test_without_build_ids_files_are_matched_by_name_and_size(
    headerless_core, gdb, tmp_path
) -> None:
    """No first pages in the core: a file of the right name and layout is used, others not.

    Decoys of the same names come first along the search path — the program
    built at -O0, another library renamed libc.so.6 — and are passed over.
    """
    with ElfCore.open(str(headerless_core)) as space:
        assert not any(space._loaded._build_id_at(m.start) for m in space.mappings() if m.is_file)
    rewritten = tmp_path / "core"
    names = set(rewrite_file_note(headerless_core, rewritten, os.path.basename))
    folders = library_folders(headerless_core)
    decoys = tmp_path / "decoys"
    decoys.mkdir()
    shutil.copy(TESTPROGS / "crash" / "build" / "crash-O0", decoys / EXE.name)
    libm = next(Path(folder) / "libm.so.6" for folder in folders)
    shutil.copy(libm, decoys / "libc.so.6")
    search = [str(decoys), str(EXE.parent), *folders]
    backtrace = open_core(str(rewritten), search_path=search, verbose=True)
    assert_matches_gdb(backtrace, gdb_core_backtraces(headerless_core, EXE, gdb=gdb))
    matched = {p.split(":", 1)[0]: p for p in backtrace.problems if "by name and size" in p}
    assert set(matched) == names, backtrace.problems
    assert str(decoys) not in " ".join(matched.values())
    # Only the decoys: both are refused, saying why, and left as anonymous memory.
    backtrace = open_core(str(rewritten), search_path=[str(decoys)])
    said = {p.split(":", 1)[0]: p for p in backtrace.problems if ANONYMOUS in p}
    assert set(said) == names, backtrace.problems
    assert "no segment of it is mapped" in said["libc.so.6"]
    assert "entry point" in said[EXE.name]
    assert not backtrace.complete


def test_absent_absolute_paths_without_build_ids_are_matched_by_name_and_size(
    headerless_core, gdb, tmp_path
) -> None:
    """Absolute paths that name nothing here: found by name along --search-path, checked."""
    rewritten = tmp_path / "core"
    rewrite_file_note(headerless_core, rewritten, lambda path: "/x/" + os.path.basename(path))
    folders = library_folders(headerless_core)
    backtrace = open_core(str(rewritten), search_path=[str(EXE.parent), *folders], verbose=True)
    assert_matches_gdb(backtrace, gdb_core_backtraces(headerless_core, EXE, gdb=gdb))
    assert any(p.startswith("/x/libc.so.6: using ") for p in backtrace.problems)
    assert all("by name and size" in p for p in backtrace.problems), backtrace.problems


def test_the_command_says_how_and_refuses_a_wrong_exe(thread_core, tmp_path) -> None:
    """The command: --verbose says which file stands for each name; a wrong EXE is refused."""
    rewritten = tmp_path / "core"
    rewrite_file_note(thread_core, rewritten, os.path.basename)
    search = ":".join(library_folders(thread_core))
    result = run_cli("core", str(rewritten), str(EXE), "--search-path", search, "--verbose")
    assert result.returncode == 0 and result.stderr == "", result.stderr  # every walk complete
    assert f"note: {EXE.name}: using {EXE}, matched by build-id" in result.stdout
    assert "thread_fault+0x7  (crash-O2)" in result.stdout
    wrong = str(EXE.parent / "crash-O0")
    assert_one_line_error(run_cli("core", str(rewritten), wrong), 64, "does not match the core")
