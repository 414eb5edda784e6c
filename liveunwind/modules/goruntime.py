"""Where a Go program keeps its scheduler's records: ``runtime.allm`` and the fields of m, g, gobuf.

A thread stopped on Go's scheduler stack (g0) ran into it from a goroutine
through ``runtime.mcall``, ``runtime.systemstack`` or ``runtime.morestack``;
the goroutine's own stack is found from the thread's M (``runtime.m``: its
``g0``, ``curg``, ``lockedg``, ``procid``; ``vdsoSP`` and ``vdsoPC`` while a
call into the vDSO runs on another stack), that goroutine's ``runtime.g``
(``stack``, ``m``, ``lockedm``, ``goid``) and the registers it saved in
``g.sched`` (``runtime.gobuf``: ``sp``, ``pc``, ``bp``, ``lr``).  The Ms are
listed from ``runtime.allm`` along ``m.alllink``.

The fields move between Go releases, so every offset comes from the
program's own DWARF (the ``runtime`` unit's structure types) and the list's
head from its symbol table; a program built without them (``-ldflags=-s``
or ``-w``, or stripped) has no layout, and the reason says so.
"""

from __future__ import annotations

from liveunwind.errors import FormatError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from liveunwind.formats.dwarf.structs import Structure
    from liveunwind.formats.elf import ElfImage
    from liveunwind.modules.lines import ModuleLines

#: The fields read, as (structure, path of members, the type(s) the last one may have).
_FIELDS: dict[str, tuple[str, tuple[str, ...], str | tuple[str, ...]]] = {
    "m_g0": ("runtime.m", ("g0",), "*runtime.g"),
    "m_curg": ("runtime.m", ("curg",), "*runtime.g"),
    "m_lockedg": ("runtime.m", ("lockedg",), "runtime.guintptr"),
    "m_procid": ("runtime.m", ("procid",), "uint64"),
    "m_alllink": ("runtime.m", ("alllink",), "*runtime.m"),
    "m_vdso_sp": ("runtime.m", ("vdsoSP",), "uintptr"),
    "m_vdso_pc": ("runtime.m", ("vdsoPC",), "uintptr"),
    "g_stack_lo": ("runtime.g", ("stack", "lo"), "uintptr"),
    "g_stack_hi": ("runtime.g", ("stack", "hi"), "uintptr"),
    "g_m": ("runtime.g", ("m",), "*runtime.m"),
    "g_lockedm": ("runtime.g", ("lockedm",), "runtime.muintptr"),
    "g_goid": ("runtime.g", ("goid",), ("int64", "uint64")),  # uint64 from Go 1.20
    "g_sched_sp": ("runtime.g", ("sched", "sp"), "uintptr"),
    "g_sched_pc": ("runtime.g", ("sched", "pc"), "uintptr"),
    "g_sched_bp": ("runtime.g", ("sched", "bp"), "uintptr"),
    "g_sched_lr": ("runtime.g", ("sched", "lr"), "uintptr"),
}
#: Largest runtime.m or runtime.g believed (Go's are 0.4–2 KiB): each is read whole.
MAX_RECORD = 1 << 16
#: The type of each structure member that leads into another structure.
_NESTED = {"stack": "runtime.stack", "sched": "runtime.gobuf"}
_STRUCTURES = ("runtime.m", "runtime.g", "runtime.stack", "runtime.gobuf")


class GoRuntime:
    """The layout of one Go program's scheduler records (64-bit words).

    ``allm`` is the link-time address of ``runtime.allm``; ``m_size`` and
    ``g_size`` the structures' sizes; every other attribute the byte offset
    of a field, named as in :data:`_FIELDS`.
    """

    def __init__(self, allm: int, sizes: dict[str, int], offsets: dict[str, int]) -> None:
        self.allm = allm
        self.m_size = sizes["runtime.m"]
        self.g_size = sizes["runtime.g"]
        self.m_g0 = offsets["m_g0"]
        self.m_curg = offsets["m_curg"]
        self.m_lockedg = offsets["m_lockedg"]
        self.m_procid = offsets["m_procid"]
        self.m_alllink = offsets["m_alllink"]
        self.m_vdso_sp = offsets["m_vdso_sp"]
        self.m_vdso_pc = offsets["m_vdso_pc"]
        self.g_stack_lo = offsets["g_stack_lo"]
        self.g_stack_hi = offsets["g_stack_hi"]
        self.g_m = offsets["g_m"]
        self.g_lockedm = offsets["g_lockedm"]
        self.g_goid = offsets["g_goid"]
        self.g_sched_sp = offsets["g_sched_sp"]
        self.g_sched_pc = offsets["g_sched_pc"]
        self.g_sched_bp = offsets["g_sched_bp"]
        self.g_sched_lr = offsets["g_sched_lr"]


def read_runtime(image: ElfImage, lines_of: Callable[[], ModuleLines | None]) -> GoRuntime | str:
    """The layout of the Go program ``image``, or why there is none.

    ``lines_of`` gives the DWARF of the module the image is the file of.
    """
    allm = image.find_symbol("runtime.allm")
    if allm is None:
        return "no symbol runtime.allm (the program's symbol table was stripped)"
    lines = lines_of()
    if lines is None:
        return "no DWARF describing runtime.g and runtime.m (built with -ldflags=-w, or stripped)"
    from liveunwind.formats.dwarf.structs import structures

    try:
        found = structures(lines.info, _STRUCTURES, first_units=("runtime",))
    except FormatError as error:
        return f"its DWARF is unreadable: {error}"
    offsets: dict[str, int] = {}
    for field, (structure, path, kind) in _FIELDS.items():
        kinds = (kind,) if isinstance(kind, str) else kind
        offset = next(
            (o for o in (_offset(found, structure, path, k) for k in kinds) if o is not None), None
        )
        if offset is None:
            return f"its DWARF does not give {structure}.{'.'.join(path)} as {' or '.join(kinds)}"
        offsets[field] = offset
    sizes = {name: found[name].size for name in ("runtime.m", "runtime.g")}
    for name, size in sizes.items():
        if not 0 < size <= MAX_RECORD:
            return f"its DWARF gives {name} {size} bytes"
    return GoRuntime(allm.value, sizes, offsets)


def _offset(
    found: dict[str, Structure], structure: str, path: tuple[str, ...], kind: str
) -> int | None:
    """The byte offset of ``structure.path`` whose last member has type ``kind``."""
    total = 0
    for depth, member in enumerate(path):
        record = found.get(structure)
        if record is None:
            return None
        last = depth == len(path) - 1
        offset = record.offset(member, kind if last else _NESTED[member])
        if offset is None:
            return None
        total += offset
        structure = _NESTED.get(member, "")
    return total
