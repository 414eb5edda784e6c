/*
 * execer — a program that replaces itself (execve), or forks, while a tracer stops it.
 *
 * Threads: "sleeper" blocks in nanosleep; "vforker" sits inside vfork()
 * while its child sleeps an hour (a thread no tracer can stop, so one
 * waits for it until its stop timeout); "execer" waits in sigwait() for
 * SIGUSR1 (blocked in every other thread) and then execs /bin/sleep 3600;
 * "forker" waits likewise for SIGUSR2, then forks a child that sleeps an hour.
 * A tracer told to stop only "sleeper" and "vforker" holds "sleeper"
 * stopped while it waits for "vforker": SIGUSR1 sent then makes the execve
 * come mid-freeze, every time, and the execve kills the stopped thread;
 * SIGUSR2 makes a fork come mid-freeze. The main thread waits in pause();
 * "ready" once all four are in place.
 */
#include "tp.h"

#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

static void *sleeper(void *unused)
{
    (void)unused;
    const struct timespec hour = {3600, 0};
    tp_arrive();
    for (;;)
        nanosleep(&hour, NULL);
    return NULL;
}

static void *vforker(void *unused)
{
    (void)unused;
    tp_arrive();
    pid_t child = vfork();
    if (child == 0) {
        const struct timespec hour = {3600, 0};
        syscall(SYS_nanosleep, &hour, NULL);
        _exit(0);
    }
    for (;;)
        pause();
    return NULL;
}

static void *forker(void *usr2)
{
    int signal_number;
    tp_arrive();
    sigwait(usr2, &signal_number);
    if (fork() == 0) {
        const struct timespec hour = {3600, 0};
        for (;;)
            nanosleep(&hour, NULL);
    }
    for (;;)
        pause();
    return NULL;
}

static void *execer(void *usr1)
{
    char *const argv[] = {"sleep", "3600", NULL};
    int signal_number;
    tp_arrive();
    sigwait(usr1, &signal_number);
    execv("/bin/sleep", argv);
    tp_die("execv");
    return NULL;
}

int main(void)
{
    static sigset_t usr1, usr2, both;
    tp_allow_tracing();
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    sigemptyset(&usr2);
    sigaddset(&usr2, SIGUSR2);
    sigemptyset(&both);
    sigaddset(&both, SIGUSR1);
    sigaddset(&both, SIGUSR2);
    pthread_sigmask(SIG_BLOCK, &both, NULL);
    tp_spawn("sleeper", sleeper, NULL);
    tp_spawn("vforker", vforker, NULL);
    tp_spawn("execer", execer, &usr1);
    tp_spawn("forker", forker, &usr2);
    tp_announce(4);
    for (;;)
        pause();
}
