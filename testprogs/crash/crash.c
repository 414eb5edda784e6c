/*
 * crash — dies of a signal in a chosen way, so the kernel (or QEMU) writes a core.
 *
 *   crash leaf         SIGSEGV: a leaf function writes through a null pointer.
 *                      Stack: leaf_store <- leaf_caller <- main.
 *   crash abort [N]    SIGABRT: abort() at the bottom of N (default 50) recursive
 *                      calls of recurse_then_abort <- main.
 *   crash handler      SIGSEGV inside the SIGUSR1 handler: handler_fault <-
 *                      on_usr1 <- (signal frame) <- raise_usr1 <- main.
 *   crash thread       SIGSEGV in the thread "crasher" (not the main thread):
 *                      thread_fault <- thread_middle <- thread_main; the main
 *                      thread and the thread "sleeper" block meanwhile.
 *   crash other        SIGSEGV in leaf_store again, from another call chain:
 *                      leaf_store <- other_caller <- main.
 *   crash fpe          SIGFPE: an integer division by zero in divide <-
 *                      fpe_caller <- main.
 *
 * Every function in the chain is noinline and does work after its call, so the
 * chain stays on the stack at any optimisation level.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline, noclone))

static volatile int sink;
static int *volatile null_pointer;

NOINLINE static void leaf_store(int value)
{
    *null_pointer = value; /* faults: SEGV_MAPERR at address 0 */
}

NOINLINE static void leaf_caller(int value)
{
    leaf_store(value + 1);
    sink++;
}

NOINLINE static void other_caller(int value)
{
    leaf_store(value * 3);
    sink++;
}

static volatile int zero;

NOINLINE static int divide(int dividend)
{
    volatile int kept = dividend; /* so gcc cannot fold 1 / x into a comparison */
    return kept / zero;           /* traps: SIGFPE, FPE_INTDIV */
}

NOINLINE static void fpe_caller(int value)
{
    sink += divide(value);
    sink++;
}

NOINLINE static int recurse_then_abort(int depth)
{
    if (depth <= 1) {
        if (sink != -1) /* always true; tells gcc the recursion can end */
            abort();
        return 0;
    }
    int result = recurse_then_abort(depth - 1);
    sink += result;
    return result + 1;
}

NOINLINE static void handler_fault(void)
{
    *null_pointer = 42;
}

static void on_usr1(int sig)
{
    (void)sig;
    handler_fault();
    sink++;
}

NOINLINE static void raise_usr1(void)
{
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_usr1;
    sigaction(SIGUSR1, &action, NULL);
    raise(SIGUSR1);
    sink++;
}

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t never = PTHREAD_COND_INITIALIZER;
static pthread_barrier_t started;

NOINLINE static void thread_fault(void)
{
    *null_pointer = 7;
}

NOINLINE static void thread_middle(void)
{
    thread_fault();
    sink++;
}

static void *thread_main(void *unused)
{
    (void)unused;
    pthread_barrier_wait(&started);
    thread_middle();
    sink++;
    return NULL;
}

static void *sleeper_main(void *unused)
{
    (void)unused;
    pthread_mutex_lock(&lock);
    pthread_barrier_wait(&started);
    for (;;)
        pthread_cond_wait(&never, &lock);
    return NULL;
}

NOINLINE static int crash_in_thread(void)
{
    pthread_t sleeper, crasher;
    pthread_barrier_init(&started, NULL, 3);
    pthread_create(&sleeper, NULL, sleeper_main, NULL);
    pthread_setname_np(sleeper, "sleeper");
    pthread_create(&crasher, NULL, thread_main, NULL);
    pthread_setname_np(crasher, "crasher");
    pthread_barrier_wait(&started);
    pthread_join(crasher, NULL);
    return 1;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    if (strcmp(mode, "leaf") == 0)
        leaf_caller(1);
    else if (strcmp(mode, "abort") == 0)
        recurse_then_abort(argc > 2 ? atoi(argv[2]) : 50);
    else if (strcmp(mode, "handler") == 0)
        raise_usr1();
    else if (strcmp(mode, "thread") == 0)
        crash_in_thread();
    else if (strcmp(mode, "other") == 0)
        other_caller(1);
    else if (strcmp(mode, "fpe") == 0)
        fpe_caller(1);
    else {
        fprintf(stderr, "usage: %s leaf|abort [N]|handler|thread|other|fpe\n", argv[0]);
        return 64;
    }
    sink++;
    return 1; /* not reached: every mode dies of a signal */
}
