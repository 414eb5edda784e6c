"""aarch64's local-capture signal handler: 208 bytes of machine code and its assembly.

It keeps the contract of :mod:`liveunwind.arch.selfcapture` (the slot, its
placeholder, ``cas``); ``tests/system/test_local.py`` assembles the source again and
compares.  The handler is called as ``(int signal, siginfo_t *info,
ucontext_t *uc)``; the kernel's ``rt_sigframe`` holds a 128-byte siginfo
before the ucontext, which is where ``read_signal_frame`` starts.
"""

from __future__ import annotations

from liveunwind.arch.selfcapture import SelfCapture

SOURCE = """
    .text
handler:                            // (int signal, siginfo_t *info, ucontext_t *uc)
    mov     x10, x2
    mov     x8, #178                // gettid
    svc     #0
    ldr     x9, slot
    ldr     w11, [x9, #4]
    cmp     w0, w11
    b.ne    done                    // not the thread asked for
arm:
    ldaxr   w11, [x9]
    cmp     w11, #1
    b.ne    busy                    // not armed (given up on, or done)
    mov     w12, #2
    stxr    w13, w12, [x9]
    cbnz    w13, arm
    mov     x1, x10
    mov     x3, #1024               // the ucontext alone, when it is not on the stack
    ldr     x4, [x9, #48]
    cmp     x10, x4
    b.lo    copy
    ldr     x4, [x9, #24]
    cmp     x10, x4
    b.hs    copy
    sub     x3, x4, x10             // up to the end of the stack
    ldr     x4, [x9, #16]
    cmp     x3, x4
    csel    x3, x3, x4, ls          // at most the buffer
    and     x3, x3, #~7
copy:
    str     x1, [x9, #32]
    str     x3, [x9, #40]
    ldr     x4, [x9, #8]
    lsr     x5, x3, #3
word:
    cbz     x5, copied
    ldr     x6, [x1], #8
    str     x6, [x4], #8
    sub     x5, x5, #1
    b       word
copied:
    mov     w11, #3
    stlr    w11, [x9]
done:
    ret
busy:
    clrex
    ret
cas:                                // int cas(int *word, int expected, int desired)
    ldaxr   w3, [x0]
    cmp     w3, w1
    b.ne    differs
    stlxr   w4, w2, [x0]
    cbnz    w4, cas
    mov     w0, w3
    ret
differs:
    clrex
    mov     w0, w3
    ret
    .balign 8
slot:
    .quad   0x1122334455667788
"""
CODE = bytes.fromhex(
    "ea0302aa481680d2010000d4e90500582b0540b91f000b6be10300542bfd5f887f050071a10300544c"
    "0080522c7d0d886dffff35e1030aaa038080d2241940f95f0104eb23010054240d40f95f0104ebc200"
    "005483000acb240940f97f0004eb6390849a63f07d92211100f9231500f9240540f965fc43d3a50000"
    "b4268440f8868400f8a50400d1fcffff176b0080522bfd9f88c0035fd65f3f03d5c0035fd603fc5f88"
    "7f00016ba100005402fc048884ffff35e003032ac0035fd65f3f03d5e003032ac0035fd68877665544"
    "332211"
)

SELF_CAPTURE = SelfCapture(
    source=SOURCE, code=CODE, cas_offset=0xA0, ucontext_offset=128, tgkill=131
)
