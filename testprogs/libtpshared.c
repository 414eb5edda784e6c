/*
 * libtpshared.so — the shared library half of the "plt" test program.
 *
 * tps_enter() is called from the executable through its PLT and calls back
 * into the executable through a function pointer; tps_block() is called from
 * that callback (again through the executable's PLT) and blocks in nanosleep,
 * itself reached through this library's PLT. Built -O2 -fPIC without frame
 * pointers, so only its CFI describes its frames.
 */
#include <time.h>

volatile int tps_sink;

__attribute__((noinline)) void tps_block(void)
{
    const struct timespec hour = {3600, 0};
    for (;;)
        nanosleep(&hour, NULL);
}

__attribute__((noinline)) void tps_enter(void (*callback)(int), int arg)
{
    callback(arg + 1);
    tps_sink++; /* not a tail call: this frame stays */
}
