/*
 * deepstacks — many threads, each parked at the bottom of a big stack.
 *
 * argv[1] (default 64) "deep" threads, each with a stack of argv[2] MiB
 * (default 32), recurse through 16 KiB frames until less than 256 KiB of
 * their stack is left, then block in nanosleep: every thread's live stack
 * is nearly its whole stack, which is what a stack copy has to bound.
 * Prints "ready" when every thread has arrived; the main thread then
 * blocks in pause().
 */
#include "tp.h"

#include <stdint.h>
#include <string.h>
#include <unistd.h>

static size_t stack_size;
static volatile int never; /* never set: the threads park for good */

TP_NOINLINE static void park(void)
{
    const struct timespec hour = {3600, 0};
    tp_arrive();
    while (!never)
        nanosleep(&hour, NULL);
}

TP_NOINLINE static void descend(uintptr_t top)
{
    volatile char frame[16384];
    memset((char *)frame, 0x5a, sizeof frame);
    if (top - (uintptr_t)frame < stack_size - (256 << 10))
        descend(top);
    else
        park();
    tp_sink += frame[0];
}

static void *deep(void *unused)
{
    (void)unused;
    char here;
    descend((uintptr_t)&here);
    return NULL;
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 64;
    stack_size = (size_t)(argc > 2 ? atoi(argv[2]) : 32) << 20;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, stack_size);
    tp_allow_tracing();
    for (int i = 0; i < threads; i++) {
        pthread_t t;
        if (pthread_create(&t, &attr, deep, NULL) != 0)
            tp_die("pthread_create");
        pthread_setname_np(t, "deep");
    }
    tp_announce(threads);
    for (;;)
        pause();
}
