// C++ with a destructor to run during unwinding: the compiler gives the
// function a personality routine and an LSDA.  There is no C++ runtime here
// (-nostdlib), so personality.c provides stub symbols; nothing ever throws.
#include "chain.h"

namespace {
struct Guard {
    long value;
    explicit Guard(long v) : value(v) {}
    ~Guard() { chain_sink = value; }
};
}  // namespace

extern "C" NOINLINE long cxx_cleanup(long seed) {
    Guard guard(seed);
    long r = leaf_stop(seed * 2);
    return r + guard.value;
}
