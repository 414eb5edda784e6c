/* Frame-pointer functions (x86_64 RBP_FRAME, arm64 FRAME).  The values read
 * from volatile globals before the call stay live across it, so fp_saved
 * must keep them in callee-saved registers: rbx, r12–r15 on x86_64,
 * x19–x28 and d8–d15 on arm64. */
#include "chain.h"

volatile long chain_sink;
volatile long chain_seed = 5;
volatile double chain_scale = 1.5;

NOINLINE long fp_saved(long depth, long seed) {
    long a = chain_seed + depth, b = chain_seed ^ seed, c = chain_seed + 7, d = chain_seed * 3;
    long e = chain_seed - 9, f = chain_seed + seed;
    double x = chain_scale * seed, y = chain_scale + depth, z = chain_scale * 2, w = chain_scale;
    long r = depth > 0 ? fp_saved(depth - 1, seed + 1) : frameless_small(seed);
    chain_sink = r;
    return r + a * b + c * d + e * f + (long)(x * y + z * w);
}

int main(void) {
    long r = fp_saved(3, 11);
    chain_sink = r;
    return 0;
}
