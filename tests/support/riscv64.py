"""riscv64 targets under QEMU user mode, held at one stopping point for several debuggers.

tests/system/test_riscv64.py compares liveunwind with gdb-multiarch on riscv64
programs that run under ``qemu-riscv64 -g PORT`` (QEMU 7.2, Debian 12).  Two
limits of that stub shape this module:

- QEMU 7.2 serves one debugger connection for the life of the process, and
  reports every signal the guest receives to it — the signals a program
  sends itself too (sighandler.c signals two of its threads) — stopping the
  guest each time.
- It ignores ^C while the guest runs: only a signal stops it.

So a :class:`Held` target is driven by this module's own small client: it
lets the guest run, passes the guest's own signals on (as gdb's ``handle
SIG nostop pass`` does), and stops it with the test's signal (SIGUSR2,
which no test program uses) once the program printed "ready".  It then
serves debuggers one after the other on a port of its own, forwarding
their packets to QEMU unchanged, except those that would let the target
go (``D``, ``k``, ``c``, ``C``, ``s``, ``vCont;c``...): those are answered
here and not passed on, so the next debugger finds the very same stopped
target.  gdb-multiarch and liveunwind therefore unwind the same registers
and the same stacks, even a thread interrupted at an arbitrary instruction.

"""

from __future__ import annotations

import os
import select
import shutil
import signal
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from liveunwind.formats.elf import ElfImage
from liveunwind.targets.remote import rsp
from tests.support.ports import free_port, wait_listening
from tests.support.programs import RunningProgram

SYSROOT = Path("/usr/riscv64-linux-gnu")
#: The signal that stops a held target; none of the test programs uses it.
STOP_SIGNAL = signal.SIGUSR2
#: Seconds a program under QEMU may take to print "ready" (it takes well under one).
READY_TIMEOUT = 20.0
#: Times a held target is started before giving up.  QEMU 7.2's user-mode stub is not
#: safe against two threads stopping at once (sighandler.c signals its second thread
#: while the first one's stop is being answered): now and then the guest then hangs
#: for good, and the program is run again.
ATTEMPTS = 3
#: Seconds one packet exchange with QEMU may take.
PACKET_TIMEOUT = 30.0
#: GDB's own signal numbers (gdb/signals.def), which stop replies carry: SIGTRAP is
#: Linux's 5, but SIGUSR1 and SIGUSR2 are 30 and 31 (Linux: 10 and 12).
_GDB_SIGTRAP = 5
GDB_SIGUSR1 = 30
GDB_SIGUSR2 = 31
#: ELF program header type of the program interpreter: a dynamic executable has one.
PT_INTERP = 3


class StubError(RuntimeError):
    """QEMU's stub answered something this module does not expect."""


def packet(payload: bytes) -> bytes:
    """``$payload#cc`` around a payload as it goes over the wire (already escaped)."""
    return b"$" + payload + b"#" + rsp.checksum(payload)


