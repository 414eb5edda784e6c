"""Go's own unwind information: the ``.gopclntab`` table of Go 1.16 and later.

Every Go binary carries it, stripped or not, because Go's runtime unwinds
its own stacks with it (for panics, the garbage collector, profiling).  It
lists each function's entry, name and flags, and per pc the *SP delta*: how
far the stack pointer lies below the one the function was entered with.
That is all a Go frame needs: the return address sits right above the
frame (x86_64: at entry sp, pushed by the call; aarch64: saved LR at the
frame's lowest word, or still in LR while the frame is empty).

It also says where Go's own traceback ends a stack, which DWARF cannot:

- ``TOPFRAME`` functions (``runtime.goexit``, ``runtime.mstart``,
  ``runtime.rt0_go``) are the outermost frame of a goroutine or thread;
- ``SPWRITE`` functions (``runtime.mcall``, ``runtime.systemstack``,
  ``runtime.morestack``, ``runtime.gogo``, ``runtime.asmcgocall``…) move
  the stack pointer to another stack in a way the SP deltas do not record.
  Seen from the scheduler stack (g0), the word above such a frame is
  whatever that stack held (``runtime.g0``'s address, a stray 1), not a
  return address.

For both, :meth:`GoPclnTab.rule_for` returns a rule whose return address is
undefined: the end of the stack, as in DWARF and SFrame.  Go's calls into
the vDSO (:data:`VDSO_CALLERS`) are SPWRITE too, but they move the stack
pointer only while the M's ``vdsoSP`` holds their caller, which the
stepper reads first (``unwinder/goswitch.py``): outside that window their
SP deltas hold, and they keep their ordinary rule.

Layout facts (Go's ``runtime/symtab.go``, ``runtime/runtime2.go`` and
``debug/gosym``), by the magic that opens the header:

- ``0xfffffffa`` (Go 1.16, 1.17): header ``magic u32, pad u8 ×2, minLC u8,
  ptrSize u8``, then ``nfunc, nfiles, funcnameOffset, cuOffset,
  filetabOffset, pctabOffset, pclnOffset``, each a pointer-sized word and
  the offsets counted from the header.  The function table at
  ``pclnOffset`` holds ``nfunc`` pairs (entry pc, offset of the function's
  ``_func`` record from the table), both pointer-sized, and the end pc.
  ``_func``: ``entry uintptr, nameoff i32, args i32, deferreturn u32,
  pcsp u32, pcfile u32, pcln u32, npcdata u32, cuOffset u32, funcID u8,
  flag u8`` (Go 1.16 has padding where 1.17 has the flag byte).
- ``0xfffffff0`` (Go 1.18, 1.19): the header has ``textStart`` after
  ``nfiles``; the function table holds 32-bit pairs (entry offset from
  textStart, record offset) and the end offset; ``_func`` starts with a
  32-bit entry offset instead of the entry pc.
- ``0xfffffff1`` (Go 1.20 on): as 1.18, and ``_func`` has ``startLine i32``
  between ``cuOffset`` and ``funcID``.

A pc-value table (``pcsp``, counted from ``pctabOffset``) is a series of
(value delta, pc delta) pairs of unsigned LEB128 numbers, the value delta
zig-zag encoded, starting from value -1 at the function's entry; a value
delta of 0 after the first pair ends the table; pc deltas count in units of
``minLC``.  A function's row covers the pcs below the pc the pair leads to.

Untrusted input: the header's counts and offsets are checked against the
table's size before use, and every record, name and pc-value table is read
within bounds; corruption raises :class:`~liveunwind.errors.FormatError`.
"""

from __future__ import annotations

import struct

from liveunwind.errors import FormatError
from liveunwind.formats import leb128
from liveunwind.formats.unwind.rules import UNDEFINED, CfaRule, RegisterRule, RegKind, UnwindRule

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator

    from liveunwind.arch import Arch

