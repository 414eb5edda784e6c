"""What a walk leaves for the next one: whole walks, walk suffixes, and whether to keep them.

A thread parked where it was, or a busy thread back in the loop it was
sampled in, walks as it walked before: :class:`RememberedWalk` gives a
thread its last walk whole when its registers and every word that walk read
are unchanged, and :class:`SuffixRecord` gives a walk the rest of an earlier
one from a frame whose loop state, the registers the rest reads and every
word it reads are unchanged.  :class:`RememberingChoice` keeps either only
where it costs less than walking.  The :class:`~liveunwind.unwinder.cache.UnwindCache`
holds them, and says when they go (ARCHITECTURE.md, Caches).
"""

from __future__ import annotations

from liveunwind.unwinder.plan import Plan

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from operator import itemgetter
    from typing import Any

    from liveunwind.frames import Method, StopReason, ThreadBacktrace

    #: What a frame of a remembered walk was: pc, sp, method, cfa, signal frame,
    #: exact pc, module path, module offset.
    FrameFacts = tuple[int, int, Method, int | None, bool, bool, str | None, int | None]
else:
    # operator.py's own itemgetter, from the C module under it: operator.py's body, which
    # replaces its Python functions with these, costs a cold start 0.3-0.5 ms
    from _operator import itemgetter


#: Times a kept suffix may miss before a new walk's suffix at its pc and sp replaces it.
SUFFIX_MISSES_BEFORE_REPLACED = 4


#: Walks in each step of a round of :class:`RememberingChoice` (warm-up, timed
#: remembering, timed not), and walks the cheaper way is then kept for (then both are
#: timed again: a program's phases differ), in at least CHOSEN_BACKTRACES backtraces.
TRIAL_WALKS = 64
CHOSEN_WALKS = 4096
#: A trial costs whole backtraces: a process of 200 threads, whose 4,096 walks were 21
#: backtraces, walked every thread anew in 2 of every 23 (timed plainly, then remembering
#: from nothing): 60 % of its profile's walking time, 800 of 15,000 walks.
CHOSEN_BACKTRACES = 256


class RememberingChoice:
    """Whether this target's walks are remembered (suffixes and whole walks) or just walked.

    Remembering gives the same frames either way, but what it costs depends
    on the program: a busy thread 30 frames deep that walks its hot loop
    again takes its last walk whole (perf samples of bench/target.c: 1.3 →
    0.67 s), and parked threads get their last walk again; xz's perf
    samples differ in their first frames' words every time, and recording
    the walks, checking and building suffixes cost more than the frames
    they save (43,000 samples: 4.1 s walked, 6.0 s remembering).  So the two
    ways are timed in turns and the cheaper one is kept.

    A round is four phases, each made of whole backtraces (a walk is
    remembered for the next backtrace, so a phase that ended inside one would
    time the recording and not what it gives): remembering untimed (what is
    kept fills up), remembering timed, walking timed, each until it has
    :data:`TRIAL_WALKS` walks; then the cheaper way until :data:`CHOSEN_WALKS`
    walks in at least :data:`CHOSEN_BACKTRACES` backtraces.
    """

    __slots__ = ("_phase", "_phase_backtraces", "_phase_walks", "_spent", "_walks", "remembering")

    def __init__(self) -> None:
        self.remembering = True
        self._phase = 0  # warm-up, timed remembering, timed walking, chosen
        self._phase_walks = 0
        self._phase_backtraces = 0
        self._spent = [0.0, 0.0]  # seconds walking: not remembering, remembering
        self._walks = [0, 0]

    def _new_round(self) -> None:
        self.remembering, self._phase = True, 0
        self._spent, self._walks = [0.0, 0.0], [0, 0]

    def walked(self, seconds: float) -> None:
        """Counts one walk of ``seconds`` in the way in force."""
        self._phase_walks += 1
        if self._phase in (1, 2):
            way = int(self.remembering)
            self._spent[way] += seconds
            self._walks[way] += 1

    def began(self) -> None:
        """A backtrace begins: the next phase starts if this one has had its walks."""
        phase, walks = self._phase, self._phase_walks
        if phase == 3:
            self._phase_backtraces += 1
            if walks < CHOSEN_WALKS or self._phase_backtraces < CHOSEN_BACKTRACES:
                return
        elif walks < TRIAL_WALKS:
            return
        self._phase_walks = self._phase_backtraces = 0
        if phase == 3:
            self._new_round()
        elif phase == 2:
            plain, remembering = (
                spent / max(count, 1) for spent, count in zip(self._spent, self._walks)
            )
            self._phase, self.remembering = 3, remembering <= plain
        else:
            self._phase, self.remembering = phase + 1, phase == 0