class Client:
    """A minimal GDB remote protocol client (acknowledged mode, as QEMU 7.2 speaks)."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=PACKET_TIMEOUT)
        # Small packets one after the other: without this, Nagle's algorithm and delayed
        # acknowledgements cost 40 ms a round trip.
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._buffer = b""

    def send(self, payload: bytes) -> None:
        self.sock.sendall(packet(payload))

    def receive(self, timeout: float = PACKET_TIMEOUT, *, ack: bool = True) -> bytes:
        """The next packet's payload, acknowledged unless ``ack`` is false ('+'/'-' skipped)."""
        deadline = time.monotonic() + timeout
        while True:
            start = self._buffer.find(b"$")
            if start >= 0:
                end = self._buffer.find(b"#", start)
                if end >= 0 and len(self._buffer) >= end + 3:
                    payload = self._buffer[start + 1 : end]
                    self._buffer = self._buffer[end + 3 :]
                    if ack:
                        self.sock.sendall(b"+")
                    return payload
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise StubError("QEMU's stub sent no packet in time")
            self.sock.settimeout(remaining)
            data = self.sock.recv(65536)
            if not data:
                raise StubError("QEMU's stub closed the connection")
            self._buffer += data

    def request(self, payload: bytes) -> bytes:
        self.send(payload)
        return self.receive()

    def drain(self) -> None:
        """Drops acknowledgements still unread, so the socket can be handed over clean."""
        self._buffer = b""
        self.sock.setblocking(False)
        try:
            while self.sock.recv(65536):
                pass
        except BlockingIOError:
            pass
        finally:
            self.sock.setblocking(True)

    def xfer(self, obj: bytes, annex: bytes) -> bytes:
        data, offset = b"", 0
        while True:
            reply = self.request(b"qXfer:%s:read:%s:%x,%x" % (obj, annex, offset, 0x800))
            if reply[:1] not in (b"m", b"l"):
                raise StubError(f"qXfer:{obj.decode()}:{annex.decode()}: {reply!r}")
            data += rsp.unescape(reply[1:])
            offset += len(reply) - 1
            if reply[:1] == b"l":
                return data

    def read_memory(self, address: int, length: int) -> bytes | None:
        """``length`` bytes at ``address``, or None if any of them cannot be read."""
        data = b""
        while len(data) < length:
            size = min(1024, length - len(data))
            reply = self.request(b"m%x,%x" % (address + len(data), size))
            if reply.startswith(b"E") or not reply:
                return None
            data += bytes.fromhex(reply.decode())
        return data

    def threads(self) -> list[bytes]:
        """Thread ids as the stub spells them (``p01.3f2a``)."""
        ids: list[bytes] = []
        reply = self.request(b"qfThreadInfo")
        while reply.startswith(b"m"):
            ids += reply[1:].split(b",")
            reply = self.request(b"qsThreadInfo")
        return ids

    def registers(self, thread: bytes) -> list[int]:
        """x0–x31 then pc of ``thread``: the ``g`` block of QEMU's riscv64 stub."""
        if self.request(b"Hg" + thread) != b"OK":
            raise StubError(f"Hg{thread.decode()} refused")
        block = bytes.fromhex(self.request(b"g").decode())
        if len(block) < 33 * 8:
            raise StubError(f"a g block of {len(block)} bytes; riscv64 has 33 registers of 8")
        return list(struct.unpack_from("<33Q", block))

    def close(self) -> None:
        self.sock.close()


def thread_tid(thread: bytes) -> int:
    """The host thread id in a stub thread id (``p01.3f2a`` -> 0x3f2a)."""
    return int(thread.rsplit(b".", 1)[-1], 16)


#: Packets that would let the target run or end: answered by the relay, never passed on.
_RESUMING = (b"c", b"C", b"s", b"S", b"k", b"vCont;c", b"vCont;C", b"vCont;s", b"vCont;S", b"vKill")


