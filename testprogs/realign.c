/*
 * realign — a chain of functions that realign their stack frames.
 *
 * Stack shape: main -> with_alloca -> with_drap -> with_aligned_local ->
 * block_here -> nanosleep. with_aligned_local has a 64-byte aligned local, so
 * its prologue does "and $-64, %rsp": the frame's size is unknown until run
 * time and only the frame pointer (or, with CFI, an rbp-based CFA) leads back.
 * with_drap has an aligned local and a variable-sized alloca, which makes gcc
 * use a dynamic realignment argument pointer (DRAP, r10 on x86_64): its CFA is
 * described by a DWARF expression (DW_CFA_def_cfa_expression) that reads the
 * saved DRAP from memory, not by a register plus offset. with_alloca moves the
 * stack pointer by a run-time amount. The program is built with
 * -mstackrealign, which makes every function realign its incoming stack (on
 * x86_64), as 32-bit code must when called from code that keeps only 4-byte
 * alignment. Built -O2 (realign-O2) and -O0 (realign-O0).
 */
#include "tp.h"

#include <alloca.h>
#include <string.h>

TP_NOINLINE static void block_here(void)
{
    const struct timespec hour = {3600, 0};
    puts("ready");
    fflush(stdout);
    for (;;)
        nanosleep(&hour, NULL);
}

TP_NOINLINE static void with_aligned_local(void)
{
    volatile char buf[96] __attribute__((aligned(64)));
    buf[0] = 1;
    block_here();
    tp_sink += buf[0];
}

TP_NOINLINE static void with_drap(size_t n)
{
    volatile char aligned[64] __attribute__((aligned(64)));
    char *dynamic = alloca(n);
    memset(dynamic, 0, n);
    aligned[0] = dynamic[n - 1];
    with_aligned_local();
    tp_sink += aligned[0] + dynamic[0];
}

TP_NOINLINE static void with_alloca(size_t n)
{
    volatile char *dynamic = alloca(n);
    dynamic[0] = 2;
    with_drap(n * 2);
    tp_sink += dynamic[0];
}

int main(int argc, char **argv)
{
    (void)argv;
    tp_allow_tracing();
    with_alloca(100 + (size_t)argc); /* size unknown at compile time */
    return 0;
}
