"""``liveunwind profile --on-cpu`` on the platform's own kernel: sampled, never stopped.

The arm64 VM runs it on Debian's arm64 kernel (perf samples whose registers
are in ``enum perf_event_arm64_regs``' order), against testprogs/profile's
``profiled`` built there with pointer authentication: the burner's hottest
stack is the chain ``liveunwind pid`` finds with the thread parked in
``spin_hot`` (gdb's pcs, the same methods and trust), the target is never
stopped or traced, and a stack copy too small ends the walks saying so
(tests/integration/oncpu.py); the stacks seen are in the JUnit report's
properties. The containers skip where perf_event_open
is refused (Docker's default seccomp profile; QEMU user mode); the VMs may not.
tests/system/test_oncpu.py is the x86_64 host's fuller suite.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.integration.oncpu import (
    BURNER,
    check_cut_walks,
    check_hottest_stack,
    check_sampled_frames,
    listing,
    require_sampling,
)
from tests.support.platform import require_ptrace
from tests.support.programs import RunningProgram, start_program

pytestmark = pytest.mark.integration


@pytest.fixture
def burner(platform_name: str, testprogs_build: Path, tmp_path: Path) -> Iterator[RunningProgram]:
    """profiled, its burner spinning; skips where this platform cannot sample."""
    with start_program(
        testprogs_build, "profiled", str(tmp_path / "chunks"), busy={"burner", "third"}
    ) as program:
        require_sampling(program.pid)
        require_ptrace()  # the oracles park the burner with ptrace (gdb, liveunwind pid)
        yield program


def test_the_hottest_stack_is_the_burners_own_chain(
    burner: RunningProgram, record_seen: Callable[[str, object], None]
) -> None:
    hottest, document = check_hottest_stack(burner.pid, burner.tid(BURNER))
    record_seen("hottest_stack", f"{hottest} of {document['samples']} samples")


def test_sampled_frames_are_gdbs_with_their_method_and_trust(
    burner: RunningProgram,
    monkeypatch: pytest.MonkeyPatch,
    record_seen: Callable[[str, object], None],
) -> None:
    frames = check_sampled_frames(burner.pid, burner.tid(BURNER), monkeypatch)
    record_seen("sample", listing(frames))


def test_a_walk_beyond_the_stack_copy_ends_there_saying_so(
    burner: RunningProgram, record_seen: Callable[[str, object], None]
) -> None:
    record_seen("cut_stacks", check_cut_walks(burner.pid, burner.tid(BURNER)))
