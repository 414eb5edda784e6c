"""One process's walks, moved onto another process of the same program mapped elsewhere.

``liveunwind pid --name`` backtraces many copies of one program, most of
them parked in the same places: their threads differ only in where address
space layout randomization put each mapping.  A walk of an earlier copy's
thread, with every address it holds moved by the distance between the two
processes' mappings, is offered to a later copy as a remembered suffix
(:class:`~liveunwind.unwinder.remembered.SuffixRecord`) at its first frame
from which it read nothing but words of its stack copy (the frame before,
a pc seen first, had its code read for a signal trampoline): a thread of
the later copy whose walk comes to that frame takes the rest only if its
loop state, the registers the rest used and every stack word the rest read
are exactly the moved ones, and walks on itself otherwise.

Why the moved walk is the walk the later process would make: the walk is a
function of the registers, the words it read and the layout (which mapping
holds an address, which file it maps and where).  Two layouts are taken as
the same (:func:`layout_key`) when their mappings pair up in address order
with the same size, permissions and file offset, and every mapping of a file
with code maps the same file (device, inode, path); then each address moves
by its own mapping's distance, a multiple of the page size, which keeps the
order of any two mapped addresses, their differences inside one mapping, and
their alignment up to a page.  A value in no mapping stays as it is, and a
walk holding one that the later process maps is not moved (a walk may ask
whether a value is code).  Only walks that a table's rules made frame by
frame (no guess, no signal frame, no registered code) and that ended at the
end of the stack are moved: their steps add offsets to registers, read
words and at most mask an address to an alignment below a page, all of
which moving keeps.  Threads' stacks are mappings of their own, and move
with them.  The main thread's stack is placed below a random offset inside
its mapping: its addresses move by the distance between the two main
threads' stack pointers instead, a multiple of 16 but not of the page, so
only for a walk whose every step adds offsets and reads words (no DWARF
expression, which may mask an address to a larger alignment), and only
while every moved address still lies in the other process's stack mapping.
"""

from __future__ import annotations

from bisect import bisect_right

from liveunwind.frames import Method, StopReason
from liveunwind.unwinder.remembered import SuffixRecord

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from operator import add

    from liveunwind.targets.base import Mapping
else:
    # operator.py's own add, from the C module under it (operator.py's body: 0.2 ms)
    from _operator import add

#: The methods of the frames of a walk that may be moved: the thread's own registers,
#: and the rules of unwind tables read from files.
_MOVABLE_METHODS = frozenset((Method.CONTEXT, Method.CFI, Method.SFRAME))
#: The one stop detail naming an address (the stepper's, at the program's entry function).
_ENTRY_DETAIL = "the program's entry function, at "


#: The loop state of a moved record's later frames: equal to no state a walk is in.
_NOWHERE: tuple[object, ...] = ("a moved walk is offered at one frame only",)


#: What a main thread's stack may move by and keep its walks: the stack pointer's alignment
#: at a call on every architecture we walk (x86_64, aarch64, riscv64 psABIs), which keeps
#: the alignment of every word an additive walk reads.
STACK_ALIGNMENT = 16


class _Unmovable(Exception):
    """A value of the walk lies in no mapping of the first process but in one of the other."""


def layout_key(mappings: Sequence[Mapping]) -> tuple[object, ...]:
    """What two processes' mappings must share for a walk of one to be moved onto the other.

    Per mapping, in address order: its size, permissions and file offset, and
    what it maps: the file (device, inode, path) where some mapping of the
    file has code, else only whether it is a file, or its name (``[stack]``,
    ``[vdso]``, an anonymous mapping's).  A data file (a program's own
    ``mmap`` of a file it opened by a name of its own) may differ.
    """
    code = {(m.device, m.inode, m.path) for m in mappings if m.executable and m.is_file}
    key: list[object] = []
    for m in mappings:
        if m.is_file:
            file = (m.device, m.inode, m.path)
            what: object = file if file in code else "file"
        else:
            what = m.path
        key.append((m.end - m.start, m.perms, m.offset, what))
    return tuple(key)


