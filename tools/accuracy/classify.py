"""One thread's frames from liveunwind against gdb's and eu-stack's: what kind of difference it is.

Pure: lists of pcs in, a verdict out. The pcs follow one convention on all
three sides (``tests/support/oracles.py``: the exact pc for frame 0 and for a
frame a signal interrupted, the return address for every other frame; gdb's
inline and tail-call frames already dropped), so two frames are the same
frame exactly when their pcs are equal.

First each oracle is compared on its own (``relate``): equal, one a prefix of
the other (we go on after it stops, or stop before it), or a first frame
where they part. Where they part, a frame that comes back within a few frames
tells an *invented* caller (we have frames between two that the oracle has
next to each other) from a *skipped* one (the oracle has frames we stepped
over); a frame that never comes back is a plain difference. Then the thread
gets one verdict (``classify``): equal to both, to one of them, or the
relation to the oracle that follows us furthest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

RESYNC_WINDOW = 8
"""Frames after the first difference in which a shared frame counts as the walks meeting again."""

GDB = "gdb"
EU_STACK = "eu-stack"
ORACLES = (GDB, EU_STACK)


class Kind(StrEnum):
    """How our frames relate to one oracle's."""

    EQUAL = "equal"
    LONGER = "we are longer"
    SHORTER = "we stop early"
    INVENTED = "invented caller"
    SKIPPED = "skipped caller"
    DIFFER = "differ"


@dataclass(frozen=True)
class Relation:
    """Our frames against one oracle's.

    ``at`` is the index of the first frame where they part (the length of the
    common prefix); ``ours`` holds the frames we have there that the oracle
    lacks (the extra frames, the invented callers, our side of a difference),
    ``theirs`` the oracle's frames we lack (where we stopped, the skipped
    callers, its side of a difference).
    """

    kind: Kind
    at: int
    ours: tuple[int, ...] = ()
    theirs: tuple[int, ...] = ()


class Verdict(StrEnum):
    """A thread's line in the table."""

    EQUAL_BOTH = "equal to both"
    EQUAL_EU_STACK = "equal to eu-stack only"
    EQUAL_GDB = "equal to gdb only"
    LONGER = "we are longer"
    SHORTER = "we stop early"
    INVENTED = "invented caller"
    SKIPPED = "skipped caller"
    DIFFER = "differ"
    UNMATCHED = "not seen by all three"


_VERDICT_OF_KIND = {
    Kind.LONGER: Verdict.LONGER,
    Kind.SHORTER: Verdict.SHORTER,
    Kind.INVENTED: Verdict.INVENTED,
    Kind.SKIPPED: Verdict.SKIPPED,
    Kind.DIFFER: Verdict.DIFFER,
}


@dataclass(frozen=True)
class ThreadVerdict:
    """A thread's verdict, the oracle it was measured against, and both relations.

    ``against`` is ``"both"`` for the equal-to-both verdict, the oracle's name
    otherwise, and None when a side did not see the thread.
    """

    verdict: Verdict
    against: str | None
    relations: dict[str, Relation]


def in_code(frames: Sequence[int], code: Sequence[tuple[int, int]]) -> int:
    """How many frames, from frame 0, have a pc in executable memory (``code``: start, end).

    A pc outside every executable mapping cannot be a frame of the stopped
    process (gdb, walking on past its information, reads stack words such as
    ``0x4`` as return addresses), so an oracle's walk is taken to end at the
    first such frame. The end is inclusive: a return address may follow a
    call that is the last instruction of its mapping.
    """
    count = 0
    for pc in frames:
        if not any(start <= pc <= end for start, end in code):
            break
        count += 1
    return count


def _first_at(haystack: Sequence[int], needle: int, start: int, window: int) -> int | None:
    """The index of ``needle`` in ``haystack[start:start + window]``, or None."""
    for index in range(start, min(len(haystack), start + window)):
        if haystack[index] == needle:
            return index
    return None


def relate(ours: Sequence[int], theirs: Sequence[int], window: int = RESYNC_WINDOW) -> Relation:
    """Compare our pcs with one oracle's, frame 0 first.

    At the first frame that differs (not frame 0: a different frame 0 means a
    different instant, a plain difference), if the oracle's frame turns up among
    our next ``window`` frames we invented the frames before it; if ours turns
    up among the oracle's next frames we skipped the oracle's frames before it;
    if both, the shorter detour wins.
    """
    at = 0
    while at < len(ours) and at < len(theirs) and ours[at] == theirs[at]:
        at += 1
    if at == len(ours) and at == len(theirs):
        return Relation(Kind.EQUAL, at)
    if at == len(theirs):
        return Relation(Kind.LONGER, at, ours=tuple(ours[at:]))
    if at == len(ours):
        return Relation(Kind.SHORTER, at, theirs=tuple(theirs[at:]))
    if at > 0:
        ours_meet = _first_at(ours, theirs[at], at + 1, window)
        theirs_meet = _first_at(theirs, ours[at], at + 1, window)
        if ours_meet is not None and (theirs_meet is None or ours_meet <= theirs_meet):
            return Relation(Kind.INVENTED, at, ours=tuple(ours[at:ours_meet]))
        if theirs_meet is not None:
            return Relation(Kind.SKIPPED, at, theirs=tuple(theirs[at:theirs_meet]))
    return Relation(Kind.DIFFER, at, ours=tuple(ours[at:]), theirs=tuple(theirs[at:]))


def classify(
    ours: Sequence[int] | None,
    oracles: dict[str, Sequence[int] | None],
    limit: int,
) -> ThreadVerdict:
    """One thread's verdict: ours against ``oracles`` (``GDB`` and ``EU_STACK`` → pcs).

    None stands for a side that did not see the thread (or failed on its
    process): the thread is then unmatched, with the relations that could be
    made. Every side is cut to ``limit`` frames first, the frame limit all
    three ran with, so a stack deeper than the limit compares on its top.
    When we equal neither oracle, the verdict is our relation to the one we
    follow furthest (the longer common prefix; on a tie, the oracle with more
    frames, since the one that stops first is the one that gave up; then
    eu-stack).
    """
    relations = {}
    for name, frames in oracles.items():
        if ours is not None and frames is not None:
            relations[name] = relate(ours[:limit], frames[:limit])
    if ours is None or len(relations) < len(ORACLES):
        return ThreadVerdict(Verdict.UNMATCHED, None, relations)
    equal = {name for name, relation in relations.items() if relation.kind is Kind.EQUAL}
    if equal == set(ORACLES):
        return ThreadVerdict(Verdict.EQUAL_BOTH, "both", relations)
    if equal == {EU_STACK}:
        return ThreadVerdict(Verdict.EQUAL_EU_STACK, EU_STACK, relations)
    if equal == {GDB}:
        return ThreadVerdict(Verdict.EQUAL_GDB, GDB, relations)

    def nearness(name: str) -> tuple[int, int, bool]:
        frames = oracles[name]
        assert frames is not None
        return relations[name].at, len(frames[:limit]), name == EU_STACK

    nearest = max(relations, key=nearness)
    return ThreadVerdict(_VERDICT_OF_KIND[relations[nearest].kind], nearest, relations)
