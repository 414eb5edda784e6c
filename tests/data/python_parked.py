"""Parks threads in known Python call chains; writes what the interpreter says of them.

Usage: python_parked.py TRUTH_FILE [abort]

Nine threads (the main one included) block in chains that cover what a
Python backtrace must get right: a C builtin calling back into Python
(``sorted`` with a key function, ``map``), a generator, methods (qualified
names), deep recursion, code compiled at run time, a function whose name
is not ASCII, and one with local variables of every simple type.  A reporter
thread waits until every other thread has parked and their frames stay the
same, then writes ``sys._current_frames()`` to TRUTH_FILE as JSON — native
thread id → [[qualified name, file, line], ...] innermost first — and each
function frame's ``f_locals`` to TRUTH_FILE.locals (native thread id → one
object per frame, name → ["value", type name, repr] for None, bool, int,
float, str and bytes, ["object", type name, id] for the rest; null for
module code), prints "ready" and ends; with ``abort`` it calls
os.abort() instead of ending, so the kernel writes a core of the parked
threads next to TRUTH_FILE.  Runs on CPython 3.11 and later.
"""

import json
import os
import sys
import threading
import time

PARKED = threading.Event()
parked_count = 0
count_lock = threading.Lock()
WORKERS = 8


def park_sleeping():
    _announce()
    time.sleep(3600)


def park_waiting():
    _announce()
    PARKED.wait()


def _announce():
    global parked_count
    with count_lock:
        parked_count += 1


def key_that_parks(value):
    if value == 2:
        park_sleeping()
    return value


def sort_with_a_callback():
    return sorted([3, 2, 1], key=key_that_parks)


def mapped(value):
    return deeper(value, 3)


def deeper(value, depth):
    if depth:
        return deeper(value, depth - 1)
    park_waiting()
    return value


def map_with_a_callback():
    return list(map(mapped, [1]))


def generator():
    park_sleeping()
    yield 1


def consume_a_generator():
    for value in generator():
        return value


class Holder:
    def method(self):
        return self.helper()

    @staticmethod
    def helper():
        park_waiting()


def recurse(depth):
    if depth:
        return recurse(depth - 1)
    park_sleeping()


def run_compiled_code():
    code = compile("park_sleeping()\n", "<generated>", "exec")
    exec(code, globals())


def ünïcode_函数():
    park_sleeping()


def park_with_locals(count, name, *rest, **options):
    big = 7**90
    negative = -(2**70)
    zero = 0
    ratio = 0.25
    text = "ünïcödé " * 40  # longer than --locals shows
    short = "short"
    data = b"\x00\xffbytes"
    nothing = None
    yes = True
    items = [count, name]
    holder = Holder()

    def reads_a_cell():
        return short

    park_waiting()
    return big, negative, zero, ratio, text, data, nothing, yes, items, holder, reads_a_cell


TARGETS = {
    "sorter": sort_with_a_callback,
    "mapper": map_with_a_callback,
    "generator": consume_a_generator,
    "method": lambda: Holder().method(),
    "recursion": lambda: recurse(40),
    "compiled": run_compiled_code,
    "nonascii": ünïcode_函数,
    "locals": lambda: park_with_locals(3, "name", 4.5, key="value"),
}


def frames_of(frame):
    chain = []
    while frame is not None:
        chain.append([frame.f_code.co_qualname, frame.f_code.co_filename, frame.f_lineno])
        frame = frame.f_back
    return chain


SIMPLE = (type(None), bool, int, float, str, bytes)


def locals_of(frame):
    chain = []
    while frame is not None:
        optimized = frame.f_code.co_flags & 1  # CO_OPTIMIZED: not module or class-body code
        chain.append(
            {
                name: ["value", type(value).__name__, repr(value)]
                if type(value) in SIMPLE
                else ["object", type(value).__name__, id(value)]
                for name, value in frame.f_locals.items()
            }
            if optimized
            else None
        )
        frame = frame.f_back
    return chain


def locals_truth(me):
    native = {thread.ident: thread.native_id for thread in threading.enumerate()}
    return {
        native[ident]: locals_of(frame)
        for ident, frame in sys._current_frames().items()
        if ident != me and ident in native
    }


def python_truth(me):
    native = {thread.ident: thread.native_id for thread in threading.enumerate()}
    return {
        native[ident]: frames_of(frame)
        for ident, frame in sys._current_frames().items()
        if ident != me and ident in native
    }


def report(path, abort):
    while parked_count < WORKERS + 1:
        time.sleep(0.01)
    me = threading.get_ident()
    truth = python_truth(me)
    while True:  # parked means: the same frames twice, 50 ms apart
        time.sleep(0.05)
        again = python_truth(me)
        if again == truth:
            break
        truth = again
    with open(path + ".locals.tmp", "w") as stream:
        json.dump(locals_truth(me), stream)
    os.rename(path + ".locals.tmp", path + ".locals")
    with open(path + ".tmp", "w") as stream:
        json.dump(truth, stream)
    os.rename(path + ".tmp", path)
    print("ready", flush=True)
    if abort:
        os.chdir(os.path.dirname(os.path.abspath(path)))  # the kernel writes the core here
        os.abort()


def main():
    path = sys.argv[1]
    abort = sys.argv[2:] == ["abort"]
    for name, target in TARGETS.items():
        threading.Thread(target=target, name=name, daemon=True).start()
    threading.Thread(target=report, args=(path, abort), name="reporter").start()
    park_sleeping()


if __name__ == "__main__":
    main()
