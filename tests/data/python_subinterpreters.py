"""Parks a thread inside a subinterpreter; writes what each interpreter says of its threads.

Usage: python_subinterpreters.py TRUTH_FILE

A thread of the main interpreter creates a subinterpreter and runs code in
it (``concurrent.interpreters`` on 3.14+, ``_interpreters`` on 3.13,
``_xxsubinterpreters`` before); that code writes the frames of its own
chain of functions to TRUTH_FILE.sub and parks on the line it wrote them
from (before 3.14 ``sys._current_frames()`` inside a subinterpreter shows
other interpreters' threads, so it cannot be the truth there).  The main
interpreter then writes its threads' frames to TRUTH_FILE as native thread
id → [[qualified name, file, line], ...] innermost first, each file with
the interpreter's id (``{"id": N, "threads": ...}``), and prints "ready".  Runs on CPython 3.11+.
"""

import json
import os
import sys
import threading
import time

SUBINTERPRETER_CODE = """
import json, os, sys, threading, time

def frames_of(frame):
    chain = []
    while frame is not None:
        chain.append([frame.f_code.co_qualname, frame.f_code.co_filename, frame.f_lineno])
        frame = frame.f_back
    return chain

def identity():
    try:
        from concurrent import interpreters
    except ImportError:
        pass
    else:
        return interpreters.get_current().id
    try:
        import _interpreters
    except ImportError:
        import _xxsubinterpreters
        return int(_xxsubinterpreters.get_current())
    return _interpreters.get_current()[0]

def record(frame):
    truth = {threading.get_native_id(): frames_of(frame)}
    with open(PATH + ".tmp", "w") as stream:
        json.dump({"id": identity(), "threads": truth}, stream)
    os.rename(PATH + ".tmp", PATH)

class Worker:
    def step(self):
        return deepest_in_subinterpreter()

def deepest_in_subinterpreter():
    record(sys._getframe()); time.sleep(3600)  # one line: the line it is recorded at is its line

Worker().step()
"""


def frames_of(frame):
    chain = []
    while frame is not None:
        chain.append([frame.f_code.co_qualname, frame.f_code.co_filename, frame.f_lineno])
        frame = frame.f_back
    return chain


def run_in_subinterpreter(code):
    try:
        from concurrent import interpreters  # 3.14+
    except ImportError:
        pass
    else:
        interpreters.create().exec(code)
        return
    try:
        import _interpreters  # 3.13
    except ImportError:
        import _xxsubinterpreters  # 3.11, 3.12

        _xxsubinterpreters.run_string(_xxsubinterpreters.create(), code)
    else:
        _interpreters.exec(_interpreters.create(), code)


def enter_the_subinterpreter(path):
    run_in_subinterpreter(f"PATH = {path!r}\n" + SUBINTERPRETER_CODE)


def main():
    path = sys.argv[1]
    threading.Thread(target=enter_the_subinterpreter, args=(path + ".sub",), daemon=True).start()
    while not os.path.exists(path + ".sub"):
        time.sleep(0.01)
    me = threading.get_ident()
    native = {thread.ident: thread.native_id for thread in threading.enumerate()}
    truth = {}
    while True:
        time.sleep(0.05)
        again = {
            native[ident]: frames_of(frame)
            for ident, frame in sys._current_frames().items()
            if ident != me and ident in native
        }
        if again == truth:
            break
        truth = again
    with open(path + ".tmp", "w") as stream:
        json.dump({"id": 0, "threads": truth}, stream)
    os.rename(path + ".tmp", path)
    print("ready", flush=True)
    time.sleep(3600)


if __name__ == "__main__":
    main()
