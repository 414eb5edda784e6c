"""The GDB remote serial protocol on the wire: packets and the documents stubs send.

A stub (gdbserver, QEMU's ``-g``, a board's debug monitor) answers in
packets ``$payload#cc``: ``cc`` is the sum of the payload bytes modulo 256
in two hex digits, ``X*n`` repeats ``X`` ``ord(n) - 29`` more times (run
length encoding, expanded before anything else), and binary payloads escape
``#``, ``$``, ``}`` and ``*`` as ``}`` followed by the byte XOR 0x20.  On top
of that come the replies this module decodes: stop replies (``T05…``),
register blocks (``g``), thread lists, ``qSupported`` features, ``qXfer``
chunks and the XML documents they carry (target descriptions, the SVR4
library list, the thread list), and Host I/O (``F``) replies.

Bytes in, records out; the socket lives in ``targets/remote/gdbremote.py``.  Every
reply comes from the other end of a network connection, so everything here
is bounded and a malformed reply is a :class:`FormatError`, never a crash.
The protocol is described in the GDB manual, appendix "GDB Remote Serial
Protocol", and the target description format in its appendix "Target
Descriptions".
"""

from __future__ import annotations

import re
from collections import namedtuple

from liveunwind.errors import FormatError

#: Largest payload accepted after run-length expansion: no reply this client asks for is larger.
MAX_PACKET = 1 << 20
#: Bytes that must be escaped inside a packet (and ``}`` itself).
_ESCAPED = frozenset(b"#$}*")
_HEX_DIGITS = frozenset(b"0123456789abcdefABCDEF")


# -- framing ------------------------------------------------------------------


def checksum(payload: bytes) -> bytes:
    """The two lowercase hex digits that end a packet carrying ``payload``."""
    return b"%02x" % (sum(payload) & 0xFF)


def escape(data: bytes) -> bytes:
    """``data`` with ``#``, ``$``, ``}`` and ``*`` escaped as ``}`` + (byte ^ 0x20)."""
    if not _ESCAPED.intersection(data):
        return data
    out = bytearray()
    for byte in data:
        if byte in _ESCAPED:
            out += bytes((0x7D, byte ^ 0x20))
        else:
            out.append(byte)
    return bytes(out)


def unescape(data: bytes) -> bytes:
    """The binary data of an escaped payload (``qXfer`` chunks, ``x`` replies)."""
    if b"}" not in data:
        return data
    out = bytearray()
    escaped = False
    for byte in data:
        if escaped:
            out.append(byte ^ 0x20)
            escaped = False
        elif byte == 0x7D:
            escaped = True
        else:
            out.append(byte)
    if escaped:
        raise FormatError("a binary reply ends inside an escape")
    return bytes(out)


def encode_packet(payload: bytes) -> bytes:
    """``$payload#cc`` with the payload escaped (a request never uses run-length encoding)."""
    body = escape(payload)
    return b"$" + body + b"#" + checksum(body)


def expand_runs(data: bytes, limit: int = MAX_PACKET) -> bytes:
    """Expands run-length encoding: ``X*n`` stands for ``X`` and ``ord(n) - 29`` more ``X``.

    ``limit`` bounds the expanded size (a hostile ``*~`` chain would
    otherwise grow 32-fold); a run with nothing to repeat or a count byte
    below ``' '`` is malformed.
    """
    if b"*" not in data:
        if len(data) > limit:
            raise FormatError(f"a packet of more than {limit} bytes")
        return data
    out = bytearray()
    position = 0
    size = len(data)
    while position < size:
        star = data.find(b"*", position)
        if star < 0:
            out += data[position:]
            break
        out += data[position:star]
        if star + 1 >= size or not out:
            raise FormatError("a run-length code with nothing to repeat or no count")
        count = data[star + 1] - 29
        if count < 3:
            raise FormatError(f"a run-length count byte {data[star + 1]:#x} out of range")
        out += out[-1:] * count
        if len(out) > limit:
            raise FormatError(f"a packet of more than {limit} bytes")
        position = star + 2
    if len(out) > limit:
        raise FormatError(f"a packet of more than {limit} bytes")
    return bytes(out)


