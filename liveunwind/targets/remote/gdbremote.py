"""A process behind a GDB remote stub (gdbserver, ``qemu-aarch64 -g``) as an AddressSpace.

Inside ``with GdbRemote(host, port) as target:`` the target is stopped: the
stub stopped it when we connected (QEMU waits for a debugger at the first
instruction, ``gdbserver --attach`` stops the process), or, with ``after``,
it ran that many seconds more and was interrupted with ``^C``.  Leaving the
``with`` lets it run again, as a debugger's ``detach`` would:

- ``D`` (detach) when the stop was ours (the stub's own stop, an interrupt,
  a trap) or when the stub filters signals itself (gdbserver, which passes
  the stopping signal on when it detaches);
- otherwise ``C sig`` — continue delivering the signal the target stopped
  with, so nothing is lost — and the connection is closed (QEMU's ``D``
  would drop the signal).

The stub must keep the target stopped while its memory is read, so the
backtrace is taken inside the ``with``.  What it reads:

- registers: ``Hg`` + ``g`` per thread, laid out by the target description
  (``qXfer:features:read``), or ``p`` per register when ``g`` is refused;
- memory: ``m`` (``x`` when the stub offers binary reads) by pages, each
  read once per stop, as many per request as the stub's packets carry; code
  and read-only data are served from the local copies of the files instead
  (found with ``--sysroot``/``--search-path`` and checked against the
  build-id in target memory), so a backtrace costs round trips only for stacks;
- what is loaded where (:mod:`liveunwind.targets.loadedfiles`): the
  executable from ``qXfer:exec-file`` (or the auxiliary vector's
  ``AT_EXECFN``, or the EXE given), placed by ``AT_ENTRY``; libraries from
  ``qXfer:libraries-svr4``, else the dynamic linker's link_map list read
  from memory; the vDSO from ``AT_SYSINFO_EHDR``.

A three-thread program costs 22 round trips through gdbserver and 29 through
QEMU (which lists one thread per ``qsThreadInfo`` and reads 2 KiB per ``m``);
gdb's ``thread apply all bt`` sends 186 packets for the same.

QEMU user mode ignores ``^C`` while the guest runs: its stub reads from the
debugger only when the guest gets a signal (QEMU 7.2 reports SIGINT as
``T02``, SIGTRAP as ``T05``; a signal the guest leaves at its default
"ignore" never reaches the stub).  So with ``after`` no ``^C`` is sent
there: when the stub's process runs on this machine
(:mod:`~liveunwind.targets.remote.portowner`: the owner of the listening
port, checked to be QEMU), it is sent SIGINT, the stub reports the guest
stopped with it, and the detach drops it — the guest runs on without ever
seeing it.  QEMU stops only the guest thread the signal landed on: one
that runs on meanwhile is reported without registers.  ``stopped_how``
says which way the target was stopped.  A stub
elsewhere gets the ``after`` seconds to stop by itself.  gdbserver
interrupts an attached process by signalling its process group, which
fails for a process that does not lead one.  When the stop does not come,
the target is left running, with a RemoteError saying so.
"""

from __future__ import annotations

import bisect
import os
import signal
import time

from liveunwind.arch import Arch, arch_by_elf_machine, arch_by_gdb_architecture, supported
from liveunwind.errors import FormatError, MemoryReadError, UsageError
from liveunwind.formats.auxv import AT_ENTRY, parse_auxv
from liveunwind.targets.base import AddressSpace, Mapping, ThreadState
from liveunwind.targets.filefinder import FileFinder, open_image
from liveunwind.targets.files import FileError, open_file
from liveunwind.targets.linkmap import PAGE_SIZE, LoadedObject
from liveunwind.targets.loadedfiles import LoadedFiles
from liveunwind.targets.remote import rsp
from liveunwind.targets.remote.connection import DEFAULT_TIMEOUT, Connection, RemoteError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from liveunwind.formats.elf import ElfImage
    from liveunwind.targets.files import RegularFile

