"""Phases: the seconds of each phase of a backtrace, in the order --stats prints them."""

from __future__ import annotations

import time

import pytest

from liveunwind.backtrace.phases import Phases


def test_phases_are_listed_in_the_order_they_ended() -> None:
    phases = Phases()
    with phases.timed("unwind"):
        pass
    with phases.timed("lines"):  # --lines reads ahead before the walk...
        time.sleep(0.01)
    with phases.timed("unwind"):
        time.sleep(0.01)
    with phases.timed("symbolize"):
        pass
    with phases.timed("lines"):  # ...and adds the lines after naming
        time.sleep(0.01)
    assert list(phases.seconds) == ["unwind", "symbolize", "lines"]
    assert phases.seconds["lines"] >= 0.02 and phases.seconds["unwind"] >= 0.01


def test_a_piece_ends_at_stop_or_at_a_time_a_target_recorded() -> None:
    phases = Phases()
    before = time.perf_counter()
    attaching = phases.timed("attach")
    stopped = attaching.stop()
    assert 0 <= phases.seconds["attach"] <= stopped - before
    detaching = phases.timed("detach")
    resumed = detaching.stop(at=stopped + 5.0)
    assert resumed == stopped + 5.0
    phases.add("freeze", 1.5)
    phases.total()
    assert list(phases.seconds) == ["attach", "detach", "freeze", "total"]
    assert phases.seconds["freeze"] == 1.5
    assert phases.seconds["total"] >= phases.seconds["attach"]


def test_a_failed_phase_is_still_counted_and_the_error_goes_on() -> None:
    phases = Phases()
    with pytest.raises(KeyError), phases.timed("copy"):
        raise KeyError("gone")
    assert "copy" in phases.seconds


def test_phases_add_to_a_callers_dictionary() -> None:
    timings = {"open": 0.5}
    phases = Phases(timings)
    with phases.timed("unwind"):
        pass
    assert phases.seconds is timings and list(timings) == ["open", "unwind"]


def test_a_piece_costs_microseconds() -> None:
    """Two perf_counter calls and a dictionary update: far below a millisecond per phase."""
    phases = Phases()
    pieces = 10_000
    started = time.process_time()  # CPU seconds: what a piece costs, however busy the machine
    for _ in range(pieces):
        with phases.timed("unwind"):
            pass
    each = (time.process_time() - started) / pieces
    assert each < 50e-6, f"{each * 1e6:.1f} µs per phase"
