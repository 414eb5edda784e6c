/*
 * recurse [N] — a thread ("recursion") N levels deep in mutual recursion
 * (default 50), blocked in nanosleep at the bottom.
 *
 * Stack shape: block_at_bottom, then exactly N frames cycling through
 * rec_a -> rec_b -> rec_c -> rec_a ..., then recurse_main and libc's thread
 * start. The same few return addresses repeat thousands of times, which is
 * what stresses an unwinder's frame limit, its loop detection (a CFA that must
 * keep growing even though pcs repeat) and the cost per frame. N=10000 needs
 * more than the default 8 MiB stack at -O0, so the recursion runs in a thread
 * with a 256 MiB stack. The main thread blocks in pthread_join.
 */
#include "tp.h"

#include <string.h>

TP_NOINLINE static void block_at_bottom(void)
{
    const struct timespec hour = {3600, 0};
    tp_arrive();
    for (;;)
        nanosleep(&hour, NULL);
}

static void rec_b(long n);
static void rec_c(long n);

/* n counts the rec_* frames still to push, this one included. */
TP_NOINLINE static void rec_a(long n)
{
    if (n > 1)
        rec_b(n - 1);
    else
        block_at_bottom();
    tp_sink += 1; /* distinct per function: keeps identical-code folding away */
}

TP_NOINLINE static void rec_b(long n)
{
    if (n > 1)
        rec_c(n - 1);
    else
        block_at_bottom();
    tp_sink += 2;
}

TP_NOINLINE static void rec_c(long n)
{
    if (n > 1)
        rec_a(n - 1);
    else
        block_at_bottom();
    tp_sink += 3;
}

static void *recurse_main(void *arg)
{
    rec_a((long)arg);
    return NULL;
}

int main(int argc, char **argv)
{
    long depth = argc > 1 ? strtol(argv[1], NULL, 10) : 50;
    pthread_attr_t attr;
    pthread_t t;

    if (depth < 1) {
        fprintf(stderr, "usage: recurse [N>=1]\n");
        return 2;
    }
    tp_allow_tracing();
    pthread_attr_init(&attr);
    if (pthread_attr_setstacksize(&attr, 256UL << 20) != 0 ||
        pthread_create(&t, &attr, recurse_main, (void *)depth) != 0)
        tp_die("pthread_create");
    pthread_setname_np(t, "recursion");
    tp_announce(1);
    pthread_join(t, NULL);
    return 0;
}
