/*
 * libsoak — the library jit-soak dlopens and dlcloses over and over, built
 * twice (libsoak-a.so, libsoak-b.so) so that the module map moves between
 * two files.
 */
static volatile int soak_sink;

__attribute__((noinline)) void soak_work(void)
{
    for (int i = 0; i < 10000; i++)
        soak_sink++;
}
