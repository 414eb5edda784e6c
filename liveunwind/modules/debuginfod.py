"""A debuginfod client: a module's debug file (or executable) by build-id, over HTTP(S).

Follows the conventions of elfutils' client, so a cache filled by gdb or
eu-stack serves liveunwind and the other way round:

- ``DEBUGINFOD_URLS``: servers, separated by spaces, asked in order;
- ``DEBUGINFOD_CACHE_PATH``: the cache, by default
  ``$XDG_CACHE_HOME/debuginfod_client`` or ``~/.cache/debuginfod_client``,
  holding ``BUILDID/debuginfo`` and ``BUILDID/executable``;
- ``DEBUGINFOD_TIMEOUT``: seconds to wait for a server to connect and send
  (default 90); ``DEBUGINFOD_MAXTIME`` and ``DEBUGINFOD_MAXSIZE``, when set,
  bound a whole download's seconds and bytes.

A server that does not answer within the timeout, or fails to connect, is
not asked again in this run: a dead or slow server costs the timeout once,
never a hang.  What arrives is checked before it enters the cache: it must
be an ELF file with the requested build-id.  A large download shows its
progress on stderr.  Only with ``--lines`` (or a call site that asks) is
this module imported, and only when ``DEBUGINFOD_URLS`` is set does it reach
the network.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time

from liveunwind.modules.debuginfo import _open_image

TYPE_CHECKING = False
if TYPE_CHECKING:
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
    """Fetches one file from one server into the cache; False (and why, in problems) if not."""
    import urllib.error
    import urllib.request

    url = f"{server}/buildid/{hex_id}/{kind}"
    timeout = _seconds("DEBUGINFOD_TIMEOUT", DEFAULT_TIMEOUT) or DEFAULT_TIMEOUT
    request = urllib.request.Request(url, headers={"User-Agent": "liveunwind debuginfod client"})
    try:
        response: HTTPResponse = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as error:
        if error.code != 404:
            problems.append(f"debuginfod {server}: {kind} of {hex_id}: HTTP {error.code}")
        return False
    except (urllib.error.URLError, OSError, ValueError) as error:
        _dead_servers.add(server)
        reason = getattr(error, "reason", error)
        problems.append(f"debuginfod {server}: not asked again in this run: {reason}")
        return False
    with response:
        try:
            received = _receive(response, server, hex_id, kind, target)
        except (OSError, ValueError) as error:  # a timeout mid-way, a full disk, a reset
            _dead_servers.add(server)
            problems.append(f"debuginfod {server}: {kind} of {hex_id}: {error}")
            return False
    if received is None:
        problems.append(f"debuginfod {server}: {kind} of {hex_id}: larger than allowed")
        return False
    return _accept(received, target, build_id, server, problems)


def _receive(
    response: HTTPResponse, server: str, hex_id: str, kind: str, target: str
) -> str | None:
    """Streams the body into a temporary file beside ``target``; None if over the size limit.

    A body cut short of its Content-Length, or slower than DEBUGINFOD_MAXTIME,
    raises OSError; nothing partial is left behind.
    """
    limit = int(_seconds("DEBUGINFOD_MAXSIZE", None) or _MAX_SIZE)
    max_time = _seconds("DEBUGINFOD_MAXTIME", None)
    started = time.monotonic()
    total = int(response.headers.get("Content-Length") or 0)
    if total > limit:
        return None
    os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
    partial = f"{target}.{os.getpid()}.part"
    progress = _Progress(server, hex_id, kind, total)
    size = 0
    try:
        with open(partial, "wb") as out:
            while chunk := response.read(_CHUNK):
                size += len(chunk)
                if size > limit:
                    _remove(partial)
                    return None
                if max_time and time.monotonic() - started > max_time:
                    raise TimeoutError(f"took longer than DEBUGINFOD_MAXTIME={max_time:g} s")
                out.write(chunk)
                progress.update(size)
        if total and size != total:
            raise OSError(f"cut short at {size} of {total} bytes")
    except BaseException:
        _remove(partial)
        raise
    progress.done(size)
    return partial


def _accept(partial: str, target: str, build_id: bytes, server: str, problems: list[str]) -> bool:
    """Moves a download into the cache if it is an ELF file with the requested build-id."""
    image = _open_image(partial, problems)
    actual = None if image is None else image.build_id
    if actual != build_id:
        _remove(partial)
        what = (
            "not an ELF file" if image is None else f"build-id {actual.hex() if actual else None}"
        )
        problems.append(f"debuginfod {server}: sent {what} for {build_id.hex()}; ignored")
        return False
    os.replace(partial, target)
    return True


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
