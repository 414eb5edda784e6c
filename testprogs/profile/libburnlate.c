/* The library testprogs/profile/latecomer.c dlopens after profiling began. */
volatile unsigned long late_sink;

__attribute__((noinline)) static unsigned long late_chunk(unsigned long seed)
{
    for (int i = 0; i < 4096; i++)
        seed = seed * 2862933555777941757ul + 3037000493ul;
    return seed;
}

void late_library_spin(void)
{
    unsigned long seed = 3;
    for (;;) {
        seed = late_chunk(seed);
        late_sink = seed;
    }
}
