/*
 * jitcode.h — the machine code the JIT test programs generate, and the ways
 * they describe it.
 *
 * Every program copies the same two x86_64 functions into an anonymous
 * executable mapping (no file, so no file's CFI covers them) and calls
 *
 *     main -> jit_outer(jit_inner, blocker) -> jit_inner(blocker) -> blocker
 *
 * where blocker (ordinary C) prints the chain and "ready", then sleeps.
 *
 * jit_outer moves rsp by odd amounts (push, sub 27, sub 5), spills rbp to an
 * odd sp-relative slot and loads rbp with junk before calling: a frame-pointer
 * walk through it fails, only the registered description can unwind it.
 * jit_inner is a classic rbp frame that also saves r12 (an fp-relative spill).
 *
 * Run with the argument "scramble", a program also starts a thread that
 * undoes and overwrites its registrations the moment the process runs again
 * after being stopped by a tracer (see jit_scramble_after_stop), then prints
 * "scrambled": what a tracer reads of the registrations after letting the
 * process go is then wrong, what it copied while the process was stopped right.
 * The frame layouts below are the ground truth the tests check against:
 *
 * jit_outer                           CFA - rsp   saved
 *    0  53              push rbx         8 -> 16  rbx at CFA-16
 *    1  48 83 ec 1b     sub rsp,27      16 -> 43
 *    5  48 89 6c 24 03  mov [rsp+3],rbp            rbp at CFA-40
 *    a  48 83 ec 05     sub rsp,5       43 -> 48
 *    e  48 89 f8        mov rax,rdi
 *   11  48 89 f7        mov rdi,rsi
 *   14  48 bd ...       movabs rbp,0xdeadbeef
 *   1e  ff d0           call rax                   (returns to +0x20)
 *   20  48 8b 6c 24 08  mov rbp,[rsp+8]
 *   25  48 83 c4 20     add rsp,32      48 -> 16
 *   29  5b              pop rbx         16 -> 8
 *   2a  c3              ret
 *
 * jit_inner                           CFA is
 *    0  55              push rbp        rsp+8 -> rsp+16, rbp at CFA-16
 *    1  48 89 e5        mov rbp,rsp     -> rbp+16
 *    4  41 54           push r12        r12 at CFA-24
 *    6  48 83 ec 18     sub rsp,24
 *    a  49 89 fc        mov r12,rdi
 *    d  41 ff d4        call r12                   (returns to +0x10)
 *   10  48 83 c4 18     add rsp,24
 *   14  41 5c           pop r12
 *   16  5d              pop rbp         -> rsp+8 after it
 *   17  c3              ret
 */
#ifndef JITCODE_H
#define JITCODE_H

#include "../tp.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <unistd.h>

#if !defined(__x86_64__)
#error "the JIT test programs generate x86_64 code"
#endif

static const unsigned char jit_outer_code[] = {
    0x53,                                                       /* push rbx */
    0x48, 0x83, 0xec, 0x1b,                                     /* sub rsp,27 */
    0x48, 0x89, 0x6c, 0x24, 0x03,                               /* mov [rsp+3],rbp */
    0x48, 0x83, 0xec, 0x05,                                     /* sub rsp,5 */
    0x48, 0x89, 0xf8,                                           /* mov rax,rdi */
    0x48, 0x89, 0xf7,                                           /* mov rdi,rsi */
    0x48, 0xbd, 0xef, 0xbe, 0xad, 0xde, 0x00, 0x00, 0x00, 0x00, /* movabs rbp,junk */
    0xff, 0xd0,                                                 /* call rax */
    0x48, 0x8b, 0x6c, 0x24, 0x08,                               /* mov rbp,[rsp+8] */
    0x48, 0x83, 0xc4, 0x20,                                     /* add rsp,32 */
    0x5b,                                                       /* pop rbx */
    0xc3,                                                       /* ret */
};
#define JIT_OUTER_RETURN 0x20