class RememberedWalk:
    """One thread's walk, and what it was walked from: its registers and the words it read.

    The walk read no memory but those words of one stack copy (``read_word``;
    the target's count of other reads did not move), asked the mappings and
    modules (which :meth:`UnwindCache.begin` checks are unchanged) and the
    cache's rules (which say what the tables say): from the same registers
    and the same words it gives the same frames.  The words are compared as
    one tuple picked from the new copy (``operator.itemgetter`` over a
    memoryview of 64-bit words: 37 frames' 74 words in about 2 µs, where
    walking them again takes some 130 µs).  The picker is made the first
    time a thread comes back with the same registers: a sampled thread
    (perf) nearly never does, and making it for every sample cost 8 µs.

    A consumer that counts stacks of names (a wall-clock profile) keeps the
    walk's in :attr:`stack` (:meth:`keep_stack`) once it named the thread's
    walk (:attr:`given`: the walk the stepper gave from this one); later
    replays then come without frames and that stack counts again: making and
    naming the frames of 8 parked threads was 0.35 ms of a 9-thread sample.
    The stack is kept with the suffix the walk was taken from too
    (:attr:`source`), for the next walk taken whole from there.
    """

    __slots__ = (
        "_addresses",
        "_pick",
        "_span",
        "_values",
        "block_start",
        "detail",
        "frames",
        "given",
        "max_frames",
        "reason",
        "registers",
        "source",
        "stack",
        "words",
    )

    def __init__(
        self,
        registers: dict[int, int],
        block_start: int,
        addresses: list[int],
        values: list[int],
        max_frames: int,
        frames: tuple[FrameFacts, ...],
        reason: StopReason,
        detail: str,
    ) -> None:
        """``addresses``: the words the walk read, in order; ``values``: what it read there."""
        self.registers = registers
        self.block_start = block_start
        self.max_frames = max_frames
        self.frames = frames
        #: Why the walk ended, and its detail.
        self.reason = reason
        self.detail = detail
        #: The thread's walk the stepper last gave from this one (walked, taken from a
        #: suffix, or replayed: its frames are made only while no :attr:`stack` is kept).
        self.given: ThreadBacktrace | None = None
        #: The stack of names a consumer made of the frames: the same facts in the same
        #: generation of the module map (which the walk does not outlast) name the same.
        self.stack: tuple[str, ...] | None = None
        #: The suffix record this walk is, from which frame on; None: none is.
        self.source: tuple[SuffixRecord, int] | None = None
        self._addresses: list[int] | None = addresses
        self._values = values
        #: The copy's words the walk read (by index from its start), and their values:
        #: made on the first comparison (-1: a word lay outside the copy or unaligned).
        self._pick: itemgetter[Any] | None = None
        self._span = 0
        self.words: object = None

    def keep_stack(self, stack: tuple[str, ...]) -> None:
        """Keeps the stack of names a consumer made of this walk's frames (see the class)."""
        self.stack = stack
        if self.source is not None:
            record, index = self.source
            if index in record.stacks or len(record.stacks) < MAX_RECORD_STACKS:
                record.stacks[index] = stack

    def holds_for(
        self, registers: dict[int, int], block: tuple[int, bytes | bytearray], max_frames: int
    ) -> bool:
        """Whether a walk from ``registers`` over the copy ``block`` is this one again."""
        if (
            block[0] != self.block_start
            or max_frames != self.max_frames
            or registers != self.registers
        ):
            return False
        if self._addresses is not None:
            self._make_pick()
        if self._span < 0:
            return False
        return self._pick is None or (
            len(block[1]) >= self._span and self._words(block[1]) == self.words
        )

    def _make_pick(self) -> None:
        addresses, values, start = self._addresses, self._values, self.block_start
        assert addresses is not None
        self._addresses = None
        if not addresses:
            return
        if start & 7 or any(at < start or at & 7 for at in addresses):
            self._span = -1
            return
        indices = [(at - start) >> 3 for at in addresses]
        self._pick = itemgetter(*indices)
        self._span = (max(indices) + 1) * 8
        self.words = tuple(values) if len(indices) > 1 else values[0]

    def _words(self, data: bytes | bytearray) -> object:
        assert self._pick is not None
        with memoryview(data) as view, view[: len(data) & ~7].cast("Q") as words:
            return self._pick(words)


