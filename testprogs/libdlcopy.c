/*
 * libdlcopy.so — the library testprogs/dlcopy opens from a copy, which the
 * tests then truncate, rewrite in place, or replace by a FIFO or a symlink
 * while liveunwind reads it.
 *
 * Stack shape of the thread that enters it: clock_nanosleep, nanosleep (libc)
 * <- dlc_block <- dlc_middle <- dlc_enter (this library) <- in_library
 * (dlcopy); of the one that enters later, dlc_block <- dlc_later. Built -O2
 * -fPIC without frame pointers, so only its CFI describes its frames. dlc_pad, half a megabyte of read-only data between the code and
 * the unwind tables, puts the tables and the symbols far from the headers: a
 * reader that reads the file as it needs it reads them separately, after the
 * headers, and the tests can cut the file between the two.
 */
#include <time.h>

volatile int dlc_sink;
__attribute__((used)) const char dlc_pad[512 << 10] = {1};

/* The time is an argument, not a constant: gcc puts a constant timespec in .rodata,
   after dlc_pad, where the tests cut the file. */
__attribute__((noinline)) void dlc_block(long seconds)
{
    const struct timespec wait = {seconds, 0};
    for (;;)
        nanosleep(&wait, NULL);
}

__attribute__((noinline)) void dlc_middle(void)
{
    dlc_block(3600);
    dlc_sink++; /* not a tail call: this frame stays */
}

__attribute__((noinline)) void dlc_later(void)
{
    dlc_block(3600);
    dlc_sink++;
}

__attribute__((noinline)) void dlc_enter(void)
{
    dlc_middle();
    dlc_sink++;
}
