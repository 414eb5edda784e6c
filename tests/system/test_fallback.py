"""When tables run out: frame pointers, scanning, corrupt stacks, limits and split debug info.

Each test program documents its true call chain in its header comment
(testprogs/fallback/); the tests compare function names along the chain, and
check that the walk never invents a frame, never loops, and ends with the
right reason.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

import liveunwind
from liveunwind.frames import Backtrace, Method, StopReason, ThreadBacktrace, Trust
from tests.support.paths import TESTPROGS
from tests.support.programs import start_program

CHAIN = ["chain_block", *(f"chain_{n:02d}" for n in range(10, 0, -1)), "chain_main"]


def thread_named(backtrace: Backtrace, name: str) -> ThreadBacktrace:
    return next(thread for thread in backtrace.threads if thread.name == name)


def own_frames(thread: ThreadBacktrace, program: str) -> list[str | None]:
    """Function names of the frames in the program itself (libc frames dropped)."""
    return [
        frame.function
        for frame in thread.frames
        if frame.module is not None and frame.module.endswith("/" + program)
    ]


def test_frame_pointers_recover_a_binary_without_tables(fallback_build: Path) -> None:
    with start_program(fallback_build, "fp-noeh") as program:
        backtrace = liveunwind.attach(program.pid)
    chain = thread_named(backtrace, "chain")
    assert own_frames(chain, "fp-noeh") == CHAIN
    by_name = {frame.function: frame for frame in chain.frames}
    # chain_block's caller is found by libc's CFI; the rest by the rbp chain.
    for name in CHAIN[1:]:
        assert by_name[name].method is Method.FRAMEPOINTER, name
        assert by_name[name].trust is Trust.MEDIUM
    assert chain.complete, chain.stop_text


def test_scanning_recovers_the_true_callers_and_invents_none(fallback_build: Path) -> None:
    with start_program(fallback_build, "nofp-noeh") as program:
        backtrace = liveunwind.attach(program.pid)
    chain = thread_named(backtrace, "chain")
    assert own_frames(chain, "nofp-noeh") == CHAIN
    assert {frame.method for frame in chain.frames if frame.function in CHAIN[1:]} == {Method.SCAN}
    assert all(frame.trust is Trust.LOW for frame in chain.frames if frame.method is Method.SCAN)
    libc_after = [
        frame.function
        for frame in chain.frames[
            chain.frames.index(next(f for f in chain.frames if f.function == "chain_main")) + 1 :
        ]
    ]
    assert libc_after[:2] == ["start_thread", "__clone3"] or libc_after[:1] == ["start_thread"]


def test_frames_without_fallbacks_stop_with_the_reason(fallback_build: Path) -> None:
    with start_program(fallback_build, "nofp-noeh") as program:
        backtrace = liveunwind.attach(program.pid, unwinders=("cfi",))
    chain = thread_named(backtrace, "chain")
    assert chain.stop_reason is StopReason.NO_UNWIND_INFO
    assert "nofp-noeh" in chain.stop_detail
    assert chain.frames[-1].function == "chain_block"


def test_assembly_without_cfi_in_the_middle(fallback_build: Path) -> None:
    if not (fallback_build / "nocfi").exists():
        pytest.skip("nocfi is x86_64 only")
    with start_program(fallback_build, "nocfi") as program:
        backtrace = liveunwind.attach(program.pid, verbose=True)
        strict = liveunwind.attach(program.pid, unwinders=("cfi",))
    names = own_frames(thread_named(backtrace, "asmchain"), "nocfi")
    assert names == ["nocfi_block", "nocfi_callback", "nocfi_asm", "asm_caller", "nocfi_main"]
    thread = thread_named(backtrace, "asmchain")
    asm_caller = next(frame for frame in thread.frames if frame.function == "asm_caller")
    assert asm_caller.method is Method.SCAN
    assert any("no cfi entry" in note for note in asm_caller.notes)
    assert thread.complete
    stopped = thread_named(strict, "asmchain")
    assert stopped.stop_reason is StopReason.NO_UNWIND_INFO
    assert stopped.frames[-1].function == "nocfi_asm"


@pytest.mark.parametrize("damage", ["ra", "smash"])
def test_corrupt_stack_stops_or_recovers_without_looping(fallback_build: Path, damage: str) -> None:
    with start_program(fallback_build, "corrupt", damage) as program:
        started = time.monotonic()
        backtrace = liveunwind.attach(program.pid, max_frames=0)
        elapsed = time.monotonic() - started
        strict = liveunwind.attach(program.pid, unwinders=("cfi",), max_frames=0)
    assert elapsed < 10
    damaged = thread_named(backtrace, "damaged")
    names = own_frames(damaged, "corrupt")
    assert names[0] == "corrupt_block"
    # Whatever is recovered is a real caller, in order; nothing is invented.
    truth = ["corrupt_block", "corrupt_middle", "corrupt_outer", "corrupt_main"]
    assert [name for name in names if name in truth] == names
    assert names == sorted(names, key=truth.index)
    assert len(damaged.frames) < 20
    # With CFI alone, the garbage return address ends the walk with its reason.
    cut = thread_named(strict, "damaged")
    assert cut.stop_reason in (StopReason.BAD_RULE, StopReason.PC_NOT_MAPPED)
    assert cut.frames[-1].function == "corrupt_block"
    assert "not code" in cut.stop_detail or "not mapped" in cut.stop_text


def test_deep_recursion_frame_limit_and_no_limit(run_program) -> None:
    program = run_program("recurse", "10000", timeout=30)
    limited = liveunwind.attach(program.pid)
    deep = max(limited.threads, key=lambda thread: len(thread.frames))
    assert len(deep.frames) == 256
    assert deep.stop_reason is StopReason.FRAME_LIMIT
    unlimited = liveunwind.attach(program.pid, threads=[deep.tid], max_frames=0)
    thread = unlimited.threads[0]
    assert thread.complete, thread.stop_text
    recursion = [frame for frame in thread.frames if frame.function in ("rec_a", "rec_b", "rec_c")]
    assert len(recursion) == 10000


# -- separate debug info, end to end ---------------------------------------------------


def _split_binary(folder: Path, how: str) -> tuple[Path, Path]:
    """Builds chain.c with CFI only in .debug_frame, then moves CFI and symbols out.

    Returns (stripped program, debug dir to give liveunwind).
    """
    source = TESTPROGS / "fallback" / "chain.c"
    full = folder / "full"
    subprocess.run(
        ["gcc", "-O2", "-g", "-pthread", "-fomit-frame-pointer", "-fno-asynchronous-unwind-tables",
         "-fno-unwind-tables", "-Wl,--build-id", "-o", str(full), str(source)],
        check=True, capture_output=True,
    )  # fmt: skip
    program = folder / f"chain-{how}"
    debug_dir = folder / "debug"
    debug_dir.mkdir(exist_ok=True)
    if how == "minidebuginfo":
        _add_mini_debuginfo(full, program, folder)
        return program, debug_dir
    debug = folder / "chain.debug"
    subprocess.run(["objcopy", "--only-keep-debug", str(full), str(debug)], check=True)
    strip = [
        "objcopy",
        "--strip-all",
        "--remove-section=.eh_frame",
        "--remove-section=.eh_frame_hdr",
    ]
    subprocess.run([*strip, str(full), str(program)], check=True)
    if how == "build-id":
        build_id = _build_id(full)
        target = debug_dir / ".build-id" / build_id[:2] / f"{build_id[2:]}.debug"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(debug, target)
    else:
        subprocess.run(
            ["objcopy", f"--add-gnu-debuglink={debug}", str(program), str(program) + ".tmp"],
            check=True,
            cwd=folder,
        )
        Path(str(program) + ".tmp").replace(program)
    program.chmod(0o755)
    return program, debug_dir


def _build_id(binary: Path) -> str:
    notes = subprocess.run(["readelf", "-n", str(binary)], capture_output=True, text=True).stdout
    return next(line.split()[-1] for line in notes.splitlines() if "Build ID" in line)


def _add_mini_debuginfo(full: Path, program: Path, folder: Path) -> None:
    """Fedora's recipe: a .symtab of the functions .dynsym lacks, xz-compressed, embedded."""
    mini = folder / "mini"
    subprocess.run(
        ["objcopy", "--only-keep-debug", "--remove-section=.gdb_index", "--strip-debug",
         str(full), str(mini)],
        check=True,
    )  # fmt: skip
    subprocess.run(["xz", "-f", "-k", str(mini)], check=True)
    stripped = folder / "stripped"
    strip = [
        "objcopy",
        "--strip-all",
        "--remove-section=.eh_frame",
        "--remove-section=.eh_frame_hdr",
    ]
    subprocess.run([*strip, str(full), str(stripped)], check=True)
    subprocess.run(
        ["objcopy", f"--add-section=.gnu_debugdata={mini}.xz", str(stripped), str(program)],
        check=True,
    )
    program.chmod(0o755)


