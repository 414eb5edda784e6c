/*
 * helper.c — a second compilation unit for lines.c: middle() is a real
 * (noinline) frame between two chains of inlined calls.
 */
#include "../tp.h"

#include "helper.h"

static pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;

static inline __attribute__((always_inline)) void deepest_wait(void)
{
    pthread_mutex_lock(&mutex);
    lines_arrive();
    for (;;)
        pthread_cond_wait(&cond, &mutex);
}

static inline __attribute__((always_inline)) int inner_wait(int depth)
{
    tp_sink += depth;
    deepest_wait();
    return depth;
}

__attribute__((noinline)) int middle(int depth)
{
    int r = inner_wait(depth * 2);
    tp_sink += r;
    return r;
}
