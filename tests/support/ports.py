"""Local TCP ports for the GDB stubs tests start (gdbserver, ``qemu-aarch64 -g``)."""

from __future__ import annotations

import socket
import time
from pathlib import Path


def free_port() -> int:
    """A port nothing listens on now (the kernel's pick for a socket bound to port 0)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_listening(port: int, timeout: float = 10.0) -> None:
    """Waits until something listens on ``port`` — without connecting (QEMU serves one client)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            try:
                rows = [line.split() for line in Path(table).read_text().splitlines()[1:]]
            except OSError:
                continue
            # local_address is HEXIP:HEXPORT; state 0A is LISTEN.
            if any(int(row[1].rsplit(":", 1)[1], 16) == port and row[3] == "0A" for row in rows):
                return
        time.sleep(0.01)
    raise AssertionError(f"nothing listens on port {port}")
