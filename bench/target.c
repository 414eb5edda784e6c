/*
 * target THREADS DEPTH HEARTBEAT_FILE [busy|quiet] — the C benchmark target.
 *
 * THREADS-1 worker threads each recurse DEPTH distinct-enough frames and
 * sleep; with "busy", the first worker works there instead, counting chunks
 * of arithmetic in HEARTBEAT_FILE (a uint64 at offset 8): its work rate,
 * which bench/profile.py compares profiled and not.  One more thread is the
 * heartbeat: it wakes every 100 µs and keeps
 * in HEARTBEAT_FILE (a double, milliseconds) the longest gap it saw between
 * two wake-ups. A tool that stops the process stops the heartbeat too, so the
 * gap measured across one tool run is how long that tool froze the process.
 * The benchmark resets the value to 0 before each run.  With "quiet", the
 * heartbeat thread only sleeps (the same threads, no wake-ups): a hundred
 * copies of the target then leave the machine idle (bench/coldstart.py).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static volatile double *longest_gap_ms;
static volatile unsigned long long *work_done;
static volatile int keep_going = 1;
static int depth;
static int quiet;

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void *heartbeat(void *arg)
{
    (void)arg;
    const struct timespec tick = {0, 100000};
    double last = now_ms();
    while (keep_going && quiet)
        sleep(3600);
    while (keep_going) {
        nanosleep(&tick, NULL);
        double now = now_ms();
        if (now - last > *longest_gap_ms)
            *longest_gap_ms = now - last;
        last = now;
    }
    return NULL;
}

/* One chunk of work: a few microseconds of dependent arithmetic. */
__attribute__((noinline, noclone)) static unsigned long long work_chunk(unsigned long long seed)
{
    for (int i = 0; i < 4096; i++)
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    return seed;
}

__attribute__((noinline, noclone)) static int descend(int level, int busy)
{
    volatile int kept = level; /* lives across the call: every level keeps its frame */
    if (level == 0) {
        unsigned long long seed = 1;
        while (keep_going && busy) {
            seed = work_chunk(seed);
            *work_done += 1;
        }
        while (keep_going)
            sleep(3600);
        return (int)seed;
    }
    int below = descend(level - 1, busy);
    return below + kept;
}

static void *worker(void *arg)
{
    descend(depth, arg != NULL);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 4 && !(argc == 5 && (strcmp(argv[4], "busy") == 0 || strcmp(argv[4], "quiet") == 0))) {
        fprintf(stderr, "usage: %s THREADS DEPTH HEARTBEAT_FILE [busy|quiet]\n", argv[0]);
        return 2;
    }
    int busy = argc == 5 && strcmp(argv[4], "busy") == 0;
    quiet = argc == 5 && strcmp(argv[4], "quiet") == 0;
    int threads = atoi(argv[1]);
    depth = atoi(argv[2]);
    int fd = open(argv[3], O_RDWR | O_CREAT, 0644);
    if (fd < 0 || ftruncate(fd, 16) != 0)
        return 1;
    longest_gap_ms = mmap(NULL, 16, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (longest_gap_ms == MAP_FAILED)
        return 1;
    work_done = (volatile unsigned long long *)((char *)longest_gap_ms + 8);
    pthread_t t;
    pthread_create(&t, NULL, heartbeat, NULL);
    for (int i = 0; i < threads - 2; i++)
        pthread_create(&t, NULL, worker, busy && i == 0 ? (void *)1 : NULL);
    puts("ready");
    fflush(stdout);
    descend(depth, 0);
    return 0;
}
