"""How many workers the default gives (backtrace/workers.py's worker_count): one per idle CPU.

What runs is what /proc/stat's procs_running said at each look; here the
looks are given, so that a thread running for a moment can be shown not to
count as a busy CPU.  tests/system/test_perf_data_workers.py spins real
processes on every CPU.
"""

from __future__ import annotations

import itertools
import os
import time

import pytest

from liveunwind.backtrace import workers


@pytest.fixture
def cpus() -> int:
    count = len(os.sched_getaffinity(0))
    if count < 2:
        pytest.skip("one CPU: never a worker")
    return count


def _looks(monkeypatch, seen: list[int | None]) -> list[int | None]:
    left = list(seen)
    monkeypatch.setattr(workers, "_running", lambda: left.pop(0))
    return left


def test_a_thread_running_for_a_moment_is_not_a_busy_cpu(monkeypatch, cpus: int) -> None:
    """The looks are a millisecond apart (back to back, a shell starting the next command
    was seen by all three), and the first that sees nothing else running ends them."""
    seen = [1, 1, 0]
    times: list[float] = []

    def running() -> int:
        times.append(time.monotonic())
        return seen[len(times) - 1]

    monkeypatch.setattr(workers, "_running", running)
    assert workers.worker_count(None) == cpus
    assert len(times) == 3
    assert min(later - earlier for earlier, later in itertools.pairwise(times)) >= 0.001
    seen[:] = [0, 1, 1]
    times.clear()
    assert workers.worker_count(None) == cpus
    assert len(times) == 1  # nothing else running: the least it can be


def test_a_cpu_busy_at_every_look_is_busy(monkeypatch, cpus: int) -> None:
    _looks(monkeypatch, [1, 2, 1])
    assert workers.worker_count(None) == max(1, cpus - 1)


def test_unknown_looks_give_every_cpu_and_asked_workers_are_kept(monkeypatch, cpus: int) -> None:
    _looks(monkeypatch, [None, None, None])
    assert workers.worker_count(None) == cpus
    assert workers.worker_count(3) == 3
