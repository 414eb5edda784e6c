/*
 * threads — one process, many threads, each parked in a different kind of
 * blocking system call.
 *
 * Stack shapes: every thread's frame 0 is inside a libc syscall wrapper
 * (clock_nanosleep, read, futex via pthread_cond_wait, poll, select,
 * epoll_wait, accept, futex via pthread_join), called from a named function in
 * this file, called from the thread's start routine, called from libc's
 * start_thread and clone3. The syscall wrappers differ in how they save
 * registers around the syscall and in whether they go through the
 * cancellation machinery, so an unwinder has to get out of each of them. One
 * more thread ("deep") sits at the bottom of a chain of 30 distinct
 * non-inlinable functions: chain_01 calls chain_02 ... calls chain_30, which
 * blocks in nanosleep. With "spin" as the first argument a "spinner" thread is
 * added that never sleeps: it is stopped wherever it happens to be in a busy
 * loop, so frame 0 is not at a call.
 *
 * Built as threads-O0, threads-O0-fp, threads-O2, threads-O2-fp and
 * threads-O2-nofp, so the same shapes appear with and without frame pointers
 * and with optimised prologues.
 *
 * Thread names (pthread_setname_np): sleeper, reader, condwait, poller,
 * selecter, epoller, acceptor, deep, [spinner]; the main thread keeps the
 * program name and blocks in pthread_join.
 */
#include "tp.h"

#include <poll.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static int pipe_fds[2]; /* nobody ever writes: readers block forever */

TP_NOINLINE static void block_in_nanosleep(void)
{
    const struct timespec hour = {3600, 0};
    tp_arrive();
    for (;;)
        nanosleep(&hour, NULL);
}

TP_NOINLINE static void block_in_read(void)
{
    char c;
    tp_arrive();
    for (;;)
        if (read(pipe_fds[0], &c, 1) < 0)
            tp_die("read");
}

TP_NOINLINE static void block_in_cond_wait(void)
{
    static pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
    static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
    pthread_mutex_lock(&mutex);
    tp_arrive();
    for (;;)
        pthread_cond_wait(&cond, &mutex);
}

TP_NOINLINE static void block_in_poll(void)
{
    struct pollfd p = {.fd = pipe_fds[0], .events = POLLIN};
    tp_arrive();
    for (;;)
        poll(&p, 1, -1);
}

TP_NOINLINE static void block_in_select(void)
{
    tp_arrive();
    for (;;) {
        fd_set set;
        FD_ZERO(&set);
        FD_SET(pipe_fds[0], &set);
        select(pipe_fds[0] + 1, &set, NULL, NULL, NULL);
    }
}

TP_NOINLINE static void block_in_epoll_wait(void)
{
    struct epoll_event ev = {.events = EPOLLIN};
    int ep = epoll_create1(0);
    if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, pipe_fds[0], &ev) < 0)
        tp_die("epoll");
    tp_arrive();
    for (;;)
        epoll_wait(ep, &ev, 1, -1);
}

TP_NOINLINE static void block_in_accept(void)
{
    /* Binding only the family autobinds a unique abstract address: no files. */
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    if (s < 0 || bind(s, (struct sockaddr *)&addr, sizeof(sa_family_t)) < 0 || listen(s, 1) < 0)
        tp_die("socket");
    tp_arrive();
    for (;;)
        accept(s, NULL, NULL);
}

/* The 30-deep chain: each link calls the next, then updates tp_sink so the
   call is not a tail call; the constant 1##n (101..130) differs per link so
   identical-code folding cannot merge links. Defined bottom-up so each callee
   is declared. */
#define LINK(n, next)                                                                      \
    TP_NOINLINE static void chain_##n(void)                                                \
    {                                                                                      \
        next();                                                                            \
        tp_sink += 1##n;                                                                   \
    }
LINK(30, block_in_nanosleep)
LINK(29, chain_30)
LINK(28, chain_29)
LINK(27, chain_28)
LINK(26, chain_27)
LINK(25, chain_26)
LINK(24, chain_25)
LINK(23, chain_24)
LINK(22, chain_23)
LINK(21, chain_22)
LINK(20, chain_21)
LINK(19, chain_20)
LINK(18, chain_19)
LINK(17, chain_18)
LINK(16, chain_17)
LINK(15, chain_16)
LINK(14, chain_15)
LINK(13, chain_14)
LINK(12, chain_13)
LINK(11, chain_12)
LINK(10, chain_11)
LINK(09, chain_10)
LINK(08, chain_09)
LINK(07, chain_08)
LINK(06, chain_07)
LINK(05, chain_06)
LINK(04, chain_05)
LINK(03, chain_04)
LINK(02, chain_03)
LINK(01, chain_02)

/* Busy loop in a function that has a frame of its own (it calls spin_step
   first), so a stopped spinner's frame 0 is mid-function, not at a call. */
TP_NOINLINE static void spin_step(void) { tp_sink = 0; }

TP_NOINLINE static void spin_forever(void)
{
    spin_step();
    tp_arrive();
    for (;;)
        tp_sink++;
}

static void *start(void *fn)
{
    ((void (*)(void))fn)();
    return NULL;
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        void (*fn)(void);
    } roles[] = {
        {"sleeper", block_in_nanosleep}, {"reader", block_in_read},
        {"condwait", block_in_cond_wait}, {"poller", block_in_poll},
        {"selecter", block_in_select},   {"epoller", block_in_epoll_wait},
        {"acceptor", block_in_accept},   {"deep", chain_01},
    };
    const int nroles = sizeof(roles) / sizeof(roles[0]);
    int spin = argc > 1 && strcmp(argv[1], "spin") == 0;
    pthread_t first = 0;

    tp_allow_tracing();
    if (pipe(pipe_fds) < 0)
        tp_die("pipe");
    for (int i = 0; i < nroles; i++) {
        pthread_t t = tp_spawn(roles[i].name, start, (void *)roles[i].fn);
        if (i == 0)
            first = t;
    }
    if (spin)
        tp_spawn("spinner", start, (void *)spin_forever);
    tp_announce(nroles + spin);
    pthread_join(first, NULL); /* main blocks in a futex too */
    return 0;
}