class PacketReader:
    """Cuts a byte stream from a stub into acknowledgements and verified packets.

    :meth:`feed` takes bytes as they arrive; :meth:`next` returns ``b"+"``
    or ``b"-"`` for an acknowledgement, ``("$", payload)`` for a packet
    (checksum verified, runs expanded, escapes kept for the caller, who
    knows which replies are binary), ``("%", payload)`` for an asynchronous
    notification, or None when more bytes are needed.  Bytes between packets
    other than acknowledgements are skipped, as GDB does; a packet that does
    not end within :data:`MAX_PACKET` bytes, or whose checksum is wrong, is
    a :class:`FormatError`.
    """

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> None:
        self._buffer += data

    @property
    def pending(self) -> int:
        """Bytes received but not yet handed out."""
        return len(self._buffer)

    def next(self) -> bytes | tuple[str, bytes] | None:
        buffer = self._buffer
        while buffer:
            first = buffer[0]
            if first in b"+-":
                del buffer[:1]
                return b"+" if first == 0x2B else b"-"
            if first not in b"$%":
                start = _next_start(buffer)
                del buffer[: len(buffer) if start < 0 else start]
                continue
            end = buffer.find(b"#", 1)
            if end < 0 or end + 3 > len(buffer):
                if len(buffer) > 2 * MAX_PACKET + 3:
                    raise FormatError(f"a packet of more than {2 * MAX_PACKET} bytes")
                return None
            body = bytes(buffer[1:end])
            sent = bytes(buffer[end + 1 : end + 3])
            del buffer[: end + 3]
            if sent.lower() != checksum(body):
                raise FormatError(
                    f"a packet with checksum {sent.decode('ascii', 'replace')!r}, "
                    f"not {checksum(body).decode()}"
                )
            return ("$" if first == 0x24 else "%", expand_runs(body))
        return None


_START = re.compile(rb"[$%+-]")


def _next_start(buffer: bytearray) -> int:
    """Index of the next byte that can start something (``$ % + -``), or -1."""
    found = _START.search(buffer)
    return -1 if found is None else found.start()


# -- hex, errors, simple replies --------------------------------------------------


def decode_hex(text: bytes) -> bytes:
    """Bytes from pairs of hex digits; FormatError on an odd length or another character."""
    if len(text) % 2 or not _HEX_DIGITS.issuperset(text):
        raise FormatError(f"not hex data: {_show(text)}")
    return bytes.fromhex(text.decode("ascii"))


def hex_number(text: bytes | str) -> int:
    """A hex number as the protocol writes them (addresses, thread ids, lengths)."""
    raw = text.encode("ascii", "replace") if isinstance(text, str) else text
    if not raw or len(raw) > 32 or not _HEX_DIGITS.issuperset(raw):
        raise FormatError(f"not a hex number: {_show(raw)}")
    return int(raw, 16)


def error_code(payload: bytes) -> str | None:
    """The error an ``E NN`` or ``E.text`` reply reports, or None for another reply."""
    if len(payload) == 3 and payload[:1] == b"E" and _HEX_DIGITS.issuperset(payload[1:]):
        return f"error {int(payload[1:], 16)}"
    if payload.startswith(b"E."):
        return payload[2:200].decode("utf-8", "replace")
    return None


def parse_features(payload: bytes) -> dict[str, str | bool]:
    """``qSupported`` reply: ``name=value`` → value, ``name+`` → True, ``name-`` → False."""
    features: dict[str, str | bool] = {}
    for item in payload.decode("ascii", "replace").split(";")[:256]:
        name, equals, value = item.partition("=")
        if equals:
            features[name] = value
        elif item.endswith("+"):
            features[item[:-1]] = True
        elif item.endswith("-"):
            features[item[:-1]] = False
    return features


# -- threads ------------------------------------------------------------------


class ThreadId(namedtuple("ThreadId", "pid tid")):
    """A thread as the protocol names it: ``p<pid>.<tid>`` (multiprocess) or ``<tid>``."""

    __slots__ = ()
    #: The process, or None when the stub does not speak the multiprocess extensions.
    pid: int | None
    tid: int

    def encode(self) -> bytes:
        if self.pid is None:
            return b"%x" % self.tid
        return b"p%x.%x" % (self.pid, self.tid)


def parse_thread_id(text: bytes) -> ThreadId:
    if text.startswith(b"p"):
        pid, dot, tid = text[1:].partition(b".")
        return ThreadId(hex_number(pid), hex_number(tid) if dot else 0)
    return ThreadId(None, hex_number(text))


