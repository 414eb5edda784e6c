"""Parks asyncio tasks in two event loops; writes what the interpreter says of each task.

Usage: python_tasks.py TRUTH_FILE [abort]

The main thread's loop runs a named task suspended three coroutines deep
in an ``Event.wait``, a task named by default asleep, one awaiting another
task, and the main coroutine gathering them; a second thread's loop runs a
task that blocks its thread in ``time.sleep`` (so it is that thread's
running task) and one asleep.  A reporter thread waits until every task is
parked, then writes each task — its name, the native id of the thread
running it (or null), and its coroutines through ``cr_await``, innermost
first, as [qualified name, file, line] — to TRUTH_FILE as JSON, prints
"ready" and ends; with ``abort`` it calls os.abort() instead, so the kernel
writes a core of the parked tasks next to TRUTH_FILE.  CPython 3.14+.
"""

import asyncio
import json
import os
import sys
import threading
import time

PARKED = threading.Barrier(3)  # the two loops and the reporter


async def leaf_wait(event):
    await event.wait()


async def middle(event):
    await leaf_wait(event)


async def worker(event):
    await middle(event)


async def sleeper():
    await asyncio.sleep(3600)


async def waits_for_task(other):
    await other


async def main_loop():
    event = asyncio.Event()
    first = asyncio.create_task(worker(event), name="worker-1")
    asleep = asyncio.create_task(sleeper())
    waiter = asyncio.create_task(waits_for_task(asleep), name="waiter")
    await asyncio.sleep(0.05)
    asyncio.get_running_loop().call_soon(PARKED.wait)
    await asyncio.gather(first, waiter)


async def blocks_its_thread():
    await asyncio.sleep(0.05)
    PARKED.wait()
    time.sleep(3600)


async def second_loop():
    asleep = asyncio.create_task(sleeper(), name="second-asleep")
    await asyncio.create_task(blocks_its_thread(), name="blocker")
    await asleep


def chain_of(task):
    frames = []
    coroutine = task.get_coro()
    while coroutine is not None and getattr(coroutine, "cr_frame", None) is not None:
        code = coroutine.cr_code
        frames.append([code.co_qualname, code.co_filename, coroutine.cr_frame.f_lineno])
        coroutine = coroutine.cr_await
    return frames[::-1]


def report(path, abort, loops):
    PARKED.wait()
    time.sleep(0.1)  # the main loop goes back to waiting after the barrier's callback
    truth = []
    for loop, thread in loops:
        running = asyncio.current_task(loop)
        for task in asyncio.all_tasks(loop):
            truth.append(
                {
                    "name": task.get_name(),
                    "thread": thread.native_id if task is running else None,
                    "frames": chain_of(task),
                }
            )
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
    second = asyncio.new_event_loop()
    thread = threading.Thread(
        target=second.run_until_complete, args=(second_loop(),), name="second", daemon=True
    )
    first = asyncio.new_event_loop()
    loops = [(first, threading.main_thread()), (second, thread)]
    threading.Thread(target=report, args=(path, abort, loops), name="reporter").start()
    thread.start()
    first.run_until_complete(main_loop())


if __name__ == "__main__":
    main()
