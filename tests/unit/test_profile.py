"""``liveunwind profile`` without a target: the flame graph's escaping and bounds, the schedule.

The schedule is driven by a scripted session whose backtraces take the time
the test says.  Profiles of a real program are tests/system/test_profile.py.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ElementTree
from typing import Any

import pytest

from liveunwind.backtrace import profile as profile_module
from liveunwind.backtrace.profile import END_DURATION, Profile, record
from liveunwind.cli.flamegraph import render
from liveunwind.frames import (
    Backtrace,
    Frame,
    Method,
    SourceLocation,
    StopReason,
    ThreadBacktrace,
)

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


class _SimulatedTime:
    """A clock and a sleep that only move when told: the schedule checked without the machine.

    Each sleep wakes ``oversleep`` seconds late, as a busy machine's do.
    """

    def __init__(self, oversleep: float = 0.0) -> None:
        self.now = 1000.0
        self.oversleep = oversleep

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds > 0
        self.now += seconds + self.oversleep


class _ScriptedSession:
    """A Session for the schedule alone: backtrace n takes ``costs[n]`` (simulated) seconds."""

    def __init__(self, costs: dict[int, float], usual: float = 0.0, oversleep: float = 0.0) -> None:
        self.pid = os.getpid()
        self.costs = costs
        self.usual = usual
        self.time = _SimulatedTime(oversleep)
        self.calls: list[float] = []
        self.modules = None  # no module map: the stacks are empty

    def backtrace(self) -> Backtrace:
        self.calls.append(self.time.now)
        self.time.now += self.costs.get(len(self.calls) - 1, self.usual)
        return Backtrace(self.pid, [], "x86_64")

    def replayable_walks(self) -> None:
        return None  # no walks: the stacks are empty

    def record(self, **keywords: Any) -> Profile:
        return record(self, clock=self.time.clock, sleep=self.time.sleep, **keywords)

    def gaps(self) -> list[float]:
        """Seconds between one sample's start and the next's, rounded to microseconds."""
        return [round(b - a, 6) for a, b in zip(self.calls, self.calls[1:])]


def test_the_clock_starts_after_the_cold_first_sample() -> None:
    session = _ScriptedSession({0: 0.3})
    profile = session.record(rate=50, duration=0.5)
    assert session.gaps()[0] == 0.3 + 0.02  # slot 1: one period after the clock started
    # Inside the clock, the cold sample would have cost 15 of the 25 slots.
    assert profile.missed == 0 and profile.samples == 25
    assert profile.duration == 0.5 and profile.end == END_DURATION


def test_a_short_stall_is_made_up() -> None:
    session = _ScriptedSession({5: 0.06})  # six periods late: the next ones come at once
    profile = session.record(rate=100, duration=1.0)
    gaps = session.gaps()
    assert gaps[:5] == [0.01] * 5 and gaps[5] == 0.06
    assert gaps[6:11] == [0.0] * 5  # back to back until the schedule is kept again
    assert set(gaps[11:]) == {0.01}
    assert profile.missed == 0 and profile.samples == 100


def test_a_long_stall_gives_up_its_slots_instead_of_a_burst() -> None:
    session = _ScriptedSession({5: 0.3})  # thirty periods late: beyond CATCH_UP
    profile = session.record(rate=100, duration=1.0)
    gaps = session.gaps()
    assert gaps[5] == 0.3
    # On the schedule again at once: what is left of the slot it lands in is
    # taken back to back, thirty in a burst are not.
    assert gaps[6:].count(0.0) <= 2 and set(gaps[6:]) <= {0.0, 0.01}, gaps
    assert profile.missed >= 28
    assert profile.samples + profile.missed == 100


def test_the_schedule_does_not_drift() -> None:
    # Each sample takes 40 % of the period, and each sleep wakes a millisecond late.
    session = _ScriptedSession({}, usual=0.004, oversleep=0.001)
    profile = session.record(rate=100, duration=1.0)
    # The n-th sample is due n periods after the first, however long each one
    # took: every slot was taken.  Each sample waiting a period after the
    # last one ended would make 1 / 15 ms = 66 samples.
    assert profile.missed == 0 and profile.samples == 100
    assert set(session.gaps()[1:]) == {0.01}  # each a millisecond late, none later


def test_each_name_keeps_where_it_was_first_seen() -> None:
    """What --pprof and --speedscope say of a name beyond it: the first pc, file and line."""
    profile = Profile(1, 100.0)
    for pc in (0x1010, 0x1020):
        frame = Frame(0, pc, 0x7000, Method.CONTEXT)
        frame.function, frame.file, frame.line = "work", "/src/a.c", 3
        inlined = SourceLocation("helper", "/src/a.h", 9)
        frame.inlined = (inlined,)
        thread = ThreadBacktrace(7, "t", [frame], StopReason.END_OF_STACK)
        profile.add(Backtrace(1, [thread], "x86_64"))
    (counted,) = profile.threads.values()
    assert counted.stacks == {("work (a.c:3)", "helper (a.h:9)"): 2}
    work, helper = profile.sites["work (a.c:3)"], profile.sites["helper (a.h:9)"]
    assert (work.function, work.file, work.line, work.pc) == ("work", "/src/a.c", 3, 0x1010)
    # An inlined call is at the pc of the frame it was inlined into.
    assert (helper.function, helper.file, helper.line, helper.pc) == (
        "helper",
        "/src/a.h",
        9,
        0x1010,
    )
    assert work.module is None  # no module map given
