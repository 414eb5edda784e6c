"""Checks of the oracles themselves, before anything is compared against them.

liveunwind's end-to-end tests trust gdb and eu-stack as ground truth, so this
module makes sure that trust holds on this machine: the two tools agree frame
for frame, and they see the stack shapes the test programs were written to
produce. A failure here means a broken oracle or test program, not a broken
liveunwind.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.oracles import (
    OracleFrame,
    describe,
    eu_stack_backtraces,
    gdb_backtraces,
    gdb_core_backtraces,
    gdb_gcore,
    pcs,
    physical,
)
from tests.support.programs import ProgramNotReadyError, RunProgram

THREADS_VARIANTS = [
    "threads-O0",
    "threads-O0-fp",
    "threads-O2",
    "threads-O2-fp",
    "threads-O2-nofp",
]
THREAD_NAMES = {
    "sleeper",
    "reader",
    "condwait",
    "poller",
    "selecter",
    "epoller",
    "acceptor",
    "deep",
}


def names(frames: list[OracleFrame]) -> list[str | None]:
    """Return the function names of the physical frames, frame 0 first."""
    return [f.name for f in physical(frames)]


def assert_run(frames: list[OracleFrame], run: list[str]) -> int:
    """Assert that ``run`` occurs as consecutive physical frame names; return its index."""
    found = names(frames)
    for i in range(len(found) - len(run) + 1):
        if found[i : i + len(run)] == run:
            return i
    raise AssertionError(f"frames {run} not consecutive in:\n{describe(physical(frames))}")


def assert_in_order(frames: list[OracleFrame], wanted: list[str]) -> None:
    """Assert that ``wanted`` names occur in this order, other frames allowed between."""
    found = iter(names(frames))
    missing = [name for name in wanted if name not in found]
    assert not missing, f"{missing} not in order {wanted} in:\n{describe(physical(frames))}"


@pytest.mark.parametrize(
    ("program", "args"),
    [(variant, ()) for variant in THREADS_VARIANTS]
    + [
        ("recurse", ("50",)),
        ("sighandler", ()),
        ("realign-O0", ()),
        ("realign-O2", ()),
        ("plt", ()),
        ("cxxthrow-O0", ()),
        ("cxxthrow-O2", ()),
    ],
)
def test_gdb_and_eu_stack_agree(
    run_program: RunProgram, gdb: str, eu_stack: str, program: str, args: tuple[str, ...]
) -> None:
    """Both oracles report the same threads and the same physical pcs for every stack."""
    proc = run_program(program, *args)
    by_gdb = gdb_backtraces(proc.pid, gdb=gdb)
    by_eu = eu_stack_backtraces(proc.pid, eu_stack=eu_stack)
    assert set(by_gdb) == set(by_eu) == set(proc.threads())
    for tid, frames in by_gdb.items():
        assert pcs(frames) == pcs(by_eu[tid]), (
            f"thread {proc.threads()[tid]}: gdb\n{describe(physical(frames))}\n"
            f"eu-stack\n{describe(by_eu[tid])}"
        )


@pytest.mark.parametrize("program", THREADS_VARIANTS)
def test_threads_shapes(run_program: RunProgram, gdb: str, program: str) -> None:
    """Every role thread exists, and "deep" shows its 30 links in call order."""
    proc = run_program(program)
    assert set(proc.threads().values()) == THREAD_NAMES | {program}
    by_gdb = gdb_backtraces(proc.pid, gdb=gdb)
    chain = [f"chain_{n:02d}" for n in range(30, 0, -1)]
    assert_run(by_gdb[proc.tid("deep")], ["block_in_nanosleep", *chain, "start"])
    assert_run(by_gdb[proc.tid("acceptor")], ["block_in_accept", "start"])
    assert_run(by_gdb[proc.pid], ["main"])


def test_spinner_is_stopped_mid_loop(run_program: RunProgram, gdb: str, eu_stack: str) -> None:
    """A busy thread is accepted as settled only when declared busy, and unwinds from its loop."""
    proc = run_program("threads-O2", "spin", busy={"spinner"})
    spinner = proc.tid("spinner")
    assert proc.thread_states()[spinner][1] == "R"
    by_gdb = gdb_backtraces(proc.pid, gdb=gdb)[spinner]
    by_eu = eu_stack_backtraces(proc.pid, eu_stack=eu_stack)[spinner]
    for frames in (by_gdb, by_eu):
        assert names(frames)[:2] == ["spin_forever", "start"], describe(frames)


def test_undeclared_busy_thread_never_settles(run_program: RunProgram) -> None:
    """Without ``busy`` the fixture must refuse a program whose thread keeps running."""
    with pytest.raises(ProgramNotReadyError, match="did not settle"):
        run_program("threads-O2", "spin", timeout=1.0)


@pytest.mark.parametrize(
    ("thread", "interrupted"),
    [
        ("busy", ["busy_loop", "middle_busy", "outer_busy", "start"]),
        ("syscall", ["__GI___libc_read", "blocked_read", "middle_sys", "outer_sys", "start"]),
    ],
)
def test_sighandler_shape(
    run_program: RunProgram, gdb: str, thread: str, interrupted: list[str]
) -> None:
    """Check that gdb finds the handler frames, a sigtramp frame, then the interrupted code."""
    proc = run_program("sighandler")
    frames = physical(gdb_backtraces(proc.pid, gdb=gdb)[proc.tid(thread)])
    at = assert_run(frames, ["handler_block", "handler_middle", "on_signal"])
    trampoline = frames[at + 3]
    assert trampoline.kind == "sigtramp", describe(frames)
    assert trampoline.name == "__restore_rt", describe(frames)
    assert names(frames[at + 4 :])[: len(interrupted)] == interrupted, describe(frames)


@pytest.mark.parametrize("program", ["cxxthrow-O0", "cxxthrow-O2"])
def test_cxxthrow_shapes(run_program: RunProgram, gdb: str, program: str) -> None:
    """Destructor during unwinding, libgcc's unwinder under terminate, and a catch block."""
    proc = run_program(program)
    by_gdb = gdb_backtraces(proc.pid, gdb=gdb)
    assert_run(by_gdb[proc.pid], ["block_forever", "Blocker::~Blocker", "throw_with_local", "main"])
    terminate = by_gdb[proc.tid("terminate")]
    assert_run(terminate, ["block_forever", "on_terminate"])
    assert_in_order(
        terminate,
        [
            "on_terminate",
            "__gxx_personality_v0",
            "_Unwind_RaiseException",
            "__cxa_throw",
            "throw_plain",
            "no_throw_allowed",
            "terminate_thread",
        ],
    )
    assert_run(by_gdb[proc.tid("catcher")], ["block_forever", "catch_and_block", "catcher_thread"])


