/*
 * chain.h — inline functions of lines.c that live in a header, so that an
 * inlined call's DW_AT_call_file names lines.c while the code inside it
 * belongs to chain.h: a logical frame's file differs from its caller's.
 */
#ifndef CHAIN_H
#define CHAIN_H

#include <poll.h>
#include <time.h>

#define ALWAYS_INLINE static inline __attribute__((always_inline))

extern volatile int chain_sink;

ALWAYS_INLINE void chain_sleep(int seconds)
{
    struct timespec t = {seconds, 0};
    for (;;) {
        nanosleep(&t, NULL);
        chain_sink++;
    }
}

ALWAYS_INLINE void chain_level3(int seconds)
{
    chain_sink += 3;
    chain_sleep(seconds);
}

ALWAYS_INLINE void chain_level2(int seconds)
{
    chain_sink += 2;
    chain_level3(seconds + 1);
    chain_sink -= 2;
}

ALWAYS_INLINE void chain_level1(int seconds)
{
    chain_sink += 1;
    chain_level2(seconds + 1);
    chain_sink -= 1;
}

ALWAYS_INLINE int chain_poll(int fd, int timeout)
{
    struct pollfd p = {fd, POLLIN, 0};
    int n = poll(&p, 1, timeout);
    chain_sink += n;
    return n;
}

#endif
