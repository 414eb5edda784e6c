"""The CPython interpreter of a target, and each thread's chain of Python frames.

:func:`find_interpreter` looks through the modules whose name says Python
(``python3.11``, ``libpython3.12.so.1.0``, ``python3.14d``) for the symbol
``_PyRuntime`` — in ``.dynsym`` (CPython exports it even from a stripped
executable), ``.symtab``, or the module's separate debug file — reads the
version the binary was built as (``Py_Version``, from the file), and chooses
the layout: the built-in one for 3.11 and 3.12, the one the interpreter
publishes in ``_Py_DebugOffsets`` for 3.13 and later.  A version without a
layout, or a published record that disagrees with the binary, is refused
with a note saying so: an unknown layout would only print garbage.

Reading the frames is split so that a live process need only be stopped
for the least of it:

1. :func:`collect` follows pointers — interpreters, thread states, frame
   chains, and the code objects, names and line tables the frames refer
   to — level by level through a :class:`Memory`, which fetches each level
   in one batch where the target can (``read_many``) and reads one object at
   a time where it cannot.  Code objects already read for an earlier
   backtrace of the process are recognised by their fields and not read
   again (:class:`CodeCache`, kept by the :class:`Interpreter`), and each
   walk leaves the next one its *plan*: every range it read, sorted and
   coalesced, fetched by the next walk with one request.
2. For a live process the walk is split around the stop: :func:`prepare`
   walks the running process before the stop (reading code objects ahead,
   making the plan); in the stop :func:`capture` fetches the plan, reads the
   thread states and walks only the threads whose frame stack is not byte
   for byte what ``prepare`` saw; after the process runs again :func:`finish`
   walks the others from the stop's copy — their frames are where
   ``prepare`` found them, inside the plan — and says so of anything it had
   to read from the running process instead.
3. :func:`describe` turns what was collected into ``PythonFrame`` records
   (function, file, line) without reading anything; its line-table decoding
   is the CPU-bound part, done after the process runs again.

Every structure read is checked before it is believed: a thread state must
point back at its interpreter, a code object's type must be ``PyCode_Type``,
a name's ``PyUnicode_Type``; every list and chain is bounded and cycles are
cut.  A frame that fails its check is left out and noted, never shown wrong.
"""

from __future__ import annotations

import bisect

from liveunwind.arch.base import WORD_MASK
from liveunwind.errors import FormatError, LiveUnwindError, MemoryReadError
from liveunwind.formats import cpython
from liveunwind.frames import PythonFrame

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from liveunwind.formats.elf import ElfImage
    from liveunwind.modules.module import Module
    from liveunwind.targets.base import AddressSpace

    Read = Callable[[int, int], bytes]
    ReadMany = Callable[[list[tuple[int, int]]], list[bytes | None]]
    #: Memory as fetched: bytes, or the bytearray the kernel wrote into.
    Data = bytes | bytearray
    #: Ranges and what was read of each (None: unreadable).
    Fetched = tuple[list[tuple[int, int]], Sequence[Data | None]]
    #: One frame as read in the stop: its code object's address, where it is in the
    #: code, and whether a generator owns it.  A tuple: the stop makes one per frame.
    RawFrame = tuple[int, int, bool]

#: Interpreters followed from ``_PyRuntime`` (subinterpreters are rare; a loop is cut sooner).
MAX_INTERPRETERS = 256
#: Thread states followed per interpreter.
MAX_THREADS = 16384
#: Python frames followed per thread (the default recursion limit is 1000).
MAX_FRAMES = 50000
#: Eval calls (``_PyCFrame`` records, 3.11) followed per thread.
MAX_EVAL_CALLS = MAX_FRAMES
#: Frames outside a thread's frame stack (generators', older chunks') kept in the plan.
MAX_PLANNED_OUTSIDE = 1024


class PythonRun:
    """The Python frames one call of the eval loop runs, innermost first.

    ``anchor`` is an address inside that C call's stack frame, which places
    the run in the native stack: the entry frame the eval call keeps on its
    C stack (3.12+), or its ``_PyCFrame`` (3.11).  None when it is not known.
    """

    __slots__ = ("anchor", "frames")

    def __init__(self, anchor: int | None, frames: list[PythonFrame]) -> None:
        self.anchor = anchor
        self.frames = frames


class PythonThread:
    """One thread's Python stack: its runs of frames, innermost run first."""

    __slots__ = ("native_id", "runs", "thread_state")

    def __init__(self, native_id: int, thread_state: int, runs: list[PythonRun]) -> None:
        #: The kernel's id of the thread (``PyThreadState.native_thread_id``).
        self.native_id = native_id
        self.thread_state = thread_state
        self.runs = runs

    @property
    def frames(self) -> list[PythonFrame]:
        """Every Python frame of the thread, innermost first."""
        return [frame for run in self.runs for frame in run.frames]

    def __repr__(self) -> str:
        return f"<PythonThread {self.native_id} {len(self.frames)} frames>"


# -- finding the interpreter ---------------------------------------------------------