@dataclass
class Held:
    """``qemu-riscv64 -g`` running ``exe``, stopped by STOP_SIGNAL once it printed "ready".

    ``port`` is the relay's: point any number of debuggers at it, one after
    the other.  ``stop`` is QEMU's stop reply, ``client`` this module's own
    connection, usable between debuggers.
    """

    exe: Path
    args: tuple[str, ...] = ()
    port: int = 0
    stop: bytes = b""
    stopped_thread: bytes = b""
    passed: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        for attempt in range(ATTEMPTS):
            try:
                self._start()
                break
            except (StubError, OSError):
                if attempt == ATTEMPTS - 1:
                    raise
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])

    def _start(self) -> None:
        """Starts QEMU and runs the program to the stop; a target that hangs is killed."""
        qemu_port = free_port()
        sysroot = [] if _is_static(self.exe) else ["-L", str(SYSROOT)]
        self.program = RunningProgram(
            Path(shutil.which("qemu-riscv64") or "qemu-riscv64"),
            ["-g", str(qemu_port), *sysroot, str(self.exe), *self.args],
        )
        self.passed = []
        try:
            wait_listening(qemu_port, timeout=30.0)
            self.client = Client(qemu_port)
            self._run_to_stop()
            self.client.drain()
        except BaseException:
            self.program.stop()
            if getattr(self, "client", None) is not None:
                self.client.close()
            raise

    def _run_to_stop(self) -> None:
        """Continue, passing the guest's own signals on, until STOP_SIGNAL stops it."""
        stopper = threading.Thread(target=self._signal_when_ready, daemon=True)
        stopper.start()
        self.client.send(b"c")
        deadline = time.monotonic() + READY_TIMEOUT + PACKET_TIMEOUT
        while True:
            try:
                reply = self.client.receive(
                    timeout=max(1.0, deadline - time.monotonic()), ack=False
                )
            except TimeoutError:
                raise StubError(f"{self.exe.name} did not stop under QEMU in time") from None
            if reply[:1] in (b"W", b"X"):
                raise StubError(f"{self.exe.name} ended under QEMU: {reply!r}")
            try:
                number = int(reply[1:3], 16)
            except ValueError:
                raise StubError(f"unexpected stop reply {reply!r}") from None
            if reply[:1] not in (b"T", b"S") and b"thread:" not in reply:
                raise StubError(f"unexpected stop reply {reply!r}")
            # QEMU 7.2's user-mode stub is not safe against two threads stopping at once
            # (sighandler.c signals its second thread while the first one's stop is being
            # answered): such a stop reply can come with its first byte overwritten.  Its
            # signal and thread are still there, and answering it lets that thread go.
            if number == GDB_SIGUSR2:
                self.client.sock.sendall(b"+")
                self.stop = reply
                thread = reply.split(b"thread:", 1)[-1].split(b";", 1)[0]
                self.stopped_thread = thread if b"thread:" in reply else b""
                stopper.join(timeout=5)
                return
            self.passed.append(number)
            # The acknowledgement and the answer in one write: another thread waiting in the
            # stub must not read one of them without the other.
            answer = b"C%02x" % number if number != _GDB_SIGTRAP else b"c"
            self.client.sock.sendall(b"+" + packet(answer))

    def _signal_when_ready(self) -> None:
        try:
            self.program.wait_for_line(b"ready\n", time.monotonic() + READY_TIMEOUT)
        except Exception:  # the stop loop reports the missing stop
            return
        time.sleep(0.3)  # from "about to block" to blocked
        os.kill(self.program.pid, STOP_SIGNAL)

    def serve_one(self, timeout: float = 600.0) -> threading.Thread:
        """In the background: one debugger's session, relayed to QEMU; the target stays stopped."""
        thread = threading.Thread(target=self._relay, args=(timeout,), daemon=True)
        thread.start()
        return thread

    def _relay(self, timeout: float) -> None:
        self._listener.settimeout(timeout)
        try:
            debugger, _ = self._listener.accept()
        except OSError:
            return
        qemu = self.client.sock
        debugger.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pending = b""
        deadline = time.monotonic() + timeout
        with debugger:
            while time.monotonic() < deadline:
                ready, _, _ = select.select([debugger, qemu], [], [], 1.0)
                if qemu in ready:
                    data = qemu.recv(65536)
                    if not data:
                        return
                    debugger.sendall(data)
                if debugger in ready:
                    try:
                        data = debugger.recv(65536)
                    except OSError:
                        data = b""
                    if not data:
                        return
                    pending += data
                    pending = self._forward(pending, debugger, qemu)

    @staticmethod
    def _forward(pending: bytes, debugger: socket.socket, qemu: socket.socket) -> bytes:
        """Passes whole units (acks, ^C, packets) on; answers the resuming packets itself."""
        while pending:
            if pending[:1] != b"$":
                if pending[:1] == b"\x03":
                    pending = pending[1:]  # QEMU user mode ignores ^C while stopped anyway
                    continue
                qemu.sendall(pending[:1])
                pending = pending[1:]
                continue
            end = pending.find(b"#")
            if end < 0 or len(pending) < end + 3:
                return pending  # the rest of the packet is still on its way
            unit, payload = pending[: end + 3], pending[1:end]
            pending = pending[end + 3 :]
            if payload.startswith(b"D"):
                debugger.sendall(b"+" + packet(b"OK"))
            elif payload.startswith(_RESUMING) and not payload.startswith(b"vCont?"):
                debugger.sendall(b"+")
            else:
                qemu.sendall(unit)
        return pending

    def close(self) -> None:
        self.program.stop()
        for closable in (getattr(self, "_listener", None), getattr(self, "client", None)):
            if closable is not None:
                closable.close()

    def __enter__(self) -> Held:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _is_static(exe: Path) -> bool:
    """Whether ``exe`` has no program interpreter (PT_INTERP)."""
    return not ElfImage(exe.read_bytes()).segments_of_type(PT_INTERP)
