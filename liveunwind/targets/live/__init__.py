"""A live process: ptrace, /proc, the system calls python-ptrace lacks, the snapshot taken while it
is stopped.
"""
