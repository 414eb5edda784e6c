"""The exception hierarchy of liveunwind.

Every error the tool can report derives from :class:`LiveUnwindError` and
carries the process exit code the command line uses for it, so the CLI needs a
single ``except`` clause and never shows a Python traceback.
"""

from __future__ import annotations


class LiveUnwindError(Exception):
    """Base class: a failure the user can act on, with a one-line message."""

    exit_code = 2


class UsageError(LiveUnwindError):
    """The command line or an API argument is malformed."""

    exit_code = 64


class TargetError(LiveUnwindError):
    """The target cannot be used at all (exit code 2)."""


class NoSuchProcessError(TargetError):
    """The pid does not name a live process."""


class NotTraceableError(TargetError):
    """The process exists but cannot be traced: zombie, kernel thread, ourselves."""


class PermissionDeniedError(TargetError):
    """The kernel refused to let us trace or read the target."""


class AttachError(TargetError):
    """Attaching failed for a reason other than permissions."""


class CoreFileError(TargetError):
    """A core file is unreadable, not a core, or of an unknown architecture."""


class MemoryReadError(LiveUnwindError):
    """Target memory at ``address`` could not be read."""

    def __init__(self, address: int, size: int, reason: str = "") -> None:
        self.address = address
        self.size = size
        detail = f": {reason}" if reason else ""
        super().__init__(f"cannot read {size} bytes at {address:#x}{detail}")


class FormatError(LiveUnwindError):
    """An unwind section or object file is corrupt or uses something unsupported.

    Decoders raise it; the stepper turns it into a fallback to the next source.
    """


class ExpressionError(FormatError):
    """A DWARF expression is malformed or exceeded its evaluation budget."""
