/*
 * remote — three threads, each parked at the end of a known call chain, for
 * the gdb-remote tests (run under qemu-aarch64 -g, qemu-x86_64 -g or
 * gdbserver) and the local-backtrace tests.
 *
 * Stacks, innermost first (every function is noinline and stores to tp_sink
 * after its call, so no call becomes a tail jump):
 *   main thread:  wait_3 <- wait_2 <- wait_1 <- main       (pthread_join: a futex)
 *   "sleeper":    sleep_3 <- sleep_2 <- sleep_1 <- start   (nanosleep)
 *   "reader":     read_2 <- read_1 <- start                (read of a pipe no one writes)
 * each below the libc wrapper of its system call, and start below libc's
 * start_thread.  With "spin" as the first argument the reader is replaced by
 * a "spinner" whose frame 0 sits mid-loop in spin_2 <- spin_1 <- start.
 *
 * The main thread prints "ready" once the others arrived, then calls
 * all_ready() (a place for a debugger's breakpoint) and blocks.  SIGUSR1 is
 * caught and ignored: the tests stop a target under QEMU 7.2, which ignores
 * ^C while the guest runs, by sending it SIGUSR1, and a debugger that lets
 * the target go passes that signal on.  SIGUSR2 makes it print "alive": a
 * target that a debugger still holds stopped cannot.
 */
#include "../tp.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

static int pipe_fds[2];

TP_NOINLINE static void sleep_3(void)
{
    const struct timespec hour = {3600, 0};
    tp_arrive();
    for (;;)
        nanosleep(&hour, NULL);
}

TP_NOINLINE static void sleep_2(void)
{
    sleep_3();
    tp_sink += 2;
}

TP_NOINLINE static void sleep_1(void)
{
    sleep_2();
    tp_sink += 1;
}

TP_NOINLINE static void read_2(void)
{
    char c;
    tp_arrive();
    for (;;)
        if (read(pipe_fds[0], &c, 1) < 0)
            tp_die("read");
}

TP_NOINLINE static void read_1(void)
{
    read_2();
    tp_sink += 1;
}

TP_NOINLINE static void spin_2(void)
{
    tp_arrive();
    for (;;)
        tp_sink++;
}

TP_NOINLINE static void spin_1(void)
{
    spin_2();
    tp_sink += 1;
}

static void *start(void *fn)
{
    ((void (*)(void))fn)();
    return NULL;
}

TP_NOINLINE static void wait_3(pthread_t thread)
{
    pthread_join(thread, NULL);
    tp_sink += 3;
}

TP_NOINLINE static void wait_2(pthread_t thread)
{
    wait_3(thread);
    tp_sink += 2;
}

TP_NOINLINE static void wait_1(pthread_t thread)
{
    wait_2(thread);
    tp_sink += 1;
}

/* Called once every thread has arrived: a debugger's breakpoint goes here. */
TP_NOINLINE void all_ready(void) { tp_sink += 4; }

static void ignore(int signo) { (void)signo; }

static void say_alive(int signo)
{
    (void)signo;
    if (write(STDOUT_FILENO, "alive\n", 6) < 0)
        _exit(1);
}

int main(int argc, char **argv)
{
    int spin = argc > 1 && strcmp(argv[1], "spin") == 0;
    struct sigaction action = {.sa_handler = ignore, .sa_flags = SA_RESTART};
    sigaction(SIGUSR1, &action, NULL);
    action.sa_handler = say_alive;
    sigaction(SIGUSR2, &action, NULL);
    tp_allow_tracing();
    if (pipe(pipe_fds) < 0)
        tp_die("pipe");
    pthread_t sleeper = tp_spawn("sleeper", start, (void *)sleep_1);
    tp_spawn(spin ? "spinner" : "reader", start, (void *)(spin ? spin_1 : read_1));
    tp_announce(2);
    all_ready();
    wait_1(sleeper);
    return 0;
}