class Interpreter:
    """A CPython runtime in a target: where ``_PyRuntime`` is, its version and layout.

    Also keeps what it learned about code objects (name, file, line table),
    keyed by address, so that a later backtrace of the same process reads
    only the code objects' headers again (see :func:`collect`).
    """

    def __init__(
        self,
        module: str,
        runtime: int,
        version: int,
        layout: cpython.Layout,
        types: dict[str, int],
    ) -> None:
        #: Path of the module that holds the runtime (``.../libpython3.12.so.1.0``), as
        #: native frames name their module.
        self.module = module
        #: Address of ``_PyRuntime``.
        self.runtime = runtime
        #: ``PY_VERSION_HEX`` of the binary.
        self.version = version
        self.layout = layout
        #: Addresses of ``PyCode_Type``, ``PyUnicode_Type`` and ``PyBytes_Type``, where found.
        self.types = types
        self.codes = CodeCache()
        #: What the last walk read (``_PyRuntime``'s head, interpreters, thread states,
        #: the used parts of the frame stacks with room to grow, frames outside them and
        #: the code objects' headers), sorted and coalesced: the next walk fetches it
        #: with one request, so the stop need not build it.
        self.plan: list[tuple[int, int]] = []
        #: Each thread state's frame pointer and frame-stack bytes as the last walk saw
        #: them: a thread whose stack is byte for byte the same in the stop has the
        #: frames that walk followed, all inside the plan (see :func:`capture`).
        self.stacks: dict[int, tuple[int, bytes]] = {}
        #: The frame and code-object fields, each unpacked with one call.
        self.tstate_record = cpython.tstate_record(layout)
        self.frame_record = cpython.frame_record(layout)
        self.code_record = cpython.code_record(layout)

    @property
    def version_text(self) -> str:
        return cpython.version_text(self.version)

    def __repr__(self) -> str:
        return f"<Interpreter CPython {self.version_text} in {self.module} at {self.runtime:#x}>"


def is_python_module(module: Module) -> bool:
    """Whether the module's file name says it is a Python interpreter or its library."""
    return "python" in module.name.lower() and not module.is_vdso


def find_interpreter(
    space: AddressSpace, modules: Iterable[Module], problems: list[str]
) -> Interpreter | None:
    """The CPython runtime among ``modules``, or None (and why, in ``problems``).

    Only modules named like Python are searched: looking through every
    module's symbols would cost a non-Python process far more than it can
    gain.  The first module that defines ``_PyRuntime`` decides.
    """
    unreadable = []
    for module in modules:
        if not is_python_module(module):
            continue
        try:
            symbols = _Symbols(module)
            if not symbols.readable:
                unreadable.append(module.name)
                continue
            runtime = symbols.find("_PyRuntime")
            if runtime is not None:
                return _interpreter(space, module, symbols, runtime, problems)
        except (FormatError, MemoryReadError) as error:
            problems.append(f"python: {module.name}: {error}")
            return None
    where = f" (files not found: {', '.join(unreadable)})" if unreadable else ""
    problems.append(f"python: no CPython interpreter found{where}")
    return None


class _Symbols:
    """A module's symbols by name: its own tables, then its separate debug file's.

    CPython exports what is looked up here, so the debug file (whose opening
    costs more than everything else) is reached only for a binary that
    hides them.
    """

    def __init__(self, module: Module) -> None:
        from liveunwind.formats.elf import ElfImage

        image = module.image
        self._module = module
        self._images: list[ElfImage] = [image] if isinstance(image, ElfImage) else []
        self._debug_looked_up = False

    @property
    def readable(self) -> bool:
        """Whether the module's file could be read at all."""
        return bool(self._images)

    @property
    def image(self) -> ElfImage:
        """The module's own image: the one whose bytes are loaded (a debug file's may be absent)."""
        return self._images[0]

    def find(self, name: str) -> int | None:
        """The link-time address of ``name``."""
        for image in list(self._images):
            symbol = image.find_symbol(name)
            if symbol is not None:
                return symbol.value
        if self._add_debug_image():
            symbol = self._images[-1].find_symbol(name)
            if symbol is not None:
                return symbol.value
        return None

    def _add_debug_image(self) -> bool:
        from liveunwind.modules.elfmodule import ElfModule

        if self._debug_looked_up or not self._images:
            return False
        self._debug_looked_up = True
        if isinstance(self._module, ElfModule):
            debug = self._module.debug_file
            if debug is not None:
                self._images.append(debug.image)
                return True
        return False


def _interpreter(
    space: AddressSpace,
    module: Module,
    symbols: _Symbols,
    runtime: int,
    problems: list[str],
) -> Interpreter:
    """Builds the Interpreter of ``module``, whose ``_PyRuntime`` is at link-time ``runtime``."""
    bias = module.load_bias
    version = _static_word(symbols.image, symbols.find("Py_Version"), 4)
    if version is None:
        raise FormatError(
            "no Py_Version: CPython older than 3.11 (not supported) or not CPython at all"
        )
    minor = cpython.minor_version(version)
    if minor < (3, 11):
        raise FormatError(f"CPython {cpython.version_text(version)}: only 3.11 and later")
    layout = cpython.BUILT_IN_LAYOUTS.get(minor)
    if layout is None:
        size = cpython.debug_offsets_size(minor)
        if size is None:
            raise FormatError(
                f"CPython {cpython.version_text(version)}: no layout known for this version"
            )
        layout = cpython.layout_from_debug_offsets(
            _static_bytes(space, symbols.image, runtime, bias, size), version
        )
    types = {}
    for name in ("PyCode_Type", "PyUnicode_Type", "PyBytes_Type"):
        found = symbols.find(name)
        if found is None:
            problems.append(f"python: {module.name}: no {name}; its objects are not type-checked")
        else:
            types[name] = (found + bias) & WORD_MASK
    return Interpreter(module.path, (runtime + bias) & WORD_MASK, version, layout, types)