def parse_thread_list(payload: bytes) -> tuple[list[ThreadId], bool]:
    """A ``qfThreadInfo``/``qsThreadInfo`` reply: its threads, and whether it is the last."""
    if payload == b"l":
        return [], True
    if not payload.startswith(b"m"):
        raise FormatError(f"a thread list reply that is neither 'm…' nor 'l': {_show(payload)}")
    return [parse_thread_id(item) for item in payload[1:].split(b",") if item], False


class StopReply(namedtuple("StopReply", "kind signal thread registers")):
    """A stop reply: why the target stopped (``T``/``S``), or that it ended (``W``/``X``)."""

    __slots__ = ()
    #: ``"stopped"``, ``"exited"`` (``W``: ``signal`` is the exit status) or ``"killed"`` (``X``).
    kind: str
    #: The GDB signal number (``S``/``T``/``X``) or the exit status (``W``).
    signal: int
    #: The thread that stopped, if the stub says.
    thread: ThreadId | None
    #: Expedited registers: GDB register number → raw bytes (target byte order).
    registers: dict[int, bytes]


def parse_stop_reply(payload: bytes) -> StopReply:
    """Decodes ``S AA``, ``T AA n1:r1;…``, ``W AA[;process:p]`` and ``X AA[;process:p]``."""
    kind = payload[:1]
    if kind not in (b"S", b"T", b"W", b"X") or len(payload) < 3:
        raise FormatError(f"not a stop reply: {_show(payload)}")
    value = hex_number(payload[1:3])
    if kind == b"W":
        return StopReply("exited", value, None, {})
    if kind == b"X":
        return StopReply("killed", value, None, {})
    thread = None
    registers: dict[int, bytes] = {}
    if kind == b"T":
        for item in payload[3:].split(b";")[:1024]:
            name, colon, data = item.partition(b":")
            if not colon:
                continue
            if name == b"thread":
                thread = parse_thread_id(data)
            elif name and _HEX_DIGITS.issuperset(name) and len(name) <= 4:
                try:
                    registers[int(name, 16)] = decode_hex(data)
                except FormatError:
                    continue  # an unavailable register ("xx…")
    return StopReply("stopped", value, thread, registers)


#: GDB's signal numbers (gdb/signals.def), which stop replies use whatever the target's are.
_GDB_SIGNAL_NAMES = {
    0: "no signal", 1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP",
    6: "SIGABRT", 7: "SIGEMT", 8: "SIGFPE", 9: "SIGKILL", 10: "SIGBUS", 11: "SIGSEGV",
    12: "SIGSYS", 13: "SIGPIPE", 14: "SIGALRM", 15: "SIGTERM", 16: "SIGURG", 17: "SIGSTOP",
    18: "SIGTSTP", 19: "SIGCONT", 20: "SIGCHLD", 21: "SIGTTIN", 22: "SIGTTOU", 23: "SIGIO",
    24: "SIGXCPU", 25: "SIGXFSZ", 26: "SIGVTALRM", 27: "SIGPROF", 28: "SIGWINCH",
    29: "SIGLOST", 30: "SIGUSR1", 31: "SIGUSR2", 32: "SIGPWR", 33: "SIGPOLL",
}  # fmt: skip
#: GDB signal numbers of the stops a debugger causes itself (an interrupt, a trap).
SIGINT = 2
SIGTRAP = 5


def signal_name(gdb_signal: int) -> str:
    """A readable name for a GDB signal number (its numbering is GDB's, not the host's)."""
    return _GDB_SIGNAL_NAMES.get(gdb_signal, f"signal {gdb_signal}")


# -- registers ----------------------------------------------------------------


class RegisterDesc(namedtuple("RegisterDesc", "name bitsize regnum")):
    """One ``<reg>`` of a target description."""

    __slots__ = ()
    name: str
    bitsize: int
    #: GDB's register number: its place in the ``g`` block, and what ``p`` asks for.
    regnum: int


