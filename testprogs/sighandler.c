/*
 * sighandler — two threads each stopped inside a signal handler.
 *
 * Stack shape, from frame 0 outwards:
 *   clock_nanosleep, nanosleep      (libc, the handler blocks here)
 *   handler_block, handler_middle   (called by the handler)
 *   on_signal                       (the SIGUSR1 handler)
 *   __restore_rt                    (libc's sigreturn trampoline: the kernel
 *                                    pushed a signal frame, not a call)
 *   interrupted code                (see below)
 *   its callers, thread start
 * Thread "busy": interrupted in busy_loop, a function with a frame that was
 * spinning, so the pc after the trampoline is an arbitrary instruction, not a
 * return address; outer_busy -> middle_busy -> busy_loop above it.
 * Thread "syscall": interrupted while blocked in read() on a pipe, so the pc
 * after the trampoline is in libc's read wrapper, right after the syscall
 * instruction; outer_sys -> middle_sys -> blocked_read above it.
 * An unwinder must recognise the trampoline, take the registers from the
 * kernel's ucontext on the stack, and not subtract 1 from the interrupted pc.
 * The main thread blocks in pthread_join.
 */
#include "tp.h"

#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static int pipe_fds[2];
static atomic_int busy_running;
static atomic_int syscall_tid;

TP_NOINLINE static void handler_block(void)
{
    const struct timespec hour = {3600, 0};
    tp_arrive(); /* async-signal-safe: an atomic add */
    for (;;)
        nanosleep(&hour, NULL);
}

TP_NOINLINE static void handler_middle(void)
{
    handler_block();
    tp_sink++;
}

static void on_signal(int sig)
{
    (void)sig;
    handler_middle();
    tp_sink++;
}

TP_NOINLINE static void busy_loop(void)
{
    atomic_store(&busy_running, 1); /* a call: busy_loop is not a leaf */
    for (;;)
        tp_sink++;
}

TP_NOINLINE static void middle_busy(void)
{
    busy_loop();
    tp_sink++;
}

TP_NOINLINE static void outer_busy(void)
{
    middle_busy();
    tp_sink++;
}

TP_NOINLINE static void blocked_read(void)
{
    char c;
    atomic_store(&syscall_tid, (int)syscall(SYS_gettid));
    for (;;)
        if (read(pipe_fds[0], &c, 1) < 0)
            tp_die("read");
}

TP_NOINLINE static void middle_sys(void)
{
    blocked_read();
    tp_sink++;
}

TP_NOINLINE static void outer_sys(void)
{
    middle_sys();
    tp_sink++;
}

static void *start(void *fn)
{
    ((void (*)(void))fn)();
    return NULL;
}

/* True once thread tid is asleep in the kernel (state S in its stat line). */
static int is_sleeping(int tid)
{
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/self/task/%d/stat", tid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *paren = strrchr(buf, ')'); /* the name may contain anything */
    return paren && paren[1] == ' ' && paren[2] == 'S';
}

int main(void)
{
    const struct timespec ms = {0, 1000000};
    struct sigaction sa;

    tp_allow_tracing();
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGUSR1, &sa, NULL) < 0 || pipe(pipe_fds) < 0)
        tp_die("setup");

    pthread_t busy = tp_spawn("busy", start, (void *)outer_busy);
    pthread_t sys = tp_spawn("syscall", start, (void *)outer_sys);

    while (!atomic_load(&busy_running))
        nanosleep(&ms, NULL);
    nanosleep(&ms, NULL); /* let it get well into the loop */
    pthread_kill(busy, SIGUSR1);

    /* Signal the reader only once it sleeps inside read(); twice in a row, a
       millisecond apart, so a brief sleep on the way there does not count. */
    while (!atomic_load(&syscall_tid))
        nanosleep(&ms, NULL);
    for (int streak = 0; streak < 2; streak = is_sleeping(syscall_tid) ? streak + 1 : 0)
        nanosleep(&ms, NULL);
    pthread_kill(sys, SIGUSR1);

    tp_announce(2);
    pthread_join(busy, NULL);
    return 0;
}
