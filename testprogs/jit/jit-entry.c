/*
 * jit-entry — a thread stopped on the first instruction of JIT code, before
 * its prologue, like a V8 function interrupted on entry.
 *
 * The code lies in anonymous memory with no unwind information (only a
 * perf map names it, as V8's --perf-basic-prof does); its first
 * instruction jumps to itself, so the "spinner" thread is always at the
 * function's first byte: the return address is at [rsp] and rbp still
 * holds the caller's frame.  The program is built with frame pointers, so
 * a frame-pointer walk from frame 0 takes call_jit's frame for jit_entry's
 * and drops call_jit.  The true chain:
 *
 *     jit_entry <- call_jit <- spin <- start_thread <- clone3
 *
 * The program prints "entry ADDRESS" (jit_entry's first byte), then "ready".
 */
#include "jitcode.h"

static void (*jit_entry)(void);
static atomic_int entered;

TP_NOINLINE static void call_jit(void)
{
    atomic_store(&entered, 1);
    jit_entry();
    tp_sink = 1;
}

static void *spin(void *unused)
{
    (void)unused;
    call_jit();
    return NULL;
}

int main(void)
{
    tp_allow_tracing();
    unsigned char *code = jit_alloc(4096);
    code[0] = 0xeb; /* jmp . */
    code[1] = 0xfe;
    __builtin___clear_cache((char *)code, (char *)code + 2);
    jit_entry = (void (*)(void))code;
    char path[64];
    snprintf(path, sizeof path, "/tmp/perf-%d.map", (int)getpid());
    FILE *map = fopen(path, "w");
    if (!map)
        tp_die("perf map");
    fprintf(map, "%lx 2 jit_entry\n", (unsigned long)code);
    fclose(map);
    tp_spawn("spinner", spin, NULL);
    const struct timespec ms = {0, 1000000};
    while (!atomic_load(&entered))
        nanosleep(&ms, NULL);
    printf("entry %lx\n", (unsigned long)code);
    puts("ready");
    fflush(stdout);
    for (;;)
        pause();
}
