"""Core files: ELF (kernel, gdb gcore, QEMU) and Mach-O, their notes and their bytes (plain or
compressed).
"""
