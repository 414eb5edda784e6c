/*
 * guesses — x86_64 only: stacks on which a guess could invent or skip a caller
 * (the assembly is guesses_asm.S; the C code keeps .eh_frame and frame
 * pointers, the assembly has neither).
 *
 * Thread "stale", innermost first (after libc's nanosleep frames):
 *   stale_block, stale_asm, stale_caller, stale_main, start_thread, clone3.
 * stale_asm's frame holds two stale return addresses below its real one (into
 * stale_helper after its call of getpid, into stale_asm itself after its call
 * of stale_helper); a scan must pass over both.
 *
 * Thread "pushleaf", innermost first:
 *   push_leaf, fp_middle, fp_outer, pushleaf_main, start_thread, clone3.
 * push_leaf (frame 0, waiting in pause) pushed one word; its return address
 * into fp_middle is at [sp+8]; rbp is fp_middle's, whose record returns into
 * fp_outer (which called fp_middle through a pointer): a frame-pointer step
 * would skip fp_middle.
 *
 * Thread "zero", innermost first:
 *   zero_block, zero_asm, zero_outer — on a stack of its own whose outermost
 * return address is 0 (run_on_stack pushed it).  zero_outer's CFI reads that
 * 0; but its own frame was found by a scan (zero_asm has no CFI), so the 0
 * proves no end: the walk is not complete ("no outermost frame").
 *
 * The main thread waits in pthread_join under main and _start.
 */
#include "../tp.h"

#include <unistd.h>

static volatile int keep_blocking = 1;

void stale_asm(void);
void push_leaf(void);
void zero_asm(void);
void run_on_stack(void (*fn)(void), void *top);

/* Called from stale_asm; global so the assembly can name them. */
TP_NOINLINE void stale_helper(void)
{
    tp_sink += getpid();
}

TP_NOINLINE void stale_block(void)
{
    const struct timespec hour = {3600, 0};
    tp_arrive();
    while (keep_blocking)
        nanosleep(&hour, NULL);
}

TP_NOINLINE static void stale_caller(void)
{
    stale_asm();
    tp_sink += 1;
}

static void *stale_main(void *arg)
{
    (void)arg;
    stale_caller();
    return NULL;
}

TP_NOINLINE static void fp_middle(void)
{
    tp_arrive();
    push_leaf();
    tp_sink += 2;
}

/* Through a pointer: the call before fp_middle's return address is indirect. */
static void (*volatile middle)(void) = fp_middle;

TP_NOINLINE static void fp_outer(void)
{
    middle();
    tp_sink += 3;
}

static void *pushleaf_main(void *arg)
{
    (void)arg;
    fp_outer();
    return NULL;
}

TP_NOINLINE void zero_block(void)
{
    const struct timespec hour = {3600, 0};
    tp_arrive();
    while (keep_blocking)
        nanosleep(&hour, NULL);
}

TP_NOINLINE static void zero_outer(void)
{
    zero_asm();
    tp_sink += 4;
    for (;;)
        pause(); /* there is nothing to return to */
}

static _Alignas(16) unsigned char zero_stack[64 * 1024];

static void *zero_main(void *arg)
{
    (void)arg;
    run_on_stack(zero_outer, zero_stack + sizeof zero_stack);
    return NULL;
}

int main(void)
{
    tp_allow_tracing();
    pthread_t stale = tp_spawn("stale", stale_main, NULL);
    pthread_t pushleaf = tp_spawn("pushleaf", pushleaf_main, NULL);
    pthread_t zero = tp_spawn("zero", zero_main, NULL);
    tp_announce(3);
    pthread_join(stale, NULL);
    pthread_join(pushleaf, NULL);
    pthread_join(zero, NULL);
    return 0;
}
