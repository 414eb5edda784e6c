"""RememberingChoice: remembered walks are kept only where they cost less than walking."""

from __future__ import annotations

from liveunwind.unwinder.remembered import (
    CHOSEN_BACKTRACES,
    CHOSEN_WALKS,
    TRIAL_WALKS,
    RememberingChoice,
)


def _backtraces(
    choice: RememberingChoice, count: int, threads: int, remembering: float, plain: float
) -> list[bool]:
    """The way in force in each of ``count`` backtraces of ``threads`` walks each."""
    ways = []
    for _ in range(count):
        choice.began()
        ways.append(choice.remembering)
        for _ in range(threads):
            choice.walked(remembering if choice.remembering else plain)
    return ways


def test_the_cheaper_way_is_kept_after_a_warm_up_and_both_trials() -> None:
    choice = RememberingChoice()
    trial = TRIAL_WALKS  # one walk a backtrace: a perf sample
    ways = _backtraces(choice, 3 * trial + CHOSEN_WALKS, 1, remembering=1.0, plain=2.0)
    assert ways[: 2 * trial] == [True] * (2 * trial)
    assert ways[2 * trial : 3 * trial] == [False] * trial
    assert ways[3 * trial :] == [True] * CHOSEN_WALKS
    # xz's case: remembering costs more: walked plainly until the next round.
    ways = _backtraces(choice, 3 * trial + CHOSEN_WALKS, 1, remembering=3.0, plain=2.0)
    assert ways[3 * trial :] == [False] * CHOSEN_WALKS
    assert _backtraces(choice, 1, 1, 1.0, 1.0) == [True]  # a new round starts remembering


def test_phases_are_whole_backtraces() -> None:
    """200 threads a backtrace: warm-up, timed remembering and timed walking are one
    backtrace each (a walk is remembered for the next backtrace: the second is the first
    that can take what the first kept)."""
    choice = RememberingChoice()
    ways = _backtraces(choice, 5, 200, remembering=1.0, plain=2.0)
    assert ways == [True, True, False, True, True]


def test_the_chosen_way_lasts_its_backtraces_too() -> None:
    """Each trial walks every thread of its backtrace: with 200 threads, the chosen way
    lasts CHOSEN_BACKTRACES backtraces (CHOSEN_WALKS of them would be 21), so the two
    backtraces that walk all 200 anew come once in CHOSEN_BACKTRACES + 3."""
    choice = RememberingChoice()
    rounds = 2 * (CHOSEN_BACKTRACES + 3)
    ways = _backtraces(choice, rounds, 200, remembering=1.0, plain=2.0)
    assert ways.count(False) == 2
    assert ways[: CHOSEN_BACKTRACES + 3] == [True, True, False] + [True] * CHOSEN_BACKTRACES
    assert ways[CHOSEN_BACKTRACES + 3 : CHOSEN_BACKTRACES + 6] == [True, True, False]


def test_the_warm_up_is_not_timed() -> None:
    """A cold start (what is kept filling up) is no measure of remembering."""
    choice = RememberingChoice()
    choice.began()
    for seconds in [100.0] * TRIAL_WALKS:  # the first walks, building what is kept
        choice.walked(seconds)
    ways = _backtraces(choice, 2 * TRIAL_WALKS, 1, remembering=1.0, plain=2.0)
    assert ways == [True] * TRIAL_WALKS + [False] * TRIAL_WALKS
    assert _backtraces(choice, 1, 1, 1.0, 2.0) == [True]  # chosen: the timed walks only
