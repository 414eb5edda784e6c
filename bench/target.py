"""The Python benchmark target: 8 threads 20 Python frames deep, and a heartbeat.

Usage: python3 target.py THREADS DEPTH HEARTBEAT_FILE. The heartbeat thread
keeps in HEARTBEAT_FILE (a double, milliseconds) the longest gap between two
of its wake-ups: how long a tool froze the process.
"""

import mmap
import struct
import sys
import threading
import time


def descend(level: int) -> None:
    if level == 0:
        while True:
            time.sleep(3600)
    descend(level - 1)


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
    with open(path, "wb") as stream:
        stream.write(bytes(8))
    with open(path, "r+b") as stream:
        gap = mmap.mmap(stream.fileno(), 8)
    threading.Thread(target=heartbeat, args=(gap,), daemon=True).start()
    for _ in range(threads - 2):
        threading.Thread(target=descend, args=(depth,), daemon=True).start()
    print("ready", flush=True)
    descend(depth)


if __name__ == "__main__":
    main()
