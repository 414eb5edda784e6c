"""The notes of a Linux ELF core: threads, process, signal, auxiliary vector, mapped files.

Layouts are those of the kernel's 64-bit ``struct elf_prstatus``,
``struct elf_prpsinfo``, ``siginfo_t`` and the NT_FILE table (see
``include/uapi/linux/elfcore.h`` and ``fs/binfmt_elf.c``); x86_64, aarch64 and
riscv64 share them, only the size of ``pr_reg`` differs.  Every note comes from an
untrusted file: sizes are checked before any field is read, and a note that
is too short is skipped with a problem, never trusted.
"""

from __future__ import annotations

import struct
from collections import namedtuple

from liveunwind.formats.auxv import parse_auxv

NT_PRSTATUS = 1
NT_PRPSINFO = 3
NT_AUXV = 6
NT_SIGINFO = 0x53494749
NT_FILE = 0x46494C45


#: ``struct elf_prstatus``: signal info, pids, times, then ``pr_reg``.
_PRSTATUS_PID = 32
_PRSTATUS_CURSIG = 12
PRSTATUS_REGS = 112
#: ``struct elf_prpsinfo``: pid at 24, ``pr_fname[16]`` at 40, ``pr_psargs[80]`` at 56.
_PRPSINFO_SIZE = 136
#: Most notes and NT_FILE entries read from one core (a process has at most a
#: few hundred thousand mappings; threads are bounded the same way).
_MAX_NOTES = 1 << 20
_MAX_FILES = 1 << 20

#: Linux signal numbers (the same on x86_64, aarch64 and riscv64).
SIGNAL_NAMES = {
    1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP", 6: "SIGABRT",
    7: "SIGBUS", 8: "SIGFPE", 9: "SIGKILL", 10: "SIGUSR1", 11: "SIGSEGV", 12: "SIGUSR2",
    13: "SIGPIPE", 14: "SIGALRM", 15: "SIGTERM", 16: "SIGSTKFLT", 17: "SIGCHLD",
    18: "SIGCONT", 19: "SIGSTOP", 20: "SIGTSTP", 21: "SIGTTIN", 22: "SIGTTOU", 23: "SIGURG",
    24: "SIGXCPU", 25: "SIGXFSZ", 26: "SIGVTALRM", 27: "SIGPROF", 28: "SIGWINCH", 29: "SIGIO",
    30: "SIGPWR", 31: "SIGSYS",
}  # fmt: skip
_SIGILL, _SIGTRAP, _SIGBUS, _SIGFPE, _SIGSEGV = 4, 5, 7, 8, 11
#: ``si_code`` values a sender can set for any signal (``include/uapi/asm-generic/siginfo.h``).
_GENERIC_CODES = {
    0: "SI_USER", 0x80: "SI_KERNEL", -1: "SI_QUEUE", -2: "SI_TIMER", -3: "SI_MESGQ",
    -4: "SI_ASYNCIO", -5: "SI_SIGIO", -6: "SI_TKILL", -7: "SI_DETHREAD", -60: "SI_ASYNCNL",
}  # fmt: skip
#: ``si_code`` values the kernel sets for faults, per signal.
_FAULT_CODES = {
    _SIGSEGV: ("SEGV_MAPERR", "SEGV_ACCERR", "SEGV_BNDERR", "SEGV_PKUERR", "SEGV_ACCADI",
               "SEGV_ADIDERR", "SEGV_ADIPERR", "SEGV_MTEAERR", "SEGV_MTESERR", "SEGV_CPERR"),
    _SIGBUS: ("BUS_ADRALN", "BUS_ADRERR", "BUS_OBJERR", "BUS_MCEERR_AR", "BUS_MCEERR_AO"),
    _SIGILL: ("ILL_ILLOPC", "ILL_ILLOPN", "ILL_ILLADR", "ILL_ILLTRP", "ILL_PRVOPC",
              "ILL_PRVREG", "ILL_COPROC", "ILL_BADSTK", "ILL_BADIADDR"),
    _SIGFPE: ("FPE_INTDIV", "FPE_INTOVF", "FPE_FLTDIV", "FPE_FLTOVF", "FPE_FLTUND",
              "FPE_FLTRES", "FPE_FLTINV", "FPE_FLTSUB"),
    _SIGTRAP: ("TRAP_BRKPT", "TRAP_TRACE", "TRAP_BRANCH", "TRAP_HWBKPT", "TRAP_UNK"),
}  # fmt: skip


class ThreadNote(namedtuple("ThreadNote", "tid signal raw_registers")):
    """One NT_PRSTATUS: a thread's id, current signal and raw ``pr_reg`` bytes."""

    __slots__ = ()
    tid: int
    signal: int
    raw_registers: bytes


class FileEntry(namedtuple("FileEntry", "start end offset path")):
    """One NT_FILE entry: a file mapped at [start, end) from byte ``offset``."""

    __slots__ = ()
    start: int
    end: int
    offset: int
    path: str


class SignalNote(namedtuple("SignalNote", "signal code fault_address")):
    """The NT_SIGINFO of the thread that received the fatal signal."""

    __slots__ = ()
    signal: int
    code: int
    #: ``si_addr`` for kernel-generated faults, else None.
    fault_address: int | None


