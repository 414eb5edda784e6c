// dwarf_cfa: keeps its CFA in x19 after realigning the stack.  Compact
// unwind can only describe frames based on fp or sp, so the assembler gives
// this function a DWARF FDE and a DWARF-mode compact entry.
    .text
    .globl _dwarf_cfa
    .p2align 2
_dwarf_cfa:
    .cfi_startproc
    stp x19, x20, [sp, #-32]!
    .cfi_def_cfa_offset 32
    stp x29, x30, [sp, #16]
    .cfi_offset w19, -32
    .cfi_offset w20, -24
    .cfi_offset w29, -16
    .cfi_offset w30, -8
    mov x19, sp
    .cfi_def_cfa w19, 32
    sub x9, sp, #64
    and sp, x9, #-64
    mov x20, x0
    add x0, x0, #1
    bl _cxx_cleanup
    add x0, x0, x20
    mov sp, x19
    .cfi_def_cfa wsp, 32
    ldp x29, x30, [sp, #16]
    ldp x19, x20, [sp], #32
    .cfi_def_cfa_offset 0
    ret
    .cfi_endproc
