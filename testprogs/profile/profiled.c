/*
 * profiled COUNTER_FILE — the target of tests/system/test_profile.py (liveunwind profile).
 *
 * Threads, by name:
 *   burner    burns a core: burner_main calls spin_hot, a chunk of arithmetic,
 *             forever, and counts the chunks in COUNTER_FILE (a uint64 at
 *             offset 0, shared memory) — its own measure of its speed;
 *   third     about a third of a core: third_busy spins until its thread CPU
 *             clock advanced 10 ms, then third_main sleeps 20 ms, forever;
 *   sleeper   asleep in sleep_forever (nanosleep);
 *   profiled  (main) waits in pthread_join.
 * "ready" is printed once every thread has started.  The test reads each
 * thread's CPU time from /proc/PID/task/TID/schedstat as the truth.
 */
#include "../tp.h"

#include <fcntl.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

static volatile uint64_t *chunks;

/* One chunk of work: a few microseconds of dependent arithmetic. */
TP_NOINLINE static uint64_t spin_hot(uint64_t seed)
{
    for (int i = 0; i < 4096; i++)
        seed = seed * 6364136223846793005u + 1442695040888963407u;
    return seed;
}

TP_NOINLINE static void *burner_main(void *arg)
{
    (void)arg;
    uint64_t seed = 1;
    tp_arrive();
    for (;;) {
        seed = spin_hot(seed);
        *chunks += 1;
        tp_sink = (int)seed;
    }
    return NULL;
}

static double thread_cpu_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* Spins until this thread has used `ms` milliseconds of CPU. */
TP_NOINLINE static uint64_t third_busy(double ms)
{
    uint64_t seed = 7;
    double until = thread_cpu_ms() + ms;
    while (thread_cpu_ms() < until)
        seed = spin_hot(seed);
    return seed;
}

TP_NOINLINE static void *third_main(void *arg)
{
    (void)arg;
    const struct timespec rest = {0, 20 * 1000000};
    tp_arrive();
    for (;;) {
        tp_sink = (int)third_busy(10.0);
        nanosleep(&rest, NULL);
    }
    return NULL;
}

TP_NOINLINE static void sleep_forever(void)
{
    const struct timespec hour = {3600, 0};
    tp_arrive();
    for (;;)
        nanosleep(&hour, NULL);
}

TP_NOINLINE static void *sleeper_main(void *arg)
{
    (void)arg;
    sleep_forever();
    tp_sink++;
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s COUNTER_FILE\n", argv[0]);
        return 2;
    }
    tp_allow_tracing();
    int fd = open(argv[1], O_RDWR | O_CREAT, 0644);
    if (fd < 0 || ftruncate(fd, sizeof(uint64_t)) != 0)
        tp_die(argv[1]);
    chunks = mmap(NULL, sizeof(uint64_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (chunks == MAP_FAILED)
        tp_die("mmap");
    pthread_t burner = tp_spawn("burner", burner_main, NULL);
    tp_spawn("third", third_main, NULL);
    tp_spawn("sleeper", sleeper_main, NULL);
    tp_announce(3);
    pthread_join(burner, NULL);
    return 0;
}