def _static_word(image: ElfImage, address: int | None, size: int) -> int | None:
    """The ``size``-byte little-endian value at link-time ``address`` in the file (rodata)."""
    if address is None:
        return None
    offset = image.offset_for_vaddr(address, size)
    return None if offset is None else int.from_bytes(image.slice(offset, size), "little")


def _static_bytes(
    space: AddressSpace, image: ElfImage, address: int, bias: int, size: int
) -> bytes:
    """``size`` bytes of initialized data at link-time ``address``: from memory, else the file.

    ``_Py_DebugOffsets`` never changes after the binary is loaded; a core
    may leave out pages that were never written, where the file has them.
    """
    try:
        return space.read((address + bias) & WORD_MASK, size)
    except MemoryReadError:
        offset = image.offset_for_vaddr(address, size)
        if offset is None:
            raise
        return bytes(image.slice(offset, size))


# -- collecting (while the target is stopped) -----------------------------------------

#: Bytes read past a ``str`` header in the same request, in the hope the characters fit.
STRING_GUESS = 192
#: Bytes of a line table read in the same request as its header (most are shorter).
LINETABLE_GUESS = 512
#: Largest used part of a thread's frame stack chunk fetched in one piece.
MAX_CHUNK_PREFETCH = 1 << 20


class Memory:
    """The reads of one :func:`collect`: ranges fetched ahead in batches, single reads otherwise.

    ``read_many(ranges)`` (one result per ``(address, size)`` range: its
    bytes, or None where it cannot be read) lets a target fetch a whole
    level of the walk — every thread's frame stack, every code object — in
    one request instead of one per object.  Without it every read goes to
    ``read`` as it comes.  A range fetched ahead serves any read inside it;
    ranges closer than :data:`COALESCE_GAP` are fetched as one.
    """

    def __init__(self, read: Read, read_many: ReadMany | None = None) -> None:
        self._read = read
        self._read_many = read_many
        self._starts: list[int] = []
        self._blocks: list[tuple[int, Data]] = []
        self._last: tuple[int, Data] = (0, b"")
        #: Reads :meth:`after_stop`'s reader had to take from the running process.
        self.late = 0

    def prefetch(self, ranges: list[tuple[int, int]]) -> None:
        """Fetches ``ranges`` in one request, leaving out those already fetched."""
        if self._read_many is None or not ranges:
            return
        self.fetch(
            _coalesce(
                [
                    (start, size)
                    for start, size in ranges
                    if start + size <= _END and not self.holds(start, size)
                ]
            )
        )

    def fetch(self, ranges: list[tuple[int, int]]) -> None:
        """Fetches ``ranges`` — sorted, coalesced, in the address space — as they are.

        The plan a walk leaves for the next one is all that already: in the
        stop it goes to the target without being looked at again.
        """
        if self._read_many is not None and ranges:
            self.take(ranges, self._read_many(ranges))

    def take(self, ranges: list[tuple[int, int]], results: Sequence[Data | None]) -> None:
        """Keeps what was read of ``ranges`` (sorted, disjoint): one result per range, or None."""
        fetched = [(start, data) for (start, _), data in zip(ranges, results) if data is not None]
        self._blocks = sorted([*self._blocks, *fetched]) if self._blocks else fetched
        self._starts = [start for start, _ in self._blocks]

    def locate_kept(self, address: int, size: int) -> tuple[Data, int]:
        """``locate``, keeping what was not fetched yet: later reads inside it see these bytes."""
        if not self.holds(address, size):
            data = self._read(address, size)
            self._blocks = sorted([*self._blocks, (address, data)])
            self._starts = [start for start, _ in self._blocks]
        return self.locate(address, size)

    def after_stop(self, frozen: Read, live: Read, frozen_many: ReadMany) -> None:
        """From now on reads the stop's copy (``frozen``), and what it lacks from ``live``.

        Each read the copy could not answer counts in :attr:`late`, for the
        walk to say which of what it shows is not of the stop's instant.
        """

        def read(address: int, size: int) -> bytes:
            try:
                return frozen(address, size)
            except MemoryReadError:
                self.late += 1
                return live(address, size)

        self._read = read
        self._read_many = frozen_many

    def holds(self, address: int, size: int) -> bool:
        """Whether a fetched block holds all of the range (the nearest block below it)."""
        index = bisect.bisect_right(self._starts, address) - 1
        if index < 0:
            return False
        start, data = self._blocks[index]
        return address + size <= start + len(data)

    def read(self, address: int, size: int) -> bytes:
        data, offset = self.locate(address, size)
        if type(data) is not bytes:
            return bytes(memoryview(data)[offset : offset + size])
        return data[offset : offset + size] if offset or len(data) != size else data

    def locate(self, address: int, size: int) -> tuple[Data, int]:
        """Where the ``size`` bytes at ``address`` are: a fetched block and their offset in it.

        Lets a walk unpack a structure where it lies instead of copying it out first.
        """
        start, data = self._last
        offset = address - start
        if offset >= 0 and offset + size <= len(data):
            return data, offset
        if address + size > _END:  # a pointer plus an offset, from corrupt memory
            raise MemoryReadError(address & WORD_MASK, size, "beyond the address space")
        index = bisect.bisect_right(self._starts, address) - 1
        while index >= 0:  # blocks may overlap: the nearest ones below ``address`` first
            start, data = self._blocks[index]
            offset = address - start
            if offset + size <= len(data):
                self._last = self._blocks[index]
                return data, offset
            if offset >= MAX_CHUNK_PREFETCH:
                break
            index -= 1
        return self._read(address, size), 0


