/*
 * chain — a thread ("chain") ten frames deep, blocked in nanosleep, in a
 * binary with no unwind tables of its own: built without them and with
 * .eh_frame / .eh_frame_hdr removed by objcopy afterwards (see the Makefile).
 * Only libc keeps its CFI.
 *
 *   fp-noeh     -O2 -fno-omit-frame-pointer: the rbp / x29 chain is intact,
 *               so frame pointers recover every caller.
 *   nofp-noeh   -O2 -fomit-frame-pointer: no chain either; only stack
 *               scanning can recover the callers.
 *
 * Stack of thread "chain", innermost first (after libc's nanosleep frames):
 *   chain_block, chain_10, chain_09, ..., chain_01, chain_main,
 *   then libc's start_thread and clone3.
 * The main thread blocks in pthread_join (main is also without CFI).
 *
 * No invented frames: chain_main first runs chain_scrub, which zeroes 16 KiB
 * of stack below it without calling anything, so the slack slots of the
 * chain_* frames hold zeros instead of stale return addresses left behind by
 * the thread's start-up code. A scan must therefore find exactly the frames
 * above and nothing else.
 */
#include "../tp.h"

/* If the blocking loop could never end, GCC would mark every caller noreturn,
   drop the code after each call and let the next function start right at the
   return address. A flag nobody clears keeps the frames ordinary. */
static volatile int keep_blocking = 1;

#define SCRUB_BYTES 16384

TP_NOINLINE static void chain_block(void)
{
    const struct timespec hour = {3600, 0};
    tp_arrive();
    while (keep_blocking) /* never cleared; keeps the callers from being noreturn */
        nanosleep(&hour, NULL);
}

/* Each level calls the next and then writes a distinct value, so the call is
   not a tail jump and no two functions can be folded together. */
#define LEVEL(n, next)                 \
    TP_NOINLINE static void n(void)    \
    {                                  \
        next();                        \
        tp_sink += __LINE__;           \
    }

LEVEL(chain_10, chain_block)
LEVEL(chain_09, chain_10)
LEVEL(chain_08, chain_09)
LEVEL(chain_07, chain_08)
LEVEL(chain_06, chain_07)
LEVEL(chain_05, chain_06)
LEVEL(chain_04, chain_05)
LEVEL(chain_03, chain_04)
LEVEL(chain_02, chain_03)
LEVEL(chain_01, chain_02)

TP_NOINLINE static void chain_scrub(void)
{
    volatile char area[SCRUB_BYTES];
    for (int i = 0; i < SCRUB_BYTES; i++)
        area[i] = 0;
    tp_sink += area[0];
}

static void *chain_main(void *arg)
{
    (void)arg;
    chain_scrub();
    chain_01();
    return NULL;
}

int main(void)
{
    tp_allow_tracing();
    pthread_t t = tp_spawn("chain", chain_main, NULL);
    tp_announce(1);
    pthread_join(t, NULL);
    return 0;
}
