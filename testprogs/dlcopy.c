/*
 * dlcopy — opens the library named by argv[1] (a copy of libdlcopy.so the
 * test made) with dlopen, and parks a thread inside it.
 *
 * Threads: "inlib" blocks in nanosleep under dlc_block <- dlc_middle <-
 * dlc_enter (the library) <- in_library; "plain" blocks in nanosleep under
 * plain_inner <- plain_outer, code of this program alone, whose backtrace is
 * whole whatever happens to the library; the main thread waits in pause().
 * On SIGUSR1 the main thread starts "later", which enters the library at
 * another function, dlc_later, and blocks under dlc_block too: code the
 * library's first thread never ran, whose unwind entry and symbol a reader
 * that had opened the library before looks up only then.
 * The tests change the copy under the running program (truncate it after
 * its code, rewrite it in place, replace it by a FIFO or a symlink) once
 * every thread is blocked: a truncation takes away the pages past the new
 * end, even those the loader wrote (the GOT), which a thread that ran on in
 * the library would need.
 */
#include "tp.h"

#include <dlfcn.h>
#include <signal.h>
#include <unistd.h>

static void (*dlc_enter)(void);
static void (*dlc_later)(void);
static volatile sig_atomic_t later_asked;

static void ask_later(int signal_number)
{
    (void)signal_number;
    later_asked = 1;
}

TP_NOINLINE static void *later(void *unused)
{
    (void)unused;
    dlc_later();
    tp_sink++;
    return NULL;
}

TP_NOINLINE static void *in_library(void *unused)
{
    (void)unused;
    tp_arrive();
    dlc_enter();
    tp_sink++;
    return NULL;
}

TP_NOINLINE static void plain_inner(void)
{
    const struct timespec hour = {3600, 0};
    tp_arrive();
    for (;;)
        nanosleep(&hour, NULL);
}

TP_NOINLINE static void *plain_outer(void *unused)
{
    (void)unused;
    plain_inner();
    tp_sink++;
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: dlcopy LIBRARY\n");
        return 2;
    }
    tp_allow_tracing();
    void *library = dlopen(argv[1], RTLD_NOW);
    if (library == NULL) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 1;
    }
    dlc_enter = (void (*)(void))dlsym(library, "dlc_enter");
    dlc_later = (void (*)(void))dlsym(library, "dlc_later");
    if (dlc_enter == NULL || dlc_later == NULL)
        tp_die("dlsym");
    /* SIGUSR1 for the main thread alone: the others start with it blocked. */
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    struct sigaction action = {.sa_handler = ask_later};
    sigaction(SIGUSR1, &action, NULL);
    pthread_sigmask(SIG_BLOCK, &usr1, NULL);
    tp_spawn("inlib", in_library, NULL);
    tp_spawn("plain", plain_outer, NULL);
    pthread_sigmask(SIG_UNBLOCK, &usr1, NULL);
    tp_announce(2);
    for (;;) {
        pause();
        if (later_asked) {
            later_asked = 0;
            tp_spawn("later", later, NULL);
        }
    }
}