#: Room for frames pushed since the last walk, fetched with a frame stack's used part.
DATASTACK_SLACK = 512


def _grown(start: int, end: int) -> int:
    """The end of a frame stack's used part plus some slack.

    No more: every byte fetched in the stop is memory liveunwind touches for
    the first time while the process waits.  Where the chunk ends within
    the slack the fetch fails and the exact part is fetched on its own.
    """
    return min(end + DATASTACK_SLACK, start + MAX_CHUNK_PREFETCH)


#: One past the last address: pointers read from the target plus offsets may pass it.
_END = WORD_MASK + 1
#: Ranges this close are fetched as one: fewer, larger requests cost less than many.
COALESCE_GAP = 1024
#: Largest range coalescing may make.
MAX_COALESCED = 64 << 10


def _coalesce(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``ranges`` sorted, with those that overlap or nearly touch joined (up to MAX_COALESCED)."""
    joined: list[list[int]] = []
    for start, size in sorted(set(ranges)):
        end = start + size
        if (
            joined
            and start - joined[-1][1] <= COALESCE_GAP
            and end - joined[-1][0] <= MAX_COALESCED
        ):
            joined[-1][1] = max(joined[-1][1], end)
        else:
            joined.append([start, end])
    return [(start, end - start) for start, end in joined]


class RawCode:
    """What was read of one code object: the fields, and the bytes of its names and line table."""

    __slots__ = ("fields", "file", "linetable", "lines", "qualname", "start")

    def __init__(
        self,
        fields: cpython.CodeFields,
        start: int,
        qualname: tuple[cpython.StringShape, bytes] | None,
        file: tuple[cpython.StringShape, bytes] | None,
        linetable: bytes | None,
    ) -> None:
        self.fields = fields
        #: Address of the code's first instruction (``co_code_adaptive``).
        self.start = start
        self.qualname = qualname
        self.file = file
        self.linetable = linetable
        #: Lines decoded so far, by instruction address (see :meth:`line_at`).
        self.lines: dict[int, int | None] = {}

    @property
    def function(self) -> str:
        return _text(self.qualname)

    @property
    def filename(self) -> str:
        return _text(self.file)

    def started(self, instr: int) -> bool:
        """Whether a frame at ``instr`` has begun (CPython hides frames that have not)."""
        return instr >= self.start + self.fields.firsttraceable * cpython.CODE_UNIT

    def line_at(self, instr: int) -> int | None:
        """The line of the instruction at ``instr``; None where there is none or no table."""
        if instr in self.lines:
            return self.lines[instr]
        line = None
        offset = instr - self.start
        if self.linetable is not None and -(1 << 31) < offset < 1 << 31:
            try:
                line = cpython.line_for_offset(self.linetable, self.fields.firstlineno, offset)
            except FormatError:
                line = None
        if len(self.lines) < MAX_LINES_KEPT:
            self.lines[instr] = line
        return line


#: Instruction → line answers kept per code object.
MAX_LINES_KEPT = 256


def _text(string: tuple[cpython.StringShape, bytes] | None) -> str:
    return "<unknown>" if string is None else string[0].decode(string[1])


class CodeCache:
    """Code objects read so far, by address, with the fields that identify them.

    Owned by the :class:`Interpreter`; an entry is used again only when the
    code object at that address still has the same type, names, line-table
    pointer and first line (so a code object freed and replaced is read
    anew); the cache is emptied when it reaches :data:`MAX_ENTRIES`.
    """

    MAX_ENTRIES = 20000

    def __init__(self) -> None:
        self._entries: dict[int, RawCode] = {}

    def get(self, address: int, fields: cpython.CodeFields) -> RawCode | None:
        entry = self._entries.get(address)
        if entry is not None and entry.fields.identity == fields.identity:
            return entry
        return None

    def put(self, address: int, raw: RawCode) -> None:
        if len(self._entries) >= self.MAX_ENTRIES:
            self._entries.clear()
        self._entries[address] = raw


class RawThread:
    """One thread state as read: its native id and its frames in runs (anchor, frames)."""

    __slots__ = ("datastack", "frame", "native_id", "outside", "runs", "stack", "thread_state")

    def __init__(
        self, thread_state: int, native_id: int, frame: int, datastack: tuple[int, int]
    ) -> None:
        self.thread_state = thread_state
        #: The kernel's id of the thread (``native_thread_id``).
        self.native_id = native_id
        #: ``cframe`` (3.11, 3.12) or ``current_frame`` (3.13+).
        self.frame = frame
        #: The used part of the frame stack chunk: (start, end).
        self.datastack = datastack
        #: Where the bytes of that used part are, if fetched whole: a block and the offset
        #: in it (not copied out: in the stop they are only compared).
        self.stack: tuple[Data, int] | None = None
        #: Frames the walk found outside it (generators', older chunks'): the next plan's.
        self.outside: list[tuple[int, int]] = []
        self.runs: list[tuple[int | None, list[RawFrame]]] = []

    @property
    def stack_bytes(self) -> bytes:
        """The used part of the frame stack (``stack`` must be known)."""
        assert self.stack is not None
        data, offset = self.stack
        start, end = self.datastack
        return bytes(memoryview(data)[offset : offset + end - start])

    def unchanged(self, seen: tuple[int, bytes] | None) -> bool:
        """Whether frame pointer and frame stack are what an earlier walk ``seen``.

        Compared where the bytes lie, without copying them out.
        """
        if seen is None or self.stack is None or seen[0] != self.frame:
            return False
        data, offset = self.stack
        start, end = self.datastack
        return len(seen[1]) == end - start and data.startswith(seen[1], offset)

    @property
    def fetchable(self) -> bool:
        """Whether the used part of the frame stack is fetched whole (not absurdly large)."""
        start, end = self.datastack
        return bool(start) and 0 < end - start <= MAX_CHUNK_PREFETCH


class Collected:
    """Everything :func:`collect` read: threads, the code objects they run, and what went wrong."""

    __slots__ = ("codes", "interpreter", "interpreters", "problems", "threads")

    def __init__(self, interpreter: Interpreter) -> None:
        self.interpreter = interpreter
        #: The interpreters found; None when ``_PyRuntime`` itself could not be read.
        self.interpreters: list[int] | None = None
        self.threads: list[RawThread] = []
        #: Code object address → what was read of it (None: unreadable or not a code object).
        self.codes: dict[int, RawCode | None] = {}
        self.problems: list[str] = []


class Captured:
    """What a stop read: its memory, the thread states, and the threads left for after it.

    ``deferred`` are the threads whose frame stack was, in the stop, byte for
    byte what the walk before it followed: their frames are where that walk
    found them, inside the plan the stop copied, so they are followed after
    the process runs again (:func:`finish`), from the copy.
    """

    __slots__ = ("codes", "collected", "deferred", "memory")

    def __init__(
        self, memory: Memory, collected: Collected, deferred: list[RawThread], codes: list[int]
    ) -> None:
        self.memory = memory
        self.collected = collected
        self.deferred = deferred
        #: Code objects the threads walked in the stop run (read there unless copied).
        self.codes = codes


def capture(
    space: AddressSpace,
    interpreter: Interpreter,
    read_many: ReadMany | None = None,
    planned: Fetched | None = None,
) -> Captured:
    """While a live target is stopped: the part of the walk that must happen in the stop.

    One request fetches the plan the last walk made (:attr:`Interpreter.plan`)
    — a second only for a frame stack that grew past it or a thread that is
    new — and the thread states are read from it.  A thread whose frame
    stack (and frame pointer) is byte for byte what the last walk saw is
    left for :func:`finish`: every frame it will follow is in what the stop
    copied.  The others (a thread that ran since) are walked here, with the
    code objects they run, as before.  Reads go through ``space.read_frozen``,
    so the snapshot keeps every byte; ``read_many`` batches a level (see
    :class:`Memory`) and must read the same frozen memory.  ``planned`` is
    the plan as the caller already read it in the stop (ranges, results),
    with a system call it made ready before the stop.
    """
    memory = Memory(space.read_frozen, read_many)
    collected = read_threads(memory, interpreter, planned)
    deferred: list[RawThread] = []
    codes: dict[int, None] = {}
    known = interpreter.stacks
    record = interpreter.frame_record
    for thread in collected.threads:
        if thread.unchanged(known.get(thread.thread_state)):
            deferred.append(thread)
        else:
            _walk_thread(memory, collected, thread, record, codes)
    # Code objects whose header the stop copied are checked after it; the others,
    # with their names and line tables, now (a thread that moved to new code).
    size = interpreter.layout.code_read_size
    _collect_codes(memory, collected, [code for code in codes if not memory.holds(code, size)])
    return Captured(memory, collected, deferred, list(codes))


def finish(captured: Captured, space: AddressSpace) -> Collected:
    """After the process runs again: walks the threads :func:`capture` left, from its copy.

    What the copy lacks (a frame or code object the walk before the stop
    did not see, so it was not planned) is read from the running process,
    and said in the problems, per thread for frames: such frames may be of
    a later instant than the native stack.
    """
    memory, collected = captured.memory, captured.collected
    memory.after_stop(space.read_frozen, space.read, space.read_frozen_many)
    codes: dict[int, None] = dict.fromkeys(captured.codes)
    record = collected.interpreter.frame_record
    for thread in captured.deferred:
        late = memory.late
        _walk_thread(memory, collected, thread, record, codes)
        if memory.late > late:
            collected.problems.append(
                f"python: thread {thread.native_id}: {memory.late - late} reads of its frames "
                "were not in the stop's copy and came from the process after it ran again"
            )
    late = memory.late
    _collect_codes(memory, collected, [code for code in codes if code not in collected.codes])
    if memory.late > late:
        collected.problems.append(
            f"python: {memory.late - late} reads of code objects were not in the stop's copy "
            "and came from the process after it ran again"
        )
    return _conclude(collected, list(codes))


def prepare(read: Read, interpreter: Interpreter, read_many: ReadMany | None = None) -> None:
    """Before the stop: walks the still running process, for its code objects and the plan.

    The names and line tables of code objects never change, so reading
    them ahead leaves the stop only the frames and the code objects'
    headers to read — the cache recognises each code object by those (see
    :class:`CodeCache`) — and the walk leaves the plan of what the stop
    copies.  What the running process changes under this read costs
    nothing: an object that is not what it should be is not kept, and a
    thread that moved is walked in the stop.
    """
    collect(Memory(read, read_many), interpreter)


def collect(memory: Memory, interpreter: Interpreter) -> Collected:
    """Follows the interpreter's pointers: thread states, frame chains, code objects.

    Level by level, so that each level can be fetched in one batch: the
    thread states (a linked list, one by one), every thread's frame stack
    chunk, the frames (mostly inside those chunks), the code objects they
    run, then the names and line tables of code objects not seen before.
    """
    collected = read_threads(memory, interpreter)
    codes: dict[int, None] = {}  # ordered set: each code object once
    record = interpreter.frame_record
    for thread in collected.threads:
        _walk_thread(memory, collected, thread, record, codes)
    _collect_codes(memory, collected, list(codes))
    return _conclude(collected, list(codes))


def read_threads(
    memory: Memory, interpreter: Interpreter, planned: Fetched | None = None
) -> Collected:
    """The interpreters, their thread states and the used parts of their frame stacks.

    Starts by fetching the last walk's plan in one request (or taking it as
    ``planned`` already read it): in a process that moved on little (the
    walk before the stop was a moment ago) that is everything.
    """
    collected = Collected(interpreter)
    layout = interpreter.layout
    if planned is None:
        memory.fetch(interpreter.plan)
    else:
        memory.take(*planned)
    try:
        head = cpython.word(
            memory.read(interpreter.runtime + layout.runtime_interpreters_head, 8), 0
        )
    except MemoryReadError as error:
        collected.problems.append(f"python: cannot read _PyRuntime: {error}")
        return collected
    seen_interpreters: dict[int, None] = {}
    interp = head
    while interp and interp not in seen_interpreters:
        if len(seen_interpreters) >= MAX_INTERPRETERS:
            collected.problems.append(f"python: more than {MAX_INTERPRETERS} interpreters")
            break
        seen_interpreters[interp] = None
        try:
            _collect_thread_states(memory, collected, interp)
            interp = cpython.word(memory.read(interp + layout.interp_next, 8), 0)
        except (MemoryReadError, FormatError) as error:
            collected.problems.append(f"python: interpreter at {interp:#x}: {error}")
            break
    collected.interpreters = list(seen_interpreters)
    wanted = [thread for thread in collected.threads if thread.fetchable]
    # What grew past the plan or is new (nothing, mostly).
    memory.prefetch(
        [(start, end - start) for start, end in (thread.datastack for thread in wanted)]
    )
    for thread in wanted:
        start, end = thread.datastack
        try:
            thread.stack = memory.locate_kept(start, end - start)
        except MemoryReadError:
            continue  # its frames are read one by one, where the walk needs them
    return collected


def _conclude(collected: Collected, codes: list[int]) -> Collected:
    """Notes a layout that cannot be right, and leaves the next walk its plan."""
    interpreter = collected.interpreter
    if collected.interpreters is None:
        return collected
    interpreter.plan = _coalesce(
        [
            (start, size)
            for start, size in _read_ranges(collected, codes)
            if start + size <= _END  # pointers from corrupt memory plus offsets may pass it
        ]
    )
    interpreter.stacks = {
        thread.thread_state: (thread.frame, thread.stack_bytes)
        for thread in collected.threads
        if thread.stack is not None
    }
    mismatch = f"python: the CPython {interpreter.version_text} layout does not match this binary"
    if not collected.threads:  # a running interpreter has at least its main thread's
        collected.problems.append(
            f"{mismatch}, or it is not running (yet or any more): no thread state found"
        )
    elif codes and not any(collected.codes.values()):
        collected.problems.append(
            f"{mismatch}: none of the {len(codes)} objects its frames point at is a code object"
        )
    return collected


def _read_ranges(collected: Collected, codes: list[int]) -> list[tuple[int, int]]:
    """Every range a walk read, for the next walk's plan."""
    interpreter = collected.interpreter
    assert collected.interpreters is not None
    layout = interpreter.layout
    return [
        (interpreter.runtime + layout.runtime_interpreters_head, 8),
        *(
            (address + offset, 8)
            for address in collected.interpreters
            for offset in (layout.interp_next, layout.interp_threads_head)
        ),
        *((thread.thread_state, layout.tstate_read_size) for thread in collected.threads),
        *(
            (start, _grown(start, end) - start)
            for start, end in (thread.datastack for thread in collected.threads if thread.fetchable)
        ),
        *(range_ for thread in collected.threads for range_ in thread.outside),
        *((address, layout.code_read_size) for address in codes),
    ]


