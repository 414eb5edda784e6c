"""x86_64: the Arch, from the facts of this folder.

``registers`` (DWARF numbering and the layouts registers are recorded in),
``sigframe`` (the sigreturn trampoline and signal frame), ``instructions``
(call instructions, an address-returning function) and ``selfcapture`` (the
local-capture handler, loaded when first used).
"""

from __future__ import annotations

from liveunwind.arch.base import Arch, FrameRecord, GdbDescription, MachODescription, PerfRegisters
from liveunwind.arch.x86_64 import instructions, registers, sigframe

TYPE_CHECKING = False
if TYPE_CHECKING:
    from liveunwind.arch.selfcapture import SelfCapture

#: The fixed address of the kernel's legacy vsyscall page.
VSYSCALL_PAGE = 0xFFFFFFFFFF600000


def _self_capture() -> SelfCapture:
    from liveunwind.arch.x86_64.selfcapture import SELF_CAPTURE

    return SELF_CAPTURE


X86_64 = Arch(
    name="x86_64",
    aliases=("amd64",),
    elf_machine=62,
    pc=registers.PC,
    sp=registers.SP,
    fp=registers.FP,
    return_address=registers.PC,
    register_names=registers.REGISTER_NAMES,
    red_zone=128,
    code_alignment=1,
    user_regs_size=registers.USER_REGS_SIZE,
    registers_from_user_regs=registers.registers_from_user_regs,
    sigreturn_code=sigframe.SIGRETURN_CODE,
    signal_frame_reader=sigframe.read_signal_frame,
    # push %rbp; mov %rsp,%rbp: [rbp] the caller's rbp, [rbp+8] the return address.
    frame_record=FrameRecord(saved_fp=0, return_address=8, caller_sp=16),
    call_sites=instructions.call_sites,
    longest_call=instructions.LONGEST_CALL,
    plt_slot=instructions.plt_slot,
    address_returned=instructions.address_returned,
    gdb=GdbDescription(
        architectures=registers.GDB_ARCHITECTURES,
        registers=registers.GDB_REGISTERS,
        default_layout=registers.GDB_DEFAULT_LAYOUT,
        general_registers=tuple(range(registers.PC + 1)),  # rax–r15 (DWARF 0–15) and the rip (16)
    ),
    sframe_abis={3: "little"},  # SFRAME_ABI_AMD64_ENDIAN_LITTLE
    macho=MachODescription(
        cpu_type=registers.MACHO_CPU_TYPE,
        unified_flavor=registers.MACHO_UNIFIED_STATE,
        thread_states={
            registers.MACHO_THREAD_STATE64: (136, registers.registers_from_thread_state64)
        },
    ),
    vsyscall_page=VSYSCALL_PAGE,
    perf_event_open=298,  # arch/x86/entry/syscalls/syscall_64.tbl
    self_capture=_self_capture,
    perf_registers=PerfRegisters(registers.PERF_REGISTERS),
)
