/*
 * anonexec — a thread parked in code that no file describes, as a JIT's is.
 *
 * Copies a few instructions (a system-call loop: pause() on x86_64,
 * ppoll() on aarch64) into an anonymous executable mapping and calls
 * them from main.  A perf map can name that code; the program writes none
 * itself but prints "code ADDRESS SIZE" before "ready", so a test can.
 * Built static (anonexec-static, `make -C testprogs static`) so it runs in
 * an empty chroot.
 */
#include "tp.h"

#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__x86_64__)
/* loop: mov eax, 34 (pause); syscall; jmp loop */
static const unsigned char code[] = {0xb8, 0x22, 0x00, 0x00, 0x00, 0x0f, 0x05, 0xeb, 0xf7};
#elif defined(__aarch64__)
/* loop: mov x0..x3, #0; mov x8, #73 (ppoll); svc #0; b loop */
static const unsigned int code[] = {0xd2800000, 0xd2800001, 0xd2800002, 0xd2800003,
                                    0xd2800928, 0xd4000001, 0x17fffffa};
#else
#error "anonexec knows x86_64 and aarch64 only"
#endif

int main(void)
{
    unsigned char *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC,
                               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED)
        tp_die("mmap");
    memcpy(page, code, sizeof code);
    __builtin___clear_cache((char *)page, (char *)page + sizeof code);
    tp_allow_tracing();
    printf("code %lx %zx\nready\n", (unsigned long)page, sizeof code);
    fflush(stdout);
    ((void (*)(void))page)();
    return 0;
}