def decode_register_block(
    payload: bytes, layout: list[RegisterDesc], wanted: dict[str, int]
) -> dict[int, int]:
    """The registers named in ``wanted`` (name → DWARF number) from a ``g`` reply.

    The block holds the registers in ``layout`` order, each in target byte
    order (little-endian here), ``xx`` for one that is unavailable.  A block
    that ends early just lacks its later registers (stubs send only what
    they have).
    """
    if len(payload) % 2 or not _HEX_DIGITS.union(b"x").issuperset(payload):
        raise FormatError(f"not a register block: {_show(payload)}")
    registers: dict[int, int] = {}
    position = 0
    for register in sorted(layout, key=lambda desc: desc.regnum):
        width = register.bitsize // 4
        field = payload[position : position + width]
        position += width
        if len(field) < width:
            break
        dwarf = wanted.get(register.name)
        if dwarf is None or b"x" in field:
            continue
        registers[dwarf] = int.from_bytes(bytes.fromhex(field.decode("ascii")), "little")
    return registers


def decode_register_value(payload: bytes) -> int | None:
    """A ``p`` reply: the value (little-endian), or None when the stub says it is unavailable."""
    if b"x" in payload and set(payload) <= set(b"x"):
        return None
    return int.from_bytes(decode_hex(payload), "little")


# -- qXfer and Host I/O -----------------------------------------------------------


def parse_xfer_chunk(payload: bytes) -> tuple[bytes, bool]:
    """A ``qXfer:…:read`` reply: the (unescaped) data, and whether it is the last chunk."""
    if payload[:1] not in (b"m", b"l"):
        raise FormatError(f"a qXfer reply that is neither 'm…' nor 'l…': {_show(payload)}")
    return unescape(payload[1:]), payload[:1] == b"l"


class HostIoReply(namedtuple("HostIoReply", "result errno data")):
    """A Host I/O (``vFile:``) reply: ``F result[,errno][;data]``."""

    __slots__ = ()
    result: int
    errno: int
    data: bytes


def parse_host_io(payload: bytes) -> HostIoReply:
    if not payload.startswith(b"F"):
        raise FormatError(f"not a Host I/O reply: {_show(payload)}")
    head, semicolon, data = payload[1:].partition(b";")
    result_text, _, errno_text = head.partition(b",")
    negative = result_text.startswith(b"-")
    result = hex_number(result_text[1:] if negative else result_text)
    errno = hex_number(errno_text) if errno_text else 0
    return HostIoReply(-result if negative else result, errno, unescape(data) if semicolon else b"")


def hex_text(text: str) -> bytes:
    """A string as the hex digits Host I/O uses for file names."""
    return text.encode("utf-8", "surrogateescape").hex().encode("ascii")


# -- XML documents ------------------------------------------------------------

#: Largest XML document accepted from a stub (a target description with SVE is ~60 KiB).
MAX_DOCUMENT = 4 << 20
_COMMENT = re.compile(rb"<!--.*?-->", re.S)
_TAG = re.compile(rb"<([A-Za-z_][\w:.-]*)((?:\s+[\w:.-]+\s*=\s*(?:\"[^\"]*\"|'[^']*'))*)\s*/?>")
_ATTRIBUTE = re.compile(rb"([\w:.-]+)\s*=\s*(?:\"([^\"]*)\"|'([^']*)')")
_ARCHITECTURE = re.compile(rb"<architecture>\s*([^<]{1,64}?)\s*</architecture>")
_ENTITY = re.compile(r"&(#x[0-9a-fA-F]{1,6}|#[0-9]{1,7}|lt|gt|amp|quot|apos);")
_NAMED = {"lt": "<", "gt": ">", "amp": "&", "quot": '"', "apos": "'"}


def _unentity(text: str) -> str:
    def replace(match: re.Match[str]) -> str:
        name = match[1]
        if name[0] != "#":
            return _NAMED[name]
        code = int(name[2:], 16) if name[1] == "x" else int(name[1:])
        return chr(code) if 0 < code < 0x110000 else "\ufffd"

    return _ENTITY.sub(replace, text) if "&" in text else text


