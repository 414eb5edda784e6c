"""What unwinding and naming learned about one target's pcs, kept from one backtrace to the next.

One :class:`UnwindCache` per target, one owner, one rule for dropping each
part; see the class.  What is cached elsewhere, and for how long:

- a module's opened file, parsed unwind tables, symbol tables and debug
  file are the module's own (cached properties); the module lives as long
  as the module map that holds it, and a new map of the same target takes
  over every module still mapped exactly as before;
- a JIT registry (``ModuleMap.registry``) is built for one backtrace's
  module map, and the rules it decoded go with it;
- the plans and names found in a file (:class:`FileFacts`) are kept by the
  file and the link-time address, in one table every target of a run may
  share (``pid --name``, ``core DIR``): the second process of a program
  finds its rules and names there.
"""

from __future__ import annotations

from operator import itemgetter

from liveunwind.unwinder.plan import Plan

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from liveunwind.arch import Arch
    from liveunwind.formats.unwind.rules import UnwindRule
    from liveunwind.frames import Method, StopReason
    from liveunwind.modules.module import Module
    from liveunwind.modules.modulemap import ModuleMap
    from liveunwind.targets.base import Mapping

    #: What a frame of a remembered walk was: pc, sp, method, cfa, signal frame,
    #: exact pc, module path, module offset.
    FrameFacts = tuple[int, int, Method, int | None, bool, bool, str | None, int | None]

#: Most entries each table of the cache holds.  A pc costs about 430 bytes
#: over all tables (measured with 100,000 pcs of libc; tests/system/test_executor.py
#: keeps it under 500), so a full cache is some 43 MB.  Deep stacks repeat
#: their return addresses: 9 threads 30 frames deep (bench/target.c) fill 13.
#: :class:`FileFacts` holds as many in each of its tables, however many targets share it.
MAX_ENTRIES = 100_000


class FileFacts:
    """What the unwinder found in files, by file and link-time address: one target's, or a run's.

    ``plans``
        (source, module file key, link-time lookup pc) → the compiled
        :class:`~liveunwind.unwinder.plan.Plan` of that source's rule, or
        None where the source has no entry: the general path's lookups.
    ``shared``
        what a rule does → its plan: the pcs of a module share a few
        plans (100,000 pcs of libc share 166), so each is made once.
    ``names``
        (module file key, link-time address) → (function, offset) from the
        module's symbols, or None.

    The key of a module's file (``Module.file_key``) is its own, or that of
    the module of another target whose file's facts it took over
    (``backtrace/shared.py``: the same device, inode and build-id): nothing
    here depends on where a target mapped the file, so nothing is dropped
    when modules move, and two different files never share an entry.  Each
    table is emptied when it holds :data:`MAX_ENTRIES` (some 43 MB in all,
    for every target sharing it).
    """

    __slots__ = ("names", "plans", "shared")

    def __init__(self) -> None:
        self.plans: dict[tuple[str, object, int], Plan | None] = {}
        self.shared: dict[tuple[object, ...], Plan] = {}
        self.names: dict[tuple[object, int], tuple[str, int] | None] = {}


#: Times a kept suffix may miss before a new walk's suffix at its pc and sp replaces it.
SUFFIX_MISSES_BEFORE_REPLACED = 4


