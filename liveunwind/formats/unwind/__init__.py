"""Unwind-table decoders: bytes in, UnwindRule out (DWARF CFI, SFrame, compact unwind, libunwind's
dynamic records, Go's pclntab, perf maps).
"""
