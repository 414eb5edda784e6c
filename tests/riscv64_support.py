"""riscv64 targets under QEMU user mode, held at one stopping point for several debuggers.

tests/test_riscv64.py compares liveunwind with gdb-multiarch on riscv64
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

:func:`write_core` writes a core of the held target in the Linux kernel's
format for riscv64 (what a riscv64 kernel writes; QEMU 7.2 user mode writes
no riscv64 core, and gdb-multiarch 13's ``gcore`` through the stub writes
one that gdb itself cannot read — see the notes in test_riscv64.py).
"""

from __future__ import annotations

import itertools
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import RunningProgram
from tests.ports import free_port, wait_listening

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
EM_RISCV = 243
PAGE = 4096


class StubError(RuntimeError):
    """QEMU's stub answered something this module does not expect."""


def _checksum(payload: bytes) -> bytes:
    return b"%02x" % (sum(payload) & 0xFF)


def packet(payload: bytes) -> bytes:
    return b"$" + payload + b"#" + _checksum(payload)


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
            data += _unescape(reply[1:])
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


def _unescape(data: bytes) -> bytes:
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
    return bytes(out)


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
    connection (for :func:`write_core`), usable between debuggers.
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
    return not any(header.type == 3 for header in program_headers(exe.read_bytes()))


# -- ELF reading ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ProgramHeader:
    type: int
    flags: int
    offset: int
    vaddr: int
    filesz: int
    memsz: int


def program_headers(image: bytes) -> list[ProgramHeader]:
    (phoff,) = struct.unpack_from("<Q", image, 32)
    entsize, count = struct.unpack_from("<HH", image, 54)
    headers = []
    for index in range(count):
        kind, flags, offset, vaddr, _, filesz, memsz, _ = struct.unpack_from(
            "<IIQQQQQQ", image, phoff + index * entsize
        )
        headers.append(ProgramHeader(kind, flags, offset, vaddr, filesz, memsz))
    return headers


def _entry(image: bytes) -> int:
    return int(struct.unpack_from("<Q", image, 24)[0])


# -- a kernel-format riscv64 core of a held target ---------------------------------------------


@dataclass(frozen=True)
class LoadedObject:
    """An ELF file the target has loaded: its path in the target, here, and its load bias."""

    target_path: str
    local_path: Path
    bias: int


def loaded_objects(client: Client, exe: Path, auxv: dict[int, int]) -> list[LoadedObject]:
    """The executable (placed by AT_ENTRY), then what the dynamic linker's link_map lists."""
    image = exe.read_bytes()
    bias = auxv[9] - _entry(image)  # AT_ENTRY
    objects = [LoadedObject(str(exe), exe, bias)]
    dynamic = [h for h in program_headers(image) if h.type == 2]  # PT_DYNAMIC
    if not dynamic:
        return objects  # static: no dynamic linker, no link_map
    data = client.read_memory(bias + dynamic[0].vaddr, dynamic[0].memsz) or b""
    r_debug = 0
    for offset in range(0, len(data) - 15, 16):
        tag, value = struct.unpack_from("<qQ", data, offset)
        if tag == 0:
            break
        if tag == 21:  # DT_DEBUG
            r_debug = value
    if not r_debug:
        raise StubError("the executable's DT_DEBUG is not set: no link_map to walk")
    node = struct.unpack("<Q", client.read_memory(r_debug + 8, 8) or bytes(8))[0]
    seen = 0
    while node and seen < 64:
        seen += 1
        l_addr, l_name, _, l_next = struct.unpack(
            "<QQQQ", client.read_memory(node, 32) or bytes(32)
        )
        name = _string(client, l_name)
        if name and not name.startswith("linux-vdso"):
            local = SYSROOT / name.lstrip("/")
            if not local.exists():  # QEMU's -L falls back to the host's own files
                local = Path(name)
            objects.append(LoadedObject(name, local, l_addr))
        node = l_next
    return objects


def _string(client: Client, address: int) -> str:
    if not address:
        return ""
    data = b""
    while b"\0" not in data and len(data) < 4096:
        chunk = client.read_memory(address + len(data), 64)
        if chunk is None:
            break
        data += chunk
    return data.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")


def _page_down(address: int) -> int:
    return address - address % PAGE