#: Walks in each step of a round of :class:`RememberingChoice` (warm-up, timed
#: remembering, timed not), and walks the cheaper way is then kept for (then both are
#: timed again: a program's phases differ).
TRIAL_WALKS = 64
CHOSEN_WALKS = 4096


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
    :data:`TRIAL_WALKS` walks; then the cheaper way until :data:`CHOSEN_WALKS`.
    """

    __slots__ = ("_phase", "_phase_walks", "_spent", "_walks", "remembering")

    def __init__(self) -> None:
        self.remembering = True
        self._phase = 0  # warm-up, timed remembering, timed walking, chosen
        self._phase_walks = 0
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
        if walks < (CHOSEN_WALKS if phase == 3 else TRIAL_WALKS):
            return
        self._phase_walks = 0
        if phase == 3:
            self._new_round()
        elif phase == 2:
            plain, remembering = (
                spent / max(count, 1) for spent, count in zip(self._spent, self._walks)
            )
            self._phase, self.remembering = 3, remembering <= plain
        else:
            self._phase, self.remembering = phase + 1, phase == 0


class UnwindCache:
    """Per-pc facts and decoded rules of one target, for the stepper and the symbolizer.

    ``plans``, ``shared``
        the tables of its :class:`FileFacts` (``files``): plans by file and
        link-time pc, and by what a rule does.
    ``at``
        lookup pc → (its module, the plan of the first table that has a
        rule there): the fast path, one dictionary lookup per frame.
    ``code``
        return addresses already found in file-backed executable mappings.
    ``names``
        lookup pc → (function, offset) from its module's symbols, or None
        (found in ``files.names`` first, by file and link-time address).
    ``walks``
        tid → the :class:`RememberedWalk` of that thread in the last
        backtrace: a thread parked where it was — the same registers, and
        the same words at every address its walk read — is not walked
        again.  Only walks that read nothing but words of the thread's own
        stack copy are kept, so the same input gives the same frames.
    ``suffixes``
        (pc, sp) of a frame → the :class:`SuffixRecord` of a walk and that
        frame's index in it: a walk that comes to a frame whose registers
        (those the rest of the remembered walk used), loop state and the
        words the rest read are the same takes the rest of its frames from
        there (a sampled thread busy in one place: its frames below the
        first few are the same in every sample).  Kept only from a frame on
        which the walk read nothing but aligned words of its stack copy.

    Who drops what, when:

    - The owner — the :class:`~liveunwind.backtrace.backtracer.Backtracer`
      of a target, which a Session keeps across its backtraces — calls
      :meth:`begin` before each backtrace.  When the module map differs
      from the previous one (a module was mapped, unmapped or moved), the
      cache starts a new :attr:`generation` and drops ``at``, ``code``
      and ``names``: their keys are absolute addresses.  ``files`` stays:
      its keys are files and link-time addresses.
    - :meth:`begin` also drops ``at`` when the target has a JIT registry: a
      JIT may register other code at the same address before the next
      backtrace, so the per-pc plans last one backtrace there.  ``files``
      (module tables and symbols only), ``code`` and ``names`` (module
      symbols only; JIT names are never cached) stay.
    - ``walks`` lasts one backtrace: :meth:`begin` hands the walks the last
      backtrace remembered to this one, and drops them when the modules
      changed (a new generation: also a file changed in place) or any
      mapping did (a stack, code or data mapped or unmapped: what the walk
      asks of mappings), or when the target has a JIT registry.
    - ``suffixes`` last across backtraces and go with the walks (a new
      generation, a mapping changed, a JIT registry); at most
      :data:`MAX_SUFFIXES` entries and :data:`MAX_SUFFIX_FRAMES` frames, the
      one used longest ago going first.
    - A table that holds :data:`MAX_ENTRIES` is emptied before its next
      entry goes in (the ``remember_*`` methods): clear-when-full needs no
      bookkeeping on a hit, which keeps a cached frame at one lookup.

    The stepper and the symbolizer only read and add.
    """

    __slots__ = (
        "_identity",
        "entry",
        "_mappings",
        "_next_walks",
        "at",
        "code",
        "files",
        "generation",
        "names",
        "plans",
        "replayed",
        "shared",
        "suffixed",
        "suffixes",
        "_suffix_frames",
        "_suffix_misses",
        "choice",
        "_uses",
        "walks",
    )

    def __init__(self, files: FileFacts | None = None) -> None:
        """``files``: the plans and names of files that other targets of the run share."""
        self.files = FileFacts() if files is None else files
        self.plans = self.files.plans
        self.shared = self.files.shared
        self.at: dict[int, tuple[Module | None, Plan | None]] = {}
        self.code: set[int] = set()
        self.names: dict[int, tuple[str, int] | None] = {}
        self.walks: dict[int, RememberedWalk] = {}
        self._next_walks: dict[int, RememberedWalk] = {}
        self.suffixes: dict[tuple[int, int], tuple[SuffixRecord, int]] = {}
        #: The frames of the suffixes' records, each counted once per entry.
        self._suffix_frames = 0
        self.choice = RememberingChoice()
        #: Kept suffixes whose last looks found other registers or words: how many times.
        self._suffix_misses: dict[tuple[int, int], int] = {}
        self._uses: dict[Plan, tuple[frozenset[int], frozenset[int]] | None] = {}
        #: Walks of the current backtrace that took a remembered suffix.
        self.suffixed = 0
        #: Threads of the current backtrace given a remembered walk.
        self.replayed = 0
        #: The program's entry point (None inside: the target has none) and the range of
        #: the function holding it, once found in this generation (an execve moves modules).
        self.entry: tuple[int | None, tuple[int, int] | None] | None = None
        #: The mappings of the last backtrace, which its remembered walks hold for.
        self._mappings: list[Mapping] | None = None
        #: Counts the module maps whose modules differed from the previous map's.
        self.generation = 0
        self._identity: frozenset[tuple[object, ...]] | None = None

    def begin(self, modules: ModuleMap) -> None:
        """Readies the cache for a backtrace of the target whose modules are ``modules``."""
        identity = modules.unchanged_since
        moved = identity != self._identity
        if moved:
            self._identity = identity
            self.generation += 1
            self.at.clear()
            self.code.clear()
            self.names.clear()
            self.entry = None
        elif modules.registry is not None:
            self.at.clear()
        mappings = modules.space.mappings()
        walks, self._next_walks = self._next_walks, {}
        self.choice.began()
        self.replayed = self.suffixed = 0
        if not moved and modules.registry is None and mappings == self._mappings:
            self.walks = walks
        else:
            self.walks = {}
            self.suffixes.clear()
            self._suffix_misses.clear()
            self._suffix_frames = 0
            self._uses.clear()
        self._mappings = mappings

    def remember_walk(self, tid: int, walk: RememberedWalk, *, replayed: bool = False) -> None:
        """Keeps a thread's walk of this backtrace (``replayed``: given it again) for the next."""
        self._next_walks[tid] = walk
        self.replayed += replayed

    def remember_suffix(self, key: tuple[int, int], record: SuffixRecord, index: int) -> None:
        """Keeps the walk ``record`` from its frame ``index`` (at pc and sp ``key``).

        A suffix kept there already stays until it has missed
        :data:`SUFFIX_MISSES_BEFORE_REPLACED` times: a frame whose own words change
        from sample to sample (a loop's counters) misses whichever walk is kept, and
        replacing it every walk made each look build a new record's check — on xz's
        samples that cost more than walking (4.2 s → 7.3 s for 43,000 samples).
        """
        suffixes = self.suffixes
        misses = self._suffix_misses
        if key in suffixes and misses.get(key, 0) < SUFFIX_MISSES_BEFORE_REPLACED:
            return
        misses.pop(key, None)
        replaced = suffixes.pop(key, None)
        if replaced is not None:
            self._suffix_frames -= len(replaced[0].facts)
        self._suffix_frames += len(record.facts)
        while suffixes and (
            len(suffixes) >= MAX_SUFFIXES or self._suffix_frames > MAX_SUFFIX_FRAMES
        ):
            oldest = next(iter(suffixes))
            self._suffix_frames -= len(suffixes.pop(oldest)[0].facts)
            misses.pop(oldest, None)
        suffixes[key] = (record, index)

    def missed_suffix(self, key: tuple[int, int]) -> None:
        """Counts a look at the suffix kept at ``key`` that found it does not hold."""
        self._suffix_misses[key] = self._suffix_misses.get(key, 0) + 1

    def took_suffix(self, key: tuple[int, int], found: tuple[SuffixRecord, int]) -> None:
        """Marks a suffix as used now (the one used longest ago goes first)."""
        suffixes = self.suffixes
        del suffixes[key]
        suffixes[key] = found
        self._suffix_misses.pop(key, None)
        self.suffixed += 1

    def uses_of(self, plan: Plan, pc: int, sp: int) -> tuple[frozenset[int], frozenset[int]] | None:
        """:func:`plan_uses` of ``plan``, made once per plan."""
        try:
            return self._uses[plan]
        except KeyError:
            if len(self._uses) >= MAX_ENTRIES:
                self._uses.clear()
            found = self._uses[plan] = plan_uses(plan, pc, sp)
            return found

    def plan(self, rule: UnwindRule, method: Method, arch: Arch) -> Plan:
        """The plan of ``rule``, shared with every rule that does the same.

        A rule's ``start`` and ``end`` (where its entry lies) do not change
        what it does, so the rows of many functions share one plan.
        """
        key = (
            rule.cfa,
            rule.registers,
            rule.return_address_register,
            rule.signal_frame,
            rule.ra_signed,
            method,
        )
        plan = self.shared.get(key)
        if plan is None:
            shared = self.shared
            if len(shared) >= MAX_ENTRIES:
                shared.clear()
            plan = shared[key] = Plan(rule, method, arch)
        return plan

    def remember_plan(self, key: tuple[str, object, int], plan: Plan | None) -> None:
        plans = self.plans
        if len(plans) >= MAX_ENTRIES:
            plans.clear()
        plans[key] = plan

    def remember_at(self, pc: int, found: tuple[Module | None, Plan | None]) -> None:
        at = self.at
        if len(at) >= MAX_ENTRIES:
            at.clear()
        at[pc] = found

    def remember_code(self, address: int) -> None:
        code = self.code
        if len(code) >= MAX_ENTRIES:
            code.clear()
        code.add(address)

    def remember_name(self, pc: int, found: tuple[str, int] | None) -> None:
        names = self.names
        if len(names) >= MAX_ENTRIES:
            names.clear()
        names[pc] = found

    def remember_file_name(self, key: tuple[object, int], found: tuple[str, int] | None) -> None:
        """Keeps the name at a module's link-time address (``key``: file key, address)."""
        names = self.files.names
        if len(names) >= MAX_ENTRIES:
            names.clear()
        names[key] = found


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
    """

    __slots__ = (
        "_addresses",
        "_pick",
        "_span",
        "_values",
        "block_start",
        "detail",
        "frames",
        "max_frames",
        "reason",
        "registers",
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
        self._addresses: list[int] | None = addresses
        self._values = values
        #: The copy's words the walk read (by index from its start), and their values:
        #: made on the first comparison (-1: a word lay outside the copy or unaligned).
        self._pick: itemgetter[Any] | None = None
        self._span = 0
        self.words: object = None

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

#: What a frame's step used of its registers, where it was not a plan's fast path: all of them.
EVERY_REGISTER = None
#: The walk ended at the frame as the program's entry function: only its pc and sp were used.
AT_ENTRY = "entry"


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
        "addresses",
        "detail",
        "facts",
        "marks",
        "pure_from",
        "reason",
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
        if trail.tail is not None:
            old, at = trail.tail
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
        record = cls(facts, states, [], marks, addresses, values, pure_from, reason, detail)
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
        keys = frozenset((pc, sp) for pc, sp, *_ in self.facts[index + 1 :])
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
