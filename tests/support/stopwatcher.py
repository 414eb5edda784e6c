"""A watcher of a process's threads: were any of them stopped or traced while it ran?

The on-CPU mode (``profile --on-cpu``) must never stop its target: the
tests read every thread's ``/proc`` status (TracerPid and State) every few
milliseconds while it samples (tests/system/test_oncpu.py, and in the VMs
tests/integration/oncpu.py).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path


class StopWatcher(threading.Thread):
    """Reads every thread's TracerPid and State every few ms; remembers any stop or tracer.

    A context manager (started on entry, stopped on exit), or :meth:`start` and :meth:`stop`.
    """

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.seen: list[str] = []
        self.reads = 0
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.is_set():
            try:
                tasks = os.listdir(f"/proc/{self.pid}/task")
            except FileNotFoundError:
                return
            for tid in tasks:
                try:
                    status = Path(f"/proc/{self.pid}/task/{tid}/status").read_text()
                except OSError:
                    continue
                fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
                state, tracer = fields.get("State", "?"), fields.get("TracerPid", "0").strip()
                if tracer != "0" or state[:1] in ("t", "T"):
                    self.seen.append(f"{tid}: State {state.strip()}, TracerPid {tracer}")
                self.reads += 1
            time.sleep(0.003)

    def stop(self) -> None:
        self._done.set()
        self.join()

    def __enter__(self) -> StopWatcher:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()