@pytest.mark.parametrize("program", ["realign-O0", "realign-O2"])
def test_realign_shape(run_program: RunProgram, gdb: str, program: str) -> None:
    """The realigning chain, DRAP frame included, unwinds to main."""
    proc = run_program(program)
    frames = gdb_backtraces(proc.pid, gdb=gdb)[proc.pid]
    assert_run(frames, ["block_here", "with_aligned_local", "with_drap", "with_alloca", "main"])


def test_plt_shape(run_program: RunProgram, gdb: str) -> None:
    """The stack crosses executable and library twice each way."""
    proc = run_program("plt")
    frames = gdb_backtraces(proc.pid, gdb=gdb)[proc.pid]
    assert_run(frames, ["tps_block", "from_library", "tps_enter", "main"])


@pytest.mark.slow
def test_recurse_10000(run_program: RunProgram, gdb: str, eu_stack: str) -> None:
    """10000 recursion frames, in rec_a -> rec_b -> rec_c order, seen alike by both oracles."""
    proc = run_program("recurse", "10000")
    tid = proc.tid("recursion")
    frames = physical(gdb_backtraces(proc.pid, gdb=gdb)[tid])
    recursion = [name for name in names(frames) if name and name.startswith("rec_")]
    # Outermost first: rec_a is called with N, the cycle goes a, b, c, a, ...
    assert recursion[::-1] == [("rec_a", "rec_b", "rec_c")[i % 3] for i in range(10000)]
    assert pcs(frames) == pcs(eu_stack_backtraces(proc.pid, eu_stack=eu_stack)[tid])


@pytest.mark.slow
def test_core_oracle_matches_live(run_program: RunProgram, gdb: str, tmp_path: Path) -> None:
    """Check that gdb reads the same stacks, sigtramp frames included, from a gcore."""
    proc = run_program("sighandler")
    core = tmp_path / "sighandler.core"
    gdb_gcore(proc.pid, core, gdb=gdb)
    from_core = gdb_core_backtraces(core, proc.path, gdb=gdb)
    assert from_core == gdb_backtraces(proc.pid, gdb=gdb)
    assert any(f.kind == "sigtramp" for f in from_core[proc.tid("busy")])
