"""The address an accessor function returns, decoded from its machine code.

libunwind's list of dynamic unwind info is a hidden symbol in Debian's
``libunwind.so.8`` (which has no ``.symtab``); what is exported is
``_U_dyn_info_list_addr()``, a function that only returns the list's address.
Its code is two or three instructions, so the address is read off them rather
than by calling anything in the target:

* x86_64: ``[endbr64] lea rax,[rip+disp32]; ret``
* aarch64: ``[bti c | paciasp] adrp x0,page; add x0,x0,#lo12; ret``
"""

from __future__ import annotations

import struct

#: ELF ``e_machine`` values of the architectures decoded here.
EM_X86_64 = 62
EM_AARCH64 = 183
#: Bytes of code read from the start of the function: enough for either sequence.
ACCESSOR_CODE_SIZE = 16

_ENDBR64 = bytes.fromhex("f30f1efa")
_LEA_RAX_RIP = b"\x48\x8d\x05"
_RET = b"\xc3"
_AARCH64_BTI_C = 0xD503245F
_AARCH64_PACIASP = 0xD503233F
_AARCH64_RET = 0xD65F03C0


def returned_address(code: bytes, address: int, machine: int) -> int | None:
    """The link-time address the function at ``address`` returns, or None if not recognised.

    ``code`` is the function's first :data:`ACCESSOR_CODE_SIZE` bytes and
    ``machine`` the image's ``e_machine``.
    """
    if machine == EM_X86_64:
        start = len(_ENDBR64) if code.startswith(_ENDBR64) else 0
        insn = code[start : start + 8]
        if insn[:3] == _LEA_RAX_RIP and insn[7:8] == _RET:
            displacement = struct.unpack_from("<i", insn, 3)[0]
            return address + start + 7 + displacement
    elif machine == EM_AARCH64 and len(code) >= ACCESSOR_CODE_SIZE:
        words = list(struct.unpack_from("<4I", code))
        if words[0] in (_AARCH64_BTI_C, _AARCH64_PACIASP):
            words.pop(0)
            address += 4
        adrp, add, ret = words[:3]
        if (
            adrp & 0x9F00001F == 0x90000000  # adrp x0
            and add & 0xFFC003FF == 0x91000000  # add x0, x0, #imm12
            and ret == _AARCH64_RET
        ):
            immediate = ((adrp >> 3) & 0x1FFFFC) | ((adrp >> 29) & 3)
            if immediate & (1 << 20):
                immediate -= 1 << 21
            page = (address & ~0xFFF) + (immediate << 12)
            return page + ((add >> 10) & 0xFFF)
    return None
