"""The GDB remote protocol codec (targets/remote/rsp.py) on replies real stubs sent, and fuzzed.

The vectors are replies captured from gdbserver 13 and QEMU 7.2's stub
(run-length encoding included); the fuzz tests feed arbitrary bytes to every
decoder, which may only ever answer with records or a FormatError.
"""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from liveunwind.errors import FormatError
from liveunwind.targets.remote import rsp
from tests.support.rsp_replies import (
    DECODERS,
    GDBSERVER_STOP,
    QEMU_FEATURES,
    QEMU_TARGET,
    SVR4,
    THREADS,
)


def read_all(stream: bytes, chunk: int = 7) -> list[bytes | tuple[str, bytes]]:
    reader = rsp.PacketReader()
    items = []
    for start in range(0, len(stream), chunk):
        reader.feed(stream[start : start + chunk])
        while (item := reader.next()) is not None:
            items.append(item)
    return items


def test_framing_of_requests() -> None:
    assert rsp.encode_packet(b"g") == b"$g#67"
    assert rsp.encode_packet(b"?") == b"$?#3f"
    assert rsp.encode_packet(b"qSupported:multiprocess+") == b"$qSupported:multiprocess+#c6"
    assert rsp.encode_packet(b"a#b") == b"$a}\x03b#" + rsp.checksum(b"a}\x03b")


def test_reader_cuts_acks_packets_and_notifications_and_skips_junk() -> None:
    notification = b"%Stop:T05#" + rsp.checksum(b"Stop:T05")
    stop = b"$" + GDBSERVER_STOP + b"#" + rsp.checksum(GDBSERVER_STOP)
    stream = b"+junk$OK#9a-" + notification + stop
    items = read_all(stream)
    assert items[:4] == [b"+", ("$", b"OK"), b"-", ("%", b"Stop:T05")]
    kind, payload = items[4]
    assert kind == "$" and payload.startswith(b"T0006:870d000000000000;07:70d1733bfe7f0000;")


def test_reader_rejects_a_bad_checksum() -> None:
    reader = rsp.PacketReader()
    reader.feed(b"$OK#00")
    with pytest.raises(FormatError, match="checksum"):
        reader.next()


def test_run_length_expansion() -> None:
    # '(' is 40: 40 - 29 = 11 more zeros; ' ' is 32: 3 more.
    assert rsp.expand_runs(b"0*(") == b"0" * 12
    assert rsp.expand_runs(b"ab* c") == b"abbbbc"
    with pytest.raises(FormatError):
        rsp.expand_runs(b"*!")  # nothing to repeat
    with pytest.raises(FormatError):
        rsp.expand_runs(b"a*\x01")  # count below ' '
    with pytest.raises(FormatError, match="more than"):
        rsp.expand_runs(b"a" + b"a*~" * 100, limit=1000)


def test_stop_replies() -> None:
    stop = rsp.parse_stop_reply(rsp.expand_runs(GDBSERVER_STOP))
    assert stop.kind == "stopped" and stop.signal == 0
    assert stop.thread == rsp.ThreadId(0xD85, 0xD85)
    assert stop.registers[0x10] == bytes.fromhex("161f986d0e7f0000")
    qemu = rsp.parse_stop_reply(b"T1ethread:p01.7f24;")
    assert (qemu.signal, qemu.thread) == (30, rsp.ThreadId(1, 0x7F24))
    assert rsp.signal_name(qemu.signal) == "SIGUSR1"
    assert rsp.parse_stop_reply(b"W00").kind == "exited"
    assert rsp.parse_stop_reply(b"X09;process:12").kind == "killed"
    with pytest.raises(FormatError):
        rsp.parse_stop_reply(b"OK")


def test_thread_lists_and_ids() -> None:
    assert rsp.parse_thread_list(b"mp01.7f24") == ([rsp.ThreadId(1, 0x7F24)], False)
    assert rsp.parse_thread_list(b"m1a,2b") == (
        [rsp.ThreadId(None, 0x1A), rsp.ThreadId(None, 0x2B)],
        False,
    )
    assert rsp.parse_thread_list(b"l") == ([], True)
    assert rsp.ThreadId(0x5B49, 0x5B4B).encode() == b"p5b49.5b4b"
    with pytest.raises(FormatError):
        rsp.parse_thread_list(b"E01")


def test_features() -> None:
    features = rsp.parse_features(QEMU_FEATURES)
    assert features["PacketSize"] == "1000"
    assert features["qXfer:features:read"] is True and features["multiprocess"] is True
    assert "QStartNoAckMode" not in features
    assert rsp.parse_features(b"qRelocInsn-")["qRelocInsn"] is False


def test_errors() -> None:
    assert rsp.error_code(b"E01") == "error 1"
    assert rsp.error_code(b"E.no such thread") == "no such thread"
    assert rsp.error_code(b"OK") is None
    assert rsp.error_code(b"Efg") is None


def test_target_description_and_numbering() -> None:
    data, last = rsp.parse_xfer_chunk(QEMU_TARGET)
    assert last
    description = rsp.parse_target_description(data)
    assert description.architecture == "aarch64"
    assert [item[1] for item in description.items] == [
        "aarch64-core.xml", "sve-registers.xml", "system-registers.xml",
    ]  # fmt: skip
    core = (
        b'<feature name="org.gnu.gdb.aarch64.core"><!-- <reg name="bogus" bitsize="8"/> -->'
        b'<reg name="x0" bitsize="64"/><reg name="x1" bitsize="64" type="int"/>'
        b'<reg name="sp" bitsize="64" regnum="31"/><reg name="pc" bitsize="64"/>'
        b'<reg name="cpsr" bitsize="32"/></feature>'
    )
    registers = rsp.number_registers(rsp.parse_target_description(core).items)
    assert [(r.name, r.regnum) for r in registers] == [
        ("x0", 0), ("x1", 1), ("sp", 31), ("pc", 32), ("cpsr", 33),
    ]  # fmt: skip
    with pytest.raises(FormatError):
        rsp.parse_target_description(b'<reg name="x" bitsize="12"/>')


