"""Decoders of the bytes liveunwind reads: no I/O of their own.

``unwind/`` turns every unwind-table format into an
:class:`~liveunwind.formats.unwind.rules.UnwindRule`; ``dwarf/`` holds the
DWARF reads behind ``--lines``; the files here are shared by both and by the
targets (ELF images, LEB128, zstd).
"""
