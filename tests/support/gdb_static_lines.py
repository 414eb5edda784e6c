"""Runs inside gdb on an executable file: the line and inline chain of many addresses.

The addresses come from the file named by ``$lu_addresses`` (one hex number
a line).  For each: gdb's ``find_pc_line`` (file and line) and the chain of
function blocks from the innermost out, each with its name and, for an
inlined function's block, its call site (gdb keeps DW_AT_call_file and
DW_AT_call_line as the symbol's symtab and line).  Printed as one line, a
marker followed by JSON.
"""

import json

import gdb

MARKER = "LIVEUNWIND-GDB-STATIC "


def chain(pc: int) -> list:
    sal = gdb.find_pc_line(pc)
    file = sal.symtab.fullname() if sal.symtab is not None and sal.line else None
    line = sal.line or None
    frames = []
    try:
        block = gdb.block_for_pc(pc)
    except RuntimeError:
        block = None
    while block is not None and not block.is_global and not block.is_static:
        function = block.function
        if function is not None:
            frames.append([function.name, file, line])
            file = function.symtab.fullname() if function.symtab is not None else None
            line = function.line or None
        block = block.superblock
    if not frames and line is not None:
        frames.append([None, file, line])
    return frames


def main() -> None:
    path = gdb.convenience_variable("lu_addresses").string()
    with open(path) as stream:
        addresses = [int(text, 16) for text in stream.read().split()]
    print(MARKER + json.dumps({hex(pc): chain(pc) for pc in addresses}))


main()
