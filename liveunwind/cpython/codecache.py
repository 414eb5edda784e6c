"""Code objects as read, and the cache that keeps them between backtraces of a process.

A frame is described by its code object: the function's qualified name, its
file and its line table.  Names and line tables never change once a code
object exists, so a later walk reads only a code object's header and, when
the fields there are the ones seen before, takes the rest from here
(:class:`CodeCache`, kept by the
:class:`~liveunwind.cpython.interpreter.Interpreter`).  The lines are
decoded on demand and kept per instruction.
"""

from __future__ import annotations

from liveunwind.cpython import objects
from liveunwind.errors import FormatError


class RawCode:
    """What was read of one code object: the fields, and the bytes of its names and line table."""

    __slots__ = (
        "address",
        "fields",
        "file",
        "linetable",
        "lines",
        "local_slots",
        "locals_in_dict",
        "qualname",
        "start",
    )

    def __init__(
        self,
        fields: objects.CodeFields,
        address: int,
        start: int,
        qualname: tuple[objects.StringShape, bytes] | None,
        file: tuple[objects.StringShape, bytes] | None,
        linetable: bytes | None,
    ) -> None:
        self.fields = fields
        #: Address of the code object.
        self.address = address
        #: Address of the code's first instruction (``co_code_adaptive``).
        self.start = start
        #: With ``--locals``: the name and kind of each slot of its frames' variables
        #: (``co_localsplusnames``, ``co_localspluskinds``), read the first time asked.
        self.local_slots: tuple[tuple[str, int], ...] | None = None
        #: Module and class-body code (not CO_OPTIMIZED) keeps its variables in a dict,
        #: the namespace it runs in, which --locals does not read.
        self.locals_in_dict = False
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
        return instr >= self.start + self.fields.firsttraceable * objects.CODE_UNIT

    def line_at(self, instr: int) -> int | None:
        """The line of the instruction at ``instr``; None where there is none or no table."""
        if instr in self.lines:
            return self.lines[instr]
        line = None
        offset = instr - self.start
        if self.linetable is not None and -(1 << 31) < offset < 1 << 31:
            try:
                line = objects.line_for_offset(self.linetable, self.fields.firstlineno, offset)
            except FormatError:
                line = None
        if len(self.lines) < MAX_LINES_KEPT:
            self.lines[instr] = line
        return line


#: Instruction → line answers kept per code object.
MAX_LINES_KEPT = 256


def _text(string: tuple[objects.StringShape, bytes] | None) -> str:
    return "<unknown>" if string is None else string[0].decode(string[1])


class CodeCache:
    """Code objects read so far, by address, with the fields that identify them.

    Owned by the :class:`~liveunwind.cpython.interpreter.Interpreter`; an
    entry is used again only when the code object at that address still has
    the same type, names, line-table pointer and first line (so a code
    object freed and replaced is read anew); the cache is emptied when it
    reaches :data:`MAX_ENTRIES`.
    """

    MAX_ENTRIES = 20000

    def __init__(self) -> None:
        self._entries: dict[int, RawCode] = {}

    def get(self, address: int, fields: objects.CodeFields) -> RawCode | None:
        entry = self._entries.get(address)
        if entry is not None and entry.fields.identity == fields.identity:
            return entry
        return None

    def put(self, address: int, raw: RawCode) -> None:
        if len(self._entries) >= self.MAX_ENTRIES:
            self._entries.clear()
        self._entries[address] = raw
