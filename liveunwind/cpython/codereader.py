"""Reading the code objects a walk's frames run: headers in one batch, then names and line tables.

A code object's header is read each time (it tells whether the object at
that address is still the one the cache knows); its qualified name, file
name and line table only when it is new.  Each is checked against its type
(``PyCode_Type``, ``PyUnicode_Type``, ``PyBytes_Type``) where the binary
names it; what fails is noted and its frame left out.
"""

from __future__ import annotations

from liveunwind.cpython import objects
from liveunwind.cpython.codecache import RawCode
from liveunwind.errors import FormatError, MemoryReadError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from liveunwind.cpython.collected import Collected
    from liveunwind.cpython.interpreter import Interpreter
    from liveunwind.cpython.memory import Memory


#: Bytes read past a ``str`` header in the same request, in the hope the characters fit.
STRING_GUESS = 192
#: Bytes of a line table read in the same request as its header (most are shorter).
LINETABLE_GUESS = 512


def read_codes(memory: Memory, collected: Collected, addresses: list[int]) -> None:
    """Reads the code objects (one batch), then the names and line tables of new ones."""
    interpreter = collected.interpreter
    layout = interpreter.layout
    size = layout.code_read_size
    record = interpreter.code_record
    memory.prefetch([(address, size) for address in addresses])
    expected = interpreter.types.get("PyCode_Type")
    new: list[tuple[int, objects.CodeFields]] = []
    for address in addresses:
        try:
            fields = objects.CodeFields(record, layout, memory.read(address, size))
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
    string_size = objects.header_size(layout) + STRING_GUESS
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
            address,
            address + layout.code_adaptive,
            _read_string(memory, interpreter, fields.qualname, collected.problems),
            _read_string(memory, interpreter, fields.filename, collected.problems),
            _read_bytes(memory, interpreter, fields.linetable, collected.problems),
        )
        interpreter.codes.put(address, raw)
        collected.codes[address] = raw


def _read_string(
    memory: Memory, interpreter: Interpreter, address: int, problems: list[str]
) -> tuple[objects.StringShape, bytes] | None:
    """The shape and character bytes of the ``str`` at ``address``, or None (noted)."""
    try:
        return read_str(memory, interpreter, address)
    except (MemoryReadError, FormatError) as error:
        problems.append(f"python: str at {address:#x}: {error}")
        return None


def read_str(
    memory: Memory, interpreter: Interpreter, address: int, keep: int | None = None
) -> tuple[objects.StringShape, bytes]:
    """The shape and character bytes of the ``str`` at ``address``, type-checked.

    ``keep``: read only that many characters of a longer one (see
    :class:`~liveunwind.cpython.objects.StringShape`).
    """
    layout = interpreter.layout
    header = memory.read(address, objects.header_size(layout))
    expected = interpreter.types.get("PyUnicode_Type")
    if expected is not None and objects.word(header, layout.object_type) != expected:
        raise FormatError("not a str object")
    shape = objects.StringShape(layout, header, keep)
    where = address + shape.offset if shape.inline else objects.word(header, shape.offset)
    return shape, memory.read(where, shape.size) if shape.size else b""


def _read_bytes(
    memory: Memory, interpreter: Interpreter, address: int, problems: list[str]
) -> bytes | None:
    """The contents of the ``bytes`` object at ``address`` (a line table), or None (noted)."""
    layout = interpreter.layout
    try:
        header = memory.read(address, layout.bytes_sval)
        expected = interpreter.types.get("PyBytes_Type")
        if expected is not None and objects.word(header, layout.object_type) != expected:
            raise FormatError("not a bytes object")
        size = objects.bytes_length(layout, header)
        return memory.read(address + layout.bytes_sval, size) if size else b""
    except (MemoryReadError, FormatError) as error:
        problems.append(f"python: line table at {address:#x}: {error}")
        return None