class _Template:
    """A whole walk recorded in one process, made ready to be moved onto others.

    The frames' pcs, sps and CFAs, the addresses of the words the walk read
    and their values, flat, each with the index of the recording process's
    mapping holding it (-1: none): moving them is then one addition each
    (9 threads' walks, 30 frames each, in some 0.1 ms where looking up each
    address's mapping took 1.2).
    """

    __slots__ = (
        "_extents",
        "at",
        "columns",
        "flat",
        "live",
        "no_cfa",
        "places",
        "record",
        "unmapped",
    )

    def __init__(self, record: SuffixRecord, starts: list[int], ends: list[int]) -> None:
        self.record = record
        #: The frame the walk is offered at: its first from which it read only words.
        self.at = record.pure_from
        #: The registers the rest used there and their values (made now: what the record
        #: makes them of holds the recording process's cache, with its stack copies).
        self.live = record.live[self.at]
        facts = record.facts
        #: The facts' columns, those that do not move made once: (method, signal frame,
        #: exact pc, module, offset in it) of every frame.
        _pcs, _sps, methods, _cfas, signals, exacts, paths, offsets = zip(*facts)
        self.columns = (methods, signals, exacts, paths, offsets)
        #: The frames without a CFA (the last, where the walk ended at its entry function).
        self.no_cfa = [index for index, fact in enumerate(facts) if fact[3] is None]
        self.flat = [
            *(fact[0] for fact in facts),
            *(fact[1] for fact in facts),
            *(0 if fact[3] is None else fact[3] for fact in facts),
            *record.addresses,
            *record.values,
        ]
        places = []
        for value in self.flat:
            at = bisect_right(starts, value) - 1
            places.append(at if at >= 0 and value < ends[at] else -1)
        self.places = places
        #: The values in no mapping: each must be in none of the other process's either.
        self.unmapped = sorted({v for v, at in zip(self.flat, places) if at < 0})
        self._extents: dict[int, tuple[int, int] | None] = {}

    def extent(self, place: int) -> tuple[int, int] | None:
        """The lowest and highest value the walk holds in mapping ``place`` (None: none)."""
        if place not in self._extents:
            inside = [value for value, at in zip(self.flat, self.places) if at == place]
            self._extents[place] = (min(inside), max(inside)) if inside else None
        return self._extents[place]

    @staticmethod
    def of(record: SuffixRecord, starts: list[int], ends: list[int]) -> _Template | None:
        """The template of ``record``, or None if its walk may not be moved (module docstring)."""
        if record.reason is not StopReason.END_OF_STACK or record.pure_from >= len(record.facts):
            return None
        if record.detail and not record.detail.startswith(_ENTRY_DETAIL):
            return None
        if any(fact[4] or fact[2] not in _MOVABLE_METHODS for fact in record.facts):
            return None
        return _Template(record, starts, ends)


