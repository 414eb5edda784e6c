/*
 * nocfi — x86_64 only: a hand-written assembly function without CFI in the
 * middle of a C call chain (C -> asm -> C -> block). The C code keeps its
 * .eh_frame; only nocfi_asm (nocfi_asm.S) has none.
 *
 * Stack of thread "asmchain", innermost first (after libc's nanosleep frames):
 *   nocfi_block, nocfi_callback, nocfi_asm, asm_caller, nocfi_main,
 *   then libc's start_thread and clone3.
 * The unwinder reaches nocfi_asm through nocfi_callback's CFI, finds no rule
 * for it, and must either recover asm_caller (frame pointers are useless
 * here: nocfi_asm does not touch rbp; a scan has to pass over the decoy
 * nocfi_asm leaves in its frame) or stop with "no unwind info" for nocfi_asm.
 * The main thread blocks in pthread_join.
 */
#include "../tp.h"

/* If the blocking loop could never end, GCC would mark every caller noreturn,
   drop the code after each call and let the next function start right at the
   return address. A flag nobody clears keeps the frames ordinary. */
static volatile int keep_blocking = 1;

void nocfi_asm(void);

TP_NOINLINE static void nocfi_block(void)
{
    const struct timespec hour = {3600, 0};
    tp_arrive();
    while (keep_blocking) /* never cleared; keeps the callers from being noreturn */
        nanosleep(&hour, NULL);
}

/* Called from nocfi_asm; global so the assembly can name it. */
TP_NOINLINE void nocfi_callback(void)
{
    nocfi_block();
    tp_sink += 1;
}

TP_NOINLINE static void asm_caller(void)
{
    nocfi_asm();
    tp_sink += 2;
}

static void *nocfi_main(void *arg)
{
    (void)arg;
    asm_caller();
    return NULL;
}

int main(void)
{
    tp_allow_tracing();
    pthread_t t = tp_spawn("asmchain", nocfi_main, NULL);
    tp_announce(1);
    pthread_join(t, NULL);
    return 0;
}
