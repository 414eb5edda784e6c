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

from liveunwind.unwinder.plan import Plan
from liveunwind.unwinder.remembered import (
    MAX_SUFFIX_FRAMES,
    MAX_SUFFIXES,
    SUFFIX_MISSES_BEFORE_REPLACED,
    RememberingChoice,
    plan_uses,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from liveunwind.arch import Arch
    from liveunwind.formats.unwind.rules import UnwindRule
    from liveunwind.frames import Method
    from liveunwind.modules.module import Module
    from liveunwind.modules.modulemap import ModuleMap
    from liveunwind.targets.base import Mapping
    from liveunwind.unwinder.layouts import Layouts
    from liveunwind.unwinder.remembered import RememberedWalk, SuffixRecord

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

    ``once``: every target sharing these facts is backtraced once (``pid
    --name``), so its walks are remembered only for other processes of its
    layout (``layouts``, :class:`~liveunwind.unwinder.layouts.Layouts`): a
    remembered walk serves the target's next backtrace, and a suffix (keyed
    by absolute pc and sp) another thread's walk over the very same stack
    words, which the threads of one process never share.  Recording them
    cost 1.1 of the 2.5 ms a 9-thread, 30-frame process spent walking
    (bench/coldstart.py's many-process run); frames are the same either way.
    """

    __slots__ = ("layouts", "names", "once", "plans", "shared")

    def __init__(self, *, once: bool = False) -> None:
        self.once = once
        self.layouts: Layouts | None = None
        if once:  # imported only then: a single backtrace's start does not pay for it
            from liveunwind.unwinder.layouts import Layouts

            self.layouts = Layouts()
        self.plans: dict[tuple[str, object, int], Plan | None] = {}
        self.shared: dict[tuple[object, ...], Plan] = {}
        self.names: dict[tuple[object, int], tuple[str, int] | None] = {}


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
        "_keeps",
        "_once",
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
        "stacks_counted",
        "_uses",
        "walks",
    )

    def __init__(self, files: FileFacts | None = None, *, once: bool = False) -> None:
        """``files``: the plans and names of files that other targets of the run share;
        ``once``: the target is backtraced once (as with ``files.once``), so nothing of
        its walks is kept for a next backtrace."""
        self.files = FileFacts() if files is None else files
        self._once = once or self.files.once
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
        #: Whether a consumer counts this target's stacks by their walks (a wall-clock
        #: profile: ``Session(counts_stacks=True)``): a walk whose stack it kept
        #: (RememberedWalk.stack) is then given without frames.  Other consumers get frames.
        self.stacks_counted = False
        #: Whether the walks and suffixes of this target's walks are kept (see :meth:`begin`).
        self._keeps = True
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
        first = self._mappings is None
        if not moved and modules.registry is None and mappings == self._mappings:
            self.walks = walks
        else:
            self.walks = {}
            self.suffixes.clear()
            self._suffix_misses.clear()
            self._suffix_frames = 0
            self._uses.clear()
        self._mappings = mappings
        layouts = self.files.layouts
        if first and self._once:
            # The one backtrace of this target: remembering serves only other processes
            # of its program (a walk recorded for a next backtrace of a 9-thread process
            # alone cost 3 of the 10 ms its cold walk took).
            offered = None
            if layouts is not None and modules.registry is None:
                offered = layouts.begin(mappings, self.suffixes, _main_stack_pointer(modules))
            self.choice.remembering = offered is not None
            for key, found in (offered or {}).items():
                self.remember_suffix(key, *found)
            # A target given other walks keeps none of its own: no backtrace comes after
            # its one.  (What it would keep also made a reference cycle through each
            # record: 1,000 objects a process left to the collector.)
            self._keeps = not offered

    @property
    def walks_given(self) -> dict[int, RememberedWalk]:
        """tid → the remembered walk of this backtrace's walk of the thread (its replay, or
        the walk it was made of): the walks the next backtrace is handed.  Read only."""
        return self._next_walks

    def remember_walk(self, tid: int, walk: RememberedWalk, *, replayed: bool = False) -> None:
        """Keeps a thread's walk of this backtrace (``replayed``: given it again) for the next."""
        if self._keeps:
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
        if not self._keeps or (
            key in suffixes and misses.get(key, 0) < SUFFIX_MISSES_BEFORE_REPLACED
        ):
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


def _main_stack_pointer(modules: ModuleMap) -> int | None:
    """The stack pointer of the target's main thread (its tid is the pid), if it has one."""
    space = modules.space
    pid = space.pid
    for thread in space.threads():
        if thread.tid == pid:
            return thread.registers.get(space.arch.sp)
    return None
