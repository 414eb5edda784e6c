"""The Python benchmark target: 8 threads 20 Python frames deep, and a heartbeat.

Usage: python3 target.py THREADS DEPTH HEARTBEAT_FILE [busy]. The heartbeat
thread keeps in HEARTBEAT_FILE (a double, milliseconds) the longest gap
between two of its wake-ups: how long a tool froze the process.  With
"busy", one of the threads works at the bottom of its stack instead of
sleeping, counting chunks of arithmetic in the file (a uint64 at offset 8):
its work rate, which bench/profile.py compares profiled and not.
"""

import mmap
import struct
import sys
import threading
import time


def descend(level: int, work: mmap.mmap | None = None) -> None:
    if level == 0:
        while work is not None:
            work_chunk()
            struct.pack_into("Q", work, 8, struct.unpack_from("Q", work, 8)[0] + 1)
        while True:
            time.sleep(3600)
    descend(level - 1, work)


def work_chunk() -> int:
    seed = 1
    for _ in range(1000):
        seed = (seed * 1103515245 + 12345) & 0xFFFFFFFF
    return seed


def heartbeat(gap: mmap.mmap) -> None:
    last = time.monotonic()
    while True:
        time.sleep(0.0001)
        now = time.monotonic()
        longest = struct.unpack("d", gap[:8])[0]
        if (now - last) * 1000 > longest:
            gap[:8] = struct.pack("d", (now - last) * 1000)
        last = now


def main() -> None:
    threads, depth, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    busy = sys.argv[4:] == ["busy"]
    with open(path, "wb") as stream:
        stream.write(bytes(16))
    with open(path, "r+b") as stream:
        gap = mmap.mmap(stream.fileno(), 16)
    threading.Thread(target=heartbeat, args=(gap,), daemon=True).start()
    for index in range(threads - 2):
        work = gap if busy and index == 0 else None
        threading.Thread(target=descend, args=(depth, work), daemon=True).start()
    print("ready", flush=True)
    descend(depth)


if __name__ == "__main__":
    main()