def _walk_thread(
    memory: Memory,
    collected: Collected,
    thread: RawThread,
    record: cpython.Record,
    codes: dict[int, None],
) -> None:
    """:func:`_collect_frames`, with what goes wrong noted instead of raised."""
    try:
        _collect_frames(memory, collected, thread, record, codes)
    except (MemoryReadError, FormatError) as error:
        collected.problems.append(f"python: thread {thread.native_id}: cut short: {error}")


def _collect_thread_states(memory: Memory, collected: Collected, interp: int) -> None:
    layout = collected.interpreter.layout
    tstate = cpython.word(memory.read(interp + layout.interp_threads_head, 8), 0)
    size, unpack = layout.tstate_read_size, collected.interpreter.tstate_record.unpack
    seen: set[int] = set()
    while tstate and tstate not in seen:
        if len(seen) >= MAX_THREADS:
            collected.problems.append(f"python: more than {MAX_THREADS} thread states")
            return
        seen.add(tstate)
        data, at = memory.locate(tstate, size)
        following, owner, native_id, frame, start, end = unpack(data, at)
        if owner != interp:
            raise FormatError(
                f"thread state {tstate:#x} does not point back at its interpreter: "
                f"the {collected.interpreter.version_text} layout does not match this binary"
            )
        collected.threads.append(RawThread(tstate, native_id, frame, (start, end)))
        tstate = following