class Mover:
    """Moves addresses of a process laid out as ``before`` onto one laid out as ``after``.

    The two have the same :func:`layout_key`: the mappings pair up in order.
    Given the stack pointers of the two processes' main threads, the main
    thread's stack moves by their distance where a walk's steps allow it
    (:attr:`SuffixRecord.additive`): the kernel places a main thread's stack
    below a random offset inside its mapping (up to 8 KB, 16-byte aligned), so
    two processes parked alike hold the same frames at the same distance from
    the top of their stacks, not from the mapping's start.
    """

    __slots__ = (
        "_after_ends",
        "_after_starts",
        "_distances",
        "_ends",
        "_main_stack",
        "_starts",
        "_word_distances",
    )

    def __init__(
        self,
        before: Sequence[Mapping],
        after: Sequence[Mapping],
        main_stack_pointers: tuple[int, int] | None = None,
    ) -> None:
        """``main_stack_pointers``: the stack pointers of ``before``'s and ``after``'s main
        threads, if known."""
        self._starts = [m.start for m in before]
        self._ends = [m.end for m in before]
        #: By mapping, and 0 last: for the place -1 (a value in no mapping).
        self._distances = [b.start - a.start for a, b in zip(before, after, strict=True)] + [0]
        self._after_starts = [m.start for m in after]
        self._after_ends = [m.end for m in after]
        #: The distances an additive walk's values move by: the main thread's stack by the
        #: distance of the two main threads' stack pointers, where that differs.
        self._word_distances = self._distances
        #: The index of the mapping holding the main thread's stack (-1: it moves with it).
        self._main_stack = -1
        if main_stack_pointers is not None:
            self._main_stack_moves(*main_stack_pointers)

    def _main_stack_moves(self, before_sp: int, after_sp: int) -> None:
        """The main thread's stack moves by its stack pointer's distance, if both lie in the
        paired mappings and the distance keeps every word's alignment to STACK_ALIGNMENT."""
        at = bisect_right(self._starts, before_sp) - 1
        if at < 0 or before_sp >= self._ends[at]:
            return
        if not self._after_starts[at] <= after_sp < self._after_ends[at]:
            return
        distance = after_sp - before_sp
        if distance == self._distances[at] or distance % STACK_ALIGNMENT:
            return
        self._word_distances = list(self._distances)
        self._word_distances[at] = distance
        self._main_stack = at

    def move(self, value: int, distances: list[int] | None = None) -> int:
        """``value`` moved with the mapping holding it (by ``distances``, the mappings' own by
        default); one in no mapping stays (or raises :class:`_Unmovable` if the other
        process maps it, or if the main thread's stack moved it out of its mapping)."""
        at = bisect_right(self._starts, value) - 1
        if at >= 0 and value < self._ends[at]:
            if distances is None or at != self._main_stack:
                return value + self._distances[at]
            moved = value + distances[at]
            if not self._after_starts[at] <= moved < self._after_ends[at]:
                raise _Unmovable
            return moved
        if self._mapped_after(value):
            raise _Unmovable
        return value

    def _mapped_after(self, value: int) -> bool:
        at = bisect_right(self._after_starts, value) - 1
        return at >= 0 and value < self._after_ends[at]

    def _distances_for(self, template: _Template) -> list[int] | None:
        """The distances ``template``'s values move by; None if they cannot be moved so.

        An additive walk with values on the main thread's stack moves them by
        the stack pointers' distance, and each must then still lie in the
        other process's stack mapping (the order of an address and the
        mapping's ends is then kept too).  Any other walk moves with the
        mappings: one of the main thread's then holds where the two stacks
        happen to lie at the same place in their mappings.
        """
        stack = self._main_stack
        extent = template.extent(stack) if stack >= 0 else None
        if extent is None or not template.record.additive:
            return self._distances
        distance = self._word_distances[stack]
        lowest, highest = extent
        if lowest + distance < self._after_starts[stack]:
            return None
        if highest + distance >= self._after_ends[stack]:
            return None
        return self._word_distances

    def moved_record(self, template: _Template) -> tuple[SuffixRecord, int] | None:
        """The template's walk with every address it holds moved, and the frame it is offered
        at; None if it may not be moved.

        Only that frame's loop state and used registers are moved: the stepper
        looks at no other frame of the record, whose states are one no walk is
        in (``_NOWHERE``).
        """
        if any(self._mapped_after(value) for value in template.unmapped):
            return None
        distances = self._distances_for(template)
        if distances is None:
            return None
        record, at = template.record, template.at
        flat = list(map(add, template.flat, map(distances.__getitem__, template.places)))
        count, words = len(record.facts), len(record.addresses)
        cfas: list[int | None] = flat[2 * count : 3 * count]
        for index in template.no_cfa:
            cfas[index] = None
        methods, signals, exacts, paths, offsets = template.columns
        facts = tuple(
            zip(
                flat[:count],
                flat[count : 2 * count],
                methods,
                cfas,
                signals,
                exacts,
                paths,
                offsets,
            )
        )
        detail = record.detail
        try:
            if detail:
                entry = self.move(int(detail[len(_ENTRY_DETAIL) :], 16))
                detail = f"{_ENTRY_DETAIL}{entry:#x}"
            state = tuple(self._moved_part(part, distances) for part in record.states[at])
            live = self._moved_live(*template.live, distances)
        except (_Unmovable, ValueError):
            return None
        states: list[tuple[object, ...]] = [_NOWHERE] * count
        lives: list[tuple[tuple[int, ...] | None, object]] = [(None, None)] * count
        states[at], lives[at] = state, live
        moved = SuffixRecord(
            facts,
            states,
            lives,
            list(record.marks),
            flat[3 * count : 3 * count + words],
            flat[3 * count + words :],
            at,
            record.reason,
            detail,
            additive=record.additive,
        )
        return moved, at

    def _moved_part(self, part: object, distances: list[int]) -> object:
        """One part of a walk's loop state moved: an address (the previous CFA) by
        ``distances``, or a range (the mapping walked on) with its mapping; flags and
        methods stay."""
        if isinstance(part, bool) or not isinstance(part, (int, tuple)):
            return part
        if isinstance(part, int):
            return self.move(part, distances)
        start, end = part
        moved = self.move(start)
        return (moved, moved + end - start)

    def _moved_live(
        self, used: tuple[int, ...] | None, wanted: object, distances: list[int]
    ) -> tuple[tuple[int, ...] | None, object]:
        """The registers the rest of a walk used and their values (all of them, a dict, where
        ``used`` is None), the values moved by ``distances``."""
        move = self.move
        if isinstance(wanted, dict):
            return used, {number: move(value, distances) for number, value in wanted.items()}
        assert isinstance(wanted, tuple)
        return used, tuple(None if value is None else move(value, distances) for value in wanted)


#: Most layouts a run keeps, and most walks kept over all of them (the layout seen
#: longest ago goes first).  A recorded walk of one of bench/target.c's 30-frame threads
#: keeps some 12 KB (measured with tracemalloc: 8 walks, 100 KB), so 50 MB at most.
MAX_LAYOUTS = 64
MAX_LAYOUT_WALKS = 4096

#: Walks by the pc and sp of a frame: the record, and the frame's index in it (a cache's
#: ``suffixes``).
Walks = dict[tuple[int, int], tuple[SuffixRecord, int]]


