"""What test_oncpu.py (arm64) and test_riscv64_vm.py (riscv64) check of ``profile --on-cpu``.

The target is testprogs/profile/profiled.c: its thread ``burner`` runs
``spin_hot`` under ``burner_main`` forever. The kernel samples it
(``perf_event_open``: the thread's user registers, in the layout of the
arch's ``asm/perf_regs.h``, and a copy of its stack), and each sample is
walked later. The oracles come from the same thread parked in ``spin_hot``
(stopped by gdb, or by ``liveunwind pid``): its return addresses are the
same at every call, so a sample in ``spin_hot`` must walk through exactly
those pcs, names, methods and trust. A register decoded from the wrong slot
of the sample (a pc, sp or return-address register of another number) gives
another stack or none.  The target must never be stopped or traced while it
is sampled: :class:`StopWatcher` reads every thread's ``/proc`` status
meanwhile.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.support.oracles import OracleFrame, describe, gdb_backtraces, physical
from tests.support.platform import PLATFORM, run_liveunwind
from tests.support.stopwatcher import StopWatcher

#: The platforms whose kernels must sample (a real kernel of the arch, running as root).
MUST_SAMPLE = ("arm64-vm", "riscv64-vm")
#: The function the burner spends its time in, and its thread's name.
HOT, BURNER = "spin_hot", "burner"
#: Attempts at catching the burner inside ``spin_hot`` (it is there nearly always).
PARK_ATTEMPTS = 20


def require_sampling(pid: int) -> None:
    """Skips where this platform refuses perf_event_open (a container's seccomp profile,
    QEMU user mode); on the VMs a refusal is a failure."""
    probe = run_liveunwind("profile", str(pid), "--on-cpu", "--duration", "0.2")
    if probe.returncode == 2 and PLATFORM not in MUST_SAMPLE:
        why = probe.stderr.strip().replace(f"process {pid}", "the process")
        pytest.skip(f"this platform cannot sample ({PLATFORM}): {why}")
    assert probe.returncode in (0, 1), probe.stderr


def profile_on_cpu(pid: int, *args: str) -> tuple[dict[str, Any], Counter[str], str]:
    """``profile PID --on-cpu ARGS --json --collapsed-out``, the target watched meanwhile:
    the JSON document, the folded stacks by count, and stdout's notes."""
    folded = Path(f"/tmp/liveunwind-oncpu-{pid}.folded")
    with StopWatcher(pid) as watcher:
        run = run_liveunwind(
            "profile", str(pid), "--on-cpu", "--json", "--collapsed-out", str(folded), *args
        )
    assert not watcher.seen, f"the target was stopped or traced while sampled: {watcher.seen}"
    assert watcher.reads > 50, watcher.reads
    assert run.returncode in (0, 1), run.stderr
    stacks: Counter[str] = Counter()
    for line in folded.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        stacks[stack] += int(count)
    folded.unlink()
    document: dict[str, Any] = json.loads(run.stdout)
    assert document["source"] == "perf_event"
    return document, stacks, run.stdout


def sampled_threads(pid: int, seconds: float, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every thread walk of ``seconds`` of on-CPU samples of ``pid``, frames and all.

    The installed package's own on-CPU recorder (the code ``profile --on-cpu``
    runs), its profile made to keep each sample's walk as well as its count.
    """
    from liveunwind.backtrace import oncpu
    from liveunwind.backtrace.options import BacktraceOptions

    walks: list[Any] = []

    class KeepingProfile(oncpu.Profile):
        def add(self, backtrace: Any, *args: Any, **kwargs: Any) -> None:
            walks.extend(backtrace.threads)
            super().add(backtrace, *args, **kwargs)

    monkeypatch.setattr(oncpu, "Profile", KeepingProfile)
    with StopWatcher(pid) as watcher:
        oncpu.record_on_cpu(pid, BacktraceOptions(), rate=100, duration=seconds, stack_size=8192)
    assert not watcher.seen, f"the target was stopped or traced while sampled: {watcher.seen}"
    return walks


def gdb_parked(pid: int, tid: int) -> list[OracleFrame]:
    """gdb's physical frames of thread ``tid`` caught inside ``spin_hot``."""
    for _ in range(PARK_ATTEMPTS):
        frames = physical(gdb_backtraces(pid)[tid])
        if frames and frames[0].name == HOT:
            return frames
    pytest.fail(f"gdb never caught thread {tid} in {HOT}: last\n{describe(frames)}")


def liveunwind_parked(pid: int, tid: int) -> list[dict[str, Any]]:
    """``liveunwind pid --json``'s frames of thread ``tid`` caught inside ``spin_hot``."""
    for _ in range(PARK_ATTEMPTS):
        run = run_liveunwind("pid", str(pid), "--json")
        assert run.returncode in (0, 1), run.stderr
        (thread,) = [t for t in json.loads(run.stdout)["threads"] if t["tid"] == tid]
        if thread["frames"][0]["function"] == HOT:
            assert thread["complete"], thread
            frames: list[dict[str, Any]] = thread["frames"]
            return frames
    pytest.fail(f"liveunwind pid never caught thread {tid} in {HOT}: last {thread['frames']}")