MAGIC_GO116 = 0xFFFFFFFA
MAGIC_GO118 = 0xFFFFFFF0
MAGIC_GO120 = 0xFFFFFFF1
#: The first Go release of each layout, by magic.
VERSIONS = {MAGIC_GO116: "1.16", MAGIC_GO118: "1.18", MAGIC_GO120: "1.20"}

#: ``_func.flag`` bits (``runtime/symtab.go``, Go 1.17 on).
FLAG_TOPFRAME = 1
FLAG_SPWRITE = 2

#: Go 1.16 has no flags; its traceback stopped at these functions by their
#: funcID, whose numbering differs between releases, so they go by name.
_GO116_TOP_FRAMES = frozenset(
    ("runtime.goexit", "runtime.mstart", "runtime.rt0_go", "runtime.mcall", "runtime.morestack")
)
#: Go marks its signal handlers TOPFRAME because its traceback cannot read
#: the kernel's signal frame; liveunwind can, so they do not end a walk.
_SIGNAL_HANDLERS = frozenset(("runtime.sigtramp", "runtime.cgoSigtramp"))
#: Go's functions that call the vDSO on another stack (g0's, or their own aligned down),
#: their caller kept in m.vdsoPC and m.vdsoSP meanwhile (runtime/sys_linux_*.s).
VDSO_CALLERS = frozenset(
    (
        "runtime.nanotime1",
        "runtime.walltime",
        "runtime.walltime1",
        "runtime.vgetrandom1",
        "time.now",  # amd64: time.Now's clock reads, in assembly (runtime/time_linux_amd64.s)
    )
)
#: Longest function name read (Go's longest generic instantiations stay far below).
MAX_NAME = 4096


class GoFunction:
    """One function of the table: where it lies, its name and pcsp offsets, its flags."""

    __slots__ = ("end", "entry", "flag", "name_offset", "pcsp")

    def __init__(self, entry: int, end: int, name_offset: int, pcsp: int, flag: int) -> None:
        #: Link-time addresses of its first byte and of the next function's.
        self.entry = entry
        self.end = end
        self.name_offset = name_offset
        self.pcsp = pcsp
        self.flag = flag


