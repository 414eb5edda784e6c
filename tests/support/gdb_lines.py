"""Runs inside gdb (``gdb -batch -x tests/support/gdb_lines.py``): every logical frame, as JSON.

The oracle of ``--lines``: for each frame, inline frames included, gdb's
function name, frame type, pc, and the source file and line gdb shows for it
(``frame.find_sal()``: for a caller frame the line of the call, for an outer
frame of an inlined call the line of the call site).  Printed as one line, a
marker followed by a JSON list of threads.
"""

import json

import gdb

MARKER = "LIVEUNWIND-GDB-LINES "
KINDS = {gdb.INLINE_FRAME: "inline", gdb.TAILCALL_FRAME: "tailcall", gdb.SIGTRAMP_FRAME: "sigtramp"}


def frame_record(frame: gdb.Frame) -> dict:
    sal = frame.find_sal()
    symtab = sal.symtab
    return {
        "pc": frame.pc(),
        "name": frame.name(),
        "kind": KINDS.get(frame.type(), "normal"),
        "file": symtab.filename if symtab is not None else None,
        "fullname": symtab.fullname() if symtab is not None else None,
        "line": sal.line or None,
    }


def thread_frames(thread: gdb.InferiorThread) -> dict:
    thread.switch()
    frames = []
    frame = gdb.newest_frame()
    while frame is not None and len(frames) < 512:
        frames.append(frame_record(frame))
        try:
            frame = frame.older()
        except gdb.error:
            break
    return {"tid": thread.ptid[1], "frames": frames}


def main() -> None:
    gdb.execute("set backtrace past-main on")
    threads = sorted(gdb.selected_inferior().threads(), key=lambda t: t.ptid[1])
    print(MARKER + json.dumps([thread_frames(t) for t in threads]))


main()