def folded_name(frame: dict[str, Any]) -> str:
    """A ``pid --json`` frame's name in folded stacks, as the profile schema says: the
    function, else ``module+offset`` (a libc without symbols for its thread entry), else
    the pc."""
    if frame["function"]:
        name = frame["function"]
    elif frame["module"] and frame["module_offset"] is not None:
        name = f"{os.path.basename(frame['module'])}+{frame['module_offset']:#x}"
    else:
        name = f"{frame['pc']:#x}"
    return str(name).replace(";", ":").replace(" ", "_")


def listing(frames: list[Any]) -> str:
    return "\n".join(
        f"#{index:<3} {frame.pc:#x} {frame.function or '??'} "
        f"[{frame.method.value}, {frame.trust.value}]"
        for index, frame in enumerate(frames)
    )


def check_hottest_stack(pid: int, tid: int) -> tuple[str, dict[str, Any]]:
    """The burner's hottest on-CPU stack is its parked chain, name for name; returns it
    (folded: the thread's name, then the functions from the outermost in) and the
    profile's JSON document."""
    document, stacks, _ = profile_on_cpu(pid, "--duration", "3")
    parked = liveunwind_parked(pid, tid)
    chain = ";".join([BURNER, *(folded_name(frame) for frame in reversed(parked))])
    burner = Counter({stack: n for stack, n in stacks.items() if stack.startswith(BURNER + ";")})
    assert burner, stacks
    hottest, count = burner.most_common(1)[0]
    assert hottest == chain, (chain, burner.most_common(3))
    assert count >= 10, burner
    # Sampled on the CPU clock: the burner's stacks are most of the samples.
    assert sum(burner.values()) >= 0.5 * sum(stacks.values()), stacks
    (row,) = [thread for thread in document["threads"] if thread["name"] == BURNER]
    assert row["top_function"] == HOT, row
    assert any("on-CPU samples" in problem for problem in document["problems"]), document
    return hottest, document


def check_sampled_frames(pid: int, tid: int, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Each sample of the burner in ``spin_hot``: gdb's pcs, ``liveunwind pid``'s
    names, methods and trust frame for frame, walked to the end; returns one."""
    from liveunwind.frames import Method, StopReason, Trust

    walks = [walk for walk in sampled_threads(pid, 2.0, monkeypatch) if walk.tid == tid]
    gdb = gdb_parked(pid, tid)
    parked = liveunwind_parked(pid, tid)
    assert [frame["pc"] for frame in parked[1:]] == [frame.pc for frame in gdb[1:]], (
        f"liveunwind pid:\n{parked}\ngdb:\n{describe(gdb)}"
    )
    hot = [walk for walk in walks if walk.frames and walk.frames[0].function == HOT]
    assert len(hot) >= 10, f"{len(hot)} of {len(walks)} samples of the burner in {HOT}"
    for walk in hot:
        frames = walk.frames
        shown = f"sample:\n{listing(frames)}\ngdb parked:\n{describe(gdb)}"
        assert walk.stop_reason is StopReason.END_OF_STACK, shown
        assert [frame.pc for frame in frames[1:]] == [frame.pc for frame in gdb[1:]], shown
        assert [frame.function for frame in frames] == [frame["function"] for frame in parked]
        assert (frames[0].method, frames[0].trust) == (Method.CONTEXT, Trust.EXACT), shown
        assert [(frame.method.value, frame.trust.value) for frame in frames[1:]] == [
            (frame["method"], frame["trust"]) for frame in parked[1:]
        ], shown
        assert all(frame.trust is Trust.of(frame.method) for frame in frames), shown
        # Where each frame lies on the stack (the sample's sp, each caller's sp and CFA):
        # the same as parked, since the burner's stack holds the same frames at every call.
        # A walk from a wrong sp reads its copy at the right offsets and finds the right
        # pcs (CFI rules are relative to the sp), but puts the frames elsewhere.
        assert [(frame.sp, frame.cfa) for frame in frames[1:]] == [
            (frame["sp"], frame["cfa"]) for frame in parked[1:]
        ], shown
        assert frames[0].cfa == parked[0]["cfa"], shown
    return list(hot[0].frames)


def check_cut_walks(pid: int, tid: int) -> dict[str, int]:
    """With a 16-byte stack copy no walk of the burner reaches its outermost frame: each
    ends inside the chain, saying the sample does not hold the memory it needed; returns
    the burner's stacks and their counts."""
    document, stacks, stdout = profile_on_cpu(pid, "--duration", "2", "--stack-size", "16")
    burner = [stack for stack in stacks if stack.startswith(BURNER + ";")]
    assert burner, stacks
    names = [folded_name(frame) for frame in reversed(liveunwind_parked(pid, tid))]
    full_chain = ";".join([BURNER, *names])
    for stack in burner:
        got = stack.split(";")[1:]
        assert got != names, f"{stack} walked past the 16 bytes copied"
        # What was walked is the chain's inner end (in spin_hot, or between two calls of
        # it in burner_main), never a guess past the copy.
        inner = [names[len(names) - len(got) :], names[len(names) - 1 - len(got) : -1]]
        assert got in inner, (stack, full_chain)
    assert any(stack.endswith(";" + HOT) for stack in burner), burner
    assert document["incomplete_reasons"].get("unreadable memory", 0) > 0, document
    assert "walks needed memory the sample does not hold" in stdout, stdout
    assert document["incomplete"] > 0
    return {stack: stacks[stack] for stack in burner}
