"""GDB stubs for the gdb-remote tests: gdbserver, and scripted ones that misbehave on purpose."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import threading
from collections.abc import Callable

import pytest

from tests.support.ports import free_port, wait_listening


def tool(name: str) -> str:
    """The path of a program the test needs; skips the test, naming it, where it is missing."""
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed")
    return path


class GdbServer:
    """``gdbserver --attach :PORT PID`` (or ``--multi :PORT``) for a running program."""

    def __init__(self, pid: int | None) -> None:
        self.port = free_port()
        where = f"127.0.0.1:{self.port}"
        argv = [tool("gdbserver"), "--multi", where] if pid is None else [
            tool("gdbserver"), "--attach", where, str(pid)
        ]  # fmt: skip
        self.process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        wait_listening(self.port)

    def __enter__(self) -> GdbServer:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        assert self.process.stderr is not None
        self.process.stderr.close()


class ScriptedStub:
    """A TCP server that answers one connection with ``behave(socket)``."""

    def __init__(self, behave: Callable[[socket.socket], None]) -> None:
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._server.getsockname()[1])
        self._behave = behave
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        try:
            connection, _ = self._server.accept()
        except OSError:
            return
        with connection, contextlib.suppress(OSError):
            self._behave(connection)

    def __enter__(self) -> ScriptedStub:
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.close()
        self._thread.join(timeout=15)


def silent(connection: socket.socket) -> None:
    """Reads and never answers."""
    connection.settimeout(12)
    while connection.recv(4096):
        pass


def hang_up(connection: socket.socket) -> None:
    """Reads the first request, then closes the connection."""
    connection.recv(4096)


def bad_checksum(connection: socket.socket) -> None:
    """Answers the first request with a packet whose checksum is wrong."""
    connection.recv(4096)
    connection.sendall(b"+$PacketSize=1000#00")
    connection.settimeout(5)
    connection.recv(4096)
