# dwarf_cfa: keeps its CFA in %rbx after realigning the stack.  Compact
# unwind can only name %rsp or %rbp as the frame base, so the assembler
# gives this function a DWARF FDE and a DWARF-mode compact entry.
    .text
    .globl _dwarf_cfa
    .p2align 4
_dwarf_cfa:
    .cfi_startproc
    pushq %rbp
    .cfi_def_cfa_offset 16
    .cfi_offset %rbp, -16
    pushq %rbx
    .cfi_def_cfa_offset 24
    .cfi_offset %rbx, -24
    movq %rsp, %rbx
    .cfi_def_cfa_register %rbx
    andq $-64, %rsp
    subq $64, %rsp
    movq %rdi, %rbp
    addq $1, %rdi
    callq _cxx_cleanup
    addq %rbp, %rax
    movq %rbx, %rsp
    .cfi_def_cfa_register %rsp
    popq %rbx
    .cfi_def_cfa_offset 16
    popq %rbp
    .cfi_def_cfa_offset 8
    retq
    .cfi_endproc
