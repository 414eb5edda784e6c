/*
 * guesses_asm — x86_64 only: two hand-written functions without any CFI whose
 * stacks fool a guess (see guesses.c for the whole chains).
 *
 * stale_asm keeps return addresses of calls it already made above its real
 * one, as hand-written assembly (libx264's) does: it saves rbp and clears it
 * (so a frame-pointer step has nothing to follow), calls stale_helper, then
 * grows its frame over the slots that call used and calls stale_block.  From
 * stale_block's CFA up, its frame holds stale_helper's return address after
 * its call of getpid (through the PLT), its own return address after the call
 * of stale_helper, the caller's rbp, and only then the real return address
 * into stale_caller.  Both stale ones follow direct calls that did not enter
 * stale_asm.
 *
 * push_leaf is a leaf that pushes one word and then waits in pause(2) for
 * ever, under a caller that keeps a frame pointer (the PostgreSQL LLVM JIT
 * case): [sp] is the pushed rbx, its return address into fp_middle is at
 * [sp+8], and rbp still points at fp_middle's frame record, whose return
 * address lies in fp_outer: following it would skip fp_middle.
 *
 * run_on_stack starts a C function on a fresh stack whose outermost return
 * address is 0 (as some runtimes end their stacks); zero_asm, called from
 * there, calls zero_block and has no CFI.
 */
    .text
    .globl  stale_asm
    .type   stale_asm, @function
stale_asm:
    pushq   %rbp
    xorl    %ebp, %ebp
    call    stale_helper
    subq    $48, %rsp
    call    stale_block
    addq    $48, %rsp
    popq    %rbp
    ret
    .size   stale_asm, .-stale_asm

    .globl  push_leaf
    .type   push_leaf, @function
push_leaf:
    pushq   %rbx
    movq    $0x1234, %rbx
1:  movl    $34, %eax           /* pause */
    syscall
    jmp     1b
    .size   push_leaf, .-push_leaf

/* run_on_stack(fn, top): fn on a fresh stack whose outermost return address is 0. */
    .globl  run_on_stack
    .type   run_on_stack, @function
run_on_stack:
    movq    %rsi, %rsp
    pushq   $0
    jmp     *%rdi
    .size   run_on_stack, .-run_on_stack

    .globl  zero_asm
    .type   zero_asm, @function
zero_asm:
    subq    $8, %rsp
    call    zero_block
    addq    $8, %rsp
    ret
    .size   zero_asm, .-zero_asm

    .section .note.GNU-stack,"",@progbits
