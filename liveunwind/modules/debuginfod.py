"""A debuginfod client: a module's debug file (or executable) by build-id, over HTTP(S).

Follows the conventions of elfutils' client, so a cache filled by gdb or
eu-stack serves liveunwind and the other way round:

- ``DEBUGINFOD_URLS``: servers, separated by spaces, asked in order;
- ``DEBUGINFOD_CACHE_PATH``: the cache, by default
  ``$XDG_CACHE_HOME/debuginfod_client`` or ``~/.cache/debuginfod_client``,
  holding ``BUILDID/debuginfo`` and ``BUILDID/executable``;
- ``DEBUGINFOD_TIMEOUT``: seconds a server has to answer, and to add each
  further 100 KiB of the file (default 90; see :class:`_Watchdog`);
  ``DEBUGINFOD_MAXTIME`` and ``DEBUGINFOD_MAXSIZE``, when set, bound a whole
  download's seconds and bytes.

A server that does not answer in time, stalls, or fails to connect is not
asked again in this run: a dead or slow server costs the timeout once,
never a hang.  What arrives is checked before it enters the cache: an ELF
file from its first bytes, whole, with the requested build-id; anything
else is one problem line and is not cached.  A large download shows its
progress on stderr.  This module is imported only when ``DEBUGINFOD_URLS``
is set and a module lacks symbols or CFI (``ElfModule.debug_file``), or
lacks DWARF under ``--lines`` (``lines.dwarf_image``).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time

from liveunwind.errors import FormatError
from liveunwind.modules.debuginfo import DebugFile, _open_image

TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket
    import urllib.request
    from http.client import HTTPResponse

    from liveunwind.formats.elf import ElfImage

DEFAULT_TIMEOUT = 90.0
#: Downloads at least this large show their progress on stderr.
PROGRESS_FROM = 1 << 20
#: Seconds between two progress lines.
_PROGRESS_EVERY = 1.0
_CHUNK = 1 << 16
#: Largest download accepted when DEBUGINFOD_MAXSIZE does not say.
_MAX_SIZE = 16 << 30
#: Bytes a download must add per DEBUGINFOD_TIMEOUT seconds (elfutils' stall rule).
LOW_SPEED = 100 << 10
_ELF_MAGIC = b"\x7fELF"
#: Characters of a server's own words kept in a note.
_MAX_REASON = 120

#: Servers that failed to connect or timed out in this run: not asked again.
_dead_servers: set[str] = set()
#: (build-id, kind) already asked in this run → the cached path, or None.
_answers: dict[tuple[bytes, str], str | None] = {}


def servers() -> list[str]:
    """The server URLs of ``DEBUGINFOD_URLS``, in order, without the dead ones."""
    urls = os.environ.get("DEBUGINFOD_URLS", "").split()
    return [url.rstrip("/") for url in urls if url.rstrip("/") not in _dead_servers]


def cache_path() -> str:
    """The client cache directory (elfutils' default when the environment names none)."""
    path = os.environ.get("DEBUGINFOD_CACHE_PATH")
    if path:
        return path
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "debuginfod_client")


def _seconds(name: str, default: float | None) -> float | None:
    text = os.environ.get(name, "")
    try:
        value = float(text)
    except ValueError:
        return default
    return value if value > 0 else default


def debug_file(build_id: bytes, problems: list[str]) -> DebugFile | None:
    """The debug file of ``build_id`` from the cache or a server, as a module keeps it."""
    path = fetch(build_id, "debuginfo", problems)
    image = None if path is None else _open_image(path, problems)
    return None if image is None or path is None else DebugFile(image, path, "debuginfod")


def debuginfo_image(build_id: bytes, problems: list[str]) -> ElfImage | None:
    """The debug file of ``build_id`` from the cache or a server, opened; None if none has it."""
    path = fetch(build_id, "debuginfo", problems)
    return None if path is None else _open_image(path, problems)


def executable_image(build_id: bytes, problems: list[str]) -> ElfImage | None:
    """The executable (or library) of ``build_id``, for a module whose file is missing."""
    path = fetch(build_id, "executable", problems)
    return None if path is None else _open_image(path, problems)


def fetch(build_id: bytes, kind: str, problems: list[str]) -> str | None:
    """The path in the cache of the ``kind`` file of ``build_id``, downloaded if need be.

    ``kind`` is ``debuginfo`` or ``executable``.  Each (build-id, kind) is
    looked for once per run.
    """
    key = (build_id, kind)
    if key in _answers:
        return _answers[key]
    hex_id = build_id.hex()
    if not hex_id or kind not in ("debuginfo", "executable"):
        return None
    target = os.path.join(cache_path(), hex_id, kind)
    found: str | None = target if _valid(target, build_id) else None
    if found is None:
        for server in servers():
            if _download(server, hex_id, kind, target, build_id, problems):
                found = target
                break
    _answers[key] = found
    return found