def _collect_frames(
    memory: Memory,
    collected: Collected,
    thread: RawThread,
    record: cpython.Record,
    codes: dict[int, None],
) -> None:
    """Reads the thread's frame chain, split into the runs of each eval call."""
    layout = collected.interpreter.layout
    pointer = thread.frame
    cframes: list[tuple[int, int]] = []
    if layout.frame_is_entry is not None:
        cframes = _cframe_chain(memory, layout, pointer, thread.outside)
        pointer = cframes[0][1] if cframes else 0
    elif layout.cframe_current is not None:
        thread.outside.append((pointer + layout.cframe_current, 8))  # on the C stack, mostly
        pointer = cpython.word(memory.read(pointer + layout.cframe_current, 8), 0)
    size = layout.frame_read_size
    # The loop runs for every frame while the process is stopped: its lookups are hoisted.
    locate, unpack = memory.locate, record.unpack
    untag = ~layout.executable_tag_bits
    #: 3.12+: frames owned by this value or more are eval calls' entry frames, not code.
    entry_owner = layout.entry_owner if layout.entry_owner is not None else 256
    #: 3.11: the flag that marks an eval call's first frame.
    is_entry = layout.frame_is_entry
    seen: set[int] = set()
    frames: list[RawFrame] = []
    #: Address of each run's innermost frame (3.11 matches them to _PyCFrames).
    firsts: list[int] = []
    block: Data = b""  # where the last frame was: the next one mostly is too
    block_start = 0
    #: Frames outside the used part of the frame stack go to the next walk's plan (the
    #: eval calls' records on the C stack too: read from the plan, the stop need not
    #: look in the stack copies).
    low, high = thread.datastack
    outside = thread.outside
    address = pointer
    while address and address not in seen:
        if len(seen) >= MAX_FRAMES:
            collected.problems.append(f"python: thread {thread.native_id}: {MAX_FRAMES}+ frames")
            break
        seen.add(address)
        at = address - block_start
        if at < 0 or at + size > len(block):
            block, at = locate(address, size)
            block_start = address - at
            if not low <= address < high and len(outside) < MAX_PLANNED_OUTSIDE:
                outside.append((address, size))
        code, previous, instr, owner = unpack(block, at)
        if owner >= entry_owner:
            # 3.12+: the entry frame of an eval call, a local of that C call.
            thread.runs.append((address, frames))
            frames = []
        else:
            if not frames:
                firsts.append(address)
            code &= untag
            codes[code] = None
            frames.append((code, instr, owner == _GENERATOR))
            if is_entry is not None and block[at + is_entry]:  # 3.11: an eval call's first frame
                thread.runs.append((None, frames))
                frames = []
        address = previous
    if address and address in seen:
        collected.problems.append(f"python: thread {thread.native_id}: frame chain loops")
    if frames:
        thread.runs.append((None, frames))
    if cframes:
        _anchor_runs(thread, firsts, cframes)