class CoreNotes:
    """Everything the notes of one core say; filled in note by note."""

    __slots__ = ("arguments", "auxv", "files", "name", "pid", "problems", "signal", "threads")

    def __init__(self) -> None:
        self.threads: list[ThreadNote] = []
        self.pid: int | None = None
        #: ``pr_fname``: the process name (at most 15 bytes, as ``comm``).
        self.name = ""
        #: ``pr_psargs``: the command line, cut at 79 bytes by the kernel.
        self.arguments = ""
        self.signal: SignalNote | None = None
        self.auxv: dict[int, int] = {}
        #: NT_FILE's entries, or None when the core has no NT_FILE note.
        self.files: list[FileEntry] | None = None
        self.problems: list[str] = []


def iterate_notes(data: bytes) -> list[tuple[bytes, int, bytes]]:
    """(name, type, descriptor) of each note in a PT_NOTE segment; stops at the first bad one."""
    notes: list[tuple[bytes, int, bytes]] = []
    position = 0
    while position + 12 <= len(data) and len(notes) < _MAX_NOTES:
        namesz, descsz, ntype = struct.unpack_from("<III", data, position)
        name_start = position + 12
        desc_start = name_start + _align4(namesz)
        desc_end = desc_start + descsz
        if desc_end > len(data):
            break
        name = data[name_start : name_start + namesz].rstrip(b"\0")
        notes.append((name, ntype, data[desc_start:desc_end]))
        position = desc_start + _align4(descsz)
    return notes


def parse_notes(segments: list[bytes], register_size: int) -> CoreNotes:
    """Decodes the CORE notes of every PT_NOTE segment of a core."""
    notes = CoreNotes()
    for data in segments:
        for name, ntype, desc in iterate_notes(data):
            if name != b"CORE":
                continue
            if ntype == NT_PRSTATUS:
                _prstatus(notes, desc, register_size)
            elif ntype == NT_PRPSINFO:
                _prpsinfo(notes, desc)
            elif ntype == NT_SIGINFO and notes.signal is None:
                _siginfo(notes, desc)
            elif ntype == NT_AUXV and not notes.auxv:
                notes.auxv = parse_auxv(desc)
            elif ntype == NT_FILE and notes.files is None:
                notes.files = _file_note(notes, desc)
    return notes


def _prstatus(notes: CoreNotes, desc: bytes, register_size: int) -> None:
    if len(desc) < PRSTATUS_REGS + register_size:
        notes.problems.append(
            f"an NT_PRSTATUS note is {len(desc)} bytes, too short for its registers; skipped"
        )
        return
    (signal,) = struct.unpack_from("<h", desc, _PRSTATUS_CURSIG)
    (tid,) = struct.unpack_from("<i", desc, _PRSTATUS_PID)
    notes.threads.append(
        ThreadNote(tid, signal, bytes(desc[PRSTATUS_REGS : PRSTATUS_REGS + register_size]))
    )


def _prpsinfo(notes: CoreNotes, desc: bytes) -> None:
    if len(desc) < _PRPSINFO_SIZE:
        notes.problems.append(f"the NT_PRPSINFO note is {len(desc)} bytes, too short; skipped")
        return
    (notes.pid,) = struct.unpack_from("<i", desc, 24)
    notes.name = _c_string(desc[40:56])
    notes.arguments = _c_string(desc[56:136]).rstrip(" ")


def _siginfo(notes: CoreNotes, desc: bytes) -> None:
    if len(desc) < 24:
        notes.problems.append(f"the NT_SIGINFO note is {len(desc)} bytes, too short; skipped")
        return
    signal, _errno, code = struct.unpack_from("<iii", desc, 0)
    fault = None
    if signal in _FAULT_CODES and code > 0:
        (fault,) = struct.unpack_from("<Q", desc, 16)
    notes.signal = SignalNote(signal, code, fault)


def _file_note(notes: CoreNotes, desc: bytes) -> list[FileEntry]:
    """NT_FILE: count, page size, (start, end, page offset) × count, then the paths."""
    if len(desc) < 16:
        notes.problems.append("the NT_FILE note is too short; mapped files are unknown")
        return []
    count, page_size = struct.unpack_from("<QQ", desc, 0)
    table_end = 16 + 24 * count
    if count > _MAX_FILES or table_end > len(desc) or page_size == 0:
        notes.problems.append(f"the NT_FILE note is corrupt ({count} entries); ignored")
        return []
    paths = bytes(desc[table_end:]).split(b"\0")
    if len(paths) < count:
        notes.problems.append("the NT_FILE note has fewer paths than entries; ignored")
        return []
    entries = []
    for index in range(count):
        start, end, page = struct.unpack_from("<QQQ", desc, 16 + 24 * index)
        if start < end:
            path = paths[index].decode("utf-8", "surrogateescape")
            entries.append(FileEntry(start, end, page * page_size, path))
    return entries


def signal_name(signal: int) -> str:
    if signal in SIGNAL_NAMES:
        return SIGNAL_NAMES[signal]
    if 32 <= signal <= 64:
        return f"SIGRT{signal - 32}"
    return f"signal {signal}"


def code_name(signal: int, code: int) -> str:
    """The name of ``si_code`` for ``signal``: fault codes are per signal, the others shared."""
    names = _FAULT_CODES.get(signal)
    if names is not None and 0 < code <= len(names):
        return names[code - 1]
    return _GENERIC_CODES.get(code, "")


def _c_string(raw: bytes) -> str:
    return bytes(raw).split(b"\0", 1)[0].decode("utf-8", "replace")


def _align4(value: int) -> int:
    return (value + 3) & ~3