#: Most walk suffixes an :class:`UnwindCache` holds, and most frames their records hold (a
#: record counted once per entry: an upper bound); the one used longest ago goes first.  A
#: record's frame is about 0.4 KB (measured: 21 records of bench/target.c's walks, 333
#: frames, 134 KB), so the suffixes of one target take at most some 13 MB; the bench
#: target's 10,711 perf samples left 57 entries.
MAX_SUFFIXES = 1024
MAX_SUFFIX_FRAMES = 32_768

#: A frame's (pc, sp), from its facts.
_PC_SP = itemgetter(0, 1)

#: What a frame's step used of its registers, where it was not a plan's fast path: all of them.
EVERY_REGISTER = None
#: The walk ended at the frame as the program's entry function: only its pc and sp were used.
AT_ENTRY = "entry"


#: Stacks of names a :class:`SuffixRecord` keeps, for walks taken whole from that many of its
#: frames: each holds a name (shared strings) per frame from there on, so a record of n
#: frames kept for every frame would hold n²/2.
MAX_RECORD_STACKS = 8


class SuffixRecord:
    """A walk, and for each of its frames what the rest of the walk from there was made of.

    The rest of a walk from frame k depends only on what the stepper holds
    at frame k — the registers, and the loop's own state: whether the pc is
    exact, how the frame was found, the previous CFA, whether a guess came
    before, the stack the walk is on (``states``) — the words it reads from
    there on, the frames before it only through the repeated-frame check
    (``seen``), and what is immutable in one generation (file-backed code,
    tables, the cache's rules).  Of the registers, only those a later step
    can use count: a plan run by the fast path reads the CFA register, the
    sources of its copies and a return address register it does not load,
    and passes every other register on unread; any other step (a guess, a
    signal frame, a failing rule, an expression) counts as using all of
    them, and so does every frame before it.  ``live[k]`` is (registers
    used, their values) — (None, the whole dict) where all are.
    """

    __slots__ = (
        "_checks",
        "_live",
        "_pending",
        "additive",
        "addresses",
        "detail",
        "facts",
        "marks",
        "pure_from",
        "reason",
        "stacks",
        "states",
        "values",
    )

    def __init__(
        self,
        facts: tuple[FrameFacts, ...],
        states: list[tuple[object, ...]],
        live: list[tuple[tuple[int, ...] | None, object]],
        marks: list[int],
        addresses: list[int],
        values: list[int],
        pure_from: int,
        reason: StopReason,
        detail: str,
        *,
        additive: bool = False,
    ) -> None:
        self.facts = facts
        self.states = states
        self._live = live
        #: What ``live`` is made of, until it is: the walked frames' registers and steps,
        #: the suffix's ``live``, the pc and sp register numbers, :meth:`UnwindCache.uses_of`.
        self._pending: (
            tuple[
                list[dict[int, int]],
                list[Plan | str | None],
                list[tuple[tuple[int, ...] | None, object]],
                frozenset[int],
                Callable[[Plan], tuple[frozenset[int], frozenset[int]] | None],
            ]
            | None
        ) = None
        #: Where each frame's reads start in ``addresses`` (and ``values``).
        self.marks = marks
        self.addresses = addresses
        self.values = values
        #: The first frame from which the walk read nothing but aligned words of its copy.
        self.pure_from = pure_from
        self.reason = reason
        self.detail = detail
        #: Whether every step from ``pure_from`` on was a table's plan without a DWARF
        #: expression (or the end at the entry function): its arithmetic is then offsets
        #: added to registers and words read, which gives the same walk moved by any
        #: distance that keeps a word's alignment (``unwinder/layouts.py``).  An
        #: expression may mask an address, and a general step may do anything.
        self.additive = additive
        #: frame → the stack of names of the walk from there (RememberedWalk.keep_stack).
        self.stacks: dict[int, tuple[str, ...]] = {}
        #: frame → (lowest word read, picker, bytes spanned, words read, later frames' keys).
        self._checks: dict[
            int, tuple[int, itemgetter[Any] | None, int, object, frozenset[tuple[int, int]]]
        ] = {}

    @classmethod
    def of(
        cls,
        facts: tuple[FrameFacts, ...],
        trail: SuffixTrail,
        block: tuple[int, bytes | bytearray],
        reason: StopReason,
        detail: str,
        uses_of: Callable[[Plan], tuple[frozenset[int], frozenset[int]] | None],
    ) -> SuffixRecord:
        """The record of a walk: ``trail``'s frames, then those of the suffix it took, if any."""
        walked = len(trail.registers)
        states, marks = trail.states, trail.marks
        addresses, values = trail.addresses, trail.values
        tail: list[tuple[tuple[int, ...] | None, object]] = []
        additive = True
        if trail.tail is not None:
            old, at = trail.tail
            additive = old.additive
            first, shift = old.marks[at], len(addresses)
            states = states + old.states[at:]
            marks = marks + [mark - first + shift for mark in old.marks[at:]]
            addresses = addresses + old.addresses[first:]
            values = values + old.values[first:]
            tail = old.live[at:]  # made already: the suffix was found to hold
        start, end = block[0], block[0] + len(block[1]) - 8
        last_bad = max(
            (
                n
                for n, address in enumerate(trail.addresses)
                if address & 7 or not start <= address <= end
            ),
            default=-1,
        )
        pure_from, others, last = walked, trail.others, trail.others_end
        while pure_from and others[pure_from - 1] == last and marks[pure_from - 1] > last_bad:
            pure_from -= 1
        additive = additive and all(
            step == AT_ENTRY
            or (isinstance(step, Plan) and not step.cfa_expression and not step.expressions)
            for step in trail.used[pure_from:]
        )
        record = cls(
            facts,
            states,
            [],
            marks,
            addresses,
            values,
            pure_from,
            reason,
            detail,
            additive=additive,
        )
        record._pending = (trail.registers, trail.used, tail, trail.pc_sp, uses_of)
        return record

    @property
    def live(self) -> list[tuple[tuple[int, ...] | None, object]]:
        """Per frame: the registers the rest of the walk used and their values, or (None,
        every register); made when first asked (a walk no other walk meets is never)."""
        if self._pending is None:
            return self._live
        registers, steps, tail, pc_sp, uses_of = self._pending
        self._pending = None
        after: frozenset[int] | None = frozenset()
        if tail:
            used = tail[0][0]
            after = None if used is None else frozenset(used)
        prefix: list[tuple[tuple[int, ...] | None, object]] = []
        for index in range(len(registers) - 1, -1, -1):
            step = steps[index]
            if step is EVERY_REGISTER or after is None:
                after = None
            elif step == AT_ENTRY:
                after = pc_sp
            else:
                assert isinstance(step, Plan)
                uses = uses_of(step)
                after = None if uses is None else uses[0] | (after - uses[1])
            if after is None:
                prefix.append((None, registers[index]))
            else:
                used = tuple(sorted(after))
                prefix.append((used, tuple(map(registers[index].get, used))))
        prefix.reverse()
        self._live = prefix + tail
        return self._live

    def holds_at(
        self,
        index: int,
        registers: dict[int, int],
        state: tuple[object, ...],
        seen: set[tuple[int, int]],
        count: int,
        limit: int,
        block: tuple[int, bytes | bytearray],
    ) -> bool:
        """Whether a walk at its frame ``count`` with ``registers`` and ``state``, having seen
        ``seen``, over the copy ``block``, goes on as this walk did from frame ``index``."""
        if state != self.states[index]:
            return False
        if limit and count + len(self.facts) - index > limit:
            return False
        used, wanted = self.live[index]
        if used is None:
            if registers != wanted:
                return False
        elif tuple(map(registers.get, used)) != wanted:
            return False
        check = self._checks.get(index)
        if check is None:
            check = self._check(index)
        base, pick, span, words, keys = check
        if keys and not seen.isdisjoint(keys):
            return False  # the walk would stop at a frame it saw before: not as this one went on
        if pick is None:
            return True
        start, data = block
        at = base - start
        if at < 0 or at & 7 or at + span > len(data):
            return False
        with memoryview(data) as view, view[at : at + span].cast("Q") as copy:
            return bool(pick(copy) == words)

    def _check(
        self, index: int
    ) -> tuple[int, itemgetter[Any] | None, int, object, frozenset[tuple[int, int]]]:
        """What :meth:`holds_at` compares for frame ``index``, made the first time it is asked."""
        first = self.marks[index]
        addresses = self.addresses[first:]
        keys = frozenset(map(_PC_SP, self.facts[index + 1 :]))
        check: tuple[int, itemgetter[Any] | None, int, object, frozenset[tuple[int, int]]]
        if not addresses:
            check = (0, None, 0, None, keys)
        else:
            base = min(addresses)
            indices = [(address - base) >> 3 for address in addresses]
            pick = itemgetter(*indices)
            words = tuple(self.values[first:]) if len(indices) > 1 else self.values[first]
            check = (base, pick, (max(indices) + 1) * 8, words, keys)
        self._checks[index] = check
        return check


