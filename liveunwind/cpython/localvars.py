"""``--locals``: each Python frame's arguments and local variables, read with its frames.

A frame's variables follow it in memory (``localsplus``): one slot per
name of its code object's ``co_localsplusnames``, whose kinds
(``co_localspluskinds``) say which are cells.  They are read level by level,
each level one batch (:meth:`~liveunwind.cpython.memory.Memory.prefetch`):
the names and kinds of each code object's variables (once: they never
change, so they are kept with the code object in the cache), the frames'
slots (inside the frame stacks the walk already read), the objects in
them, the contents of cells, then what did not fit the first read of an
object (a long str, bytes or int) and the names of other objects' types.
In a live process this happens in the stop, so every value is of the same
instant as the frames.

What ``f_locals`` shows is shown: variables that have a value, a cell's
contents instead of the cell, hidden comprehension variables left out.  Module
and class-body code keeps its variables in the namespace dict it runs in
(its ``f_locals`` is that dict), which is not read: such a frame has no
``locals``.
Every count is bounded (:data:`MAX_LOCALS` per frame, :data:`MAX_VALUES`
per walk); an object that cannot be read or is not what its type says is
shown as unreadable, with a problem saying why.
"""

from __future__ import annotations

from liveunwind.cpython import objects, values
from liveunwind.cpython.codereader import read_str
from liveunwind.errors import FormatError, MemoryReadError
from liveunwind.frames import PythonValue

TYPE_CHECKING = False
if TYPE_CHECKING:
    from liveunwind.cpython.codecache import RawCode
    from liveunwind.cpython.collected import Collected
    from liveunwind.cpython.interpreter import Interpreter
    from liveunwind.cpython.layouts import Layout
    from liveunwind.cpython.memory import Memory

#: Variables shown per frame (a function has rarely more than a few dozen).
MAX_LOCALS = 256
#: Values read per walk, over every frame of every thread.
MAX_VALUES = 20000
#: Bytes read of an object past its header in the first batch: most str, bytes and ints fit.
INLINE_GUESS = 64
#: ``co_flags``: the code keeps its variables in slots (a function's), not in a dict.
CO_OPTIMIZED = 0x1
#: Pointers below this are no object (NULL, or a tagged value CPython keeps in a slot).
LOWEST_OBJECT = 4096


def read_local_names(memory: Memory, collected: Collected) -> None:
    """Reads the variable names of the code objects the walk's frames run (once each).

    What a live process's walk before its stop does, so that the stop reads
    only the variables' values.
    """
    codes = [code for _, code in _described_frames(collected)]
    _read_slot_names(memory, collected.interpreter, codes, collected.problems)


def read_locals(memory: Memory, collected: Collected) -> None:
    """Gives every frame the walk describes its variables, in ``collected.locals``."""
    interpreter = collected.interpreter
    collected.locals = {}
    frames = _described_frames(collected)
    _read_slot_names(memory, interpreter, [code for _, code in frames], collected.problems)
    reader = _ValueReader(memory, interpreter, collected.problems)
    slots: list[tuple[int, list[tuple[str, int, int]]]] = []
    budget = MAX_VALUES
    for address, code in frames:
        if code.local_slots is None or code.locals_in_dict or budget <= 0:
            continue
        try:
            held = _slots(memory, interpreter.layout, address, code.local_slots)
        except (MemoryReadError, FormatError) as error:
            collected.problems.append(f"python: locals of {code.function}: {error}")
            continue
        held = held[:budget]
        budget -= len(held)
        slots.append((address, held))
    if budget <= 0:
        collected.problems.append(f"python: locals: only the first {MAX_VALUES} values are read")
    reader.read([pointer for _, held in slots for _, _, pointer in held])
    for address, held in slots:
        shown: dict[str, PythonValue] = {}
        for name, kind, pointer in held:
            value = reader.value(pointer, cell=bool(kind & (values.KIND_CELL | values.KIND_FREE)))
            if value is not None:
                shown[name] = value
        collected.locals[address] = shown


def _described_frames(collected: Collected) -> list[tuple[int, RawCode]]:
    """(frame address, code) of every frame :func:`~liveunwind.cpython.stacks.describe` shows."""
    frames = []
    for thread in collected.threads:
        for _, run in thread.runs:
            for code_address, instr, generator, address in run:
                code = collected.codes.get(code_address)
                if code is not None and (generator or code.started(instr)):
                    frames.append((address, code))
    return frames


