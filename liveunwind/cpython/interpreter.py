"""A target's CPython interpreter: where ``_PyRuntime`` is, which version, which layout.

:func:`find_interpreter` looks through the modules whose name says Python
(``python3.11``, ``libpython3.12.so.1.0``, ``python3.14d``) for the symbol
``_PyRuntime`` — in ``.dynsym`` (CPython exports it even from a stripped
executable), ``.symtab``, or the module's separate debug file — reads the
version the binary was built as (``Py_Version``, from the file), and chooses
the layout: the built-in one for 3.11 and 3.12, the one the interpreter
publishes in ``_Py_DebugOffsets`` for 3.13 and later.  A version without a
layout, or a published record that disagrees with the binary, is refused
with a note saying so: an unknown layout would only print garbage.
"""

from __future__ import annotations

from liveunwind.arch.base import WORD_MASK
from liveunwind.cpython import layouts, objects, values
from liveunwind.cpython.codecache import CodeCache
from liveunwind.errors import FormatError, MemoryReadError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

    from liveunwind.cpython.layouts import AsyncioLayout, Layout
    from liveunwind.formats.elf import ElfImage
    from liveunwind.modules.module import Module
    from liveunwind.targets.base import AddressSpace


class Interpreter:
    """A CPython runtime in a target: where ``_PyRuntime`` is, its version and layout.

    Also keeps what it learned about code objects (name, file, line table),
    keyed by address, so that a later backtrace of the same process reads
    only the code objects' headers again (see :class:`CodeCache`), and what
    the last walk read: the plan of the next one (see :mod:`~liveunwind.cpython.plan`).
    """

    def __init__(
        self,
        module: str,
        runtime: int,
        version: int,
        layout: Layout,
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
        #: Addresses of ``PyCode_Type``, ``PyUnicode_Type``, ``PyBytes_Type`` and the
        #: symbols of :data:`~liveunwind.cpython.values.VALUE_SYMBOLS`, where found.
        self.types = types
        self.codes = CodeCache()
        #: Where asyncio keeps its tasks (3.14+), found by the reader when ``--tasks`` asks.
        self.asyncio: AsyncioLayout | None = None
        #: What the last walk read (``_PyRuntime``'s head, interpreters, thread states,
        #: the used parts of the frame stacks with room to grow, frames outside them and
        #: the code objects' headers), sorted and coalesced: the next walk fetches it
        #: with one request, so the stop need not build it.
        self.plan: list[tuple[int, int]] = []
        #: Each thread state's frame pointer and frame-stack bytes as the last walk saw
        #: them: a thread whose stack is byte for byte the same in the stop has the
        #: frames that walk followed, all inside the plan (see
        #: :func:`~liveunwind.cpython.stop.capture`).
        self.stacks: dict[int, tuple[int, bytes]] = {}
        #: The frame and code-object fields, each unpacked with one call.
        self.tstate_record = objects.tstate_record(layout)
        self.frame_record = objects.frame_record(layout)
        self.code_record = objects.code_record(layout)

    @property
    def version_text(self) -> str:
        return layouts.version_text(self.version)

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
    minor = layouts.minor_version(version)
    if minor < (3, 11):
        raise FormatError(f"CPython {layouts.version_text(version)}: only 3.11 and later")
    layout = layouts.BUILT_IN_LAYOUTS.get(minor)
    if layout is None:
        size = layouts.debug_offsets_size(minor)
        if size is None:
            raise FormatError(
                f"CPython {layouts.version_text(version)}: no layout known for this version"
            )
        layout = layouts.layout_from_debug_offsets(
            _static_bytes(space, symbols.image, runtime, bias, size), version
        )
    types = {}
    for name in ("PyCode_Type", "PyUnicode_Type", "PyBytes_Type", *values.VALUE_SYMBOLS):
        found = symbols.find(name)
        if found is not None:
            types[name] = (found + bias) & WORD_MASK
        elif name not in values.VALUE_SYMBOLS:
            problems.append(f"python: {module.name}: no {name}; its objects are not type-checked")
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