class SuffixTrail:
    """What a walk under way records of each frame it walks, for its :class:`SuffixRecord`."""

    __slots__ = (
        "addresses",
        "marks",
        "others",
        "others_end",
        "pc_sp",
        "registers",
        "states",
        "tail",
        "used",
        "values",
    )

    def __init__(self, pc: int, sp: int) -> None:
        #: The words read, in order, and their values.
        self.addresses: list[int] = []
        self.values: list[int] = []
        #: Per frame walked: its registers, its state, where its reads start, the count of
        #: the target's other reads before it, and what its step used.
        self.registers: list[dict[int, int]] = []
        self.states: list[tuple[object, ...]] = []
        self.marks: list[int] = []
        self.others: list[int | None] = []
        self.used: list[Plan | str | None] = []
        self.others_end: int | None = None
        #: The suffix the walk took instead of walking on: a record and its frame.
        self.tail: tuple[SuffixRecord, int] | None = None
        self.pc_sp = frozenset((pc, sp))


def plan_uses(plan: Plan, pc: int, sp: int) -> tuple[frozenset[int], frozenset[int]] | None:
    """The registers a plan's run reads, and those it sets in the caller; None: it may read any.

    A DWARF expression may read any register, so a plan with one is None.
    """
    if plan.cfa_expression or plan.expressions:
        return None
    written = {number for number, _ in plan.loads}
    written.update(number for number, _ in plan.values)
    written.update(number for number, _ in plan.copies)
    written.update(plan.undefined)
    if not plan.sets_sp:
        written.add(sp)
    read = {pc, sp, plan.cfa_register}
    read.update(source for _, source in plan.copies)
    if plan.return_address not in written:
        read.add(plan.return_address)
    written.add(pc)
    return frozenset(read), frozenset(written)
