"""``python -m liveunwind``: the same as the ``liveunwind`` command."""

import sys


def _quiet_interrupt(unraisable: "sys.UnraisableHookArgs") -> None:
    """Ctrl-C inside the import machinery's callbacks is "ignored" with a traceback: say nothing."""
    if not issubclass(unraisable.exc_type, KeyboardInterrupt):
        sys.__unraisablehook__(unraisable)


sys.unraisablehook = _quiet_interrupt
try:
    from liveunwind.cli import run
except KeyboardInterrupt:  # Ctrl-C while Python is still loading us: no traceback
    raise SystemExit(130) from None  # cli.EXIT_INTERRUPTED, which could not be loaded

run()