#: FRAME_OWNED_BY_GENERATOR, the same in every version.
_GENERATOR = 1


def _cframe_chain(
    memory: Memory, layout: cpython.Layout, cframe: int, read: list[tuple[int, int]]
) -> list[tuple[int, int]]:
    """(address, current frame) of each ``_PyCFrame`` from the innermost eval call outwards.

    What it read is added to ``read`` (up to :data:`MAX_PLANNED_OUTSIDE` ranges).
    """
    assert layout.cframe_current is not None and layout.cframe_previous is not None
    size = max(layout.cframe_current, layout.cframe_previous) + 8
    chain: list[tuple[int, int]] = []
    seen: set[int] = set()
    while cframe and cframe not in seen and len(chain) < MAX_EVAL_CALLS:
        seen.add(cframe)
        data = memory.read(cframe, size)
        if len(read) < MAX_PLANNED_OUTSIDE:
            read.append((cframe, size))
        chain.append((cframe, cpython.word(data, layout.cframe_current)))
        cframe = cpython.word(data, layout.cframe_previous)
    return chain


def _anchor_runs(thread: RawThread, firsts: list[int], cframes: list[tuple[int, int]]) -> None:
    """3.11: each run's anchor is the ``_PyCFrame`` of the eval call running it.

    Each eval call has one ``_PyCFrame`` on its C stack whose current frame
    is the innermost frame of its run; the thread state's own root
    ``_PyCFrame`` runs nothing (current frame NULL).  Runs and cframes are
    paired in order for as long as that holds; a run left without its
    cframe keeps no anchor.
    """
    calls = [(address, current) for address, current in cframes if current]
    for index, (call, first) in enumerate(zip(calls, firsts)):
        if call[1] != first:
            return
        thread.runs[index] = (call[0], thread.runs[index][1])