static const unsigned char jit_inner_code[] = {
    0x55,                   /* push rbp */
    0x48, 0x89, 0xe5,       /* mov rbp,rsp */
    0x41, 0x54,             /* push r12 */
    0x48, 0x83, 0xec, 0x18, /* sub rsp,24 */
    0x49, 0x89, 0xfc,       /* mov r12,rdi */
    0x41, 0xff, 0xd4,       /* call r12 */
    0x48, 0x83, 0xc4, 0x18, /* add rsp,24 */
    0x41, 0x5c,             /* pop r12 */
    0x5d,                   /* pop rbp */
    0xc3,                   /* ret */
};
#define JIT_INNER_RETURN 0x10

/* Where the code goes inside the executable page. */
#define JIT_OUTER_OFFSET 0x0
#define JIT_INNER_OFFSET 0x40

/* DWARF CFA programs equivalent to the layouts above (data alignment -8). */
static const unsigned char jit_outer_cfa[] = {
    0x41, 0x0e, 0x10, 0x83, 0x02, /* @1: cfa=rsp+16, rbx at cfa-16 */
    0x44, 0x0e, 0x2b,             /* @5: cfa=rsp+43 */
    0x45, 0x86, 0x05,             /* @a: rbp at cfa-40 */
    0x44, 0x0e, 0x30,             /* @e: cfa=rsp+48 */
    0x5b, 0x0e, 0x10,             /* @29: cfa=rsp+16 */
    0x41, 0x0e, 0x08,             /* @2a: cfa=rsp+8 */
};
static const unsigned char jit_inner_cfa[] = {
    0x41, 0x0e, 0x10, 0x86, 0x02, /* @1: cfa=rsp+16, rbp at cfa-16 */
    0x43, 0x0d, 0x06,             /* @4: cfa=rbp+16 */
    0x42, 0x8c, 0x03,             /* @6: r12 at cfa-24 */
    0x51, 0x0c, 0x07, 0x08,       /* @17: cfa=rsp+8 */
};

typedef void (*jit_callback)(void);
typedef void (*jit_inner_fn)(jit_callback);
typedef void (*jit_outer_fn)(jit_inner_fn, jit_callback);

/* An anonymous read-write-execute mapping for code (and, in some programs,
   the unwind data next to it). */
static inline unsigned char *jit_alloc(size_t size)
{
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    if (p == MAP_FAILED)
        tp_die("mmap");
    return p;
}

static inline unsigned char *jit_emit_code(unsigned char *base)
{
    memcpy(base + JIT_OUTER_OFFSET, jit_outer_code, sizeof jit_outer_code);
    memcpy(base + JIT_INNER_OFFSET, jit_inner_code, sizeof jit_inner_code);
    __builtin___clear_cache((char *)base, (char *)base + 0x100);
    return base;
}

static inline void put32(unsigned char *p, uint32_t v) { memcpy(p, &v, 4); }

/* Writes an .eh_frame at `out` (whose address, as seen by pcrel pointers, is
   `out` itself): one CIE (zR, pcrel sdata4 FDE pointers, ra = r16, cfa=rsp+8)
   and an FDE for each function, then a zero terminator.  Returns the FDE
   offsets through fde_offsets[2] and the total size. */