def xml_elements(document: bytes) -> list[tuple[str, dict[str, str]]]:
    """Every start (or empty) tag of ``document`` in order: (name, attributes).

    The documents stubs send are flat lists of elements whose attributes
    carry the data, so a tag scanner is all that is needed; it never
    expands entities other than the five predefined ones and character
    references, so a hostile DTD cannot make it grow.
    """
    if len(document) > MAX_DOCUMENT:
        raise FormatError(f"an XML document of more than {MAX_DOCUMENT} bytes")
    document = _COMMENT.sub(b"", document)
    elements = []
    for match in _TAG.finditer(document):
        attributes = {}
        for attribute in _ATTRIBUTE.finditer(match[2]):
            value = attribute[2] if attribute[2] is not None else attribute[3]
            attributes[attribute[1].decode("utf-8", "replace")] = _unentity(
                value.decode("utf-8", "replace")
            )
        elements.append((match[1].decode("utf-8", "replace"), attributes))
    return elements


class TargetDescription(namedtuple("TargetDescription", "architecture items")):
    """A target description document: its architecture, and its registers and includes in order."""

    __slots__ = ()
    #: ``<architecture>`` (``aarch64``, ``i386:x86-64``), or "" if it names none.
    architecture: str
    #: ``("reg", name, bitsize, regnum or None)`` and ``("include", href, 0, None)``, in order.
    items: list[tuple[str, str, int, int | None]]


def parse_target_description(document: bytes) -> TargetDescription:
    """The registers and ``xi:include`` references of one target description document."""
    found = _ARCHITECTURE.search(_COMMENT.sub(b"", document[:MAX_DOCUMENT]))
    architecture = found[1].decode("ascii", "replace") if found else ""
    items: list[tuple[str, str, int, int | None]] = []
    for name, attributes in xml_elements(document):
        if name == "xi:include" and "href" in attributes:
            items.append(("include", attributes["href"], 0, None))
        elif name == "reg":
            try:
                bitsize = int(attributes["bitsize"])
                regnum = int(attributes["regnum"]) if "regnum" in attributes else None
            except (KeyError, ValueError):
                raise FormatError(f"a <reg> without a valid bitsize: {attributes}") from None
            if not 0 < bitsize <= 4096 or bitsize % 8 or (regnum is not None and regnum > 1 << 16):
                raise FormatError(f"a <reg> with bitsize {bitsize} or regnum {regnum}")
            items.append(("reg", attributes.get("name", ""), bitsize, regnum))
    return TargetDescription(architecture, items)


def number_registers(items: list[tuple[str, str, int, int | None]]) -> list[RegisterDesc]:
    """GDB's numbering: a register without ``regnum`` follows the previous register."""
    registers = []
    next_number = 0
    for kind, name, bitsize, regnum in items:
        if kind != "reg":
            continue
        number = next_number if regnum is None else regnum
        registers.append(RegisterDesc(name, bitsize, number))
        next_number = number + 1
    return registers


class Library(namedtuple("Library", "name lm l_addr l_ld")):
    """One ``<library>`` of an SVR4 library list: a link_map entry."""

    __slots__ = ()
    name: str
    #: Address of the ``struct link_map``.
    lm: int
    #: The load bias.
    l_addr: int
    #: Runtime address of the dynamic section.
    l_ld: int


def parse_library_list_svr4(document: bytes) -> tuple[int, list[Library]]:
    """``qXfer:libraries-svr4:read``: the main program's link_map address and every library."""
    main = 0
    libraries = []
    for name, attributes in xml_elements(document):
        try:
            if name == "library-list-svr4" and "main-lm" in attributes:
                main = int(attributes["main-lm"], 16)
            elif name == "library":
                libraries.append(
                    Library(
                        attributes.get("name", ""),
                        int(attributes.get("lm", "0"), 16),
                        int(attributes.get("l_addr", "0"), 16),
                        int(attributes.get("l_ld", "0"), 16),
                    )
                )
        except ValueError:
            raise FormatError(f"a library list entry with a bad address: {attributes}") from None
    return main, libraries


def parse_threads(document: bytes) -> dict[ThreadId, str]:
    """``qXfer:threads:read``: every thread, in the stub's order, with its name ("" if none)."""
    threads = {}
    for name, attributes in xml_elements(document):
        if name == "thread" and "id" in attributes:
            thread = parse_thread_id(attributes["id"].encode("ascii", "replace"))
            threads[thread] = attributes.get("name", "")
    return threads


def _show(data: bytes) -> str:
    """A short printable rendering of reply bytes for an error message."""
    text = data[:40].decode("ascii", "backslashreplace")
    return repr(text + ("…" if len(data) > 40 else ""))