def _valid(path: str, build_id: bytes) -> bool:
    """Whether ``path`` is a cached ELF file with ``build_id`` (elfutils leaves empty
    files for misses; those are not ours to judge, so they count as absent)."""
    try:
        if os.path.getsize(path) == 0:
            return False
    except OSError:
        return False
    image = _open_image(path, [])
    return image is not None and image.build_id == build_id


def _download(
    server: str, hex_id: str, kind: str, target: str, build_id: bytes, problems: list[str]
) -> bool:
    """Fetches one file from one server into the cache; False (and why, in problems) if not.

    Whatever the server does — no answer, a trickle, an HTTP reply that is
    not one, a body that is not the file — ends within the bounds of
    :class:`_Watchdog` with one line in ``problems`` and nothing in the cache.
    """
    import http.client
    import urllib.error

    url = f"{server}/buildid/{hex_id}/{kind}"
    timeout = _seconds("DEBUGINFOD_TIMEOUT", DEFAULT_TIMEOUT) or DEFAULT_TIMEOUT
    watchdog = _Watchdog(timeout, _seconds("DEBUGINFOD_MAXTIME", None))
    try:
        with watchdog:
            response = _opener(watchdog).open(_request(url), timeout=timeout)
            with response:
                watchdog.answered(int(response.headers.get("Content-Length") or 0))
                received = _receive(response, server, hex_id, kind, target, watchdog)
    except urllib.error.HTTPError as error:
        if error.code != 404:
            problems.append(f"debuginfod {server}: {kind} of {hex_id}: HTTP {error.code}")
        return False
    except (OSError, ValueError, http.client.HTTPException) as error:
        # Refused, unreachable, too slow, cut short, not HTTP, a full disk: not asked again.
        _dead_servers.add(server)
        reason = watchdog.expired or _describe(getattr(error, "reason", error), timeout)
        problems.append(f"debuginfod {server}: {kind} of {hex_id}: {reason}; not asked again")
        return False
    if isinstance(received, str):
        problems.append(f"debuginfod {server}: {kind} of {hex_id}: {received}; ignored")
        return False
    return _accept(received[0], target, build_id, server, problems)


def _request(url: str) -> urllib.request.Request:
    import urllib.request

    return urllib.request.Request(url, headers={"User-Agent": "liveunwind debuginfod client"})


def _describe(error: object, timeout: float) -> str:
    """Why a request failed, on one line (a server's words may hold anything, line breaks too)."""
    import http.client

    if isinstance(error, TimeoutError):
        return f"no answer within DEBUGINFOD_TIMEOUT={timeout:g} s"
    if isinstance(error, http.client.IncompleteRead):
        return f"cut short after {len(error.partial)} bytes"
    text = " ".join(str(error).split())[:_MAX_REASON]
    if isinstance(error, http.client.HTTPException):
        return f"not an HTTP answer ({type(error).__name__}{': ' + text if text else ''})"
    return text


def _receive(
    response: HTTPResponse, server: str, hex_id: str, kind: str, target: str, watchdog: _Watchdog
) -> tuple[str] | str:
    """Streams the body into a temporary file beside ``target``: (its path,) or why not.

    What is plainly not the file is refused as soon as it shows: a size
    over the limit (declared or reached), a body that does not start as an
    ELF file.  A body cut short of its Content-Length raises OSError, and so
    does a server the watchdog cut off; nothing partial is left behind.
    """
    limit = int(_seconds("DEBUGINFOD_MAXSIZE", None) or _MAX_SIZE)
    total = watchdog.total
    if total > limit:
        return f"{total} bytes, larger than allowed ({limit})"
    os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
    partial = f"{target}.{os.getpid()}.part"
    progress = _Progress(server, hex_id, kind, total)
    size = 0
    head = b""
    try:
        with open(partial, "wb") as out:
            while chunk := response.read(_CHUNK):
                size += len(chunk)
                watchdog.received = size
                if len(head) < len(_ELF_MAGIC):
                    head += chunk[: len(_ELF_MAGIC)]
                    if not _ELF_MAGIC.startswith(head[: len(_ELF_MAGIC)]):
                        _remove(partial)
                        return "sent something that is not an ELF file"
                if size > limit:
                    _remove(partial)
                    return f"sent more than allowed ({limit} bytes)"
                out.write(chunk)
                progress.update(size)
        if watchdog.expired:
            raise TimeoutError(watchdog.expired)
        if total and size != total:
            raise OSError(f"cut short at {size} of {total} bytes")
    except BaseException:
        _remove(partial)
        raise
    progress.done(size)
    return (partial,)


def _accept(partial: str, target: str, build_id: bytes, server: str, problems: list[str]) -> bool:
    """Moves a download into the cache if it is a whole ELF file with the requested build-id."""
    image = _open_image(partial, problems)
    actual = None if image is None else image.build_id
    why = None
    if image is None:
        why = "not an ELF file"
    elif actual != build_id:
        why = f"build-id {actual.hex() if actual else None}"
    else:
        why = _incomplete(image)
    if why is not None:
        _remove(partial)
        problems.append(f"debuginfod {server}: sent {why} for {build_id.hex()}; ignored")
        return False
    os.replace(partial, target)
    return True


