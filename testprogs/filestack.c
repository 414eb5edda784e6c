/*
 * filestack — a thread whose stack lies in a mapping that the kernel can
 * read only in part.
 *
 * The mapping is 2 MiB of a memfd only 1 MiB long: its upper half lies past
 * the end of the file, where a read (process_vm_readv, /proc/PID/mem) fails
 * with EFAULT although /proc/PID/maps shows one mapping. The thread
 * "filestack" runs on the lower half (pthread_attr_setstack) and blocks in
 * nanosleep under filestack_inner <- filestack_outer; a copy of its stack
 * from its stack pointer to the end of the mapping stops half way. The main
 * thread waits in pause().
 */
#include "tp.h"

#include <sys/mman.h>
#include <unistd.h>

#define HALF (1 << 20)

TP_NOINLINE static void filestack_inner(void)
{
    const struct timespec hour = {3600, 0};
    tp_arrive();
    for (;;)
        nanosleep(&hour, NULL);
}

TP_NOINLINE static void *filestack_outer(void *unused)
{
    (void)unused;
    filestack_inner();
    tp_sink++;
    return NULL;
}

int main(void)
{
    tp_allow_tracing();
    int fd = memfd_create("filestack", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, HALF) != 0)
        tp_die("memfd");
    char *base = mmap(NULL, 2 * HALF, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED)
        tp_die("mmap");
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    if (pthread_attr_setstack(&attr, base, HALF) != 0)
        tp_die("pthread_attr_setstack");
    pthread_t thread;
    if (pthread_create(&thread, &attr, filestack_outer, NULL) != 0)
        tp_die("pthread_create");
    pthread_setname_np(thread, "filestack");
    tp_announce(1);
    for (;;)
        pause();
}