class GoPclnTab:
    """A decoded ``.gopclntab``: functions by pc, their names, SP deltas and unwind rules.

    ``data`` is the table's bytes; ``text_start`` the link-time address of
    ``runtime.text``, used where the header's own (Go 1.18 on) is zero, as
    it is in the file of a position-independent executable before
    relocation.  ``arch`` says how a return address is found.
    """

    def __init__(self, data: bytes | memoryview, arch: Arch, text_start: int = 0) -> None:
        self._data = data
        self._arch = arch
        size = len(data)
        if size < 8:
            raise FormatError(f".gopclntab: {size} bytes is too short for a header")
        magic, _pad1, _pad2, quantum, word = struct.unpack_from("<IBBBB", data, 0)
        if magic not in VERSIONS:
            raise FormatError(f".gopclntab: magic {magic:#x} is not that of Go 1.16 or later")
        if word not in (4, 8) or quantum not in (1, 2, 4):
            raise FormatError(f".gopclntab: pointer size {word}, instruction size {quantum}")
        self.magic = magic
        self.version = VERSIONS[magic]
        self._quantum = quantum
        self._word = word
        fields = 7 if magic == MAGIC_GO116 else 8
        if 8 + fields * word > size:
            raise FormatError(".gopclntab: header cut off")
        values = struct.unpack_from("<" + ("Q" if word == 8 else "I") * fields, data, 8)
        if magic == MAGIC_GO116:
            nfunc, _nfiles, names, _cu, _files, pctab, functab = values
            header_text = 0
        else:
            nfunc, _nfiles, header_text, names, _cu, _files, pctab, functab = values
        self.text_start = header_text or text_start
        for name, offset in (("funcname", names), ("pctab", pctab), ("functab", functab)):
            if not 8 <= offset <= size:
                raise FormatError(f".gopclntab: {name} offset {offset:#x} outside the table")
        #: Function-table entries are pointer-sized pairs (Go 1.16) or 32-bit pairs.
        self._entry_size = word if magic == MAGIC_GO116 else 4
        self._functab = functab
        if functab + (2 * nfunc + 1) * self._entry_size > size:
            raise FormatError(f".gopclntab: {nfunc} functions do not fit in {size} bytes")
        self.nfunc = nfunc
        self._names = names
        self._pctab = pctab
        entry_format = "<" + ("Q" if self._entry_size == 8 else "I")
        self._entry = struct.Struct(entry_format)
        #: The ``_func`` fields read: entry, nameoff, pcsp; then the flag byte's offset.
        self._record = struct.Struct("<" + ("Q" if magic == MAGIC_GO116 else "I") + "iIII")
        #: After the entry: nameoff, args, deferreturn, pcsp, pcfile, pcln, npcdata,
        #: cuOffset (and startLine from Go 1.20), funcID, then the flag.
        self._flag_at = self._entry_size + 4 * (9 if magic == MAGIC_GO120 else 8) + 1

    def __len__(self) -> int:
        return self.nfunc

    # -- functions ------------------------------------------------------------

    def _table_entry(self, index: int) -> int:
        """Entry pc (link-time) of function-table slot ``index`` (``nfunc``: the end)."""
        offset = self._functab + 2 * index * self._entry_size
        value: int = self._entry.unpack_from(self._data, offset)[0]
        return value if self.magic == MAGIC_GO116 else self.text_start + value

    def function_at(self, pc: int) -> GoFunction | None:
        """The function whose range holds link-time ``pc``, or None outside Go's code."""
        count = self.nfunc
        if count == 0 or not self._table_entry(0) <= pc < self._table_entry(count):
            return None
        low, high = 0, count - 1
        while low < high:  # the last slot whose entry is <= pc
            middle = (low + high + 1) // 2
            if self._table_entry(middle) <= pc:
                low = middle
            else:
                high = middle - 1
        return self.function(low)

    def function(self, index: int) -> GoFunction:
        """The function in slot ``index`` of the table (0 ≤ index < ``len(self)``)."""
        if not 0 <= index < self.nfunc:
            raise IndexError(index)
        slot = self._functab + (2 * index + 1) * self._entry_size
        record_offset = self._entry.unpack_from(self._data, slot)[0]
        record = self._functab + record_offset
        if record + self._flag_at + 1 > len(self._data):
            raise FormatError(f".gopclntab: function record at {record:#x} outside the table")
        entry, name, _args, _deferreturn, pcsp = self._record.unpack_from(self._data, record)
        if self.magic != MAGIC_GO116:
            entry += self.text_start
        start, end = self._table_entry(index), self._table_entry(index + 1)
        if entry != start:
            raise FormatError(
                f".gopclntab: function {index} starts at {entry:#x} in its record, "
                f"{start:#x} in the table"
            )
        return GoFunction(entry, end, name, pcsp, self._data[record + self._flag_at])

    def name(self, function: GoFunction) -> str:
        """The function's name as Go spells it (``main.main``, ``runtime.mcall``)."""
        start = self._names + function.name_offset
        if not self._names <= start < len(self._data):
            raise FormatError(f".gopclntab: name offset {function.name_offset:#x} outside")
        raw = bytes(self._data[start : min(start + MAX_NAME, len(self._data))])
        end = raw.find(b"\0")
        return raw[: end if end >= 0 else len(raw)].decode("utf-8", "replace")

    def sp_delta(self, function: GoFunction, pc: int) -> int | None:
        """Bytes the stack pointer lies below the function's entry sp at ``pc``.

        x86_64 counts from the sp after the call pushed the return address.
        None where the function's pcsp table ends before ``pc`` (the padding
        after its code).
        """
        for start, end, value in self._sp_rows(function):
            if start <= pc < end:
                return value
            if pc < start:
                break
        return None

    def _sp_rows(self, function: GoFunction) -> Iterator[tuple[int, int, int]]:
        """The function's pcsp table: (first pc, end pc, SP delta) per row, in pc order."""
        data, end = self._data, len(self._data)
        position = self._pctab + function.pcsp
        if not self._pctab <= position < end:
            raise FormatError(f".gopclntab: pcsp offset {function.pcsp:#x} outside the table")
        value, at, first = -1, function.entry, True
        while position < end:
            delta, position = leb128.decode(data, position, end, signed=False)
            if delta == 0 and not first:
                return
            first = False
            value += -(delta & 1) ^ (delta >> 1)
            step, position = leb128.decode(data, position, end, signed=False)
            start, at = at, at + step * self._quantum
            yield start, at, value
        raise FormatError(f".gopclntab: pcsp table of {function.entry:#x} runs off the end")

    def ends_stack(self, function: GoFunction) -> bool:
        """Whether a walk ends at this function, as Go's own traceback does.

        TOPFRAME and SPWRITE functions end it, except the signal handlers
        (the kernel called them, and the signal frame above them leads on
        to the code the signal interrupted) and the calls into the vDSO
        (their SP deltas hold whenever the M does not hold their caller).
        """
        if function.flag & FLAG_SPWRITE:
            return self.name(function) not in VDSO_CALLERS
        if function.flag & FLAG_TOPFRAME:
            return self.name(function) not in _SIGNAL_HANDLERS
        return self.magic == MAGIC_GO116 and self.name(function) in _GO116_TOP_FRAMES

    def writes_sp_unrecorded(self, function: GoFunction) -> bool:
        """Whether a walk ending at this function ends short of the stack's top: it moves the
        stack pointer where the SP deltas do not say (SPWRITE), is not a top frame (TOPFRAME,
        which may write it too: ``runtime.rt0_go``), and is not a call into the vDSO.

        Go's own traceback stops there as well (and says so when it crashes:
        "traceback: unexpected SPWRITE function"); what lies above is not known.
        """
        if not function.flag & FLAG_SPWRITE or function.flag & FLAG_TOPFRAME:
            return False
        return self.name(function) not in VDSO_CALLERS

    # -- the unwind source ----------------------------------------------------

    def rule_for(self, pc: int) -> UnwindRule | None:
        """How to find the caller of a frame at link-time ``pc``, or None outside Go's code."""
        function = self.function_at(pc)
        if function is None:
            return None
        delta = self.sp_delta(function, pc)
        return None if delta is None else self._rule(function, delta, pc)

    def rows(self, function: GoFunction) -> Iterator[tuple[int, UnwindRule]]:
        """The function's rules, each with the first pc it holds at (for ``unwind-info``)."""
        for start, _end, delta in self._sp_rows(function):
            yield start, self._rule(function, delta, start)

    def _rule(self, function: GoFunction, delta: int, pc: int) -> UnwindRule:
        """The rule of a frame of ``function`` whose SP delta is ``delta``."""
        if delta < 0:
            raise FormatError(f".gopclntab: SP delta {delta} at {pc:#x}")
        arch = self._arch
        return_address = arch.return_address
        pushed = 0 if arch.link_register is not None else self._word
        cfa = CfaRule(arch.sp, delta + pushed)
        if self.ends_stack(function):
            saved: tuple[tuple[int, RegisterRule], ...] = ((return_address, UNDEFINED),)
        elif pushed:
            saved = ((return_address, RegisterRule(RegKind.OFFSET, -pushed)),)
        elif delta:
            saved = ((return_address, RegisterRule(RegKind.OFFSET, -delta)),)
        else:
            saved = ()  # an empty frame: the return address is still in LR
        return UnwindRule(cfa, saved, return_address, start=function.entry, end=function.end)
