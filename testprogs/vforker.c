/*
 * vforker — a main thread that cannot be stopped: it sits inside vfork()
 * while the child sleeps, in a killable (not interruptible) kernel wait
 * that PTRACE_INTERRUPT does not end.
 *
 * One more thread ("sleeper") blocks in nanosleep and can be stopped as
 * usual.  The child prints "ready" once the sleeper has arrived (the
 * parent is inside vfork() by then), sleeps for argv[1] seconds (default
 * 30), and exits; the parent then blocks in pause().  Only system calls
 * run in the child: it shares the parent's memory.
 *
 * Thread names: main keeps the program name, "sleeper".
 */
#include "tp.h"

#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

TP_NOINLINE static void block_in_nanosleep(void)
{
    const struct timespec hour = {3600, 0};
    tp_arrive();
    for (;;)
        nanosleep(&hour, NULL);
}

static void *sleeper(void *unused)
{
    (void)unused;
    block_in_nanosleep();
    return NULL;
}

TP_NOINLINE static void vfork_and_wait(long seconds)
{
    pid_t child = vfork();
    if (child == 0) {
        static const char ready[] = "ready\n";
        const struct timespec pause_for = {seconds, 0};
        syscall(SYS_write, 1, ready, sizeof ready - 1);
        syscall(SYS_nanosleep, &pause_for, NULL);
        _exit(0);
    }
    tp_sink++;
}

int main(int argc, char **argv)
{
    long seconds = argc > 1 ? atol(argv[1]) : 30;
    const struct timespec ms = {0, 1000000};
    tp_allow_tracing();
    tp_spawn("sleeper", sleeper, NULL);
    while (atomic_load(&tp_arrived) < 1)
        nanosleep(&ms, NULL);
    fflush(stdout);
    vfork_and_wait(seconds);
    for (;;)
        pause();
}
