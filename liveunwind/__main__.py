"""``python -m liveunwind``: the same as the ``liveunwind`` command."""

try:
    from liveunwind.cli import run
except KeyboardInterrupt:  # Ctrl-C while Python is still loading us: no traceback
    raise SystemExit(130) from None  # cli.EXIT_INTERRUPTED, which could not be loaded

run()
