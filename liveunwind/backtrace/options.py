"""How to walk and name a target's stacks: the options every entry point takes, defaults once.

``attach``, ``open_core``, ``gdb_remote``, ``local_backtrace``, ``Session``
and the command all take one :class:`BacktraceOptions`.  An option is added
here and nowhere else: every entry point passes it on untouched, and the
keywords users wrote before there was an options object
(``attach(pid, python=True)``) become options in :func:`chosen`, the one
place that knows they exist.
"""

from __future__ import annotations

from liveunwind.sources import AUTO_UNWINDERS
from liveunwind.unwinder import DEFAULT_MAX_FRAMES

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any


class BacktraceOptions:
    """How to unwind and name the frames of a target (what every command shares).

    Built by keyword only, read-only once built: options are shared by the
    backtraces of a session and are a dictionary key (``local_backtrace``
    keeps the backtracer of its last options), so they compare and hash by
    value.  :meth:`replace` makes a changed copy.  A plain class rather than
    a dataclass: a backtrace of a process pays for no ``dataclasses`` import.
    """

    #: Every option, in the order of ``__init__`` (which :meth:`__repr__` follows): a new
    #: option is named here and in ``__init__``, with its default and what it asks for.
    __slots__ = (
        "max_frames",
        "unwinders",
        "symbols",
        "verbose",
        "debug_dirs",
        "lines",
        "python",
        "python_locals",
        "python_tasks",
    )

    def __init__(
        self,
        *,
        max_frames: int = DEFAULT_MAX_FRAMES,
        unwinders: Sequence[str] = AUTO_UNWINDERS,
        symbols: bool = True,
        verbose: bool = False,
        debug_dirs: Sequence[str] = (),
        lines: bool = False,
        python: bool = False,
        python_locals: bool = False,
        python_tasks: bool = False,
    ) -> None:
        #: Each walk stops after this many frames; 0 is no limit.
        self.max_frames = max_frames
        #: The unwind sources, in the order each frame tries them.
        self.unwinders = tuple(unwinders)
        #: Name each frame's function.
        self.symbols = symbols
        #: Note under each frame why the sources before the one that worked failed.
        self.verbose = verbose
        #: Separate debug files are looked for here, then in the default folders.
        self.debug_dirs = tuple(debug_dirs)
        #: Give each frame its source file and line and the calls inlined into it (DWARF).
        self.lines = lines
        #: Give each frame of CPython's eval loop the Python frames it runs.
        self.python = python
        #: With ``python``: give each Python frame its arguments and local variables.
        self.python_locals = python_locals
        #: With ``python``: list the asyncio tasks, each with its await chain (3.14+).
        self.python_tasks = python_tasks

    def __setattr__(self, name: str, value: object) -> None:
        """Each option is set once, by ``__init__``: a changed option would change a hash."""
        if hasattr(self, name):
            raise AttributeError(f"BacktraceOptions are read-only: use replace({name}=...)")
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"BacktraceOptions are read-only: {name} cannot be deleted")

    def replace(self, **changes: Any) -> BacktraceOptions:
        """A copy with the options named in ``changes`` changed; an unknown name is a TypeError."""
        return BacktraceOptions(**{**self._as_dict(), **changes})

    def _as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BacktraceOptions):
            return NotImplemented
        return self._as_dict() == other._as_dict()

    def __hash__(self) -> int:
        return hash(tuple(self._as_dict().values()))

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={value!r}" for name, value in self._as_dict().items())
        return f"BacktraceOptions({fields})"


def chosen(options: BacktraceOptions | None, keywords: Mapping[str, Any]) -> BacktraceOptions:
    """What an entry point was asked for: ``options`` (or the defaults), changed by ``keywords``.

    Every entry point takes ``options=`` and, as it did before there was an
    options object, any option as a keyword of its own; a keyword wins over
    the same option in ``options``.  A keyword that names no option is a
    TypeError that names it, as Python's own would be.
    """
    if options is None:
        return BacktraceOptions(**keywords)
    return options.replace(**keywords) if keywords else options