def _slots(
    memory: Memory, layout: Layout, frame: int, names: tuple[tuple[str, int], ...]
) -> list[tuple[str, int, int]]:
    """(name, kind, object pointer) of each slot with a value that ``f_locals`` would show."""
    data = memory.read(frame + layout.frame_localsplus, 8 * len(names))
    untag = ~layout.executable_tag_bits
    held = []
    for index, (name, kind) in enumerate(names):
        if kind & values.KIND_HIDDEN:
            continue
        bits = objects.word(data, index * 8)
        if layout.executable_tag_bits and bits & 3 == 3:
            held.append((name, kind, bits))  # a tagged int (3.14+): the value is in the bits
            continue
        pointer = bits & untag
        if pointer >= LOWEST_OBJECT:
            held.append((name, kind, pointer))
    return held


def _read_slot_names(
    memory: Memory, interpreter: Interpreter, codes: list[RawCode], problems: list[str]
) -> None:
    """Reads the variable names and kinds of the code objects that have none yet (kept)."""
    layout = interpreter.layout
    new = list({id(code): code for code in codes if code.local_slots is None}.values())
    if not new:
        return
    guess = layout.tuple_items + 8 * 16
    memory.prefetch(
        [(code.address + layout.code_flags, 4) for code in new]
        + [(code.address + layout.code_localsplusnames, 16) for code in new]
        + [(code.address + layout.code_localspluskinds, 8) for code in new]
    )
    pointers = []
    for code in new:
        try:
            flags = int.from_bytes(memory.read(code.address + layout.code_flags, 4), "little")
            names = objects.word(memory.read(code.address + layout.code_localsplusnames, 8), 0)
            kinds = objects.word(memory.read(code.address + layout.code_localspluskinds, 8), 0)
        except MemoryReadError as error:
            problems.append(f"python: variable names of {code.function}: {error}")
            continue
        if not flags & CO_OPTIMIZED:
            code.locals_in_dict = True
            code.local_slots = ()
            continue
        pointers.append((code, names, kinds))
    memory.prefetch(
        [(names, guess) for _, names, _ in pointers]
        + [(kinds, layout.bytes_sval + 32) for _, _, kinds in pointers]
    )
    string_size = objects.header_size(layout) + 32
    wanted: list[tuple[RawCode, list[int], bytes]] = []
    for code, names, kinds in pointers:
        try:
            header = memory.read(names, layout.tuple_items)
            count = objects.word(header, layout.tuple_size)
            if count > MAX_LOCALS:
                raise FormatError(f"{count} variables (more than {MAX_LOCALS})")
            items = memory.read(names + layout.tuple_items, 8 * count) if count else b""
            kinds_header = memory.read(kinds, layout.bytes_sval)
            if values.bytes_size(layout, kinds_header) != count:
                raise FormatError("variable kinds and names differ in number")
            kind_bytes = memory.read(kinds + layout.bytes_sval, count) if count else b""
        except (MemoryReadError, FormatError) as error:
            problems.append(f"python: variable names of {code.function}: {error}")
            continue
        wanted.append((code, [objects.word(items, 8 * i) for i in range(count)], kind_bytes))
    memory.prefetch([(name, string_size) for _, names_at, _ in wanted for name in names_at])
    for code, names_at, kind_bytes in wanted:
        slots = []
        for index, name in enumerate(names_at):
            text = string_at(memory, interpreter, name, None)
            if text is None:
                problems.append(f"python: variable {index} of {code.function}: not a str")
                break
            slots.append((text[0], kind_bytes[index]))
        else:
            code.local_slots = tuple(slots)


def string_at(
    memory: Memory, interpreter: Interpreter, address: int, keep: int | None
) -> tuple[str, bool] | None:
    """The text of the str at ``address`` (and whether it was cut at ``keep``), or None."""
    try:
        shape, data = read_str(memory, interpreter, address, keep)
    except (MemoryReadError, FormatError):
        return None
    return shape.decode(data), shape.truncated


