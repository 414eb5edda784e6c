"""Whether a guessed return address is that of a call that could have entered the frame's function.

A word on the stack that points right after a call instruction is a return
address of *some* call; it is the caller of the frame being walked only if
that call could have entered the frame's function.  Stale return addresses of
earlier calls (into other functions, long returned) pass every other check,
so each guess (scan, leaf, frame pointer) asks :func:`refusal` here:

- an indirect call could have gone anywhere: allowed;
- a direct call's target, followed through its PLT entry's GOT slot where it
  is one (``Arch.plt_slot``), is the *entry*; where the frame's function is
  known (symbols, perf maps, JIT registrations), the entry must be its start
  (or, for code a JIT compiler announced, or a symbol without a size, lie
  between its start and the pc: other entry points, unnamed functions after
  a symbol); where it is not known, the entry's own function must hold the
  pc, or failing a symbol there, the entry must lie at or below the pc in the
  pc's module (a call from between the two may be one the function made, or
  recursion: allowed);
- a PLT entry whose GOT slot has not been bound yet (it still points into the
  PLT) leads who knows where: allowed;
- JIT code (no module holds it) calling JIT code: allowed, whatever the
  entry, for JIT compilers route calls through stubs and veneers (BEAM's
  calls of its shared code, HotSpot's of its runtime stubs); a call from JIT
  code into a module's function is checked as any other.

A direct call into the middle of a named function is data that decodes as a
call.  A tail call (``foo`` jumping to ``bar``) leaves the return address of
the call to ``foo`` while the pc lies in ``bar``: refused, a missing frame
rather than a wrong one.

:func:`checked_call` answers for every decoding of the bytes before a return
address (x86_64 code has more than one) and says whether the call was a
direct one into the function: what the frame-pointer step needs to know
whether its record could belong to a function further up.
"""

from __future__ import annotations

from liveunwind.arch.base import PLT_CODE_SIZE, CallSite
from liveunwind.errors import MemoryReadError
from liveunwind.unwinder.strategies import CodeReader, Walk

_PAGE = 4096

#: How a call before a return address reached the frame's function.
DIRECT = "direct"  # a direct call to the function (through its PLT entry, maybe)
ALLOWED = "allowed"  # an indirect call, or a PLT entry not bound yet: cannot tell
#: A direct call from a module into one of its functions nothing names, while the
#: frame is JIT code: the callee may be a runtime's trampoline into it (V8's builtins).
TRAMPOLINE = "trampoline"
#: Why a return address is refused when no call instruction ends right before it.
NO_CALL = "does not follow a call"


def checked_call(
    walk: Walk, return_address: int, pc: int, *, trampolines: bool = False
) -> tuple[str | None, str]:
    """``(DIRECT or ALLOWED, "")`` for the best call before ``return_address``, or ``(None, why)``.

    ``pc`` is the frame's lookup pc (an address inside its function).  With
    ``trampolines``, a call that could only have reached the frame's JIT code
    through a trampoline of the module it was made in gives ``(TRAMPOLINE,
    why)``: the frame-pointer step asks, for a record it reads is no stray
    word, and then wants its chain to go on.
    """
    arch = walk.arch
    code = code_before(walk.code_reader, return_address, arch.longest_call)
    sites = list(arch.call_sites(return_address, code))
    if not sites:
        return None, NO_CALL
    function = None if walk.function_at is None else walk.function_at(pc)
    reasons = []
    verdict = None
    for site in sites:
        why = refusal(walk, site, pc, function)
        if why is None:
            if site.target is not None:
                return DIRECT, ""
            verdict = ALLOWED
        elif why is not _UNBOUND:
            reasons.append(why)
        else:
            verdict = ALLOWED
    if verdict is not None:
        return verdict, ""
    if trampolines and any(_through_trampoline(walk, site, pc) for site in sites):
        return TRAMPOLINE, "; ".join(reasons)
    return None, "; ".join(reasons)


def _through_trampoline(walk: Walk, site: CallSite, pc: int) -> bool:
    """Whether ``site`` is a direct call into a module's unnamed code while ``pc`` is JIT code.

    JIT runtimes enter their code from their own routines, which jump on
    into it (V8's embedded builtins): a call into such a routine may have
    led to any JIT code.  Where the callee's start is named, it is no
    such routine unless it is the frame's; then :func:`refusal` answered.
    """
    module_at, function_at = walk.module_at, walk.function_at
    target = site.target
    if target is None or module_at is None or module_at(pc) is not None:
        return False
    entry = _through_plt(walk, target)
    if entry is None or not walk.is_code(entry) or module_at(entry) is None:
        return False
    return function_at is None or function_at(entry) is None


