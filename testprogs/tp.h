/*
 * tp.h — the small amount of plumbing every test program shares.
 *
 * The end-to-end tests need to know when a program's stacks are in their final
 * shape. Every thread calls tp_arrive() just before its blocking call; the main
 * thread calls tp_announce(n), which waits until n arrivals and then prints the
 * line "ready". tp_arrive() is async-signal-safe (a C11 atomic), so signal
 * handlers can arrive too. The test fixture additionally waits until the
 * kernel reports every thread as sleeping, which closes the small window between
 * tp_arrive() and the blocking system call itself.
 */
#ifndef TP_H
#define TP_H

#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <time.h>

#define TP_NOINLINE __attribute__((noinline, noclone))

/* Written after calls so the compiler can neither turn calls into tail jumps
   nor fold functions together: every frame stays on the stack. */
static volatile int tp_sink;

static atomic_int tp_arrived;

static inline void tp_arrive(void) { atomic_fetch_add(&tp_arrived, 1); }

/* Let any process trace us even under Yama ptrace_scope=1: the tracer (gdb,
   eu-stack, liveunwind) is the test's sibling, not our parent. Ignored where
   Yama is absent. */
static inline void tp_allow_tracing(void) { prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0); }

static inline void tp_announce(int n)
{
    const struct timespec ms = {0, 1000000};
    while (atomic_load(&tp_arrived) < n)
        nanosleep(&ms, NULL);
    puts("ready");
    fflush(stdout);
}

static inline void tp_die(const char *what)
{
    perror(what);
    exit(1);
}

/* Start a named thread; names are how the tests find threads. */
static inline pthread_t tp_spawn(const char *name, void *(*fn)(void *), void *arg)
{
    pthread_t t;
    if (pthread_create(&t, NULL, fn, arg) != 0)
        tp_die("pthread_create");
    pthread_setname_np(t, name);
    return t;
}

#endif
