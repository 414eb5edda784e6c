"""aarch64: the Arch, from the facts of this folder.

``registers`` (DWARF numbering and the layouts registers are recorded in),
``sigframe`` (the sigreturn trampoline and signal frame), ``instructions``
(call instructions, an address-returning function) and ``selfcapture`` (the
local-capture handler, loaded when first used).
"""

from __future__ import annotations

from liveunwind.arch.aarch64 import instructions, registers, sigframe
from liveunwind.arch.base import Arch, FrameRecord, GdbDescription, MachODescription, PerfRegisters

TYPE_CHECKING = False
if TYPE_CHECKING:
    from liveunwind.arch.selfcapture import SelfCapture

#: User-space addresses have at most 52 significant bits; anything above
#: them in a return address is a pointer-authentication code or a tag.
_ADDRESS_MASK = (1 << 48) - 1


def strip_pointer_auth(value: int) -> int:
    """Drops the PAC bits of a signed return address (48-bit user address space)."""
    return value & _ADDRESS_MASK


def _self_capture() -> SelfCapture:
    from liveunwind.arch.aarch64.selfcapture import SELF_CAPTURE

    return SELF_CAPTURE


AARCH64 = Arch(
    name="aarch64",
    aliases=("arm64",),
    elf_machine=183,
    pc=registers.PC,
    sp=registers.SP,
    fp=registers.FP,
    return_address=registers.LR,
    register_names=registers.REGISTER_NAMES,
    red_zone=0,
    code_alignment=4,
    user_regs_size=registers.USER_REGS_SIZE,
    registers_from_user_regs=registers.registers_from_user_regs,
    sigreturn_code=sigframe.SIGRETURN_CODE,
    signal_frame_reader=sigframe.read_signal_frame,
    # The AAPCS64 frame record (stp x29, x30, [...]; mov x29, <record>): [x29]
    # the caller's x29, [x29+8] the saved x30.  It lies inside the callee's
    # frame, so x29+16 is the lowest the caller's sp can be (exact when the
    # record sits at the top of the frame, clang's layout).
    frame_record=FrameRecord(saved_fp=0, return_address=8, caller_sp=16),
    call_sites=instructions.call_sites,
    longest_call=instructions.LONGEST_CALL,
    plt_slot=instructions.plt_slot,
    address_returned=instructions.address_returned,
    gdb=GdbDescription(
        architectures=registers.GDB_ARCHITECTURES,
        registers=registers.GDB_REGISTERS,
        default_layout=registers.GDB_DEFAULT_LAYOUT,
        general_registers=tuple(range(registers.PC + 1)),  # x0–x30, sp and the pc (DWARF 0–32)
    ),
    link_register=registers.LR,
    strip_pointer_auth=strip_pointer_auth,
    # SFRAME_ABI_AARCH64_ENDIAN_BIG, SFRAME_ABI_AARCH64_ENDIAN_LITTLE
    sframe_abis={1: "big", 2: "little"},
    macho=MachODescription(
        cpu_type=registers.MACHO_CPU_TYPE,
        unified_flavor=registers.MACHO_UNIFIED_STATE,
        thread_states={
            registers.MACHO_THREAD_STATE64: (264, registers.registers_from_thread_state64),
            registers.MACHO_NEON_STATE64: (512, registers.registers_from_neon_state64),
        },
    ),
    perf_event_open=241,  # include/uapi/asm-generic/unistd.h
    self_capture=_self_capture,
    perf_registers=PerfRegisters(registers.PERF_REGISTERS),
)
