"""``liveunwind profile`` without a target: the flame graph's escaping and bounds, the schedule.

The schedule is driven by a scripted session whose backtraces take the time
the test says.  Profiles of a real program are tests/system/test_profile.py.
"""

from __future__ import annotations

import os
import time
import xml.etree.ElementTree as ElementTree

import pytest

from liveunwind.backtrace import profile as profile_module
from liveunwind.backtrace.profile import END_DURATION, Profile, record
from liveunwind.cli.flamegraph import render
from liveunwind.frames import Backtrace, Frame, Method, StopReason, ThreadBacktrace

# -- the flame graph ---------------------------------------------------------------------


def test_names_from_the_target_cannot_break_the_document() -> None:
    hostile = '<script>alert("x")</script> & \x00\x1b\udcff ]]> \ufffe'
    svg = render({("thread-1", hostile): 3, ("thread-1", "ok"): 1}, title=hostile, subtitle="")
    root = ElementTree.fromstring(svg.encode("utf-8"))  # parses: escaped, no forbidden characters
    namespace = "{http://www.w3.org/2000/svg}"
    assert len(list(root.iter(f"{namespace}script"))) == 1
    titles = [element.text for element in root.iter(f"{namespace}title")]
    assert any(
        title and title.startswith('<script>alert("x")</script> & \ufffd') for title in titles
    )


def test_boxes_too_narrow_to_see_are_left_out_but_counted() -> None:
    stacks = {("big",): 100_000, ("tiny", "child"): 1}
    root = ElementTree.fromstring(render(stacks, title="t").encode("utf-8"))
    namespace = "{http://www.w3.org/2000/svg}"
    titles = [element.text or "" for element in root.iter(f"{namespace}title")]
    assert titles == ["all (100001 samples, 100.00%)", "big (100000 samples, 100.00%)"]


def test_distinct_stacks_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A target whose every sample is a new stack cannot make the profile grow without end."""
    monkeypatch.setattr(profile_module, "MAX_STACKS", 2)
    profile = Profile(1, 100.0)
    for pc in range(0x1000, 0x1005):
        thread = ThreadBacktrace(
            7, "t", [Frame(0, pc, 0x7000, Method.CONTEXT)], StopReason.END_OF_STACK
        )
        profile.add(Backtrace(1, [thread], "x86_64"))
    (counted,) = profile.threads.values()
    assert counted.stacks == {("0x1000",): 1, ("0x1001",): 1, profile_module.OVERFLOW: 3}
    assert profile.distinct == 2 and profile.overflowed == 3


def _sample(profile: Profile, *threads: tuple[int, str, list[str]]) -> None:
    """One sample: each thread (tid, name, function names innermost first)."""
    walked = []
    for tid, name, functions in threads:
        frames = []
        for index, function in enumerate(functions):
            frame = Frame(index, 0x1000 + index, 0x7000, Method.CONTEXT)
            frame.function = function
            frames.append(frame)
        walked.append(ThreadBacktrace(tid, name, frames, StopReason.END_OF_STACK))
    profile.add(Backtrace(1, walked, "x86_64"))


def test_frames_and_names_kept_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Deep stacks of new names reach the frame or the name bound before the stack bound."""
    monkeypatch.setattr(profile_module, "MAX_FRAMES", 10)
    profile = Profile(1, 100.0)
    for n in range(4):
        _sample(profile, (7, "t", [f"f{n}", "shared", "main"]))
    assert profile.distinct == 3 and profile.frames_kept == 9 and profile.overflowed == 1
    monkeypatch.setattr(profile_module, "MAX_FRAMES", 100)
    monkeypatch.setattr(profile_module, "MAX_NAMES", 6)
    _sample(profile, (7, "t", ["g1", "g2", "main"]))  # 5 names + 2 > 6
    _sample(profile, (7, "t", ["f0", "main"]))  # known names: kept
    assert profile.overflowed == 2 and profile.distinct == 4
    (counted,) = profile.threads.values()
    assert counted.stacks[profile_module.OVERFLOW] == 2