class _Layout:
    """A layout seen in the run: how often, and the walks one process of it recorded."""

    __slots__ = ("main_sp", "mappings", "seen", "templates", "walks")

    def __init__(self) -> None:
        self.seen = 1
        self.mappings: Sequence[Mapping] = ()
        #: The recording process's main thread's stack pointer (None: not known).
        self.main_sp: int | None = None
        #: The recording process's walks (its cache's own, filled while it is walked).
        self.walks: Walks = {}
        #: The recorded walks made ready to move, once the recording process is walked.
        self.templates: list[_Template] | None = None

    def ready(self) -> list[_Template]:
        """The templates of the recorded walks, made the first time they are asked for."""
        if self.templates is None:
            starts = [m.start for m in self.mappings]
            ends = [m.end for m in self.mappings]
            # Each record is kept at every frame from its first pure one: taken once.
            records = {id(record): record for record, _ in self.walks.values()}
            found = (_Template.of(record, starts, ends) for record in records.values())
            self.templates = [template for template in found if template is not None]
            self.walks = {}  # what the templates need is theirs now
        return self.templates


class Layouts:
    """The layouts of a run's processes, and the walks one process of each leaves the others.

    The first process of a layout is only walked: most layouts of ``--all``
    are one process's, and recording a walk costs half again as much as
    walking it.  The second records its walks; each later one is offered
    them, moved (:class:`Mover`).
    """

    __slots__ = ("_keyed", "_layouts", "_plain", "_recording")

    def __init__(self) -> None:
        self._layouts: dict[tuple[object, ...], _Layout] = {}
        #: The layout whose walks the process before this one recorded.
        self._recording: _Layout | None = None
        #: The layouts a process of which, running, needed nothing read before its stop
        #: (the oldest first, at most MAX_LAYOUTS).
        self._plain: dict[tuple[object, ...], None] = {}
        #: The last mappings keyed, and their key: a process's are keyed before its stop
        #: and again in it, where they are read anew and most often equal.
        self._keyed: tuple[Sequence[Mapping], tuple[object, ...]] | None = None

    def found_plain(self, mappings: Sequence[Mapping]) -> None:
        """A process laid out as ``mappings`` was found, running, to have nothing to read
        before its stop: no JIT code, no Go program (``backtrace/session.py``)."""
        plain = self._plain
        plain[self._key(mappings)] = None
        while len(plain) > MAX_LAYOUTS:
            del plain[next(iter(plain))]

    def known_plain(self, mappings: Sequence[Mapping]) -> bool:
        """Whether another process laid out as ``mappings`` was found to have nothing to read
        before its stop, which this one then has neither.

        What was looked for depends on the layout alone: JIT code on anonymous
        executable mappings (their sizes and permissions are in the key) and
        Go on the program's file (its device, inode and path are), so a process
        of the same layout would find the same, and its map made while it runs
        (some 0.15 ms of a C process's 2.5) is spared.
        """
        return self._key(mappings) in self._plain

    def _key(self, mappings: Sequence[Mapping]) -> tuple[object, ...]:
        keyed = self._keyed
        if keyed is not None and (keyed[0] is mappings or keyed[0] == mappings):
            return keyed[1]
        key = layout_key(mappings)
        self._keyed = (mappings, key)
        return key

    def begin(
        self, mappings: Sequence[Mapping], recorded: Walks, main_sp: int | None = None
    ) -> Walks | None:
        """A process laid out as ``mappings``, its main thread's stack pointer ``main_sp`` (None:
        not known), begins its one backtrace: the walks of another process moved onto it
        (empty: it is to record its own in ``recorded``), or None: it is only walked."""
        if self._recording is not None:
            # Its process is walked: its templates are made, and its cache let go.
            self._recording.ready()
            self._recording = None
        key = self._key(mappings)
        layouts = self._layouts
        layout = layouts.pop(key, None)
        if layout is None:
            layout = _Layout()
        else:
            layout.seen += 1
        layouts[key] = layout  # the newest last
        self._bound()
        if layout.seen == 1:
            return None
        if layout.seen == 2:
            layout.mappings, layout.walks, layout.main_sp = mappings, recorded, main_sp
            self._recording = layout
            return {}
        main_sps = None if layout.main_sp is None or main_sp is None else (layout.main_sp, main_sp)
        mover = Mover(layout.mappings, mappings, main_sps)
        moved: Walks = {}
        for template in layout.ready():
            found = mover.moved_record(template)
            if found is not None:
                record, at = found
                moved[record.facts[at][:2]] = found
        return moved or None

    def _bound(self) -> None:
        layouts = self._layouts
        while len(layouts) > MAX_LAYOUTS or (
            len(layouts) > 1
            and sum(len(layout.templates or ()) for layout in layouts.values()) > MAX_LAYOUT_WALKS
        ):
            del layouts[next(iter(layouts))]
