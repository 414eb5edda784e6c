/*
 * latecomer LIBRARY COUNTER_FILE — the target of tests/system/test_oncpu.py
 * (liveunwind profile --on-cpu): what starts after sampling has.
 *
 *   early      burns a core from the start in early_spin, counting its chunks
 *              in COUNTER_FILE (a uint64 at offset 0, shared memory) — its own
 *              measure of its speed;
 *   latecomer  started on SIGUSR1 (after the profiler began): dlopens LIBRARY
 *              (libburnlate.so, not mapped before) and burns in its
 *              late_library_spin, forever;
 *   latecomer  (main) waits for the signal, then in pthread_join.
 * "ready" is printed once "early" runs; "late" once the new thread burns.
 */
#include "../tp.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

static volatile uint64_t *chunks;
static volatile sig_atomic_t go;
static const char *library;

TP_NOINLINE static uint64_t early_spin(uint64_t seed)
{
    for (int i = 0; i < 4096; i++)
        seed = seed * 6364136223846793005u + 1442695040888963407u;
    return seed;
}

TP_NOINLINE static void *early_main(void *arg)
{
    (void)arg;
    uint64_t seed = 1;
    tp_arrive();
    for (;;) {
        seed = early_spin(seed);
        *chunks += 1;
        tp_sink = (int)seed;
    }
    return NULL;
}

TP_NOINLINE static void *late_main(void *arg)
{
    (void)arg;
    void *handle = dlopen(library, RTLD_NOW);
    if (handle == NULL) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        exit(1);
    }
    void (*spin)(void) = (void (*)(void))dlsym(handle, "late_library_spin");
    if (spin == NULL)
        tp_die("dlsym");
    printf("late\n");
    fflush(stdout);
    spin();
    return NULL;
}

static void on_usr1(int signum)
{
    (void)signum;
    go = 1;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s LIBRARY COUNTER_FILE\n", argv[0]);
        return 2;
    }
    library = argv[1];
    tp_allow_tracing();
    signal(SIGUSR1, on_usr1);
    int fd = open(argv[2], O_RDWR | O_CREAT, 0644);
    if (fd < 0 || ftruncate(fd, sizeof(uint64_t)) != 0)
        tp_die(argv[2]);
    chunks = mmap(NULL, sizeof(uint64_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (chunks == MAP_FAILED)
        tp_die("mmap");
    tp_spawn("early", early_main, NULL);
    tp_announce(1);
    const struct timespec tick = {0, 5 * 1000000};
    while (!go)
        nanosleep(&tick, NULL);
    pthread_t late = tp_spawn("latecomer", late_main, NULL);
    pthread_join(late, NULL);
    return 0;
}