@pytest.mark.parametrize("how", ["build-id", "debuglink", "minidebuginfo"])
def test_split_debug_info_gives_symbols_and_cfi(tmp_path: Path, how: str) -> None:
    if shutil.which("xz") is None and how == "minidebuginfo":
        pytest.skip("xz is not installed")
    program_path, debug_dir = _split_binary(tmp_path, how)
    nm = subprocess.run(["nm", str(program_path)], capture_output=True, text=True)
    assert "chain_block" not in nm.stdout  # really stripped
    with start_program(program_path.parent, program_path.name) as program:
        backtrace = liveunwind.attach(program.pid, debug_dirs=[str(debug_dir)])
    chain = thread_named(backtrace, "chain")
    assert own_frames(chain, program_path.name) == CHAIN
    assert chain.complete, chain.stop_text
    methods = {frame.method for frame in chain.frames if frame.function in CHAIN[1:]}
    # build-id and debuglink bring .debug_frame; MiniDebugInfo brings names only.
    assert methods == ({Method.SCAN} if how == "minidebuginfo" else {Method.CFI})


def _guesses(fallback_build: Path) -> Backtrace:
    if not (fallback_build / "guesses").exists():
        pytest.skip("guesses is x86_64 only")
    with start_program(fallback_build, "guesses") as program:
        return liveunwind.attach(program.pid, verbose=True)


