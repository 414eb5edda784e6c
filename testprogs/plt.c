/*
 * plt — a stack that crosses between an executable and a shared library
 * several times, with calls that went through lazily bound PLT stubs.
 *
 * Stack shape: clock_nanosleep, nanosleep (libc) <- tps_block (libtpshared.so)
 * <- from_library (plt) <- tps_enter (libtpshared.so) <- main (plt).
 * Every call between the modules goes through a PLT stub, and with -z lazy the
 * first call of each goes through the dynamic linker's resolver
 * (_dl_runtime_resolve), which rewrites the GOT and jumps on. The return
 * addresses therefore sit in different modules with different load biases,
 * each needing its own unwind tables, and an unwinder that can symbolise PLT
 * addresses can be checked on the call sites. The library is found through
 * RUNPATH $ORIGIN, i.e. next to the executable.
 */
#include "tp.h"

void tps_enter(void (*callback)(int), int arg);
void tps_block(void);

TP_NOINLINE static void from_library(int arg)
{
    tp_sink = arg;
    puts("ready");
    fflush(stdout);
    tps_block();
    tp_sink++;
}

int main(int argc, char **argv)
{
    (void)argv;
    tp_allow_tracing();
    tps_enter(from_library, argc);
    return 0;
}
