"""The auxiliary vector (``AT_*`` entries): of a core's NT_AUXV note, /proc/PID/auxv, a stub's.

Apart from the core notes' reader (targets/cores/notes.py) because every live
backtrace reads ``AT_ENTRY`` (where a walk ends) and nothing else of a core's
notes: importing those (their classes and tables) cost a cold ``pid`` 0.4 ms.
"""

from __future__ import annotations

import struct

AT_NULL = 0
AT_PHDR = 3
AT_PHNUM = 5
AT_BASE = 7
AT_ENTRY = 9
AT_SYSINFO_EHDR = 33
AT_EXECFN = 31


def parse_auxv(desc: bytes) -> dict[int, int]:
    """The auxiliary vector as {AT_*: value}, up to AT_NULL."""
    auxv: dict[int, int] = {}
    for position in range(0, len(desc) - 15, 16):
        key, value = struct.unpack_from("<QQ", desc, position)
        if key == AT_NULL:
            break
        auxv.setdefault(key, value)
    return auxv
