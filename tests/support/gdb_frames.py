"""Runs inside gdb (``gdb -batch -x tests/support/gdb_frames.py``): every thread's frames, as JSON.

The oracle in ``oracles.py`` needs gdb's view of each stack in a form that does
not depend on how gdb happens to format ``bt`` today, so this script walks the
frames with gdb's Python API and prints one line: a marker followed by a JSON
list of threads. The frame limit comes from the convenience variable
``$lu_max_frames`` (0 or unset: no limit).
"""

import json

import gdb

MARKER = "LIVEUNWIND-GDB-FRAMES "

# gdb's frame types under stable names: tests look for "sigtramp" and drop
# "inline" frames (an inlined call shares the pc of the frame that contains it).
KINDS = {
    gdb.NORMAL_FRAME: "normal",
    gdb.DUMMY_FRAME: "dummy",
    gdb.INLINE_FRAME: "inline",
    gdb.TAILCALL_FRAME: "tailcall",
    gdb.SIGTRAMP_FRAME: "sigtramp",
    gdb.ARCH_FRAME: "arch",
    gdb.SENTINEL_FRAME: "sentinel",
}


def thread_frames(thread: gdb.InferiorThread, limit: int) -> dict:
    """Return the frames of one thread, newest first, as JSON-ready dicts.

    An unwinding error ends the list where gdb gave up, like ``bt`` does, and is
    reported in "error" so a truncated oracle stack is visible as such.
    """
    thread.switch()
    frames = []
    error = None
    frame = gdb.newest_frame()
    while frame is not None and (limit == 0 or len(frames) < limit):
        frames.append({"pc": frame.pc(), "name": frame.name(), "kind": KINDS.get(frame.type())})
        try:
            frame = frame.older()
        except gdb.error as exc:
            error = str(exc)
            break
    return {"tid": thread.ptid[1], "name": thread.name, "frames": frames, "error": error}


def main() -> None:
    """Print all threads of the selected inferior; stacks past main are wanted too."""
    gdb.execute("set backtrace past-main on")
    gdb.execute("set backtrace past-entry on")
    limit_value = gdb.convenience_variable("lu_max_frames")
    limit = 0 if limit_value is None else int(limit_value)
    threads = sorted(gdb.selected_inferior().threads(), key=lambda t: t.ptid[1])
    print(MARKER + json.dumps([thread_frames(t, limit) for t in threads]))


main()