def _incomplete(image: ElfImage) -> str | None:
    """Why an image whose headers read is still not a whole file (cut short), or None."""
    try:
        for section in image.section_headers:
            image.contents(section)  # FormatError where a section lies past the end
    except FormatError as error:
        return f"a file cut short ({error})"
    return None


class _Watchdog:
    """Bounds one download in time, whatever the server does.

    The answer (status and headers) must come within ``timeout`` seconds
    of the request, and by each further multiple of ``timeout`` the body
    must have grown by :data:`LOW_SPEED` bytes more (or be complete) —
    elfutils' rule for a server that stalls — and, with ``max_time``, the
    whole download must end by then.  A server that fails is cut off by
    shutting its socket down, which wakes the reader at once.  DNS look-ups
    are not bounded (``getaddrinfo`` cannot be interrupted).
    """

    def __init__(self, timeout: float, max_time: float | None) -> None:
        import threading

        self.timeout = timeout
        self.max_time = max_time
        self.total = 0
        self.received = 0
        self.has_answered = False
        #: Why the server was cut off, or None.
        self.expired: str | None = None
        self._socket: socket.socket | None = None
        self._finished = threading.Event()
        self._thread = threading.Thread(target=self._run, name="debuginfod watchdog", daemon=True)

    def __enter__(self) -> _Watchdog:
        self._started = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._finished.set()
        self._thread.join()

    def watch(self, connection: socket.socket) -> None:
        """The socket of the request (a redirect's replaces the last)."""
        self._socket = connection
        if self.expired:
            self._cut()

    def answered(self, total: int) -> None:
        self.total = total
        self.has_answered = True

    def _run(self) -> None:
        windows = 1
        while True:
            check = self._started + windows * self.timeout
            if self.max_time is not None:
                check = min(check, self._started + self.max_time)
            if self._finished.wait(max(0.0, check - time.monotonic())):
                return
            elapsed = time.monotonic() - self._started
            if self.max_time is not None and elapsed >= self.max_time:
                self.expired = f"took longer than DEBUGINFOD_MAXTIME={self.max_time:g} s"
            elif not self.has_answered:
                self.expired = f"no answer within DEBUGINFOD_TIMEOUT={self.timeout:g} s"
            else:
                wanted = windows * LOW_SPEED
                if self.received < (min(wanted, self.total) if self.total else wanted):
                    self.expired = (
                        f"{self.received} bytes in {elapsed:.0f} s, under {LOW_SPEED >> 10} KiB"
                        f" per DEBUGINFOD_TIMEOUT={self.timeout:g} s"
                    )
            if self.expired:
                self._cut()
                return
            windows += 1

    def _cut(self) -> None:
        import socket

        connection = self._socket
        if connection is not None:
            # The plain socket's shutdown, also for TLS: SSLSocket's own would
            # unwrap the connection under the reading thread.
            with contextlib.suppress(OSError):
                socket.socket.shutdown(connection, socket.SHUT_RDWR)


def _opener(watchdog: _Watchdog) -> urllib.request.OpenerDirector:
    """urllib's opener whose HTTP(S) connections hand their socket to ``watchdog``."""
    import http.client
    import urllib.request

    class Http(http.client.HTTPConnection):
        def connect(self) -> None:
            super().connect()
            watchdog.watch(self.sock)

    class Https(http.client.HTTPSConnection):
        def connect(self) -> None:
            super().connect()
            watchdog.watch(self.sock)

    class HttpHandler(urllib.request.HTTPHandler):
        def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
            return self.do_open(Http, req)

    class HttpsHandler(urllib.request.HTTPSHandler):
        def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
            return self.do_open(Https, req)

    return urllib.request.build_opener(HttpHandler, HttpsHandler)


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


class _Progress:
    """``downloading … 12.0/48.0 MiB`` on stderr, for downloads of at least PROGRESS_FROM."""

    def __init__(self, server: str, hex_id: str, kind: str, total: int) -> None:
        self.label = f"liveunwind: debuginfod: {kind} of {hex_id} from {server}"
        self.total = total
        self.shown_at = 0.0
        self.shown = False

    def update(self, size: int) -> None:
        if max(size, self.total) < PROGRESS_FROM:
            return
        now = time.monotonic()
        if now - self.shown_at >= _PROGRESS_EVERY:
            self.shown_at = now
            self.shown = True
            of = f"/{self.total / (1 << 20):.1f}" if self.total else ""
            sys.stderr.write(f"{self.label}: {size / (1 << 20):.1f}{of} MiB\n")
            sys.stderr.flush()

    def done(self, size: int) -> None:
        if self.shown:
            sys.stderr.write(f"{self.label}: {size / (1 << 20):.1f} MiB, done\n")
            sys.stderr.flush()


def forget_run_state() -> None:
    """Forgets dead servers and answers (a new run; tests call it between cases)."""
    _dead_servers.clear()
    _answers.clear()