static inline size_t jit_emit_eh_frame(unsigned char *out, const unsigned char *code,
                                       size_t fde_offsets[2])
{
    static const unsigned char cie[] = {
        0x14, 0, 0, 0,       /* length 20 */
        0, 0, 0, 0,          /* CIE id */
        1,                   /* version */
        'z', 'R', 0,         /* augmentation */
        1,                   /* code alignment */
        0x78,                /* data alignment -8 */
        16,                  /* return address register */
        1, 0x1b,             /* augmentation data: FDE encoding pcrel|sdata4 */
        0x0c, 7, 8,          /* def_cfa rsp+8 */
        0x90, 1,             /* r16 at cfa-8 */
        0, 0,                /* padding (DW_CFA_nop) */
    };
    const struct {
        const unsigned char *program;
        size_t program_size;
        size_t code_offset, code_size;
    } fdes[2] = {
        {jit_outer_cfa, sizeof jit_outer_cfa, JIT_OUTER_OFFSET, sizeof jit_outer_code},
        {jit_inner_cfa, sizeof jit_inner_cfa, JIT_INNER_OFFSET, sizeof jit_inner_code},
    };
    size_t pos = sizeof cie;
    memcpy(out, cie, sizeof cie);
    for (int i = 0; i < 2; i++) {
        size_t start = pos;
        size_t body = 4 + 4 + 4 + 1 + fdes[i].program_size; /* id, begin, range, auglen */
        size_t length = (body + 3) & ~(size_t)3;
        memset(out + pos, 0, 4 + length);
        put32(out + pos, (uint32_t)length);
        put32(out + pos + 4, (uint32_t)(pos + 4)); /* back to the CIE at offset 0 */
        intptr_t begin = (intptr_t)(code + fdes[i].code_offset) - (intptr_t)(out + pos + 8);
        put32(out + pos + 8, (uint32_t)(int32_t)begin);
        put32(out + pos + 12, (uint32_t)fdes[i].code_size);
        out[pos + 16] = 0; /* no augmentation data */
        memcpy(out + pos + 17, fdes[i].program, fdes[i].program_size);
        fde_offsets[i] = start;
        pos += 4 + length;
    }
    put32(out + pos, 0);
    return pos + 4;
}

/* Appends the JIT functions to /tmp/perf-PID.map, as perf expects of JITs. */
static inline void jit_write_perf_map(const unsigned char *code)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/perf-%d.map", (int)getpid());
    FILE *f = fopen(path, "w");
    if (!f)
        tp_die("perf map");
    fprintf(f, "%lx %zx jit_outer\n", (unsigned long)(code + JIT_OUTER_OFFSET),
            sizeof jit_outer_code);
    fprintf(f, "%lx %zx jit_inner\n", (unsigned long)(code + JIT_INNER_OFFSET),
            sizeof jit_inner_code);
    fclose(f);
}

/* Threads that arrive before "ready": the main one, and the scrambler if any. */
static int jit_threads = 1;
static void (*jit_scramble)(void);

/* The scrambler thread.  epoll_wait on an empty set never returns by itself,
   and (unlike most blocking calls, which the kernel restarts) fails with
   EINTR when a ptrace stop of its thread ends: so it returns exactly when a
   tracer that stopped the process lets it run again. */
static void *jit_scrambler(void *unused)
{
    (void)unused;
    struct epoll_event event;
    int set = epoll_create1(0);
    if (set < 0)
        tp_die("epoll_create1");
    tp_arrive();
    if (epoll_wait(set, &event, 1, -1) >= 0 || errno != EINTR)
        tp_die("epoll_wait");
    jit_scramble();
    printf("scrambled\n");
    fflush(stdout);
    return NULL;
}

/* With the argument "scramble", starts the scrambler thread, which calls
   `scramble` once the first tracer to stop the process resumes it. */
static inline void jit_scramble_after_stop(int argc, char **argv, void (*scramble)(void))
{
    if (argc < 2 || strcmp(argv[1], "scramble") != 0)
        return;
    jit_scramble = scramble;
    jit_threads = 2;
    tp_spawn("scrambler", jit_scrambler, NULL);
}

/* The blocking end of every chain: report, then sleep until killed.  The
   chain is the same in every program: the names are the registered ones. */
TP_NOINLINE static void blocker(void)
{
    const struct timespec hour = {3600, 0};
    printf("chain: blocker jit_inner jit_outer main\n");
    printf("returns: jit_outer=%#x jit_inner=%#x\n", JIT_OUTER_RETURN, JIT_INNER_RETURN);
    tp_arrive();
    tp_announce(jit_threads);
    for (;;)
        nanosleep(&hour, NULL);
}

static inline void jit_run(unsigned char *code)
{
    jit_outer_fn outer = (jit_outer_fn)(void *)(code + JIT_OUTER_OFFSET);
    outer((jit_inner_fn)(void *)(code + JIT_INNER_OFFSET), blocker);
    tp_sink += 1;
}

#endif