def _collect_codes(memory: Memory, collected: Collected, addresses: list[int]) -> None:
    """Reads the code objects (one batch), then the names and line tables of new ones."""
    interpreter = collected.interpreter
    layout = interpreter.layout
    size = layout.code_read_size
    record = interpreter.code_record
    memory.prefetch([(address, size) for address in addresses])
    expected = interpreter.types.get("PyCode_Type")
    new: list[tuple[int, cpython.CodeFields]] = []
    for address in addresses:
        try:
            fields = cpython.CodeFields(record, layout, memory.read(address, size))
        except MemoryReadError as error:
            collected.problems.append(f"python: code object {address:#x}: {error}")
            collected.codes[address] = None
            continue
        if expected is not None and fields.type != expected:
            collected.problems.append(f"python: {address:#x} is not a code object; frame left out")
            collected.codes[address] = None
            continue
        known = interpreter.codes.get(address, fields)
        collected.codes[address] = known
        if known is None:
            new.append((address, fields))
    string_size = cpython.header_size(layout) + STRING_GUESS
    memory.prefetch(
        [
            (pointer, string_size if kind == "str" else layout.bytes_sval + LINETABLE_GUESS)
            for _, fields in new
            for kind, pointer in (
                ("str", fields.qualname),
                ("str", fields.filename),
                ("bytes", fields.linetable),
            )
        ]
    )
    for address, fields in new:
        raw = RawCode(
            fields,
            address + layout.code_adaptive,
            _read_string(memory, interpreter, fields.qualname, collected.problems),
            _read_string(memory, interpreter, fields.filename, collected.problems),
            _read_bytes(memory, interpreter, fields.linetable, collected.problems),
        )
        interpreter.codes.put(address, raw)
        collected.codes[address] = raw


def _read_string(
    memory: Memory, interpreter: Interpreter, address: int, problems: list[str]
) -> tuple[cpython.StringShape, bytes] | None:
    """The shape and character bytes of the ``str`` at ``address``, or None (noted)."""
    layout = interpreter.layout
    try:
        header = memory.read(address, cpython.header_size(layout))
        expected = interpreter.types.get("PyUnicode_Type")
        if expected is not None and cpython.word(header, layout.object_type) != expected:
            raise FormatError("not a str object")
        shape = cpython.StringShape(layout, header)
        where = address + shape.offset if shape.inline else cpython.word(header, shape.offset)
        return shape, memory.read(where, shape.size) if shape.size else b""
    except (MemoryReadError, FormatError) as error:
        problems.append(f"python: str at {address:#x}: {error}")
        return None


def _read_bytes(
    memory: Memory, interpreter: Interpreter, address: int, problems: list[str]
) -> bytes | None:
    """The contents of the ``bytes`` object at ``address`` (a line table), or None (noted)."""
    layout = interpreter.layout
    try:
        header = memory.read(address, layout.bytes_sval)
        expected = interpreter.types.get("PyBytes_Type")
        if expected is not None and cpython.word(header, layout.object_type) != expected:
            raise FormatError("not a bytes object")
        size = cpython.bytes_length(layout, header)
        return memory.read(address + layout.bytes_sval, size) if size else b""
    except (MemoryReadError, FormatError) as error:
        problems.append(f"python: line table at {address:#x}: {error}")
        return None


# -- describing (after the target runs again) ----------------------------------------


def describe(collected: Collected) -> list[PythonThread]:
    """The collected stacks as Python frames; reads nothing, so the target may run meanwhile.

    Frames CPython itself does not show are left out as it leaves them out:
    a frame not yet started (before its first traceable instruction; 3.11
    and 3.12 only, the versions whose layout says where that is) and one
    whose code object could not be read.
    """
    threads = []
    for raw in collected.threads:
        runs = []
        for anchor, frames in raw.runs:
            described = []
            for address, instr, generator in frames:
                code = collected.codes.get(address)
                if code is None or not (generator or code.started(instr)):
                    continue
                described.append(PythonFrame(code.function, code.filename, code.line_at(instr)))
            runs.append(PythonRun(anchor, described))
        threads.append(PythonThread(raw.native_id, raw.thread_state, runs))
    return threads


def python_stacks(
    space: AddressSpace, modules: Iterable[Module], problems: list[str]
) -> list[PythonThread]:
    """The Python stacks of a target that holds still (a core, a stopped process)."""
    try:
        interpreter = find_interpreter(space, modules, problems)
    except LiveUnwindError as error:
        problems.append(f"python: {error}")
        return []
    if interpreter is None:
        return []
    collected = collect(Memory(space.read_frozen, space.read_frozen_many), interpreter)
    problems.extend(collected.problems)
    return describe(collected)