def test_short_lived_threads_are_counted_by_name() -> None:
    """A thread-per-request server: a new tid every sample, one entry for the name."""
    profile = Profile(1, 100.0)
    for n in range(100):
        _sample(profile, (1, "server", ["main"]), (1000 + n, "request", ["handle", "start"]))
    assert sorted(profile.threads) == ["request", "server"]
    request = profile.threads["request"]
    assert request.thread_count == 100 and request.samples == 100 and request.tid == 1099
    assert request.label == "request"
    assert profile.threads_seen == 101 and profile.threads_folded == 99
    assert profile.folded() == {("request", "start", "handle"): 100, ("server", "main"): 100}


def test_per_thread_keeps_tids_apart_up_to_a_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(profile_module, "MAX_THREADS", 3)
    profile = Profile(1, 100.0, per_thread=True)
    for n in range(5):
        _sample(profile, (1, "server", ["main"]), (1000 + n, "request", ["handle"]))
    assert sorted(profile.threads, key=str) == [1, 1000, 1001, "request"]
    assert profile.threads[1000].label == "request-1000"
    assert profile.threads["request"].thread_count == 3
    assert profile.threads_by_name == 3 and profile.threads_folded == 2


def test_a_thread_seen_again_is_not_a_new_thread() -> None:
    profile = Profile(1, 100.0)
    for _ in range(3):
        _sample(profile, (1, "main", ["main"]), (2, "worker", ["work"]), (3, "worker", ["work"]))
    assert profile.threads["worker"].thread_count == 2 and profile.threads["worker"].samples == 6
    assert profile.threads_seen == 3


# -- the schedule -----------------------------------------------------------------------


class _ScriptedSession:
    """A Session for testing the schedule alone: backtrace n takes ``costs[n]`` seconds."""

    def __init__(self, costs: dict[int, float], usual: float = 0.0) -> None:
        self.pid = os.getpid()
        self.costs = costs
        self.usual = usual
        self.calls: list[float] = []

    def backtrace(self) -> Backtrace:
        self.calls.append(time.perf_counter())
        time.sleep(self.costs.get(len(self.calls) - 1, self.usual))
        return Backtrace(self.pid, [], "x86_64")


def test_the_clock_starts_after_the_cold_first_sample() -> None:
    session = _ScriptedSession({0: 0.3})
    profile = record(session, rate=50, duration=0.5)
    assert session.calls[1] - session.calls[0] >= 0.3
    # Inside the clock, the cold sample would have cost 15 of the 25 slots.
    assert profile.missed < 10 and profile.samples + profile.missed == pytest.approx(25, abs=1)
    assert profile.duration == 0.5 and profile.end == END_DURATION


def test_a_short_stall_is_made_up() -> None:
    session = _ScriptedSession({5: 0.06})  # six periods late: the next ones come at once
    profile = record(session, rate=100, duration=1.0)
    gaps = [b - a for a, b in zip(session.calls, session.calls[1:])]
    assert sorted(gaps[6:12])[2] < 0.005  # back to back (mostly: the machine may be busy)
    assert profile.samples + profile.missed == pytest.approx(100, abs=3)


def test_a_long_stall_gives_up_its_slots_instead_of_a_burst() -> None:
    session = _ScriptedSession({5: 0.3})  # thirty periods late: beyond CATCH_UP
    profile = record(session, rate=100, duration=1.0)
    gaps = [b - a for a, b in zip(session.calls, session.calls[1:])]
    # On the schedule again: a sample or two may follow at once (the part of
    # a period left over, a busy machine's late wake-up), thirty in a burst may not.
    assert sorted(gaps[6:16])[5] > 0.002, gaps
    assert profile.missed >= 25
    assert profile.samples + profile.missed == pytest.approx(100, abs=3)


def test_the_schedule_does_not_drift() -> None:
    session = _ScriptedSession({}, usual=0.004)  # each sample takes 40 % of the period
    profile = record(session, rate=100, duration=1.0)
    # The n-th sample is due n periods after the first, however long each one
    # took: every slot was taken or counted missed (a busy machine can miss
    # some).  Each sample waiting a period after the last one ended would
    # make 1 / 14 ms = 71 samples, none missed.
    assert profile.samples + profile.missed == pytest.approx(100, abs=2)
    assert profile.samples > 71
