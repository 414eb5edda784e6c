"""The registry of unwind sources: every word ``--unwinder`` takes, in one place.

An unwind source is either a *table* (rules a module's file carries, or that a
JIT compiler registered at run time), which the stepper asks for the rule at
a pc, or a *strategy* (a checked guess made from the stack itself), which the
stepper tries when no table gave a usable rule.  Everything that names
sources reads them here: the stepper (tables, strategies, what ``auto``
means), the command line (``--unwinder``'s words and help, ``unwind-info
--format``), the unwind tables of a module (``modules/sources.py``: the
method their frames report), and the JSON Schema, which a test compares.

Adding a source is one entry in :data:`SOURCES`, plus what it reads — a
table's decoder (``formats/unwind/``) and the factory that finds it in a file
(``modules/sources.py``), or a strategy's module (``unwinder/strategies/``) —
and their tests.

Four methods of :class:`~liveunwind.frames.Method` belong to no source:
``context`` (frame 0, the thread's own registers), ``signal`` (the kernel's
sigreturn trampoline, recognised by its code whatever the sources),
``goroutine`` (the registers Go saved when a goroutine switched to its
scheduler stack, or the caller it keeps while it calls into the vDSO on
another stack, ``unwinder/goswitch.py``) and ``leaf`` (frame 0 before its
prologue, which the stepper checks before the other strategies whenever any
strategy is chosen: following the frame pointer or scanning from there would
skip its caller).  A strategy that reads the
function's own code sees for itself whether the frame is built yet, and is
tried before the leaf check (``before_leaf``).
"""

from __future__ import annotations

from liveunwind.errors import UsageError
from liveunwind.frames import Method

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

#: A source the stepper asks for the rule at a pc.
TABLE = "table"
#: A source that guesses the caller from the stack: ``step(walk)`` of a module
#: in ``liveunwind/unwinder/strategies/``.
STRATEGY = "strategy"


class Source:
    """One unwind source: its ``--unwinder`` word, its kind and the method its frames report."""

    __slots__ = ("before_leaf", "help", "kind", "method", "name", "run_time", "strategy")

    def __init__(
        self,
        name: str,
        kind: str,
        method: Method,
        help: str,
        *,
        run_time: bool = False,
        strategy: str | None = None,
        before_leaf: bool = False,
    ) -> None:
        #: The word of ``--unwinder`` (and the key of a module's ``unwind_sources``).
        self.name = name
        #: TABLE or STRATEGY.
        self.kind = kind
        #: What every frame this source finds reports.
        self.method = method
        #: One line for ``--help``.
        self.help = help
        #: A table of the whole target that JIT compilers fill at run time
        #: (``ModuleMap.registry``), rather than one a module's file carries.
        self.run_time = run_time
        #: For a strategy: its module in ``liveunwind/unwinder/strategies/``,
        #: whose ``step(walk)`` the stepper calls (imported when first needed).
        self.strategy = strategy
        #: For a strategy: tried before the leaf check of a frame whose pc is
        #: exact, because it knows from the code whether the frame is built.
        self.before_leaf = before_leaf

    def __repr__(self) -> str:
        return f"<Source {self.name} ({self.kind})>"


#: Every source, in the order ``auto`` tries them.  Run-time registrations
#: come first: a JIT compiler that registers code knows it best, and only JIT
#: code has them.  Compact unwind exists only in Mach-O images, where it is the
#: primary table (with its own escape to DWARF).  CFI comes before SFrame: both
#: cost the same per lookup (about 22 µs cold, measured on testprogs/sframe-O2),
#: but CFI restores every callee-saved register, which later frames' rules may
#: use (e.g. a CFA based on rbx), while SFrame knows only the CFA, FP and RA.
#: SFrame then covers code whose CFI is missing.  The strategies come last:
#: they are guesses, checked but guesses.  The prologue, read from the
#: function's start (its symbol, or the direct call that entered it), is the
#: function's own word on its frame where its code is the usual; the
#: frame-pointer chain holds only where every function keeps one; a scan takes
#: what looks like a return address.
SOURCES = (
    Source(
        "dynamic",
        TABLE,
        Method.DYNAMIC,
        "what a JIT compiler registered at run time",
        run_time=True,
    ),
    Source("compact", TABLE, Method.COMPACT, "Apple compact unwind, __unwind_info"),
    Source(
        "cfi", TABLE, Method.CFI, "DWARF CFI in .eh_frame and .debug_frame, and Go's .gopclntab"
    ),
    Source("sframe", TABLE, Method.SFRAME, "SFrame, .sframe"),
    Source(
        "prologue",
        STRATEGY,
        Method.PROLOGUE,
        "the function's prologue, read from its start where the architecture has an analysis",
        strategy="prologue",
        before_leaf=True,
    ),
    Source(
        "fp",
        STRATEGY,
        Method.FRAMEPOINTER,
        "the frame-pointer chain, every link checked",
        strategy="framepointer",
    ),
    Source(
        "scan",
        STRATEGY,
        Method.SCAN,
        "a return address found on the stack, right after a call",
        strategy="scan",
    ),
)

#: Each source by its name.
SOURCES_BY_NAME = {source.name: source for source in SOURCES}
#: What ``--unwinder auto`` means: every source, in order.
AUTO_UNWINDERS = tuple(source.name for source in SOURCES)


def sources_named(names: Sequence[str]) -> tuple[Source, ...]:
    """The sources called ``names``, in that order; a UsageError names any unknown one."""
    unknown = [name for name in names if name not in SOURCES_BY_NAME]
    if unknown:
        raise _unknown(", ".join(unknown))
    return tuple(SOURCES_BY_NAME[name] for name in names)


def parse_unwinders(text: str) -> tuple[str, ...]:
    """Parses ``--unwinder`` (``auto`` or a comma-separated list of source names)."""
    if text == "auto":
        return AUTO_UNWINDERS
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    if not names:
        raise _unknown(repr(text))
    sources_named(names)
    return names


def _unknown(what: str) -> UsageError:
    return UsageError(f"unknown unwinder {what}; choose from auto, {', '.join(SOURCES_BY_NAME)}")
