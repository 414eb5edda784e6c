/*
 * target THREADS DEPTH HEARTBEAT_FILE — the C benchmark target.
 *
 * THREADS-1 worker threads each recurse DEPTH distinct-enough frames and
 * sleep; one more thread is the heartbeat: it wakes every 100 µs and keeps
 * in HEARTBEAT_FILE (a double, milliseconds) the longest gap it saw between
 * two wake-ups. A tool that stops the process stops the heartbeat too, so the
 * gap measured across one tool run is how long that tool froze the process.
 * The benchmark resets the value to 0 before each run.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static volatile double *longest_gap_ms;
static volatile int keep_going = 1;
static int depth;

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
    while (keep_going) {
        nanosleep(&tick, NULL);
        double now = now_ms();
        if (now - last > *longest_gap_ms)
            *longest_gap_ms = now - last;
        last = now;
    }
    return NULL;
}

__attribute__((noinline, noclone)) static int descend(int level)
{
    volatile int kept = level; /* lives across the call: every level keeps its frame */
    if (level == 0) {
        while (keep_going)
            sleep(3600);
        return 0;
    }
    int below = descend(level - 1);
    return below + kept;
}

static void *worker(void *arg)
{
    (void)arg;
    descend(depth);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s THREADS DEPTH HEARTBEAT_FILE\n", argv[0]);
        return 2;
    }
    int threads = atoi(argv[1]);
    depth = atoi(argv[2]);
    int fd = open(argv[3], O_RDWR | O_CREAT, 0644);
    if (fd < 0 || ftruncate(fd, sizeof(double)) != 0)
        return 1;
    longest_gap_ms = mmap(NULL, sizeof(double), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    pthread_t t;
    pthread_create(&t, NULL, heartbeat, NULL);
    for (int i = 0; i < threads - 2; i++)
        pthread_create(&t, NULL, worker, NULL);
    puts("ready");
    fflush(stdout);
    descend(depth);
    return 0;
}
