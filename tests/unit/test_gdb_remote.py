"""The gdb-remote client against scripted stubs: bounded failures, binary reads, addresses.

Each stub is a thread of this process serving one TCP connection on
loopback: one that never answers, one that hangs up, one that sends a bad
checksum, one that serves memory with ``x``.  Real stubs (QEMU user mode,
gdbserver) are tests/system/test_gdb_remote.py.
"""

from __future__ import annotations

import socket
import time

import pytest

from liveunwind.backtrace.remote import gdb_remote, parse_address
from liveunwind.errors import MemoryReadError, TargetError, UsageError
from liveunwind.targets.remote import rsp
from liveunwind.targets.remote.connection import Connection, RemoteError
from liveunwind.targets.remote.gdbremote import _Memory
from tests.support.ports import free_port
from tests.support.stubs import ScriptedStub, bad_checksum, hang_up, silent


@pytest.mark.parametrize(
    ("behave", "words"),
    [
        (silent, "did not answer 'qSupported' within 2 s"),
        (hang_up, "closed the connection"),
        (bad_checksum, "malformed packet"),
    ],
)
def test_stub_failures_are_one_bounded_error(behave, words: str) -> None:
    with ScriptedStub(behave) as stub:
        started = time.monotonic()
        with pytest.raises(RemoteError) as caught:
            gdb_remote(f"127.0.0.1:{stub.port}", timeout=2.0)
        elapsed = time.monotonic() - started
    assert elapsed < 10
    assert isinstance(caught.value, TargetError) and caught.value.exit_code == 2
    message = str(caught.value)
    assert words in message and "\n" not in message, message


def test_silent_stub_with_default_timeout_fails_within_ten_seconds() -> None:
    with ScriptedStub(silent) as stub:
        started = time.monotonic()
        with pytest.raises(RemoteError):
            gdb_remote(f"127.0.0.1:{stub.port}")
        assert time.monotonic() - started < 10


def test_connection_refused() -> None:
    port = free_port()
    started = time.monotonic()
    with pytest.raises(
        RemoteError, match=f"cannot connect to 127.0.0.1:{port}: connection refused"
    ):
        gdb_remote(f"127.0.0.1:{port}")
    assert time.monotonic() - started < 5


def test_binary_reads_with_x() -> None:
    """``x`` (GDB 16's binary read, offered as binary-upload): escaped bytes, a partial block."""
    memory = bytes(range(256)) * 16  # every byte value, '#', '$', '}' and '*' included
    base = 0x10000

    def serve(connection: socket.socket) -> None:
        reader = rsp.PacketReader()
        while True:
            data = connection.recv(4096)
            if not data:
                return
            reader.feed(data)
            while (item := reader.next()) is not None:
                if isinstance(item, bytes):
                    continue
                address, length = (int(part, 16) for part in item[1][1:].split(b","))
                offset = address - base
                if not 0 <= offset < len(memory):
                    reply = b"E14"
                else:
                    reply = b"b" + rsp.escape(memory[offset : offset + length])
                connection.sendall(b"+$" + reply + b"#" + rsp.checksum(reply))

    with ScriptedStub(serve) as stub:
        connection = Connection("127.0.0.1", stub.port, timeout=2.0)
        try:
            reads = _Memory(connection, 4096, binary=True)
            assert reads.read(base + 30, 100) == memory[30:130]
            assert reads.read(base + 4000, 96) == memory[4000:]
            with pytest.raises(MemoryReadError):
                reads.read(base + 4000, 200)  # runs past the end
            assert connection.round_trips == 2
        finally:
            connection.close()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("localhost:1234", ("localhost", 1234)),
        (":1234", ("localhost", 1234)),
        ("tcp:10.0.0.2:2345", ("10.0.0.2", 2345)),
        ("[::1]:99", ("::1", 99)),
    ],
)
def test_parse_address(text: str, expected: tuple[str, int]) -> None:
    assert parse_address(text) == expected


@pytest.mark.parametrize("text", ["localhost", "host:port", "host:0", "host:70000", "[::1]99"])
def test_parse_address_rejects(text: str) -> None:
    with pytest.raises(UsageError):
        parse_address(text)


# -- the stub's process on this machine ---------------------------------------------


def test_proc_net_tcp_addresses_are_words_in_this_machines_order() -> None:
    """/proc/net/tcp{,6} print each 32-bit word of an address in host (little-endian) order."""
    from liveunwind.targets.remote.portowner import _address, _same

    assert str(_address("0100007F")) == "127.0.0.1"
    assert str(_address("00000000")) == "0.0.0.0"
    assert str(_address("00000000000000000000000001000000")) == "::1"
    mapped = _address("0000000000000000FFFF00000100007F")
    assert mapped.ipv4_mapped is not None and str(mapped.ipv4_mapped) == "127.0.0.1"
    assert _same(mapped, _address("0100007F"))
    assert not _same(mapped, _address("0200007F"))
    with pytest.raises(ValueError):
        _address("0100")


def test_only_a_stub_on_this_machine_counts() -> None:
    from liveunwind.targets.remote.portowner import on_this_machine

    assert on_this_machine("127.0.0.1", "127.0.0.1")
    assert on_this_machine("::1", "::1")
    assert on_this_machine("::ffff:127.0.0.1", "::ffff:127.0.0.1")
    assert on_this_machine("192.0.2.7", "192.0.2.7")  # our own address
    assert not on_this_machine("192.0.2.7", "192.0.2.8")
    assert not on_this_machine("192.0.2.7", "not an address")
