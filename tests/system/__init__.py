"""System tests: liveunwind against real processes, compilers and oracles on this machine.

A test belongs here when it builds or starts a program, runs a compiler or
an oracle (gdb, eu-stack, readelf, objdump, llvm-*), runs the command in a
process of its own, attaches to a process (this one included), or reads
this machine's files (its libc, /proc).  Build fixtures (one per family of
testprogs/) and the program fixtures are in tests/conftest.py; the helpers
in tests/support/.  Pure decoding on bytes goes to tests/unit/.
"""
