"""x86_64 machine code liveunwind reads: calls, PLT entries, an address-returning function.

Call forms recognised (Intel SDM vol. 2, CALL): ``E8 rel32`` and ``FF /2``
with every ModRM form — register (``FF D0+r``), ``[reg]``, ``[reg+disp8]``,
``[reg+disp32]``, SIB with and without displacement, SIB without base
(``disp32``), and RIP-relative (``FF 15 disp32``).  Prefixes (REX, segment
overrides, ``notrack`` 3E, ``bnd`` F2, ``data16``, ``addr32``) sit before the
opcode and do not change the length of what follows it in 64-bit mode, so
the decoder need not see them: ``41 FF D3`` ends like ``FF D3``, and the
linker's ``67 E8 rel32`` relaxation like ``E8 rel32``.  More than one
decoding can end at the same address: x86_64 instructions have no fixed start.
"""

from __future__ import annotations

import struct

from liveunwind.arch.base import WORD_MASK, CallSite

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator

#: Longest call without prefixes: FF, ModRM, SIB, disp32.
LONGEST_CALL = 7

_ENDBR64 = bytes.fromhex("f30f1efa")
_LEA_RAX_RIP = b"\x48\x8d\x05"
_RET = b"\xc3"
#: ``jmp *disp32(%rip)``, alone or after ``bnd`` (F2): how every PLT entry binutils
#: writes reaches its GOT slot (.plt, .plt.got, .plt.sec, .plt.bnd; the IBT
#: forms start with endbr64).
_JMP_RIP = b"\xff\x25"
_BND = 0xF2


def call_sites(return_address: int, code: bytes) -> Iterator[CallSite]:
    """Call instructions whose last byte is the last byte of ``code``."""
    size = len(code)
    if size >= 5 and code[-5] == 0xE8:
        relative = int.from_bytes(code[-4:], "little", signed=True)
        yield CallSite(return_address - 5, (return_address + relative) & WORD_MASK)
    for length in (2, 3, 4, 6, 7):
        if length > size:
            return
        start = size - length
        if code[start] == 0xFF and _ff2_length(code, start) == length:
            yield CallSite(return_address - length, None)


def _ff2_length(code: bytes, start: int) -> int | None:
    """Length of an ``FF /2`` (near indirect call) at ``start``, from its ModRM and SIB."""
    modrm = code[start + 1]
    if (modrm >> 3) & 7 != 2:
        return None
    mod, rm = modrm >> 6, modrm & 7
    if mod == 3:
        return 2
    length = 2
    if rm == 4:  # a SIB byte follows
        if start + 2 >= len(code):
            return None
        length += 1
        if mod == 0 and code[start + 2] & 7 == 5:  # no base register: disp32
            return length + 4
    elif mod == 0 and rm == 5:  # RIP-relative disp32
        return length + 4
    return length + (0, 1, 4)[mod]


def address_returned(code: bytes, address: int) -> int | None:
    """The address ``[endbr64] lea rax,[rip+disp32]; ret`` at ``address`` returns, or None.

    That is all of libunwind's ``_U_dyn_info_list_addr()``.
    """
    start = len(_ENDBR64) if code.startswith(_ENDBR64) else 0
    insn = code[start : start + 8]
    if insn[:3] == _LEA_RAX_RIP and insn[7:8] == _RET:
        displacement = struct.unpack_from("<i", insn, 3)[0]
        return address + start + 7 + displacement
    return None


def plt_slot(code: bytes, address: int) -> int | None:
    """The GOT slot the PLT entry at ``address`` jumps through, or None where it is not one.

    ``[endbr64] [bnd] jmp *disp32(%rip)``: the lazy .plt entry, .plt.got,
    .plt.sec and .plt.bnd entries all begin so.
    """
    start = len(_ENDBR64) if code.startswith(_ENDBR64) else 0
    if code[start : start + 1] == bytes((_BND,)):
        start += 1
    if code[start : start + 2] != _JMP_RIP or len(code) < start + 6:
        return None
    displacement = struct.unpack_from("<i", code, start + 2)[0]
    return (address + start + 6 + displacement) & WORD_MASK
