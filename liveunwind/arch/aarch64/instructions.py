"""aarch64 machine code liveunwind reads: calls, PLT entries, an address-returning function.

Call forms recognised (Arm ARM, C6): ``BL imm26``, ``BLR Xn``, and the
pointer-auth variants ``BLRAA``/``BLRAB Xn, Xm`` and ``BLRAAZ``/``BLRABZ Xn``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from liveunwind.arch.base import ACCESSOR_CODE_SIZE, WORD_MASK, CallSite

#: Every instruction is one 4-byte word.
LONGEST_CALL = 4

_BL_MASK, _BL = 0xFC000000, 0x94000000
_BLR_MASK, _BLR = 0xFFFFFC1F, 0xD63F0000
#: BLRAA / BLRAB Xn, Xm (bit 10 selects key B).
_BLRA_MASK, _BLRA = 0xFFFFF800, 0xD73F0800
#: BLRAAZ / BLRABZ Xn (bit 10 selects key B, Rm is 11111).
_BLRAZ_MASK, _BLRAZ = 0xFFFFF81F, 0xD63F081F

_BTI_C = 0xD503245F
_PACIASP = 0xD503233F
_RET = 0xD65F03C0


def call_sites(return_address: int, code: bytes) -> Iterator[CallSite]:
    """The BL/BLR-family instruction in the last four bytes of ``code``, if any."""
    if len(code) < 4 or return_address % 4:
        return
    (word,) = struct.unpack("<I", code[-4:])
    site = return_address - 4
    if word & _BL_MASK == _BL:
        offset = (word & 0x03FFFFFF) << 2
        if offset & (1 << 27):
            offset -= 1 << 28
        yield CallSite(site, (site + offset) & WORD_MASK)
    elif word & _BLR_MASK == _BLR or word & _BLRA_MASK == _BLRA or word & _BLRAZ_MASK == _BLRAZ:
        yield CallSite(site, None)


def address_returned(code: bytes, address: int) -> int | None:
    """The address ``[bti c | paciasp] adrp x0,page; add x0,x0,#lo12; ret`` returns, or None.

    That is all of libunwind's ``_U_dyn_info_list_addr()``.
    """
    if len(code) < ACCESSOR_CODE_SIZE:
        return None
    words = list(struct.unpack_from("<4I", code))
    if words[0] in (_BTI_C, _PACIASP):
        words.pop(0)
        address += 4
    adrp, add, ret = words[:3]
    if (
        adrp & 0x9F00001F == 0x90000000  # adrp x0
        and add & 0xFFC003FF == 0x91000000  # add x0, x0, #imm12
        and ret == _RET
    ):
        immediate = ((adrp >> 3) & 0x1FFFFC) | ((adrp >> 29) & 3)
        if immediate & (1 << 20):
            immediate -= 1 << 21
        page = (address & ~0xFFF) + (immediate << 12)
        return page + ((add >> 10) & 0xFFF)
    return None


def plt_slot(code: bytes, address: int) -> int | None:
    """The GOT slot the PLT entry at ``address`` loads, or None where it is not one.

    binutils' entries: ``[bti c] adrp x16, page; ldr x17, [x16, #lo12]; add
    x16, x16, #lo12; br x17``; the first two instructions give the slot.
    """
    if len(code) < 8:
        return None
    words = list(struct.unpack_from(f"<{len(code) // 4}I", code))
    if words[0] == _BTI_C:
        words.pop(0)
        address += 4
    if len(words) < 2:
        return None
    adrp, load = words[:2]
    if adrp & 0x9F00001F != 0x90000010 or load & 0xFFC003FF != 0xF9400211:
        return None  # not adrp x16 / ldr x17, [x16, #imm]
    page = ((adrp >> 29) & 3) | (((adrp >> 5) & 0x7FFFF) << 2)
    if page & (1 << 20):
        page -= 1 << 21
    base = (address & ~0xFFF) + (page << 12)
    return (base + ((load >> 10) & 0xFFF) * 8) & WORD_MASK