_PAGE = PAGE_SIZE
#: What this client tells the stub it understands (``xmlRegisters=i386`` makes
#: an x86 gdbserver send a target description).
_CLIENT_FEATURES = b"qSupported:multiprocess+;xmlRegisters=i386;qRelocInsn-;vContSupported+"
#: Most threads listed (``qsThreadInfo`` rounds are bounded by this too).
MAX_THREADS = 1 << 16
#: Most documents of one target description (the main one and its includes).
_MAX_DESCRIPTIONS = 16
#: Largest single read from target memory.
_MAX_READ = 64 << 20
#: Largest block read with one packet, whatever the stub's packet size.
_MAX_BLOCK = 1 << 16
#: GDB signal numbers of stops that are not the target's own: none, ^C, a trap, SIGSTOP.
_OUR_SIGNALS = (0, rsp.SIGINT, rsp.SIGTRAP, 17)


class GdbRemote(AddressSpace):
    """AddressSpace of a process behind a GDB stub, usable inside ``with``."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        executable: str | None = None,
        sysroot: str | None = None,
        search_path: Sequence[str] = (),
        timeout: float = DEFAULT_TIMEOUT,
        after: float | None = None,
        attach: int | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.timeout = timeout
        self._executable_argument = executable
        self._finder = FileFinder(sysroot=sysroot, search_path=search_path)
        self._after = after
        self._attach = attach
        self.problems: list[str] = []
        self._connection: Connection | None = None
        #: The last connection, kept for its counters after it is closed.
        self._counted: Connection | None = None
        #: True while the stub holds the target stopped for us.
        self._stopped = False
        self._stop = rsp.StopReply("stopped", 0, None, {})
        #: The process id the stub's thread ids carry (QEMU calls every process 1).
        self._stub_pid: int | None = None
        self._features: dict[str, str | bool] = {}
        #: The program's entry point, from the auxiliary vector the stub gave.
        self._entry: int | None = None
        self._memory: _Memory | None = None
        self._threads: list[ThreadState] = []
        self._mappings: list[Mapping] = []
        self._starts: list[int] = []
        #: The target's files, once the target is stopped.
        self._loaded: LoadedFiles | None = None
        #: perf_counter() when the target was stopped for us, and when it was let go.
        self.stopped_at: float | None = None
        self.resumed_at: float | None = None
        #: Which way the target came to be stopped, for --verbose.
        self.stopped_how = ""
        #: The QEMU process a SIGINT stopped the guest through, if one did.
        self._qemu_pid: int | None = None

    # -- context management ---------------------------------------------------

    def __enter__(self) -> GdbRemote:
        self._connection = self._counted = Connection(self.host, self.port, timeout=self.timeout)
        try:
            self._handshake()
            self._take_stop()
            self.arch, layout = self._describe()
            self._memory = _Memory(self._connection, self._block_size(), self._binary_reads())
            before = self._guest_activity()
            self._threads = self._without_running(self._read_threads(layout), before)
            self._mappings = self._find_mappings()
            self._starts = [mapping.start for mapping in self._mappings]
        except BaseException:
            self._leave(failing=True)
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._leave(failing=exc_info[0] is not None)

    @property
    def stats(self) -> dict[str, int]:
        """Protocol round trips and bytes received so far (for ``--stats``)."""
        connection = self._counted
        if connection is None:
            return {"round_trips": 0, "bytes_received": 0}
        return {"round_trips": connection.round_trips, "bytes_received": connection.bytes_received}

    @property
    def matches(self) -> list[str]:
        """The file here that stands for each path the target names that is not here, and how."""
        return [] if self._loaded is None else self._loaded.matches

    # -- AddressSpace ---------------------------------------------------------

    def threads(self) -> list[ThreadState]:
        return self._threads

    def mappings(self) -> list[Mapping]:
        return self._mappings

    def read(self, address: int, size: int) -> bytes:
        """Code and read-only data from the local files; everything else from the stub."""
        if size <= 0:
            return b""
        data = self._read_file(address, size)
        if data is not None:
            return data
        if self._memory is None or not self._stopped:
            raise MemoryReadError(address, size, "the target is no longer stopped")
        return self._memory.read(address, size)

    def mapped_image(self, mapping: Mapping) -> ElfImage | None:
        found = self._loaded.file(mapping) if self._loaded is not None else None
        return None if found is None else found.image

    def open_mapped_file(self, mapping: Mapping) -> RegularFile | None:
        found = self._loaded.file(mapping) if self._loaded is not None else None
        if found is None:
            return None
        try:
            return open_file(found.path)
        except FileError:
            return None

    # -- connecting and stopping ------------------------------------------------

    def _request(self, payload: bytes, what: str = "") -> bytes:
        assert self._connection is not None
        return self._connection.request(payload, what=what)

    def _handshake(self) -> None:
        self._features = rsp.parse_features(self._request(_CLIENT_FEATURES, "'qSupported'"))
        if (
            self._features.get("QStartNoAckMode") is True
            and self._request(b"QStartNoAckMode") == b"OK"
        ):
            assert self._connection is not None
            self._connection.acknowledging = False
        if self._attach is not None:
            if self._request(b"!") != b"OK":
                raise RemoteError(
                    f"the stub at {self.where} cannot attach to processes "
                    "(start gdbserver with --multi)"
                )
            reply = self._request(b"vAttach;%x" % self._attach, "'vAttach'")
            error = rsp.error_code(reply)
            if error is not None or not reply:
                raise RemoteError(
                    f"the stub at {self.where} cannot attach to process {self._attach}: "
                    f"{error or 'not supported'}"
                )

    @property
    def where(self) -> str:
        return f"{self.host}:{self.port}"

    def _take_stop(self) -> None:
        """Learns why the target is stopped; with ``after``, lets it run and interrupts it."""
        reply = self._request(b"?")
        if reply.startswith(b"W") and self._attach is None:
            # A gdbserver --multi without a process; in extended mode it outlives this
            # connection, as it would a debugger's ``target extended-remote``.
            self._request(b"!")
            raise RemoteError(
                f"the stub at {self.where} has no process; to have gdbserver --multi attach "
                "to one, name its pid"
            )
        self._stop = self._stop_reply(reply)
        self._stopped = True
        self.stopped_at = time.perf_counter()
        if self._after is None:
            self.stopped_how = f"held by the stub when reached ({self._signal_text()})"
            return
        assert self._connection is not None
        interruptible = self._honours_interrupt()
        self._connection.send(self._continue_packet())
        self._stopped = False
        self.stopped_at = None
        try:
            stop = self._connection.wait_stop(self._after, what="a stop")
        except KeyboardInterrupt:
            # Stopped again, the target can be detached from on the way out.
            if interruptible and not self._connection.broken:
                self._connection.interrupt()
                stop = self._connection.wait_stop(self.timeout, what="the stop after ^C")
                if stop is not None:
                    self._stop = self._stop_reply(stop)
                    self._stopped = True
            raise
        how = ""  # how it was stopped, if it did not stop by itself
        if stop is None and not interruptible:
            stop, how = self._stop_by_signal()
        elif stop is None:
            self._connection.interrupt()
            stop = self._connection.wait_stop(self.timeout, what="the stop after ^C")
            if stop is None:
                raise RemoteError(
                    f"the stub at {self.where} did not stop the target within "
                    f"{self.timeout:g} s of the interrupt; it is left running (gdbserver "
                    "interrupts an attached process by signalling its process group, which "
                    "fails unless the target leads one)"
                )
            how = f"interrupted with ^C after {self._after:g} s"
        self._stop = self._stop_reply(stop)
        self._stopped = True
        self.stopped_at = time.perf_counter()
        self.stopped_how = how or f"stopped by itself ({self._signal_text()}) within --after"

    def _signal_text(self) -> str:
        signal_number = self._stop.signal
        return rsp.signal_name(signal_number) if signal_number else "no signal"

    def _stop_by_signal(self) -> tuple[bytes, str]:
        """QEMU user mode: SIGINT to the stub's process, whose stub reports the guest stopped.

        Only when that process runs here and is QEMU; the detach in
        :meth:`_leave` drops the SIGINT (it is a stop of ours), so the
        guest never gets it.  Returns the stop reply and how the stop came.
        """
        assert self._connection is not None and self._after is not None
        pid, reason = self._stub_process()
        if pid is None:
            raise RemoteError(
                f"the target behind {self.where} did not stop within {self._after:g} s and "
                f"QEMU user mode does not stop a running guest on ^C; {reason}, so it cannot "
                "be sent a signal; the guest is left running"
            )
        try:
            os.kill(pid, signal.SIGINT)
        except OSError as error:
            raise RemoteError(
                f"cannot send SIGINT to QEMU (pid {pid}) to stop the guest: "
                f"{(error.strerror or str(error)).lower()}; the guest is left running"
            ) from None
        self._qemu_pid = pid
        stop = self._connection.wait_stop(self.timeout, what="the stop after SIGINT")
        if stop is None:
            raise RemoteError(
                f"QEMU (pid {pid}) did not report the guest stopped within {self.timeout:g} s "
                "of SIGINT; the guest is left running (a guest thread that blocks SIGINT gets "
                "it when it unblocks it)"
            )
        how = (
            f"stopped by SIGINT sent to QEMU (pid {pid}) after {self._after:g} s, which its stub "
            "reported as a stop; not delivered to the guest (QEMU user mode ignores the GDB "
            "interrupt)"
        )
        return stop, how

    def _stub_process(self) -> tuple[int | None, str]:
        """The QEMU process serving this connection on this machine, or None and why not."""
        from liveunwind.targets.remote import portowner  # only for a guest that will not stop

        assert self._connection is not None
        try:
            local, peer, port = self._connection.addresses()
        except OSError:
            return None, "the connection's addresses cannot be read"
        if not portowner.on_this_machine(local, peer):
            return None, "the stub runs on another machine"
        pid, reason = portowner.listening_owner(peer, port, seconds=self.timeout)
        if pid is None:
            return None, reason
        name = portowner.executable_name(pid)
        if not name.startswith("qemu-"):
            shown = name or "an unknown program"
            return None, f"the process listening on port {port} (pid {pid}, {shown}) is not QEMU"
        return pid, ""

    def _honours_interrupt(self) -> bool:
        """False for QEMU user mode, which reads nothing from gdb while the guest runs.

        A ``^C`` it has not read stays in its socket and, once liveunwind has
        hung up, makes QEMU (7.2) resend its next stop reply into the closed
        connection and die of SIGPIPE; so it is never sent there.  QEMU
        answers ``qqemu.sstepbits``; only its system mode has ``qqemu.PhyMemMode``.
        """
        if not self._request(b"qqemu.sstepbits"):
            return True
        return bool(self._request(b"qqemu.PhyMemMode"))

    def _stop_reply(self, payload: bytes) -> rsp.StopReply:
        try:
            reply = rsp.parse_stop_reply(payload)
        except FormatError as error:
            raise RemoteError(
                f"the stub at {self.where} sent an unreadable stop reply: {error}"
            ) from None
        if reply.kind == "exited":
            raise RemoteError(f"the target behind {self.where} exited with status {reply.signal}")
        if reply.kind == "killed":
            raise RemoteError(
                f"the target behind {self.where} was killed by {rsp.signal_name(reply.signal)}"
            )
        if reply.thread is not None and reply.thread.pid is not None:
            self._stub_pid = reply.thread.pid
        return reply

    def _leave(self, *, failing: bool = False) -> None:
        """Lets the target run on, with the signal it stopped with; closes the connection.

        Nothing is sent on a connection that broke (a stub that stopped
        answering would only make the error wait longer).  While another
        error is on its way (``failing``), a failure to let go is not
        raised over it.
        """
        connection = self._connection
        if connection is None:
            return
        try:
            if self._stopped and not connection.broken:
                self._stopped = False
                if self._foreign_signal() and self._features.get("QPassSignals") is not True:
                    connection.send(self._continue_packet(), "'C'")
                else:
                    reply = connection.request(self._detach_packet(), "'D'")
                    if reply != b"OK":
                        connection.send(self._continue_packet(), "'c'")
                        raise RemoteError(
                            f"the stub at {self.where} refused to detach "
                            f"({rsp.error_code(reply) or 'not supported'}); the target was "
                            "continued instead and the stub still holds it"
                        )
                self.resumed_at = time.perf_counter()
        except RemoteError:
            if not failing:
                raise
        finally:
            connection.close()
            self._connection = None

    def _foreign_signal(self) -> int:
        """The signal the target stopped with, unless the stop was a debugger's own."""
        signal = self._stop.signal
        return 0 if signal in _OUR_SIGNALS else int(signal)

    def _continue_packet(self) -> bytes:
        """``c``, or ``C sig`` to deliver the signal the target stopped with."""
        signal = self._foreign_signal()
        return b"C%02x" % signal if signal else b"c"

    def _detach_packet(self) -> bytes:
        """``D``; with the multiprocess extensions ``D;pid`` (gdbserver refuses a bare ``D``)."""
        if self._attach is not None:
            return b"D;%x" % self._attach
        if self._stub_pid is not None and self._features.get("multiprocess") is True:
            return b"D;%x" % self._stub_pid
        return b"D"

    # -- registers and threads ------------------------------------------------

    def _guest_activity(self) -> dict[int, tuple[str, int]] | None:
        """The QEMU threads' states and CPU times, when a SIGINT to QEMU stopped the guest."""
        if self._qemu_pid is None:
            return None
        from liveunwind.targets.remote import portowner

        return portowner.thread_activity(self._qemu_pid)

    def _without_running(
        self, threads: list[ThreadState], before: dict[int, tuple[str, int]] | None
    ) -> list[ThreadState]:
        """Threads that ran on while their registers were read lose them.

        QEMU user mode stops only the guest thread that took the signal; the
        others run on (each is a thread of QEMU with the guest's tid), and
        the registers its stub gives for a running one are its emulated CPU's
        last saved state, whose pc can lag behind the rest.  A thread QEMU
        shows running, or that used CPU time while the registers were read,
        is reported as not stopped, without frames, rather than walked from
        registers of no one instant.  A thread blocked in a system call
        (sleeping, no CPU time) keeps its registers.
        """
        if before is None or self._qemu_pid is None:
            return threads
        from liveunwind.targets.remote import portowner

        after = portowner.thread_activity(self._qemu_pid)
        stopped = self._stop.thread.tid if self._stop.thread is not None else None
        result = []
        for thread in threads:
            then, now = before.get(thread.tid), after.get(thread.tid)
            ran = then is not None and now is not None and (now[0] == "R" or now[1] != then[1])
            if ran and thread.tid != stopped:
                state = "running: QEMU user mode stops only the thread that took the signal"
                thread = ThreadState(thread.tid, thread.name, {}, state, stopped=False)
            result.append(thread)
        return result

    def _describe(self) -> tuple[Arch, list[rsp.RegisterDesc]]:
        """The architecture and the ``g`` block layout, from the target description if any."""
        architecture = ""
        layout: list[rsp.RegisterDesc] = []
        if self._features.get("qXfer:features:read") is True:
            architecture, layout = self._target_description()
        arch = arch_by_gdb_architecture(architecture) or self._arch_from_files(architecture)
        if not layout or not _has_registers(layout, arch):
            layout = [
                rsp.RegisterDesc(register, bits, number)
                for number, (register, bits) in enumerate(arch.gdb.default_layout)
            ]
        return arch, layout

    def _target_description(self) -> tuple[str, list[rsp.RegisterDesc]]:
        """Reads ``target.xml`` and its includes until the registers an unwinder needs are known.

        GDB numbers registers in document order; the general registers come
        first in every description (QEMU's aarch64 one goes on to hundreds
        of system registers), so includes after them are not fetched.
        """
        architecture = ""
        pending = ["target.xml"]
        items: list[tuple[str, str, int, int | None]] = []
        fetched = 0
        while pending and fetched < _MAX_DESCRIPTIONS:
            name = pending.pop(0)
            document = self._xfer(b"features", name.encode("utf-8", "replace"))
            fetched += 1
            if document is None:
                break
            try:
                description = rsp.parse_target_description(document)
            except FormatError as error:
                self.problems.append(f"target description {name}: {error}")
                break
            architecture = architecture or description.architecture
            position = 0
            for item in description.items:
                if item[0] == "include":
                    pending.insert(position, item[1])
                    position += 1
                else:
                    items.append(item)
            known = arch_by_gdb_architecture(architecture)
            if known is not None and _has_registers(rsp.number_registers(items), known):
                break
        return architecture, rsp.number_registers(items)

    def _arch_from_files(self, architecture: str) -> Arch:
        """The architecture of the executable, when the stub does not name a known one."""
        path = self._executable_argument
        if path is None and self._features.get("qXfer:exec-file:read") is True:
            document = self._xfer(b"exec-file", b"")
            path = document.decode("utf-8", "surrogateescape") if document else None
        image = open_image(path) if path else None
        if image is None:
            what = f"an unsupported architecture ({architecture})" if architecture else "none"
            raise RemoteError(
                f"the stub at {self.where} names {what}; give the executable to tell "
                f"which of {supported()} it is"
            )
        try:
            return arch_by_elf_machine(image.machine)
        except UsageError as error:
            raise RemoteError(f"{path}: {error}") from None

    def _read_threads(self, layout: list[rsp.RegisterDesc]) -> list[ThreadState]:
        listed = self._listed_threads()
        wanted = self.arch.gdb.registers
        threads = []
        for thread, name in listed.items():
            registers = self._registers(thread, layout, wanted)
            if registers is None:
                continue
            state = "stopped"
            if self._stop.thread is not None and thread == self._stop.thread and self._stop.signal:
                state = f"stopped by {rsp.signal_name(self._stop.signal)}"
            threads.append(ThreadState(thread.tid, name, registers, state))
        ids = list(listed)
        if self._stub_pid is None:
            self._stub_pid = next((thread.pid for thread in ids if thread.pid is not None), None)
        pid = self._process_id(ids)
        self.pid = pid
        threads.sort(key=lambda state: (state.tid != pid, state.tid))
        if not threads:
            raise RemoteError(f"the stub at {self.where} gave no thread's registers")
        return threads

    def _listed_threads(self) -> dict[rsp.ThreadId, str]:
        """Every thread and its name: one ``qXfer:threads`` document, else ``qfThreadInfo``…"""
        if self._features.get("qXfer:threads:read") is True:
            document = self._xfer(b"threads", b"")
            try:
                threads = rsp.parse_threads(document) if document else {}
            except FormatError as error:
                self.problems.append(f"thread list: {error}")
                threads = {}
            if threads:
                return dict(list(threads.items())[:MAX_THREADS])
        return dict.fromkeys(self._thread_ids(), "")

    def _thread_ids(self) -> list[rsp.ThreadId]:
        ids: list[rsp.ThreadId] = []
        reply = self._request(b"qfThreadInfo")
        while reply and len(ids) < MAX_THREADS:
            try:
                found, last = rsp.parse_thread_list(reply)
            except FormatError as error:
                raise RemoteError(
                    f"the stub at {self.where} sent a bad thread list: {error}"
                ) from None
            ids += found
            if last or not found:
                break
            reply = self._request(b"qsThreadInfo")
        if not ids:
            stopped = self._stop.thread
            ids = [stopped] if stopped is not None else [rsp.ThreadId(None, 0)]
        return list(dict.fromkeys(ids))

    def _process_id(self, ids: list[rsp.ThreadId]) -> int | None:
        """The process id: the multiprocess pid when a thread has it as its id (its main thread).

        QEMU user mode calls every process 1; its main thread's id is then the
        lowest thread id, which is what a Linux pid is.
        """
        tids = {thread.tid for thread in ids}
        for thread in ids:
            if thread.pid is not None and thread.pid in tids:
                return thread.pid
        return min(tids) if tids else None

    def _registers(
        self, thread: rsp.ThreadId, layout: list[rsp.RegisterDesc], wanted: dict[str, int]
    ) -> dict[int, int] | None:
        if thread.tid and self._request(b"Hg" + thread.encode(), "'Hg'") != b"OK":
            self.problems.append(f"thread {thread.tid}: the stub cannot select it")
            return None
        reply = self._request(b"g")
        registers: dict[int, int] = {}
        if reply and rsp.error_code(reply) is None:
            try:
                registers = rsp.decode_register_block(reply, layout, wanted)
            except FormatError as error:
                raise RemoteError(f"the stub at {self.where} sent bad registers: {error}") from None
        if self.arch.pc not in registers or self.arch.sp not in registers:
            registers.update(self._registers_one_by_one(layout, wanted, registers))
        if self.arch.pc not in registers or self.arch.sp not in registers:
            self.problems.append(f"thread {thread.tid}: the stub gave no pc and sp")
            return None
        return registers

    def _registers_one_by_one(
        self, layout: list[rsp.RegisterDesc], wanted: dict[str, int], have: dict[int, int]
    ) -> dict[int, int]:
        """``p`` for each register an unwinder needs that the ``g`` block lacked."""
        registers = {}
        for register in layout:
            dwarf = wanted.get(register.name)
            if dwarf is None or dwarf in have:
                continue
            reply = self._request(b"p%x" % register.regnum, "'p'")
            if not reply or rsp.error_code(reply) is not None:
                continue
            try:
                value = rsp.decode_register_value(reply)
            except FormatError:
                continue
            if value is not None:
                registers[dwarf] = value
        return registers

    # -- qXfer ------------------------------------------------------------------

    def _xfer(self, kind: bytes, annex: bytes) -> bytes | None:
        """A whole ``qXfer:KIND:read:ANNEX`` object, or None if the stub does not have it."""
        chunk = max(256, self._packet_size() - 16)
        data = bytearray()
        while len(data) < rsp.MAX_DOCUMENT:
            reply = self._request(
                b"qXfer:%s:read:%s:%x,%x" % (kind, annex, len(data), chunk),
                f"'qXfer:{kind.decode()}:read'",
            )
            if not reply or rsp.error_code(reply) is not None:
                return None if not data else bytes(data)
            try:
                part, last = rsp.parse_xfer_chunk(reply)
            except FormatError as error:
                raise RemoteError(
                    f"the stub at {self.where} sent a bad {kind.decode()}: {error}"
                ) from None
            data += part
            if last or not part:
                return bytes(data)
        raise RemoteError(f"the stub's {kind.decode()} is larger than {rsp.MAX_DOCUMENT} bytes")

    def _packet_size(self) -> int:
        value = self._features.get("PacketSize")
        try:
            size = int(value, 16) if isinstance(value, str) else 0
        except ValueError:
            size = 0
        return min(max(size, 400), 1 << 20) if size else 400

    def _block_size(self) -> int:
        """Bytes read per ``m``: the largest power of two whose hex reply fits a packet."""
        limit = min(self._packet_size() // 2, _MAX_BLOCK)
        block = 64
        while block * 2 <= limit:
            block *= 2
        return block

    def _binary_reads(self) -> bool:
        return self._features.get("binary-upload") is True

    # -- what is loaded where -----------------------------------------------------

    def _find_mappings(self) -> list[Mapping]:
        """The target's files from what the stub says, else from the loader's own records."""
        auxv = self._auxv()
        self._entry = auxv.get(AT_ENTRY)
        recorded = ""
        if self._features.get("qXfer:exec-file:read") is True:
            pid = b"%x" % self._attach if self._attach is not None else b""
            document = self._xfer(b"exec-file", pid)
            recorded = document.decode("utf-8", "surrogateescape") if document else ""
        assert self._memory is not None
        loaded = self._loaded = LoadedFiles(
            self.arch, self._read_memory, self._finder, header_read=self._memory.unit
        )
        mappings = loaded.mappings(auxv, recorded, self._executable_argument, self._svr4_libraries)
        self.problems += loaded.problems
        return mappings

    def entry_point(self) -> int | None:
        return self._entry

    def _auxv(self) -> dict[int, int]:
        if self._features.get("qXfer:auxv:read") is not True:
            self.problems.append("the stub does not give the auxiliary vector")
            return {}
        document = self._xfer(b"auxv", b"")
        return parse_auxv(document) if document else {}

    def _svr4_libraries(self) -> list[LoadedObject] | None:
        """The loader's list as the stub reads it for us (one round trip), if it does."""
        if self._features.get("qXfer:libraries-svr4:read") is not True:
            return None
        document = self._xfer(b"libraries-svr4", b"")
        if document is None:
            return None
        try:
            _, libraries = rsp.parse_library_list_svr4(document)
        except FormatError as error:
            self.problems.append(f"library list: {error}")
            return None
        return [LoadedObject(lib.name, lib.l_addr, lib.l_ld) for lib in libraries]

    # -- memory -----------------------------------------------------------------

    def _read_memory(self, address: int, size: int) -> bytes:
        """Target memory itself, never a local file (build-ids and the loader's lists)."""
        assert self._memory is not None
        return self._memory.read(address, size)

    def _read_file(self, address: int, size: int) -> bytes | None:
        """From the local file when a read-only file mapping holds all of the range."""
        index = bisect.bisect_right(self._starts, address) - 1
        if index < 0:
            return None
        mapping = self._mappings[index]
        if address + size > mapping.end or mapping.writable or not mapping.is_file:
            return None
        found = self._loaded.file(mapping) if self._loaded is not None else None
        if found is None:
            return None
        offset = mapping.offset + (address - mapping.start)
        try:
            data = found.image.read(offset, size)
        except FormatError:  # the file changed since it was opened: the stub is asked instead
            return None
        return data if len(data) == size else None


class _Memory:
    """Target memory read through the stub, each unit fetched at most once per stop.

    A unit is a page, or less when the stub's packets cannot carry a page
    (QEMU reads at most 2 KiB per ``m``).  A fetch asks for as many missing
    units as one packet carries, from the one needed upwards — the way an
    unwinder goes up a stack — and, when the stub refuses that, for the one
    unit alone: a request that runs into an unmapped page fails as a whole
    on some stubs.
    """

    def __init__(self, connection: Connection, block: int, binary: bool) -> None:
        self._connection = connection
        #: Bytes one request may ask for.
        self.block = block
        self.unit = min(block, _PAGE)
        self._binary = binary
        #: Unit address → its bytes (shorter than a unit where the stub stopped), or None.
        self._units: dict[int, bytes | None] = {}

    def read(self, address: int, size: int) -> bytes:
        if size <= 0:
            return b""
        if address < 0 or size > _MAX_READ or address + size > 1 << 64:
            raise MemoryReadError(address, size, "outside the address space")
        unit = self.unit
        first = address - address % unit
        end = address + size
        chunks = []
        position = first
        while position < end:
            if position not in self._units:
                self._fetch(position, end)
            data = self._units[position]
            if data is None:
                break
            chunks.append(data)
            if len(data) < unit:
                break
            position += unit
        joined = b"".join(chunks)
        result = joined[address - first : address - first + size]
        if len(result) < size:
            raise MemoryReadError(address, size, "the stub cannot read it")
        return result

    def _fetch(self, start: int, end: int) -> None:
        """Reads the unit at ``start`` and the missing ones after it that one packet holds."""
        unit = self.unit
        length = unit
        while length < self.block and start + length not in self._units:
            length += unit
        data = self._request(start, length)
        if data is None and length > unit:
            length = unit
            data = self._request(start, length)
        if data is None:
            self._units[start] = None
            return
        for offset in range(0, min(len(data), length), unit):
            self._units[start + offset] = data[offset : offset + unit]
        if not data:
            self._units[start] = None

    def _request(self, start: int, length: int) -> bytes | None:
        command = b"x" if self._binary else b"m"
        reply = self._connection.request(b"%s%x,%x" % (command, start, length), "'m'")
        if not reply or rsp.error_code(reply) is not None:
            return None
        try:
            if self._binary:
                if not reply.startswith(b"b"):
                    return None
                data = rsp.unescape(reply[1:])
            else:
                data = rsp.decode_hex(reply)
        except FormatError as error:
            raise RemoteError(
                f"the stub at {self._connection.where} sent unreadable memory: {error}"
            ) from None
        return data[:length]


def _has_registers(layout: list[rsp.RegisterDesc], arch: Arch) -> bool:
    """True when ``layout`` places the pc, the sp and every general register of ``arch``."""
    wanted = arch.gdb.registers
    numbers = {wanted[register.name] for register in layout if register.name in wanted}
    return all(number in numbers for number in arch.gdb.general_registers)
