/*
 * libchain.so — a C call chain that calls back into Python, for the
 * local-backtrace tests (loaded with ctypes).
 *
 *   chain_call(callback) -> chain_middle -> chain_inner -> callback()
 *
 * so a backtrace taken inside the callback has, below the callback's ctypes
 * and interpreter frames, chain_inner, chain_middle and chain_call, then the
 * ctypes and interpreter frames that called chain_call.  Every function is
 * noinline and uses the callback's result after the call, so no call
 * becomes a tail jump.
 */
#include <stdint.h>

#define NOINLINE __attribute__((noinline, noclone))

typedef int (*callback_t)(void);

static volatile int sink;

NOINLINE static int chain_inner(callback_t callback)
{
    int result = callback();
    sink += result;
    return result + 1;
}

NOINLINE static int chain_middle(callback_t callback)
{
    int result = chain_inner(callback);
    sink += result;
    return result + 1;
}

NOINLINE int chain_call(callback_t callback)
{
    int result = chain_middle(callback);
    sink += result;
    return result + 1;
}
