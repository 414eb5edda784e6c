"""Where the command's output goes: files written whole or not at all, and stdout.

A file the user names (``profile --svg``, ``--collapsed-out``, ``--pprof``,
``--speedscope``) is written to
a temporary file beside it, created before any sampling (so a folder that
cannot be written fails at once) and renamed over the name only once all of
it is on disk (a name that is not a regular file, such as ``/dev/stdout``,
is written straight through: see :class:`AtomicFile`).  Interrupted,
killed or out of space, the name holds either what it held before or the
whole new output, never half of it; the temporary file is removed on every
way out but SIGKILL.

A write that fails (a full disk, a quota, an I/O error), to a file or to
stdout, is one line and exit code 74 (:class:`OutputError`).
"""

from __future__ import annotations

import os
import sys

from liveunwind.errors import LiveUnwindError, UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal
    from typing import TextIO
else:
    # signal.py's C module, without the enums signal.py makes (0.7 ms of a cold start)
    import _signal as signal


class OutputError(LiveUnwindError):
    """An output could not be written (sysexits.h's EX_IOERR)."""

    exit_code = 74


class AtomicFile:
    """A file written under a temporary name in its folder, renamed to ``path`` when complete.

    A path that names something other than a regular file — ``/dev/stdout``,
    a pipe such as bash's ``>(flamegraph.pl)`` — cannot be replaced by a
    rename (and must not be: as root that would put a file in place of a
    device); it is opened at once and written straight through.  A symbolic
    link to a regular file keeps pointing where it did: the file it names is
    replaced.
    """

    def __init__(self, path: str) -> None:
        """Creates the temporary file (or opens the stream); one that cannot be is a UsageError."""
        self.path = path
        self._temporary: str | None = None
        self._stream: TextIO | None = None
        import stat
        import tempfile  # only the commands that write files pay for them

        try:
            try:
                regular = stat.S_ISREG(os.stat(path).st_mode)
            except FileNotFoundError:
                regular = True
            if not regular:
                self._stream = open(path, "w", encoding="utf-8")  # noqa: SIM115 (closed in commit or discard)
                return
            self._target = os.path.realpath(path)
            folder, name = os.path.split(self._target)
            # Held until the name is kept here, where discard() finds it: a
            # signal in between would leave the file behind.
            held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
            try:
                descriptor, self._temporary = tempfile.mkstemp(
                    prefix=f".{name}.", suffix=".part", dir=folder
                )
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, held)
            os.close(descriptor)  # a signal held above is raised by here, inside the try
        except OSError as error:
            raise UsageError(f"cannot write {path}: {error.strerror}") from None
        except BaseException:
            self.discard()
            raise

    def commit(self, text: str | bytes) -> None:
        """Writes ``text`` (UTF-8, or bytes as they are), flushed to disk, and renames the
        temporary file to ``path``."""
        data = text.encode("utf-8") if isinstance(text, str) else text
        try:
            if self._stream is not None:
                with self._stream as stream:
                    self._stream = None
                    stream.buffer.write(data)
                return
            temporary = self._temporary
            if temporary is None:
                raise ValueError(f"{self.path} was already written or discarded")
            with open(temporary, "wb") as binary:
                binary.write(data)
                binary.flush()
                os.fsync(binary.fileno())
            os.chmod(temporary, 0o666 & ~_umask())  # mkstemp makes it 0600
            os.replace(temporary, self._target)
            self._temporary = None
        except OSError as error:
            self.discard()
            raise OutputError(
                f"cannot write {self.path}: {error.strerror} (nothing was written there)"
            ) from None

    def discard(self) -> None:
        """Removes the temporary file (interrupted, or another output failed)."""
        stream, self._stream = self._stream, None
        if stream is not None:
            try:  # noqa: SIM105 (contextlib.suppress would import contextlib for this alone)
                stream.close()
            except OSError:
                pass  # a pipe whose reader went away: nothing more to say to it
        temporary, self._temporary = self._temporary, None
        if temporary is not None:
            try:  # noqa: SIM105
                os.unlink(temporary)
            except OSError:
                pass  # already gone: nothing to clean


def _umask() -> int:
    """The process's umask (read by setting it: the only way POSIX offers)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def emit(text: str) -> None:
    """Writes ``text`` to stdout; a stdout that cannot take it (a full disk) is an OutputError.

    A reader that went away (BrokenPipeError) is left to the caller, which
    ends quietly.
    """
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as error:
        raise OutputError(f"cannot write the output: {error.strerror}") from None