def _page_up(address: int) -> int:
    return _page_down(address + PAGE - 1)


@dataclass
class CoreImage:
    """What write_core recorded: per thread its registers (x0–x31, pc), and the files."""

    pid: int
    threads: dict[int, list[int]]
    objects: list[LoadedObject]
    #: Per PT_LOAD: address, what was dumped, p_flags, p_memsz.
    segments: list[tuple[int, bytes, int, int]]


def write_core(held: Held, path: Path, *, stack_limit: int = 1 << 20) -> CoreImage:
    """Writes a core of the held target as a riscv64 Linux kernel would (fs/binfmt_elf.c).

    Notes: NT_PRSTATUS (376 bytes, ``pr_reg`` = user_regs_struct: pc, x1..x31)
    and NT_FPREGSET (264 bytes, zeros: the stub's ``g`` has no FP registers)
    per thread, the stopped thread first; NT_PRPSINFO, NT_SIGINFO, NT_AUXV and
    NT_FILE once.  One PT_LOAD per mapping, p_memsz its size and p_filesz
    what was dumped, as the kernel's default coredump_filter dumps it: each
    loaded file's writable segments and .bss whole, the first page of the one
    holding its ELF header (and build-id), nothing of the others (code comes
    from the files); every thread's stack from its sp up to the end of the
    mapping (at most ``stack_limit`` bytes); QEMU's trampoline page.
    """
    client = held.client
    listed = client.threads()
    order = sorted(listed, key=lambda t: t != held.stopped_thread)
    registers = {thread_tid(t): client.registers(t) for t in order}
    auxv_bytes = client.xfer(b"auxv", b"")
    auxv = dict(struct.iter_unpack("<QQ", auxv_bytes[: len(auxv_bytes) // 16 * 16]))
    objects = loaded_objects(client, held.exe, auxv)

    # The mappings, each as the kernel dumps it (one PT_LOAD per mapping, p_memsz its size,
    # p_filesz what was written): start, end, ELF p_flags, and how much to dump.
    vmas: list[tuple[int, int, int, str]] = []
    file_entries: list[tuple[int, int, int, str]] = []
    for obj in objects:
        loads = [h for h in program_headers(obj.local_path.read_bytes()) if h.type == 1]
        for load in loads:
            start = obj.bias + _page_down(load.vaddr)
            file_end = obj.bias + _page_up(load.vaddr + load.filesz)
            end = obj.bias + _page_up(load.vaddr + load.memsz)
            file_entries.append((start, file_end, _page_down(load.offset) // PAGE, obj.target_path))
            if load.flags & 2:  # PF_W: private, written to: dumped whole
                dump = "all"
            elif load.offset < PAGE:  # the ELF header (and build-id note): its first page
                dump = "header"
            else:
                dump = "none"
            vmas.append((start, file_end, load.flags, dump))
            if end > file_end:  # .bss past the file's last page: anonymous
                vmas.append((file_end, end, 6, "all"))
    starts = sorted(vma[0] for vma in vmas)
    stacks = []
    for regs in registers.values():
        start = _page_down(regs[2])
        limit = min([s for s in starts if s > start], default=start + stack_limit)
        end = start
        while end < min(limit, start + stack_limit) and client.read_memory(end, 1) is not None:
            end += PAGE
        stacks.append((start, end))
    for start, end, flags in _trampoline_pages(client, stacks):
        vmas.append((start, end, flags, "all"))
        stacks = [(s, min(e, start) if s < start else e) for s, e in stacks]
    vmas += [(start, end, 6, "all") for start, end in stacks if end > start]
    vmas.sort()
    if any(a[1] > b[0] for a, b in itertools.pairwise(vmas)):
        raise StubError(f"overlapping mappings: {[(hex(v[0]), hex(v[1])) for v in vmas]}")

    segments = []
    for start, end, flags, dump in vmas:
        size = {"all": end - start, "header": PAGE, "none": 0}[dump]
        pages = [client.read_memory(page, PAGE) for page in range(start, start + size, PAGE)]
        data = b"".join(page if page is not None else bytes(PAGE) for page in pages)
        segments.append((start, data, flags, end - start))

    pid = thread_tid(listed[0])  # QEMU lists the main thread first
    notes = b""
    for index, tid in enumerate(registers):
        regs = registers[tid]
        prstatus = bytearray(376)
        struct.pack_into("<h", prstatus, 12, STOP_SIGNAL if index == 0 else 0)  # pr_cursig
        struct.pack_into("<iiii", prstatus, 32, tid, 0, pid, pid)  # pid ppid pgrp sid
        struct.pack_into("<32Q", prstatus, 112, regs[32], *regs[1:32])  # pc, x1..x31
        notes += _note(b"CORE", 1, bytes(prstatus))  # NT_PRSTATUS
        if index == 0:
            notes += _note(b"CORE", 3, _prpsinfo(pid, held))  # NT_PRPSINFO
            siginfo = struct.pack("<iii", STOP_SIGNAL, 0, 0) + bytes(116)
            notes += _note(b"CORE", 0x53494749, siginfo)  # NT_SIGINFO
            notes += _note(b"CORE", 6, auxv_bytes)  # NT_AUXV
            notes += _note(b"CORE", 0x46494C45, _nt_file(file_entries))  # NT_FILE
        notes += _note(b"CORE", 2, bytes(264))  # NT_FPREGSET: f0..f31, fcsr
    _write_elf(path, notes, segments)
    return CoreImage(pid, registers, objects, segments)


#: QEMU user mode's sigreturn trampoline (li a7, 139; ecall), at the start of a page of its own.
QEMU_SIGRETURN = bytes.fromhex("9308b00873000000")


def _trampoline_pages(client: Client, stacks: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """Pages of QEMU's signal trampoline that words on the stacks point to.

    The kernel dumps its vDSO, which holds the trampoline; QEMU 7.2 has no
    vDSO for riscv64 and puts the trampoline at the start of an anonymous
    page instead, which a kernel's default coredump_filter would dump too.
    """
    candidates = set()
    for start, end in stacks:
        data = client.read_memory(start, end - start) or b""
        for (word,) in struct.iter_unpack("<Q", data[: len(data) // 8 * 8]):
            if word and word % PAGE == 0:
                candidates.add(word)
    pages = []
    for page in sorted(candidates):
        if client.read_memory(page, len(QEMU_SIGRETURN)) == QEMU_SIGRETURN:
            pages.append((page, page + PAGE, 5))
    return pages


def _note(name: bytes, kind: int, desc: bytes) -> bytes:
    name += b"\0"
    header = struct.pack("<III", len(name), len(desc), kind)
    return header + name + bytes(-len(name) % 4) + desc + bytes(-len(desc) % 4)


def _prpsinfo(pid: int, held: Held) -> bytes:
    info = bytearray(136)
    struct.pack_into("<iiii", info, 24, pid, 0, pid, pid)
    info[40:56] = held.exe.name.encode()[:15].ljust(16, b"\0")
    info[56:136] = " ".join([str(held.exe), *held.args]).encode()[:79].ljust(80, b"\0")
    return bytes(info)


def _nt_file(entries: list[tuple[int, int, int, str]]) -> bytes:
    body = struct.pack("<QQ", len(entries), PAGE)
    for start, end, offset, _ in entries:
        body += struct.pack("<QQQ", start, end, offset)
    return body + b"".join(path.encode() + b"\0" for *_, path in entries)


def _write_elf(path: Path, notes: bytes, segments: list[tuple[int, bytes, int, int]]) -> None:
    count = 1 + len(segments)
    header = bytearray(64)
    header[:16] = b"\x7fELF\x02\x01\x01" + bytes(9)
    struct.pack_into(
        "<HHIQQQIHHHHHH", header, 16, 4, EM_RISCV, 1, 0, 64, 0, 0, 64, 56, count, 0, 0, 0
    )
    offset = 64 + 56 * count
    tables = struct.pack("<IIQQQQQQ", 4, 0, offset, 0, 0, len(notes), 0, 4)  # PT_NOTE
    data = notes
    offset += len(notes)
    for address, contents, flags, size in segments:
        padding = -offset % PAGE
        data += bytes(padding)
        offset += padding
        tables += struct.pack("<IIQQQQQQ", 1, flags, offset, address, 0, len(contents), size, PAGE)
        data += contents
        offset += len(contents)
    path.write_bytes(bytes(header) + tables + data)


def run_checked(argv: list[str], timeout: float = 600.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, check=False
    )
