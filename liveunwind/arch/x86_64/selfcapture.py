"""x86_64's local-capture signal handler: 104 bytes of machine code and its assembly.

It keeps the contract of :mod:`liveunwind.arch.selfcapture` (the slot, its
placeholder, ``cas``); ``tests/system/test_local.py`` assembles the source again and
compares.  The handler is called as ``(int signal, siginfo_t *info,
ucontext_t *uc)``: the ucontext is where the kernel's ``rt_sigframe`` starts
after the return address the kernel pushed, so it is the frame
``read_signal_frame`` reads.
"""

from __future__ import annotations

from liveunwind.arch.selfcapture import SelfCapture

SOURCE = """
    .intel_syntax noprefix
    .text
handler:                            # (int signal, siginfo_t *info, ucontext_t *uc)
    mov     r9, rdx
    mov     eax, 186                # gettid
    syscall
    movabs  r8, 0x1122334455667788  # the slot
    cmp     eax, dword ptr [r8 + 4]
    jne     done                    # not the thread asked for
    mov     eax, 1
    mov     ecx, 2
    lock cmpxchg dword ptr [r8], ecx
    jne     done                    # not armed (given up on, or done)
    mov     rsi, r9
    mov     ecx, 1024               # the ucontext alone, when it is not on the stack
    cmp     r9, qword ptr [r8 + 48]
    jb      copy
    mov     rax, qword ptr [r8 + 24]
    cmp     r9, rax
    jae     copy
    sub     rax, r9                 # up to the end of the stack
    mov     rcx, rax
    cmp     rcx, qword ptr [r8 + 16]
    jbe     copy
    mov     rcx, qword ptr [r8 + 16] # at most the buffer
copy:
    mov     qword ptr [r8 + 32], rsi
    mov     qword ptr [r8 + 40], rcx
    mov     rdi, qword ptr [r8 + 8]
    rep movsb
    mov     dword ptr [r8], 3
done:
    ret
cas:                                # int cas(int *word, int expected, int desired)
    mov     eax, esi
    lock cmpxchg dword ptr [rdi], edx
    ret
"""
CODE = bytes.fromhex(
    "4989d1b8ba0000000f0549b88877665544332211413b4004754db801000000b902000000f0410fb108"
    "753c4c89ceb9000400004d3b48307219498b40184939c173104c29c84889c1493b48107604498b4810"
    "4989702049894828498b7808f3a441c70003000000c389f0f00fb117c3"
)

SELF_CAPTURE = SelfCapture(source=SOURCE, code=CODE, cas_offset=0x68, ucontext_offset=0, tgkill=234)
