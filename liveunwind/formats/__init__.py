"""Unwind-format decoders: bytes in, :class:`~liveunwind.formats.rules.UnwindRule` out."""
