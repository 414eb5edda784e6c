"""One TCP connection to a GDB remote stub: requests, replies, acknowledgements, time limits.

Every wait is bounded: connecting, each reply, and the stop after an
interrupt each get at most ``timeout`` seconds, so a stub that accepts and
never answers, a dropped connection or a malformed packet becomes one
:class:`RemoteError` (a TargetError: exit code 2) within a few seconds.
Requests go one at a time — a stub in acknowledgement mode (QEMU has no
other) reads the byte after its reply as the acknowledgement, so pipelining
is not safe — and each request/reply pair counts as one round trip.
"""

from __future__ import annotations

import socket
import time

from liveunwind.errors import FormatError, TargetError
from liveunwind.targets.remote import rsp

#: Seconds to wait for a connection, a reply, or the stop after an interrupt.
DEFAULT_TIMEOUT = 3.0
#: Times a packet is sent again when the stub asks for it (``-``) before giving up.
_RETRANSMITS = 3


class RemoteError(TargetError):
    """The stub cannot be reached, does not answer in time, or answers something unreadable."""


class Connection:
    """A connection to one stub; ``round_trips`` counts the request/reply pairs so far."""

    def __init__(self, host: str, port: int, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.where = f"{host}:{port}"
        self.timeout = timeout
        self.round_trips = 0
        self.bytes_received = 0
        self._reader = rsp.PacketReader()
        #: False once the stub agreed to QStartNoAckMode.
        self.acknowledging = True
        #: True once a reply did not come, the connection dropped or a packet was unreadable.
        self.broken = False
        try:
            self._socket = socket.create_connection((host, port), timeout=timeout)
        except socket.gaierror as error:
            raise RemoteError(f"cannot connect to {self.where}: {error.strerror}") from None
        except TimeoutError:
            raise RemoteError(
                f"cannot connect to {self.where}: no answer within {timeout:g} s"
            ) from None
        except OSError as error:
            reason = (error.strerror or str(error)).lower()
            raise RemoteError(f"cannot connect to {self.where}: {reason}") from None
        self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def close(self) -> None:
        self._socket.close()

    def addresses(self) -> tuple[str, str, int]:
        """Our address, the stub's, and the stub's port, as the connection reached them."""
        local = self._socket.getsockname()
        peer = self._socket.getpeername()
        return str(local[0]), str(peer[0]), int(peer[1])

    def _fail(self, message: str) -> RemoteError:
        """The error to raise; the connection is not used for anything after it."""
        self.broken = True
        return RemoteError(message)

    # -- requests -------------------------------------------------------------

    def request(self, payload: bytes, what: str = "") -> bytes:
        """Sends one packet and returns the stub's reply (an empty reply: not supported)."""
        deadline = time.monotonic() + self.timeout
        self._send(payload, deadline, what)
        reply = self._receive_packet(deadline, what or _name(payload))
        assert reply is not None  # only a wait for a stop may end without a reply
        self.round_trips += 1
        return reply

    def send(self, payload: bytes, what: str = "") -> None:
        """Sends a packet that has no immediate reply (``c``, ``C``): only the ack is awaited."""
        self._send(payload, time.monotonic() + self.timeout, what)

    def interrupt(self) -> None:
        """The out-of-band interrupt byte (``^C``): a running target should stop and say so."""
        self._write(b"\x03", "the interrupt")

    def wait_stop(self, seconds: float, *, what: str) -> bytes | None:
        """The next stop reply within ``seconds``, or None if there was none.

        Console output (``O…``) packets are acknowledged and skipped.
        """
        deadline = time.monotonic() + seconds
        while True:
            reply = self._receive_packet(deadline, what, none_on_timeout=True)
            if reply is None:
                return None
            if reply.startswith(b"O") and reply != b"OK":
                continue
            self.round_trips += 1
            return reply

    # -- the wire -------------------------------------------------------------

    def _send(self, payload: bytes, deadline: float, what: str) -> None:
        packet = rsp.encode_packet(payload)
        what = what or _name(payload)
        for _ in range(_RETRANSMITS + 1):
            self._write(packet, what)
            if not self.acknowledging:
                return
            if self._receive_ack(deadline, what):
                return
        raise self._fail(f"the stub at {self.where} keeps rejecting {what}")

    def _write(self, data: bytes, what: str) -> None:
        try:
            self._socket.sendall(data)
        except OSError as error:
            raise self._fail(
                f"the connection to {self.where} broke while sending {what}: "
                f"{(error.strerror or str(error)).lower()}"
            ) from None

    def _receive_ack(self, deadline: float, what: str) -> bool:
        """True for ``+``, False for ``-`` (send again); packets before it are a protocol error."""
        while True:
            item = self._next(deadline, what, none_on_timeout=False)
            if item == b"+":
                return True
            if item == b"-":
                return False
            raise self._fail(f"the stub at {self.where} answered {what} before acknowledging it")

    def _receive_packet(
        self, deadline: float, what: str, *, none_on_timeout: bool = False
    ) -> bytes | None:
        while True:
            item = self._next(deadline, what, none_on_timeout=none_on_timeout)
            if item is None:
                return None
            if isinstance(item, bytes):
                continue  # a stray acknowledgement
            kind, payload = item
            if kind == "%":
                continue  # a notification: only non-stop mode sends them
            if self.acknowledging:
                self._write(b"+", "an acknowledgement")
            return payload

    def _next(
        self, deadline: float, what: str, *, none_on_timeout: bool
    ) -> bytes | tuple[str, bytes] | None:
        """The next acknowledgement or packet, reading from the socket until the deadline."""
        while True:
            try:
                item = self._reader.next()
            except FormatError as error:
                raise self._fail(
                    f"the stub at {self.where} sent a malformed packet for {what}: {error}"
                ) from None
            if item is not None:
                return item
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if none_on_timeout:
                    return None
                raise self._fail(
                    f"the stub at {self.where} did not answer {what} within {self.timeout:g} s"
                )
            self._socket.settimeout(remaining)
            try:
                data = self._socket.recv(65536)
            except TimeoutError:
                continue
            except OSError as error:
                raise self._fail(
                    f"the connection to {self.where} broke while waiting for {what}: "
                    f"{(error.strerror or str(error)).lower()}"
                ) from None
            if not data:
                raise self._fail(f"the stub at {self.where} closed the connection during {what}")
            self.bytes_received += len(data)
            self._reader.feed(data)


def _name(payload: bytes) -> str:
    """How an error message names a request: its command, not its arguments."""
    head = payload.split(b":", 1)[0].split(b";", 1)[0].split(b",", 1)[0]
    text = head[:24].decode("ascii", "replace")
    if text[:1] in ("m", "x", "p", "H", "C") and text[1:2] not in ("", "f", "s"):
        text = text[:1] if text[:1] != "H" else text[:2]
    return f"'{text}'"
