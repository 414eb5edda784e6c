/*
 * sframe.c — stacks that SFrame alone can unwind from top to main.
 *
 * Built with `-Wa,--gsframe`, this program's own functions carry SFrame
 * (binutils 2.40 here writes version 1) but libc's do not. So that a walk
 * with `--unwinder sframe` is not stopped at frame 0 by a libc frame, every
 * thread parks in a raw system call issued by inline assembly inside this
 * program: the whole chain from that frame to main (or the thread's start
 * routine) is SFrame-described. Three threads give three stack shapes:
 *   "chain"    sf_chain_1 → … → sf_chain_12 → sf_park (12 distinct frames)
 *   "leafy"    sf_leafy → sf_park, with a large frame (2- and 4-byte offsets)
 *   main       main → sf_main_wait → sf_park (after printing "ready")
 */
#include "tp.h"

#include <string.h>
#include <sys/syscall.h>

/* Never cleared: read through a volatile so the compiler cannot prove that
   sf_park does not return, which would let it drop the code after every call
   and fold the callers together. */
static volatile int sf_forever = 1;

/* Block in pause(2) (ppoll on aarch64) without calling into libc. */
TP_NOINLINE static void sf_park(void)
{
    tp_arrive();
    while (sf_forever) {
#if defined(__x86_64__)
        long nr = SYS_pause;
        __asm__ volatile("syscall" : "+a"(nr) : : "rcx", "r11", "memory");
#elif defined(__aarch64__)
        register long x8 __asm__("x8") = SYS_ppoll;
        register long x0 __asm__("x0") = 0;
        register long x1 __asm__("x1") = 0;
        register long x2 __asm__("x2") = 0;
        register long x3 __asm__("x3") = 0;
        __asm__ volatile("svc #0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3) : "memory");
#else
#error "unsupported architecture"
#endif
    }
}

#define LINK(n, next)                                                                              \
    TP_NOINLINE static void sf_chain_##n(void)                                                     \
    {                                                                                              \
        next();                                                                                    \
        tp_sink++;                                                                                 \
    }
LINK(12, sf_park)
LINK(11, sf_chain_12)
LINK(10, sf_chain_11)
LINK(9, sf_chain_10)
LINK(8, sf_chain_9)
LINK(7, sf_chain_8)
LINK(6, sf_chain_7)
LINK(5, sf_chain_6)
LINK(4, sf_chain_5)
LINK(3, sf_chain_4)
LINK(2, sf_chain_3)
LINK(1, sf_chain_2)

/* A frame of ~100 KiB: its SFrame rows need 4-byte CFA offsets. */
TP_NOINLINE static void sf_leafy(void)
{
    volatile char big[100000];
    memset((char *)big, 1, sizeof big);
    sf_park();
    tp_sink += big[tp_sink & 0xff];
}

static void *chain_thread(void *arg)
{
    (void)arg;
    sf_chain_1();
    return NULL;
}

static void *leafy_thread(void *arg)
{
    (void)arg;
    sf_leafy();
    return NULL;
}

TP_NOINLINE static void sf_main_wait(void)
{
    sf_park();
    tp_sink++;
}

int main(void)
{
    tp_allow_tracing();
    tp_spawn("chain", chain_thread, NULL);
    tp_spawn("leafy", leafy_thread, NULL);
    /* Announce once both threads park; main then parks too (the fixture waits
       for every thread to sleep, so it sees main settle as well). */
    tp_announce(2);
    sf_main_wait();
    return 0;
}
