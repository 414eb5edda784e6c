/*
 * sigframe — prints what an unwinder needs to know about the riscv64 signal
 * frame, as the kernel (or QEMU user mode) built it for this very process.
 *
 * The SIGUSR1 handler records:
 *   tramp BYTES       the 8 bytes at its return address (the sigreturn trampoline)
 *   tramp_address A   that return address
 *   sp A              the stack pointer at the handler's entry, which is also the
 *                     sp at the trampoline when the handler returns into it
 *   frame A HEX       1024 bytes of stack from that sp
 *   pc/ra/sp/s0 A     the interrupted registers, read through glibc's
 *                     ucontext_t (uc_mcontext.__gregs[REG_PC], [REG_RA], ...)
 *   siginfo_offset N, ucontext_offset N, mcontext_offset N
 *                     where the handler's siginfo_t and ucontext_t arguments,
 *                     and uc_mcontext, lie relative to that sp
 * tests/system/test_riscv64.py feeds the frame bytes to liveunwind's riscv64 signal
 * frame reader and compares with the registers glibc's view gives.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ucontext.h>

static volatile int sink;

__attribute__((noinline)) static void report(void *ra, uintptr_t sp, siginfo_t *info, ucontext_t *uc)
{
    const unsigned char *code = ra;
    printf("tramp");
    for (int i = 0; i < 8; i++)
        printf(" %02x", code[i]);
    printf("\ntramp_address %#lx\nsp %#lx\nframe ", (unsigned long)(uintptr_t)ra, (unsigned long)sp);
    for (int i = 0; i < 1024; i++)
        printf("%02x", ((const unsigned char *)sp)[i]);
    printf("\npc %#lx\nra %#lx\nsp_interrupted %#lx\ns0 %#lx\n",
           (unsigned long)uc->uc_mcontext.__gregs[REG_PC], (unsigned long)uc->uc_mcontext.__gregs[REG_RA],
           (unsigned long)uc->uc_mcontext.__gregs[REG_SP], (unsigned long)uc->uc_mcontext.__gregs[REG_S0]);
    printf("siginfo_offset %ld\nucontext_offset %ld\nmcontext_offset %ld\n", (long)((uintptr_t)info - sp),
           (long)((uintptr_t)uc - sp), (long)((uintptr_t)&uc->uc_mcontext - sp));
    fflush(stdout);
}

/* Built with -fno-omit-frame-pointer: s0 (__builtin_frame_address(0)) is the
   CFA, the sp at the handler's entry. */
static void on_usr1(int sig, siginfo_t *info, void *context)
{
    (void)sig;
    report(__builtin_return_address(0), (uintptr_t)__builtin_frame_address(0), info, context);
    sink++;
}

int main(void)
{
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = on_usr1;
    action.sa_flags = SA_SIGINFO;
    sigaction(SIGUSR1, &action, NULL);
    raise(SIGUSR1);
    return 0;
}
