/*
 * capture — runs liveunwind's sampling signal handler (machine code that
 * liveunwind/targets/selfcapture.py holds) outside Python, so the aarch64
 * version runs too (under qemu-aarch64; there is no aarch64 Python here).
 *
 * The test writes the code bytes into handler.h (HANDLER_CODE, CAS_OFFSET,
 * REGS_OFFSET: where the saved stack pointer, then the pc, sit in the copied
 * ucontext)
 * and builds this file against it.  A thread stores a marker in a local
 * variable and blocks in read(); the main thread arms the slot for it,
 * signals it, waits for the copy, and checks what a sampler relies on: the
 * copy runs from the ucontext to the end of the thread's stack, the saved
 * stack pointer lies in that stack below the marker, the marker is in the
 * copy where it is in the stack, the saved pc is in the C library; then a
 * disarmed slot makes a second signal copy nothing, and cas() behaves as a
 * compare-and-swap.  It prints "ok" or what failed.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "handler.h"

enum { IDLE, ARMED, COPYING, DONE };

struct slot {
    volatile uint32_t state, tid;
    uint64_t buffer, capacity, stack_end, start, length, stack_start;
};

static int pipe_fds[2];
static volatile uintptr_t marker_address;
static volatile uintptr_t stack_low, stack_high;
static volatile pid_t worker_tid;

static void *worker(void *unused)
{
    (void)unused;
    pthread_attr_t attr;
    void *address;
    size_t size;
    pthread_getattr_np(pthread_self(), &attr);
    pthread_attr_getstack(&attr, &address, &size);
    stack_low = (uintptr_t)address;
    stack_high = (uintptr_t)address + size;
    volatile uint64_t marker = 0x6c697665756e7764; /* "dwnuevil" */
    marker_address = (uintptr_t)&marker;
    worker_tid = (pid_t)syscall(SYS_gettid);
    char c;
    for (;;)
        if (read(pipe_fds[0], &c, 1) == 1)
            break;
    return (void *)(uintptr_t)marker;
}

static int wait_for(struct slot *slot, uint32_t state)
{
    const struct timespec ms = {0, 1000000};
    for (int i = 0; i < 2000; i++) {
        if (__atomic_load_n(&slot->state, __ATOMIC_ACQUIRE) == state)
            return 1;
        nanosleep(&ms, NULL);
    }
    return 0;
}

#define FAIL(...)                                                                          \
    do {                                                                                   \
        printf(__VA_ARGS__);                                                               \
        putchar('\n');                                                                     \
        return 1;                                                                          \
    } while (0)

int main(void)
{
    static const unsigned char code[] = HANDLER_CODE;
    const uint64_t placeholder = 0x1122334455667788;
    long page = sysconf(_SC_PAGESIZE);
    struct slot *slot = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    uint64_t capacity = 1 << 22;
    unsigned char *buffer = mmap(NULL, capacity, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    unsigned char *text = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (slot == MAP_FAILED || buffer == MAP_FAILED || text == MAP_FAILED)
        FAIL("mmap");
    memcpy(text, code, sizeof code);
    unsigned char *patch = memmem(text, sizeof code, &placeholder, sizeof placeholder);
    if (patch == NULL)
        FAIL("no placeholder in the code");
    uint64_t slot_address = (uint64_t)(uintptr_t)slot;
    memcpy(patch, &slot_address, sizeof slot_address);
    if (mprotect(text, page, PROT_READ | PROT_EXEC) != 0)
        FAIL("mprotect");
    __builtin___clear_cache((char *)text, (char *)text + sizeof code);

    struct sigaction action = {.sa_flags = SA_SIGINFO | SA_RESTART};
    action.sa_sigaction = (void (*)(int, siginfo_t *, void *))(uintptr_t)text;
    int signo = SIGRTMIN + 5;
    sigaction(signo, &action, NULL);

    if (pipe(pipe_fds) != 0)
        FAIL("pipe");
    pthread_t thread;
    pthread_create(&thread, NULL, worker, NULL);
    while (worker_tid == 0)
        usleep(1000);
    usleep(50000); /* into read() */

    slot->tid = (uint32_t)worker_tid;
    slot->buffer = (uint64_t)(uintptr_t)buffer;
    slot->capacity = capacity;
    slot->stack_start = stack_low;
    slot->stack_end = stack_high;
    __atomic_store_n(&slot->state, ARMED, __ATOMIC_RELEASE);
    syscall(SYS_tgkill, getpid(), worker_tid, signo);
    if (!wait_for(slot, DONE))
        FAIL("no copy: state %u", slot->state);

    if (slot->start < stack_low || slot->start >= marker_address)
        FAIL("copy starts at %#llx, not in the stack below the marker", (unsigned long long)slot->start);
    if (slot->start + slot->length != stack_high)
        FAIL("copy of %#llx bytes does not reach the stack's end", (unsigned long long)slot->length);
    uint64_t sp, pc, marker;
    memcpy(&sp, buffer + REGS_OFFSET, 8);
    memcpy(&pc, buffer + REGS_OFFSET + 8, 8);
    memcpy(&marker, buffer + (marker_address - slot->start), 8);
    if (sp < slot->start || sp >= marker_address)
        FAIL("saved sp %#llx is not between the ucontext and the marker", (unsigned long long)sp);
    if (marker != 0x6c697665756e7764)
        FAIL("marker not copied: %#llx", (unsigned long long)marker);
    Dl_info info;
    if (dladdr((void *)(uintptr_t)pc, &info) == 0 || info.dli_fname == NULL ||
        strstr(info.dli_fname, "libc.so") == NULL)
        FAIL("saved pc %#llx is not in the C library", (unsigned long long)pc);

    /* Disarmed: a signal for the same thread copies nothing. */
    slot->length = 0;
    __atomic_store_n(&slot->state, IDLE, __ATOMIC_RELEASE);
    syscall(SYS_tgkill, getpid(), worker_tid, signo);
    usleep(50000);
    if (slot->state != IDLE || slot->length != 0)
        FAIL("a disarmed slot was used");

    int (*cas)(volatile uint32_t *, int, int) = (int (*)(volatile uint32_t *, int, int))(uintptr_t)(text + CAS_OFFSET);
    volatile uint32_t word = 1;
    if (cas(&word, 1, 0) != 1 || word != 0)
        FAIL("cas did not swap");
    if (cas(&word, 1, 2) != 0 || word != 0)
        FAIL("cas swapped a different value");

    if (write(pipe_fds[1], "x", 1) != 1)
        FAIL("write");
    void *result;
    pthread_join(thread, &result);
    if ((uint64_t)(uintptr_t)result != 0x6c697665756e7764)
        FAIL("the worker's own marker changed");
    printf("ok pc=%#llx\n", (unsigned long long)pc);
    return 0;
}
