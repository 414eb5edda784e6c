"""The unwinder: the per-frame stepper, rule execution and the fallback strategies."""

#: A walk stops after this many frames unless asked otherwise (0 asks for no limit).
#: Here rather than in the stepper so the command's help can say it without
#: importing the stepper, which would double the start-up of ``--help``.
DEFAULT_MAX_FRAMES = 256
