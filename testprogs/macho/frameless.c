/* Built with -fomit-frame-pointer.  x86_64: frameless_small has a frame
 * small enough for STACK_IMMD and pushes six callee-saved registers (rbp
 * among them) whose order the permutation field encodes; big_frame's frame
 * is too large for the 8-bit size field, so its size is read from its own
 * `subq` (STACK_IND).  arm64 cannot describe a frameless non-leaf function
 * compactly (FRAMELESS keeps the return address in LR), so these two become
 * DWARF there, and leaf_stop is the FRAMELESS case. */
#include "chain.h"

extern volatile long chain_seed;

NOINLINE long frameless_small(long seed) {
    long a = chain_seed * 5, b = chain_seed ^ 0x77, c = chain_seed + 13, d = chain_seed - 1;
    long e = chain_seed * 9, f = chain_seed + seed;
    volatile long local[2] = {seed, a};
    long r = big_frame(seed + local[1]);
    return r + a * b + c * d + e * f + local[0];
}

NOINLINE long big_frame(long seed) {
    volatile char buffer[4000];
    long a = chain_seed * 7, b = chain_seed ^ 0x99, c = chain_seed - 3;
    buffer[seed & 1023] = (char)seed;
    long r = dwarf_cfa(seed + buffer[seed & 1023]);
    return r + a * b + c + buffer[(seed + 1) & 1023];
}

NOINLINE long leaf_stop(long seed) {
    chain_sink = seed;
    return seed + 1;
}
