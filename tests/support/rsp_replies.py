"""Replies real GDB stubs sent (gdbserver 13, QEMU 7.2), and every decoder of stub replies.

The protocol tests decode them; the fuzz campaign starts its edits from them.
"""

from __future__ import annotations

from liveunwind.targets.remote import rsp

#: gdbserver 13's stop reply after --attach, with expedited registers, run-length encoded.
GDBSERVER_STOP = b"T0006:870d0*(;07:70d1733bfe7f0* ;10:161f986d0e7f0* ;thread:pd85.d85;core:1;"
QEMU_FEATURES = (
    b"PacketSize=1000;qXfer:features:read+;qXfer:auxv:read+;vContSupported+;multiprocess+"
)
QEMU_TARGET = (
    b'l<?xml version="1.0"?><!DOCTYPE target SYSTEM "gdb-target.dtd"><target>'
    b'<architecture>aarch64</architecture><xi:include href="aarch64-core.xml"/>'
    b'<xi:include href="sve-registers.xml"/><xi:include href="system-registers.xml"/></target>'
)
SVR4 = (
    b'<library-list-svr4 version="1.0" main-lm="0x7f0e6db262e0">'
    b'<library name="linux-vdso.so.1" lm="0x7f0e6db268b0" l_addr="0x7f0e6daf0000" '
    b'l_ld="0x7f0e6daf0440" lmid="0x7f0e6db26118"/>'
    b'<library name="/lib/x86_64-linux-gnu/libc.so.6" lm="0x7f0e6dae8200" '
    b'l_addr="0x7f0e6d8fc000" l_ld="0x7f0e6daceb60" lmid="0x7f0e6db26118"/>'
    b"</library-list-svr4>"
)
THREADS = (
    b'<threads>\n<thread id="pd85.d85" core="1" name="remote-x64"/>\n'
    b'<thread id="pd85.d87" core="1" name="sleeper"/>\n'
    b'<thread id="pd85.d88" core="1" name="a &amp; b &#x41;"/>\n</threads>\n'
)

#: Every decoder of what a stub sends: the fuzz tests feed them any bytes.
DECODERS = [
    rsp.expand_runs,
    rsp.unescape,
    rsp.decode_hex,
    rsp.parse_features,
    rsp.parse_stop_reply,
    rsp.parse_thread_list,
    rsp.parse_xfer_chunk,
    rsp.parse_host_io,
    rsp.parse_target_description,
    rsp.parse_library_list_svr4,
    rsp.parse_threads,
    rsp.decode_register_value,
    lambda data: rsp.decode_register_block(
        data, [rsp.RegisterDesc("pc", 64, 0), rsp.RegisterDesc("sp", 32, 1)], {"pc": 16}
    ),
]