def test_register_block() -> None:
    layout = [rsp.RegisterDesc("rax", 64, 0), rsp.RegisterDesc("rbx", 64, 1),
              rsp.RegisterDesc("eflags", 32, 2), rsp.RegisterDesc("rip", 64, 3)]  # fmt: skip
    block = b"0100000000000000" + b"x" * 16 + b"46020000" + b"efbeadde00000000"
    wanted = {"rax": 0, "rbx": 3, "rip": 16}
    assert rsp.decode_register_block(block, layout, wanted) == {0: 1, 16: 0xDEADBEEF}
    assert rsp.decode_register_block(block[:16], layout, wanted) == {0: 1}
    with pytest.raises(FormatError):
        rsp.decode_register_block(b"0g", layout, wanted)
    assert rsp.decode_register_value(b"xxxxxxxx") is None
    assert rsp.decode_register_value(b"1000000000000000") == 16


def test_library_list_and_thread_names() -> None:
    main, libraries = rsp.parse_library_list_svr4(SVR4)
    assert main == 0x7F0E6DB262E0
    assert libraries[1] == rsp.Library(
        "/lib/x86_64-linux-gnu/libc.so.6", 0x7F0E6DAE8200, 0x7F0E6D8FC000, 0x7F0E6DACEB60
    )
    threads = rsp.parse_threads(THREADS)
    assert list(threads) == [rsp.ThreadId(0xD85, tid) for tid in (0xD85, 0xD87, 0xD88)]
    assert threads[rsp.ThreadId(0xD85, 0xD87)] == "sleeper"
    assert threads[rsp.ThreadId(0xD85, 0xD88)] == "a & b A"
    with pytest.raises(FormatError):
        rsp.parse_library_list_svr4(b'<library name="x" lm="zz"/>')


def test_host_io_and_binary_chunks() -> None:
    assert rsp.parse_host_io(b"F6") == rsp.HostIoReply(6, 0, b"")
    assert rsp.parse_host_io(b"F-1,2") == rsp.HostIoReply(-1, 2, b"")
    assert rsp.parse_host_io(b"F3;a}]b") == rsp.HostIoReply(3, 0, b"a}b")
    assert rsp.parse_xfer_chunk(b"m}\x03}\x04") == (b"#$", False)
    with pytest.raises(FormatError):
        rsp.unescape(b"ab}")


# -- fuzzing ----------------------------------------------------------------------


def encode_runs(data: bytes) -> bytes:
    """Run-length encoding the way gdbserver writes it (remote-utils.cc ``try_rle``)."""
    out = bytearray()
    position = 0
    while position < len(data):
        byte = data[position]
        out.append(byte)
        run = 1
        while position + run < len(data) and data[position + run] == byte and run < 98:
            run += 1
        repeats = run - 1
        if repeats >= 3:
            while repeats + 29 in (ord("$"), ord("#")):
                repeats -= 1
            out += bytes((ord("*"), repeats + 29))
            position += repeats + 1
        else:
            position += 1
    return bytes(out)


@settings(max_examples=300, deadline=1000)
@given(payload=st.binary(max_size=300), chunk=st.integers(min_value=1, max_value=64))
def test_fuzz_binary_payloads_survive_escaping_runs_and_framing(payload: bytes, chunk: int) -> None:
    """What a stub sends (escaped, then run-length encoded, then framed) decodes to the payload."""
    body = encode_runs(rsp.escape(payload))
    stream = b"$" + body + b"#" + rsp.checksum(body)
    assert read_all(stream, chunk) == [("$", rsp.escape(payload))]
    assert rsp.unescape(rsp.expand_runs(body)) == payload


@settings(max_examples=500, deadline=1000)
@given(data=st.binary(max_size=200), which=st.integers(0, len(DECODERS) - 1))
def test_fuzz_decoders_raise_only_format_errors(data: bytes, which: int) -> None:
    with contextlib.suppress(FormatError):
        DECODERS[which](data)


_XML_PIECES = st.sampled_from(
    [b"<reg ", b'name="pc" ', b'bitsize="64" ', b'regnum="9" ', b"/>", b"<library ", b'lm="0x1" ',
     b'<xi:include href="a.xml"/>', b"<!--", b"-->", b"&amp;", b"&#x10FFFF;", b"&#99999999;",
     b"<architecture>aarch64</architecture>", b'<thread id="p1.2" name="n"/>', b"<", b">", b'"']
)  # fmt: skip


@settings(max_examples=500, deadline=1000)
@given(pieces=st.lists(_XML_PIECES, max_size=30))
def test_fuzz_xml_documents(pieces: list[bytes]) -> None:
    document = b"".join(pieces)
    for parse in (
        rsp.parse_target_description,
        rsp.parse_library_list_svr4,
        rsp.parse_threads,
    ):
        with contextlib.suppress(FormatError):
            parse(document)


@settings(max_examples=300, deadline=1000)
@given(stream=st.binary(max_size=400), chunk=st.integers(min_value=1, max_value=50))
def test_fuzz_reader_on_any_stream(stream: bytes, chunk: int) -> None:
    reader = rsp.PacketReader()
    try:
        for start in range(0, len(stream), chunk):
            reader.feed(stream[start : start + chunk])
            while reader.next() is not None:
                pass
    except FormatError:
        return
    assert reader.pending <= len(stream)
