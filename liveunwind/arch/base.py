"""What the rest of liveunwind asks of one architecture: the Arch record and its parts.

Kept apart from the package's ``__init__`` so that the per-architecture
folders, which build Arch instances, and the package, which registers them,
do not import each other.  Everything that differs between architectures is
a field of :class:`Arch` (or of a part it holds), so code outside
``liveunwind/arch/`` never asks which architecture it is.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections import namedtuple
    from collections.abc import Callable, Iterator

    from liveunwind.arch.selfcapture import SelfCapture
else:
    # the same class as collections.abc's, from the module os loaded: not collections (0.8 ms)
    from _collections_abc import Callable

    # the standard library's, cheaper to import (liveunwind/classes.py says why)
    from liveunwind.classes import namedtuple

#: Reads ``size`` bytes of target memory at an address (raises MemoryReadError).
ReadMemory = Callable[[int, int], bytes]
#: Reads up to ``size`` bytes of code at an address: fewer where there are none, never raising.
ReadCode = Callable[[int, int], bytes]
#: Registers keyed by DWARF number, decoded from one register block.
DecodeRegisters = Callable[[bytes], dict[int, int]]

#: Addresses and registers are 64-bit on every architecture liveunwind reads:
#: arithmetic on them (CFA + offset, load bias + symbol) wraps with this mask.
WORD_MASK = (1 << 64) - 1
#: Bytes of a function's code read to decode the address it returns
#: (:attr:`Arch.address_returned`): enough for every architecture's sequence.
ACCESSOR_CODE_SIZE = 16
#: Bytes of a PLT entry read to find the slot it jumps through (:attr:`Arch.plt_slot`).
PLT_CODE_SIZE = 16


class CallSite(namedtuple("CallSite", "address target")):
    """A call instruction that ends at a return address."""

    __slots__ = ()
    #: Address of the opcode (after any prefixes).
    address: int
    #: The address called, for direct calls; None for indirect ones.
    target: int | None


class FrameRecord:
    """Where a function that keeps a frame pointer saved its caller's fp and return address.

    Offsets are from the frame pointer: x86_64 and aarch64 point it at the
    saved fp with the return address above it (``[fp]``, ``[fp+8]``, caller's
    sp at least ``fp+16``); RISC-V points it at the CFA, with both below
    (``[fp-16]``, ``[fp-8]``, caller's sp ``fp``).  The two words are read
    with one read of ``size`` bytes at ``fp + start``.
    """

    __slots__ = ("caller_sp", "return_address", "saved_fp", "size", "start", "word")

    def __init__(
        self, *, saved_fp: int, return_address: int, caller_sp: int, word: int = 8
    ) -> None:
        #: Offset of the caller's saved frame pointer.
        self.saved_fp = saved_fp
        #: Offset of the saved return address.
        self.return_address = return_address
        #: The caller's sp is fp plus this (a lower bound where the record is
        #: not at the top of the frame, as with gcc on aarch64).
        self.caller_sp = caller_sp
        self.start = min(saved_fp, return_address)
        self.size = abs(saved_fp - return_address) + word
        self.word = word

    def links(self, data: bytes) -> tuple[int, int]:
        """The caller's fp and the return address, from the ``size`` bytes at ``fp + start``."""
        fp_at, ra_at, word = self.saved_fp - self.start, self.return_address - self.start, self.word
        return (
            int.from_bytes(data[fp_at : fp_at + word], "little"),
            int.from_bytes(data[ra_at : ra_at + word], "little"),
        )


class GdbDescription:
    """How GDB names the architecture and lays out its registers (the remote protocol).

    ``architectures`` are the ``<architecture>`` strings of a target
    description that mean this architecture; ``registers`` maps the register
    names of a description to DWARF numbers, for the registers unwinding
    uses; ``default_layout`` is the ``g`` block of a stub that sends no
    description (GDB's built-in layout): (name, bits) in order;
    ``general_registers`` are the DWARF numbers a layout must place before
    the stub's registers are taken (the general registers and the pc).
    """

    __slots__ = ("architectures", "default_layout", "general_registers", "registers")

    def __init__(
        self,
        *,
        architectures: tuple[str, ...],
        registers: dict[str, int],
        default_layout: tuple[tuple[str, int], ...],
        general_registers: tuple[int, ...],
    ) -> None:
        self.architectures = architectures
        self.registers = registers
        self.default_layout = default_layout
        self.general_registers = general_registers


class MachODescription:
    """The architecture as Mach-O records it: its CPU type and the thread states of a core.

    ``thread_states`` maps an LC_THREAD flavor to the least size its state
    has and the decoder of its bytes; ``unified_flavor`` is the flavor that
    wraps another state behind a (flavor, count) header.
    """

    __slots__ = ("cpu_type", "thread_states", "unified_flavor")

    def __init__(
        self,
        *,
        cpu_type: int,
        unified_flavor: int,
        thread_states: dict[int, tuple[int, DecodeRegisters]],
    ) -> None:
        self.cpu_type = cpu_type
        self.unified_flavor = unified_flavor
        self.thread_states = thread_states


class PerfRegisters:
    """The kernel's numbering of user registers in perf samples (``asm/perf_regs.h``).

    A perf event asks for registers by a bit mask over this numbering
    (``sample_regs_user``) and each sample holds the value of every set bit,
    lowest bit first.  ``dwarf`` maps a perf number to the DWARF number the
    stepper keeps the register under (registers unwinding never reads, such
    as flags and segment registers, are left out); ``unwind_mask`` asks for
    every one of them, which is what a stack copy is unwound with.
    """

    __slots__ = ("_layouts", "dwarf", "unwind_mask")

    def __init__(self, dwarf: dict[int, int]) -> None:
        self.dwarf = dwarf
        self.unwind_mask = sum(1 << number for number in dwarf)
        #: mask → the DWARF number of each value a sample holds (None: not kept).
        self._layouts: dict[int, tuple[int | None, ...]] = {}

    def layout(self, mask: int) -> tuple[int | None, ...]:
        """The DWARF number of each value of a sample taken with ``mask`` (None: not kept)."""
        found = self._layouts.get(mask)
        if found is None:
            bits = [bit for bit in range(64) if mask >> bit & 1]
            found = self._layouts[mask] = tuple(self.dwarf.get(bit) for bit in bits)
        return found

    def registers(self, mask: int, values: tuple[int, ...]) -> dict[int, int]:
        """The values of a sample taken with ``mask``, by DWARF number."""
        return {
            number: value for number, value in zip(self.layout(mask), values) if number is not None
        }


class PrologueFrame(namedtuple("PrologueFrame", "cfa_register cfa_offset saved kept")):
    """What a function's own instructions say of its frame at one pc.

    The CFA (the caller's sp) is ``cfa_register + cfa_offset``; ``saved``
    pairs each register whose caller's value the function stored with the
    offset of that slot from the CFA; ``kept`` lists the registers that still
    hold the caller's value (the return-address register among them while it
    still holds the return address).  An UnwindRule's subset, in DWARF numbers.
    """

    __slots__ = ()
    cfa_register: int
    cfa_offset: int
    saved: tuple[tuple[int, int], ...]
    kept: tuple[int, ...]


class PrologueAnalysis:
    """How an architecture reads a frame off its function's code (gdb's prologue analysers).

    ``frame(read, start, pc, exact, size)``: the frame at ``pc`` of the
    function entered at ``start``, reading its code with ``read(address,
    size)`` (which returns fewer bytes where there are none, and never
    raises); ``exact`` says the pc is where the thread stopped (frame 0, or
    code a signal interrupted) rather than a return address; ``size`` is the
    function's size where its symbol says.  It returns a
    :class:`PrologueFrame`, or why the code does not tell.
    """

    __slots__ = ("frame",)

    def __init__(
        self, frame: Callable[[ReadCode, int, int, bool, int | None], PrologueFrame | str]
    ) -> None:
        self.frame = frame


def _no_pointer_auth(value: int) -> int:
    return value


class Arch:
    """What the stepper, the targets and the formats need to know about one architecture.

    One instance per architecture (``X86_64``, ``AARCH64``), compared by
    identity and listed by :func:`liveunwind.arch.architectures`.
    """

    __slots__ = (
        "address_returned",
        "aliases",
        "call_sites",
        "code_alignment",
        "elf_machine",
        "fp",
        "frame_record",
        "gdb",
        "link_register",
        "longest_call",
        "macho",
        "name",
        "pc",
        "perf_event_open",
        "perf_registers",
        "plt_slot",
        "pointer_auth",
        "prologue",
        "red_zone",
        "register_names",
        "registers_from_user_regs",
        "return_address",
        "sframe_abis",
        "signal_frame_reader",
        "sigreturn_code",
        "sp",
        "strip_pointer_auth",
        "user_regs_size",
        "vsyscall_page",
        "word_size",
        "_self_capture",
    )

    def __init__(
        self,
        *,
        name: str,
        aliases: tuple[str, ...] = (),
        elf_machine: int,
        pc: int,
        sp: int,
        fp: int,
        return_address: int,
        register_names: dict[int, str],
        red_zone: int,
        code_alignment: int,
        user_regs_size: int,
        registers_from_user_regs: DecodeRegisters,
        sigreturn_code: bytes,
        signal_frame_reader: Callable[[ReadMemory, int], dict[int, int]],
        frame_record: FrameRecord,
        call_sites: Callable[[int, bytes], Iterator[CallSite]],
        longest_call: int,
        address_returned: Callable[[bytes, int], int | None],
        gdb: GdbDescription,
        link_register: int | None = None,
        strip_pointer_auth: Callable[[int], int] | None = None,
        sframe_abis: dict[int, str] | None = None,
        macho: MachODescription | None = None,
        prologue: PrologueAnalysis | None = None,
        plt_slot: Callable[[bytes, int], int | None] | None = None,
        vsyscall_page: int | None = None,
        perf_event_open: int | None = None,
        perf_registers: PerfRegisters | None = None,
        self_capture: Callable[[], SelfCapture] | None = None,
        word_size: int = 8,
    ) -> None:
        #: The name liveunwind reports (``uname -m``'s), and others it answers to.
        self.name = name
        self.aliases = aliases
        #: ELF ``e_machine``.
        self.elf_machine = elf_machine
        #: DWARF numbers of the program counter, stack pointer and frame pointer.
        self.pc = pc
        self.sp = sp
        self.fp = fp
        #: The DWARF return-address column of a typical CIE.
        self.return_address = return_address
        #: The register a call leaves the return address in (aarch64's LR), or
        #: None where the call pushes it onto the stack (x86_64).
        self.link_register = link_register
        self.register_names = register_names
        #: Bytes below the stack pointer a leaf function may use without moving it.
        self.red_zone = red_zone
        #: Bytes every instruction's size is a multiple of (DWARF's code alignment factor).
        self.code_alignment = code_alignment
        #: The kernel's ``user_regs_struct`` (PTRACE_GETREGSET, NT_PRSTATUS): its
        #: size, and its decoder to DWARF numbers; shorter means a 32-bit process.
        self.user_regs_size = user_regs_size
        self.registers_from_user_regs = registers_from_user_regs
        #: Machine code of the kernel's sigreturn trampoline (the bytes at its pc).
        self.sigreturn_code = sigreturn_code
        #: Recovers the interrupted registers from the signal frame at ``sp``.
        self.signal_frame_reader = signal_frame_reader
        #: Where a frame-pointer chain keeps its links.
        self.frame_record = frame_record
        #: ``call_sites(return_address, code)``: every call instruction whose
        #: last byte is the last byte of ``code`` (the bytes before the return
        #: address), needing at most ``longest_call`` of them.
        self.call_sites = call_sites
        self.longest_call = longest_call
        #: ``address_returned(code, address)``: the address a function that only
        #: returns a constant address returns (read off its first
        #: :data:`ACCESSOR_CODE_SIZE` bytes at link-time ``address``), or None.
        self.address_returned = address_returned
        #: The GDB remote protocol's names and register layout.
        self.gdb = gdb
        #: Clears pointer-authentication bits from a code address.
        self.strip_pointer_auth = strip_pointer_auth or _no_pointer_auth
        #: Whether return addresses may be signed (pointer authentication).
        self.pointer_auth = strip_pointer_auth is not None
        #: SFrame ABI/arch ids of this architecture and their byte order ("little", "big").
        self.sframe_abis = sframe_abis or {}
        #: What Mach-O files and cores say of it; None where Apple never ran it.
        self.macho = macho
        #: Reads a frame off its function's code where no table covers it; None
        #: where liveunwind has no such analysis for the architecture.
        self.prologue = prologue
        #: ``plt_slot(code, address)``: the address of the GOT slot the PLT entry
        #: at ``address`` jumps through (read off its first :data:`PLT_CODE_SIZE`
        #: bytes; link-time addresses give the link-time slot), None where the
        #: code is not one; None where liveunwind does not decode the
        #: architecture's PLT entries.
        self.plt_slot = plt_slot
        #: Address of the kernel's legacy vsyscall page, where it has one.
        self.vsyscall_page = vsyscall_page
        #: The number of the perf_event_open(2) system call (``profile --on-cpu``);
        #: None where liveunwind does not know it.
        self.perf_event_open = perf_event_open
        #: How perf samples number its user registers; None where the kernel has no perf registers.
        self.perf_registers = perf_registers
        self._self_capture = self_capture
        self.word_size = word_size

    def __repr__(self) -> str:
        return f"<Arch {self.name}>"

    def register_name(self, number: int) -> str:
        return self.register_names.get(number, f"r{number}")

    def register_number(self, name: str) -> int:
        for number, known in self.register_names.items():
            if known == name:
                return number
        raise KeyError(name)

    def self_capture(self) -> SelfCapture | None:
        """The signal handler a thread of this process copies its own stack with, if written.

        Loaded on first use: only local backtraces need its machine code.
        """
        return None if self._self_capture is None else self._self_capture()
