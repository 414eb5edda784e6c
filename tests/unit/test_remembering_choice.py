"""RememberingChoice: remembered walks are kept only where they cost less than walking."""

from __future__ import annotations

from liveunwind.unwinder.cache import CHOSEN_WALKS, TRIAL_WALKS, RememberingChoice


def _round(choice: RememberingChoice, remembering: float, plain: float) -> list[bool]:
    """The way in force for each walk of one round, each walk taking what its way costs."""
    ways = []
    for _ in range(3 * TRIAL_WALKS + CHOSEN_WALKS):
        ways.append(choice.remembering)
        choice.walked(remembering if choice.remembering else plain)
    return ways


def test_the_cheaper_way_is_kept_after_a_warm_up_and_both_trials() -> None:
    choice = RememberingChoice()
    ways = _round(choice, remembering=1.0, plain=2.0)
    assert ways[: 2 * TRIAL_WALKS] == [True] * (2 * TRIAL_WALKS)
    assert ways[2 * TRIAL_WALKS : 3 * TRIAL_WALKS] == [False] * TRIAL_WALKS
    assert ways[3 * TRIAL_WALKS :] == [True] * CHOSEN_WALKS
    # xz's case: remembering costs more: walked plainly until the next round.
    ways = _round(choice, remembering=3.0, plain=2.0)
    assert ways[3 * TRIAL_WALKS :] == [False] * CHOSEN_WALKS
    assert choice.remembering  # the next round starts remembering again


def test_the_warm_up_is_not_timed() -> None:
    """A cold start (what is kept filling up) is no measure of remembering."""
    choice = RememberingChoice()
    for _ in range(TRIAL_WALKS):
        choice.walked(100.0)  # the first walks, building what is kept
    for _ in range(TRIAL_WALKS):
        choice.walked(1.0)
    for _ in range(TRIAL_WALKS):
        choice.walked(2.0)
    assert choice.remembering