class _ValueReader:
    """The objects a walk's variables hold, read level by level, each level one batch."""

    def __init__(self, memory: Memory, interpreter: Interpreter, problems: list[str]) -> None:
        self._memory = memory
        self._interpreter = interpreter
        self._layout = interpreter.layout
        self._problems = problems
        self._types = interpreter.types
        layout = self._layout
        #: Bytes read of each object in the first batch: its header and the start of its value.
        self._size = (
            max(
                objects.header_size(layout),
                layout.long_digits,
                layout.float_value + 8,
                layout.bytes_sval,
                layout.object_type + 16,
            )
            + INLINE_GUESS
        )
        self._type_names: dict[int, str] = {}

    def read(self, pointers: list[int]) -> None:
        """Fetches the objects, then the cells' contents, then the names of their types."""
        layout, memory = self._layout, self._memory
        objects_at = [pointer for pointer in dict.fromkeys(pointers) if pointer & 3 != 3]
        memory.prefetch([(pointer, self._size) for pointer in objects_at])
        cell_type = self._types.get("PyCell_Type")
        contents = []
        types = set()
        for pointer in objects_at:
            try:
                header = memory.read(pointer, layout.object_type + 8)
                kind = objects.word(header, layout.object_type)
            except MemoryReadError:
                continue
            types.add(kind)
            if kind == cell_type:
                inner = self._cell_contents(pointer)
                if inner is not None:
                    contents.append(inner)
        memory.prefetch([(pointer, self._size) for pointer in contents])
        for pointer in contents:
            try:
                types.add(
                    objects.word(memory.read(pointer, layout.object_type + 8), layout.object_type)
                )
            except MemoryReadError:
                continue
        by_value = {self._types.get(name) for name in _BY_VALUE}
        self._read_type_names(types - by_value)

    def _cell_contents(self, cell: int) -> int | None:
        """The object a cell holds (``ob_ref``, after the object header), or None if empty."""
        try:
            inner = objects.word(self._memory.read(cell + self._layout.object_type + 8, 8), 0)
        except MemoryReadError:
            return None
        return inner if inner >= LOWEST_OBJECT else None

    def _read_type_names(self, types: set[int]) -> None:
        layout, memory = self._layout, self._memory
        memory.prefetch([(kind + layout.type_name, 8) for kind in types])
        names = {}
        for kind in types:
            try:
                names[kind] = objects.word(memory.read(kind + layout.type_name, 8), 0)
            except MemoryReadError:
                continue
        memory.prefetch([(name, _to_page_end(name)) for name in names.values()])
        for kind, name in names.items():
            try:
                self._type_names[kind] = values.c_string(memory.read(name, _to_page_end(name)))
            except MemoryReadError:
                continue

    def value(self, pointer: int, *, cell: bool) -> PythonValue | None:
        """The value ``pointer`` holds; None for an empty cell (``f_locals`` leaves it out)."""
        if self._layout.executable_tag_bits and pointer & 3 == 3:
            return PythonValue("int", _signed(pointer) >> 2)  # a tagged int (3.14+)
        layout = self._layout
        try:
            header = self._memory.read(pointer, layout.object_type + 8)
            kind = objects.word(header, layout.object_type)
            if cell and kind == self._types.get("PyCell_Type"):
                inner = self._cell_contents(pointer)
                return None if inner is None else self.value(inner, cell=False)
            return self._decode(pointer, kind)
        except (MemoryReadError, FormatError) as error:
            self._problems.append(f"python: local at {pointer:#x}: {error}")
            return PythonValue("<unreadable>", address=pointer)

    def _decode(self, pointer: int, kind: int) -> PythonValue:
        types, layout, memory = self._types, self._layout, self._memory
        if pointer == types.get(values.NONE_OBJECT):
            return PythonValue("NoneType", None)
        if kind == types.get("PyLong_Type") or kind == types.get("PyBool_Type"):
            header = memory.read(pointer, layout.long_digits)
            count, sign = values.long_digit_count(layout, header)
            kept = min(count, values.MAX_INT_DIGITS)
            digits = memory.read(pointer + layout.long_digits, 4 * kept) if kept else b""
            number = values.long_from_digits(digits, kept, sign)
            if kind == types.get("PyBool_Type"):
                return PythonValue("bool", bool(number))
            return PythonValue("int", number, truncated=kept < count)
        if kind == types.get("PyFloat_Type"):
            data = memory.read(pointer, layout.float_value + 8)
            return PythonValue("float", values.float_value(layout, data))
        if kind == types.get("PyUnicode_Type"):
            text = string_at(memory, self._interpreter, pointer, values.MAX_TEXT)
            if text is None:
                raise FormatError("a str that cannot be read")
            return PythonValue("str", text[0], truncated=text[1])
        if kind == types.get("PyBytes_Type"):
            size = values.bytes_size(layout, memory.read(pointer, layout.bytes_sval))
            kept = min(size, values.MAX_TEXT)
            data = memory.read(pointer + layout.bytes_sval, kept) if kept else b""
            return PythonValue("bytes", data, truncated=kept < size)
        return PythonValue(self._type_names.get(kind, "<unknown type>"), address=pointer)


#: The types whose objects are read by value (the rest are shown by type name and address).
_BY_VALUE = ("PyLong_Type", "PyBool_Type", "PyFloat_Type", "PyUnicode_Type", "PyBytes_Type")


def _signed(bits: int) -> int:
    return bits - (1 << 64) if bits >> 63 else bits


def _to_page_end(address: int) -> int:
    """Bytes to read of a C string at ``address``: up to MAX_TYPE_NAME, not past its page."""
    return min(values.MAX_TYPE_NAME, 4096 - address % 4096)
