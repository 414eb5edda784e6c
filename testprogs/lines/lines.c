/*
 * lines — threads parked under chains of inlined calls, the oracle program of
 * `liveunwind --lines` (compared with gdb's logical frames: function, file
 * and line of every frame, inline frames included).
 *
 * Built with -O2 -g (and -gdwarf-4, -gdwarf-3, compressed and separate debug
 * variants, see the Makefile).  Thread names and stacks:
 *   chain     worker_chain → chain_level1 → chain_level2 → chain_level3 →
 *             chain_sleep (all four inlined, from chain.h) → nanosleep
 *   twice     worker_twice: the same inline chain_poll inlined at two call
 *             sites (the first returns at once); the thread blocks in the second
 *   middle    worker_middle → [inline outer_step] → middle (noinline, in
 *             helper.c: another unit) → [inline inner_wait → deepest_wait] →
 *             pthread_cond_wait
 *   block     worker_block: an inlined call inside a lexical block that has
 *             its own locals, with a cold path split off (.text.unlikely), so
 *             the function has DW_AT_ranges
 *   recurse   recurse(3) → recurse(2) → recurse(1) → recurse(0), each with an
 *             inlined helper on the way, blocking in read on a pipe
 * The main thread blocks in pthread_join.
 */
#include "../tp.h"

#include <string.h>
#include <unistd.h>

#include "chain.h"
#include "helper.h"

volatile int chain_sink;

void lines_arrive(void) { tp_arrive(); }
static int pipe_fds[2]; /* nobody writes: readers block forever */

TP_NOINLINE static void *worker_chain(void *arg)
{
    (void)arg;
    tp_arrive();
    chain_level1(3600);
    tp_sink++;
    return NULL;
}

TP_NOINLINE static void *worker_twice(void *arg)
{
    int fd = *(int *)arg;
    if (chain_poll(fd, 0) > 0)
        tp_sink++;
    tp_arrive();
    chain_poll(fd, -1);
    tp_sink++;
    return NULL;
}

ALWAYS_INLINE int outer_step(int depth)
{
    tp_sink += depth;
    int result = middle(depth + 1);
    tp_sink -= depth;
    return result;
}

TP_NOINLINE static void *worker_middle(void *arg)
{
    (void)arg;
    int r = outer_step(2);
    tp_sink += r;
    return NULL;
}

__attribute__((cold, noinline)) static void complain(const char *what)
{
    fprintf(stderr, "lines: %s\n", what);
}

ALWAYS_INLINE void read_one(int fd, char *into)
{
    if (__builtin_expect(read(fd, into, 1) < 0, 0))
        complain("read");
}

TP_NOINLINE static void *worker_block(void *arg)
{
    int fd = *(int *)arg;
    tp_arrive();
    for (;;) {
        char buffer[64];
        memset(buffer, (int)tp_sink, sizeof buffer);
        read_one(fd, buffer);
        if (__builtin_expect(buffer[0] == 'x', 0)) {
            complain("unexpected input");
            break;
        }
        tp_sink += buffer[1];
    }
    return NULL;
}

ALWAYS_INLINE int step_down(int n)
{
    tp_sink += n;
    return n - 1;
}

TP_NOINLINE static int recurse(int n)
{
    char c;
    if (n == 0) {
        tp_arrive();
        while (read(pipe_fds[0], &c, 1) >= 0)
            tp_sink++;
        complain("read");
        return 0;
    }
    int r = recurse(step_down(n));
    tp_sink += r;
    return r + 1;
}

TP_NOINLINE static void *worker_recurse(void *arg)
{
    (void)arg;
    int r = recurse(3);
    tp_sink += r;
    return NULL;
}

int main(void)
{
    tp_allow_tracing();
    if (pipe(pipe_fds) != 0)
        tp_die("pipe");
    pthread_t threads[5];
    threads[0] = tp_spawn("chain", worker_chain, NULL);
    threads[1] = tp_spawn("twice", worker_twice, &pipe_fds[0]);
    threads[2] = tp_spawn("middle", worker_middle, NULL);
    threads[3] = tp_spawn("block", worker_block, &pipe_fds[0]);
    threads[4] = tp_spawn("recurse", worker_recurse, NULL);
    tp_announce(5);
    for (int i = 0; i < 5; i++)
        pthread_join(threads[i], NULL);
    return tp_sink;
}
