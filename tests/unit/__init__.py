"""Unit tests: pure Python on bytes, fake memory and synthetic stacks — seconds for all of them.

A test belongs here when it starts no process (no subprocess, no compiler, no
oracle such as gdb or readelf, no ``python -m liveunwind``), attaches to
nothing, and reads no file but this checkout's (tests/data, the package,
pyproject.toml) and those it writes itself.  tests/unit/conftest.py makes
starting a process here fail.  Anything else goes to tests/system/.
"""