#: The refusal that is none: a PLT entry whose slot is not bound yet.
_UNBOUND = "unbound PLT entry"


def refusal(
    walk: Walk, site: CallSite, pc: int, function: tuple[int, int | None] | None
) -> str | None:
    """Why the call ``site`` cannot have entered the function holding ``pc``; None if it may.

    ``function`` is that function's ``(start, end)`` as ``walk.function_at``
    gives it (None: not known).  Returns :data:`_UNBOUND` for an unbound PLT
    entry (allowed, but not evidence of a direct call).
    """
    target = site.target
    if target is None:
        return None
    if not walk.is_code(target):
        return f"follows a call to {target:#x}, which is not code"
    entry = _through_plt(walk, target)
    if entry is None:
        return _UNBOUND
    if entry != target and not walk.is_code(entry):
        return f"follows a call through the PLT entry {target:#x} to {entry:#x}, which is not code"
    function_at, module_at = walk.function_at, walk.module_at
    entered = None if function_at is None else function_at(entry)
    named = module_at is not None and module_at(entry) is not None
    if entered is not None and entered[0] != entry and named:
        return f"follows a call to {entry:#x}, inside the function at {entered[0]:#x}: data"
    shown = f"{entry:#x}" if entry == target else f"{entry:#x} (through the PLT entry {target:#x})"
    if module_at is not None and module_at(pc) is None and module_at(entry) is None:
        return None  # JIT code calling JIT code: through stubs and veneers, as often as not
    if function is not None:
        start, end = function
        if entry == start:
            return None
        loose = end is None or (module_at is not None and module_at(start) is None)
        if loose and start <= entry <= pc:
            return None
        return f"follows a call to {shown}, not to the function at {start:#x} holding pc {pc:#x}"
    if entered is not None and entered[1] is not None:
        if entered[0] <= pc < entered[1]:
            return None
        return f"follows a call to the function at {shown}, which does not hold pc {pc:#x}"
    if module_at is not None and module_at(entry) != module_at(pc):
        return f"follows a call to {shown}, in another module than pc {pc:#x}"
    if entry > pc:
        return f"follows a call to {shown}, above pc {pc:#x}"
    return None  # a call from between the entry and the pc may be recursion: allowed


def _through_plt(walk: Walk, target: int) -> int | None:
    """Where a direct call to ``target`` enters: the bound GOT slot's address for a PLT entry.

    None for a PLT entry whose slot is unreadable or still points into the
    target's own module elsewhere than at a function's start (lazy binding:
    the PLT's way to the dynamic linker's resolver).
    """
    plt_slot = walk.arch.plt_slot
    if plt_slot is None:
        return target
    try:
        code = bytes(walk.code_reader(target, PLT_CODE_SIZE))
    except MemoryReadError:
        return target
    got = plt_slot(code, target)
    if got is None:
        return target
    word = walk.arch.word_size
    try:
        entry = walk.arch.strip_pointer_auth(int.from_bytes(walk.read(got, word), "little"))
    except MemoryReadError:
        return None
    if not walk.is_code(entry):
        return None
    module_at, function_at = walk.module_at, walk.function_at
    if module_at is not None and module_at(entry) == module_at(target):
        # A bound slot of the module's own PLT holds an exported function's start.
        entered = None if function_at is None else function_at(entry)
        if entered is None or entered[0] != entry:
            return None
    return entry


def code_before(code_reader: CodeReader, end: int, size: int) -> bytes:
    """Up to ``size`` bytes of code ending at ``end``, fewer if the page before is not code.

    ``end`` lies in an executable mapping, so the bytes from its page start
    on are readable even when the page before is not.
    """
    start = max(end - size, 0)
    try:
        return bytes(code_reader(start, end - start))
    except MemoryReadError:
        start = max(start, end - end % _PAGE)
        if start == end:
            return b""
        try:
            return bytes(code_reader(start, end - start))
        except MemoryReadError:
            return b""
