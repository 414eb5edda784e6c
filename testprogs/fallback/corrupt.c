/*
 * corrupt [ra|smash] — a thread ("damaged") that damages its own stack, then
 * blocks in nanosleep. Built with frame pointers and normal CFI, so the damage
 * is the only obstacle; x86_64 and aarch64 alike (the frame record at the
 * frame pointer holds the saved fp, then the return address).
 *
 * Stack of thread "damaged" as the code built it, innermost first (after
 * libc's nanosleep frames):
 *   corrupt_block, corrupt_middle, corrupt_outer, corrupt_main,
 *   then libc's start_thread and clone3.
 *
 *   ra     (default) corrupt_block overwrites its own return address with
 *          RA_GARBAGE (non-canonical on x86_64, unmapped on aarch64). The
 *          CFI rule of corrupt_block then yields a return address outside
 *          every mapping: an unwinder must stop there with its reason, or
 *          recover (e.g. by scanning) a later caller — never invent one.
 *   smash  corrupt_block's own frame record, and every word from
 *          corrupt_middle's frame record up to (not including)
 *          corrupt_main's, are overwritten in pairs: a saved frame pointer
 *          that points at itself (a cycle a frame-pointer walk must refuse),
 *          then RA_GARBAGE. corrupt_middle and corrupt_outer are
 *          unrecoverable; corrupt_main's record and everything above it are
 *          intact. corrupt_block's locals are spared (on aarch64 they lie
 *          above its frame record), so it still sleeps properly.
 *
 * The main thread blocks in pthread_join. The damage is done before
 * tp_arrive(), so it is in place when "ready" is printed.
 */
#include "../tp.h"

#include <stdint.h>
#include <string.h>

/* If the blocking loop could never end, GCC would mark every caller noreturn,
   drop the code after each call and let the next function start right at the
   return address. A flag nobody clears keeps the frames ordinary. */
static volatile int keep_blocking = 1;

#define RA_GARBAGE ((uintptr_t)0x4141414141414141ULL)

static int smash;
static volatile uintptr_t *main_record;

TP_NOINLINE static void corrupt_block(void)
{
    const struct timespec hour = {3600, 0};
    volatile uintptr_t *record = (volatile uintptr_t *)__builtin_frame_address(0);

    volatile uintptr_t *caller_record = (volatile uintptr_t *)record[0];

    record[1] = RA_GARBAGE;
    if (smash) {
        record[0] = (uintptr_t)record;
        for (volatile uintptr_t *slot = caller_record; slot + 1 < main_record; slot += 2) {
            slot[0] = (uintptr_t)slot;
            slot[1] = RA_GARBAGE;
        }
    }
    tp_arrive();
    while (keep_blocking) /* never cleared; keeps the callers from being noreturn */
        nanosleep(&hour, NULL);
}

TP_NOINLINE static void corrupt_middle(void)
{
    corrupt_block();
    tp_sink += 1;
}

TP_NOINLINE static void corrupt_outer(void)
{
    corrupt_middle();
    tp_sink += 2;
}

static void *corrupt_main(void *arg)
{
    (void)arg;
    main_record = (volatile uintptr_t *)__builtin_frame_address(0);
    corrupt_outer();
    tp_sink += 3;
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "smash") == 0)
        smash = 1;
    else if (argc > 1 && strcmp(argv[1], "ra") != 0) {
        fprintf(stderr, "usage: corrupt [ra|smash]\n");
        return 2;
    }
    tp_allow_tracing();
    pthread_t t = tp_spawn("damaged", corrupt_main, NULL);
    tp_announce(1);
    pthread_join(t, NULL);
    return 0;
}