def test_a_scan_passes_over_return_addresses_of_calls_the_function_made(
    fallback_build: Path,
) -> None:
    """stale_asm's frame holds return addresses of its own earlier calls below its real one."""
    thread = thread_named(_guesses(fallback_build), "stale")
    assert own_frames(thread, "guesses") == [
        "stale_block",
        "stale_asm",
        "stale_caller",
        "stale_main",
    ]
    caller = next(frame for frame in thread.frames if frame.function == "stale_caller")
    assert caller.method is Method.SCAN
    # How the caller was found, and which candidates were refused: stale_helper's
    # return address after its call of getpid (through its PLT entry), stale_asm's
    # after its call of stale_helper.
    refused = [note for note in caller.notes if note.startswith("scan: [")]
    assert len(refused) == 2, caller.notes
    assert "(through the PLT entry" in refused[0] and "not to the function at" in refused[0]
    assert "not to the function at" in refused[1]
    assert thread.complete, thread.stop_text


def test_a_frame_pointer_step_does_not_skip_the_caller_of_a_leaf(fallback_build: Path) -> None:
    """push_leaf pushed a word under fp_middle's frame record: the record returns to fp_outer."""
    thread = thread_named(_guesses(fallback_build), "pushleaf")
    assert own_frames(thread, "guesses") == ["push_leaf", "fp_middle", "fp_outer", "pushleaf_main"]
    leaf, middle = thread.frames[0], thread.frames[1]
    if leaf.offset:  # past its push (it is caught there but for a moment after "ready")
        assert middle.method is Method.SCAN
        assert any("frame pointer: the step would pass over" in note for note in middle.notes)
    assert thread.complete, thread.stop_text


def test_a_walk_that_guessed_is_not_complete_on_a_zero_return_address(
    fallback_build: Path,
) -> None:
    """zero_outer's CFI reads the 0 run_on_stack pushed, but a scan placed zero_outer's frame."""
    thread = thread_named(_guesses(fallback_build), "zero")
    assert own_frames(thread, "guesses") == ["zero_block", "zero_asm", "zero_outer"]
    assert thread.frames[-1].method is Method.SCAN
    assert thread.stop_reason is StopReason.NO_OUTERMOST_FRAME
    assert not thread.complete
    assert "after a guessed frame" in thread.stop_detail


def test_the_entry_function_is_the_outermost_frame(fallback_build: Path) -> None:
    """nofp-noeh's _start has no CFI: the walk ends there, complete, as gdb's and eu-stack's do."""
    with start_program(fallback_build, "nofp-noeh") as program:
        backtrace = liveunwind.attach(program.pid)
    main = next(thread for thread in backtrace.threads if thread.tid == program.pid)
    assert main.frames[-1].function == "_start"
    assert main.complete and "entry function" in main.stop_detail, main.stop_text
    assert backtrace.complete
