/*
 * jit-soak — a process whose threads, libraries and JIT code never hold still,
 * for the soak (tests/system/test_soak.py, make soak).
 *
 *   spawner ×2  start one short-lived thread after another, each named
 *               "worker" (a thread-per-request server): it spins a little,
 *               then exits — joined, or detached;
 *   loader      dlopens libsoak-a.so and libsoak-b.so (next to the program)
 *               in turn, calls soak_work() in each, keeps it 2 ms and
 *               dlcloses it: the module map moves every few milliseconds;
 *   jitter      every JIT_EVERY_MS a fresh executable mapping holding
 *               jit_outer and jit_inner (jitcode.h), described through the
 *               GDB JIT interface (jitgdb.h) and appended to
 *               /tmp/perf-PID.map; the oldest of JIT_SLOTS is unregistered
 *               and unmapped;
 *   runner      calls the newest JIT code in a loop: jit_outer -> jit_inner
 *               -> runner_spin, so samples land inside JIT frames;
 *   main        prints "ready" once all of them run, then pause()s.
 *
 * Every thread but main is always busy: the test does not wait for them
 * to settle.  A tracer that holds the process stops all of this; the test
 * checks that the work goes on (the counters below, read by nobody, keep
 * the compiler from eliding it).
 */
#include "jitgdb.h"

#include <dlfcn.h>
#include <limits.h>
#include <sys/mman.h>

#define JIT_SLOTS 8
#define JIT_EVERY_MS 20
#define SLOT_SIZE (2 * 4096) /* the code, then the object describing it */

struct slot {
    unsigned char *page;
    struct jit_code_entry *entry;
};

static pthread_mutex_t jit_lock = PTHREAD_MUTEX_INITIALIZER;
static struct slot slots[JIT_SLOTS];
static unsigned char *newest;
static char folder[PATH_MAX - 32]; /* room left for a library's name */

static void sleep_ms(long ms)
{
    struct timespec pause_for = {0, ms * 1000000L};
    nanosleep(&pause_for, NULL);
}

TP_NOINLINE static void worker_spin(void)
{
    for (int i = 0; i < 20000; i++)
        tp_sink++;
}

static void *worker(void *unused)
{
    (void)unused;
    worker_spin();
    return NULL;
}

static void *spawner(void *unused)
{
    (void)unused;
    pthread_attr_t detached;
    pthread_attr_init(&detached);
    pthread_attr_setdetachstate(&detached, PTHREAD_CREATE_DETACHED);
    tp_arrive();
    for (unsigned long n = 0;; n++) {
        pthread_t thread;
        int joined = n % 2 == 0;
        if (pthread_create(&thread, joined ? NULL : &detached, worker, NULL) != 0) {
            sleep_ms(1);
            continue;
        }
        pthread_setname_np(thread, "worker");
        if (joined)
            pthread_join(thread, NULL);
        else
            sleep_ms(1);
    }
    return NULL;
}

static void *loader(void *unused)
{
    (void)unused;
    char paths[2][PATH_MAX];
    snprintf(paths[0], sizeof paths[0], "%s/libsoak-a.so", folder);
    snprintf(paths[1], sizeof paths[1], "%s/libsoak-b.so", folder);
    tp_arrive();
    for (unsigned long n = 0;; n++) {
        void *library = dlopen(paths[n % 2], RTLD_NOW | RTLD_LOCAL);
        if (!library)
            tp_die(dlerror());
        void (*work)(void) = (void (*)(void))dlsym(library, "soak_work");
        if (!work)
            tp_die("dlsym soak_work");
        work();
        sleep_ms(2); /* loaded for a while: a sample sees one library or the other */
        dlclose(library);
    }
    return NULL;
}

static void unregister_object(struct jit_code_entry *entry)
{
    if (entry->prev_entry)
        entry->prev_entry->next_entry = entry->next_entry;
    else
        __jit_debug_descriptor.first_entry = entry->next_entry;
    if (entry->next_entry)
        entry->next_entry->prev_entry = entry->prev_entry;
    __jit_debug_descriptor.relevant_entry = entry;
    __jit_debug_descriptor.action_flag = JIT_UNREGISTER_FN;
    __jit_debug_register_code();
    free(entry);
}

/* Makes slot `n` hold new code: the old one unregistered and unmapped first. */
static void renew(struct slot *slot)
{
    if (slot->page) {
        unregister_object(slot->entry);
        munmap(slot->page, SLOT_SIZE);
    }
    slot->page = jit_alloc(SLOT_SIZE);
    unsigned char *code = jit_emit_code(slot->page);
    size_t code_size = JIT_INNER_OFFSET + sizeof jit_inner_code;
    slot->entry = register_object(build_object(slot->page + 4096, code, code_size), OBJECT_SIZE);
    char path[64];
    snprintf(path, sizeof path, "/tmp/perf-%d.map", (int)getpid());
    FILE *perf_map = fopen(path, "a");
    if (!perf_map)
        tp_die("perf map");
    fprintf(perf_map, "%lx %zx jit_outer\n", (unsigned long)(code + JIT_OUTER_OFFSET),
            sizeof jit_outer_code);
    fprintf(perf_map, "%lx %zx jit_inner\n", (unsigned long)(code + JIT_INNER_OFFSET),
            sizeof jit_inner_code);
    fclose(perf_map);
    newest = code;
}

static void *jitter(void *unused)
{
    (void)unused;
    tp_arrive();
    for (unsigned long n = 0;; n++) {
        sleep_ms(JIT_EVERY_MS);
        pthread_mutex_lock(&jit_lock);
        renew(&slots[n % JIT_SLOTS]);
        pthread_mutex_unlock(&jit_lock);
    }
    return NULL;
}

TP_NOINLINE static void runner_spin(void)
{
    for (int i = 0; i < 2000; i++)
        tp_sink++;
}

static void *runner(void *unused)
{
    (void)unused;
    tp_arrive();
    for (;;) {
        pthread_mutex_lock(&jit_lock); /* the jitter unmaps no code while it runs */
        jit_outer_fn outer = (jit_outer_fn)(void *)(newest + JIT_OUTER_OFFSET);
        outer((jit_inner_fn)(void *)(newest + JIT_INNER_OFFSET), runner_spin);
        pthread_mutex_unlock(&jit_lock);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    (void)argc;
    tp_allow_tracing();
    char self[PATH_MAX];
    ssize_t length = readlink("/proc/self/exe", self, sizeof self - 1);
    if (length <= 0)
        tp_die("readlink /proc/self/exe");
    self[length] = 0;
    int folder_length = (int)(strrchr(self, '/') - self);
    if (folder_length >= (int)sizeof folder)
        tp_die("folder name too long");
    memcpy(folder, self, (size_t)folder_length);
    (void)argv;
    renew(&slots[JIT_SLOTS - 1]);
    tp_spawn("spawner", spawner, NULL);
    tp_spawn("spawner", spawner, NULL);
    tp_spawn("loader", loader, NULL);
    tp_spawn("jitter", jitter, NULL);
    tp_spawn("runner", runner, NULL);
    tp_announce(5);
    for (;;)
        pause();
}
