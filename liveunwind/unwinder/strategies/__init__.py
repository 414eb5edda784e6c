"""What the stepper tries when no unwind table covers a pc: checked guesses.

Every strategy is one function of one argument, ``step(walk)``, where
``walk`` is the :class:`Walk` the stepper keeps for the thread: the current
registers and the callables through which a strategy sees the target, so
none of them knows whether it runs on a live process, a snapshot or a core.
``step`` returns the caller's registers (pc, sp and fp, and the registers a
prologue read says where the caller's are; everything else is unknown after a
guess) or None, and explains a refusal through
``walk.notes`` so ``--verbose`` can say why a fallback was not taken.  The
registry (``liveunwind/sources.py``) names the module of each strategy a
user can choose; ``tests/unit/test_sources.py`` checks they have this shape.

- :mod:`.prologue`: the frame the function's own prologue builds, read from
  its start by the architecture's analysis (riscv64), where a symbol, a JIT
  registration or the direct call that entered it says where it starts.
- :mod:`.framepointer`: the rbp chain / aarch64 frame records, every link checked.
- :mod:`.leaf`: the first frame of a function that has not set up a frame yet
  (tried before the other strategies, after the prologue's, whenever any
  strategy may be used; no source of its own).
- :mod:`.scan`: a bounded search of the stack for a return address that
  follows a call instruction.
"""

from __future__ import annotations

from liveunwind.arch.base import ReadMemory

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from liveunwind.arch import Arch
else:
    # the same class as collections.abc's, from the module os loaded: not collections (0.8 ms)
    from _collections_abc import Callable

__all__ = [
    "CodeReader",
    "FunctionAt",
    "IsCode",
    "ModuleAt",
    "ReadMemory",
    "ScanBudget",
    "StackAt",
    "Walk",
    "note",
]

#: True when an address is executable code of the target.
IsCode = Callable[[int], bool]
#: Reads machine code (file or memory); raises MemoryReadError or returns short.
CodeReader = Callable[[int, int], bytes]
#: The function holding an address, as its symbol (or a JIT's registration) says:
#: its start and its end (None where the symbol has no size); None where unknown.
FunctionAt = Callable[[int], tuple[int, int | None] | None]
#: The writable mapping holding an address (low, high exclusive), None where none does.
StackAt = Callable[[int], tuple[int, int] | None]
#: What identifies the module holding an address (compared with ==), None for none.
ModuleAt = Callable[[int], object]

#: Words all scans of one thread examine at most (512 KiB of stack).
DEFAULT_BUDGET = 65536


class ScanBudget:
    """The words all scans of one thread may still examine."""

    def __init__(self, words: int = DEFAULT_BUDGET) -> None:
        self.remaining = words

    def take(self, words: int) -> int:
        """Grants up to ``words`` words and returns how many were granted."""
        granted = min(words, self.remaining)
        self.remaining -= granted
        return granted

    def give_back(self, words: int) -> None:
        """Returns words that were granted but not examined."""
        self.remaining += words

    @property
    def exhausted(self) -> bool:
        return self.remaining <= 0


class Walk:
    """One thread's walk as a strategy sees it.

    The stepper makes one per backtrace, starts it anew for each thread
    (:meth:`begin`) and sets ``registers`` before each step, so trying a
    strategy allocates nothing but what the strategy makes.

    ``read(address, size) -> bytes``
        target memory (the stack); raises MemoryReadError.
    ``is_code(address) -> bool``
        the address lies in an executable mapping or a registered JIT range.
    ``code_reader(address, size) -> bytes``
        machine code at an address, from the mapped file or from memory;
        raises MemoryReadError (or returns fewer bytes) when it has none.
    ``stack_at(address) -> (low, high) | None``
        the writable mapping holding an address (a stack other than the
        thread's, where a runtime keeps one); None in place of the callable:
        no mappings to ask.
    ``function_at(address) -> (start, end) | None``
        the function holding an address, as the symbols (or a JIT's
        registration) say; None: not known.  None in place of the callable:
        no symbols to ask.
    ``module_at(address)``
        what identifies the module holding an address (None: none); None in
        place of the callable: no modules to ask.
    """

    __slots__ = (
        "arch",
        "budget",
        "code_reader",
        "exact_pc",
        "foreign_stack",
        "found_by_frame_pointer",
        "found_by_table",
        "function_at",
        "is_code",
        "module_at",
        "notes",
        "read",
        "registers",
        "stack_at",
        "stack_range",
    )

    def __init__(
        self,
        arch: Arch,
        registers: dict[int, int],
        read: ReadMemory,
        is_code: IsCode,
        code_reader: CodeReader,
        *,
        stack_range: tuple[int, int] | None = None,
        notes: list[str] | None = None,
        stack_at: StackAt | None = None,
        budget: ScanBudget | None = None,
        function_at: FunctionAt | None = None,
        module_at: ModuleAt | None = None,
        exact_pc: bool = True,
    ) -> None:
        self.arch = arch
        #: The registers of the frame whose caller is wanted.
        self.registers = registers
        #: The pc of ``registers`` is where the thread stopped (frame 0, or code a
        #: signal interrupted), not a return address.
        self.exact_pc = exact_pc
        #: The frame of ``registers`` was found by a frame-pointer step: its fp is
        #: the one its callee's checked frame record saved, a link of the chain.
        self.found_by_frame_pointer = False
        #: The frame of ``registers`` was found by an unwind table's rule (it made
        #: a call): its fp is the one its callee kept or restored.
        self.found_by_table = False
        self.read = read
        self.is_code = is_code
        self.code_reader = code_reader
        #: The stack mapping the walk is on (low, high exclusive), None when
        #: unknown: the thread's, or another one the walk moved to.
        self.stack_range = stack_range
        #: Why strategies refused, when ``--verbose`` asked (else None).
        self.notes = notes
        self.stack_at = stack_at
        self.function_at = function_at
        self.module_at = module_at
        #: Shared by every scan of the thread, so a corrupt or huge stack costs
        #: at most the budget's words of reads and checks.
        self.budget = ScanBudget() if budget is None else budget
        #: The walk left the thread's stack for one a frame pointer led to (a
        #: runtime's, inside a heap mapping): where it ends nothing says.
        self.foreign_stack = False

    def begin(
        self,
        registers: dict[int, int],
        stack_range: tuple[int, int] | None,
        notes: list[str] | None,
    ) -> None:
        """Another thread of the same target: its registers, stack, notes, and a whole budget."""
        self.registers = registers
        self.stack_range = stack_range
        self.notes = notes
        self.budget = ScanBudget()
        self.foreign_stack = False


def note(notes: list[str] | None, text: str) -> None:
    """Records why a strategy refused, when the caller asked to know."""
    if notes is not None:
        notes.append(text)
