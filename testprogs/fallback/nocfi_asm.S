/*
 * nocfi_asm — x86_64 only: a hand-written function without any CFI, called
 * from C and calling back into C (see nocfi.c for the whole chain).
 *
 * It has no frame pointer (rbp is left alone, so a frame-pointer walk skips
 * it and lands in the C caller's frame, if that keeps one) and a 40-byte
 * frame (keeping the stack 16-byte aligned at its call) holding a decoy: the
 * address of nocfi_asm itself, a code address that does not follow a call
 * and that a stack scan must pass over. The other slots are zero. The true
 * return address (into asm_caller) lies 40 bytes above nocfi_callback's CFA.
 */
    .text
    .globl  nocfi_asm
    .type   nocfi_asm, @function
nocfi_asm:
    subq    $40, %rsp
    leaq    nocfi_asm(%rip), %rax
    movq    $0, (%rsp)
    movq    %rax, 8(%rsp)
    movq    $0, 16(%rsp)
    movq    $0, 24(%rsp)
    movq    $0, 32(%rsp)
    call    nocfi_callback
    addq    $40, %rsp
    ret
    .size   nocfi_asm, .-nocfi_asm

    .section .note.GNU-stack,"",@progbits
