"""riscv64 (RV64GC, lp64d): the Arch, from the facts of this folder.

``registers`` (DWARF numbering, ``user_regs_struct``, GDB's ``g`` packet),
``sigframe`` (the sigreturn trampoline and signal frame), ``instructions``
(call instructions, an address-returning function) and ``prologue`` (a frame
read off its function's code, where no unwind table covers it: Debian's
riscv64 glibc has tables for few of its functions).  No SFrame (binutils
has no RISC-V ABI id: 2.40's gas says ".sframe not supported for target"),
no Mach-O, and no self-capture handler yet: ``local_backtrace`` says so.
"""

from __future__ import annotations

from liveunwind.arch.base import Arch, FrameRecord, GdbDescription, PerfRegisters
from liveunwind.arch.riscv64 import instructions, prologue, registers, sigframe

RISCV64 = Arch(
    name="riscv64",
    elf_machine=243,  # EM_RISCV
    pc=registers.PC,
    sp=registers.SP,
    fp=registers.FP,
    # gcc's and glibc's CIEs: "Return address column: 1".
    return_address=registers.RA,
    register_names=registers.REGISTER_NAMES,
    red_zone=0,  # the psABI has none
    code_alignment=2,  # RVC: 16-bit instructions
    user_regs_size=registers.USER_REGS_SIZE,
    registers_from_user_regs=registers.registers_from_user_regs,
    sigreturn_code=sigframe.SIGRETURN_CODE,
    signal_frame_reader=sigframe.read_signal_frame,
    # gcc -fno-omit-frame-pointer: ``addi sp,sp,-N; sd s0,N-16(sp); sd ra,N-8(sp);
    # addi s0,sp,N``: s0 is the CFA (the caller's sp) with the pair below it.  A
    # leaf saves s0 alone, at [s0-8], where the return-address check refuses it.
    frame_record=FrameRecord(saved_fp=-16, return_address=-8, caller_sp=0),
    call_sites=instructions.call_sites,
    longest_call=instructions.LONGEST_CALL,
    address_returned=instructions.address_returned,
    gdb=GdbDescription(
        architectures=registers.GDB_ARCHITECTURES,
        registers=registers.GDB_REGISTERS,
        default_layout=registers.GDB_DEFAULT_LAYOUT,
        general_registers=registers.GDB_GENERAL_REGISTERS,
    ),
    link_register=registers.RA,  # jal/jalr leave the return address in ra
    prologue=prologue.ANALYSIS,
    plt_slot=instructions.plt_slot,
    perf_event_open=241,  # include/uapi/asm-generic/unistd.h
    perf_registers=PerfRegisters(registers.PERF_REGISTERS),
)
