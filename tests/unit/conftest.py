"""Unit tests start no process: one that tries fails, saying which folder it belongs in.

An audit hook (PEP 578) sees every way Python starts a program — subprocess,
os.posix_spawn, fork, exec, system — and, while a test of this folder runs,
refuses it.  The fixtures of tests/conftest.py that build and start programs
are for tests/system/.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

_STARTS = frozenset(
    {
        "subprocess.Popen",
        "os.posix_spawn",
        "os.fork",
        "os.forkpty",
        "os.exec",
        "os.spawn",
        "os.system",
        "pty.spawn",
    }
)
_guarding = False


def _refuse_processes(event: str, args: tuple[object, ...]) -> None:
    if _guarding and event in _STARTS:
        raise RuntimeError(
            f"a unit test started a process ({event} {args[:2]!r}): it belongs in tests/system/"
        )


sys.addaudithook(_refuse_processes)


@pytest.fixture(autouse=True)
def _no_process() -> Iterator[None]:
    global _guarding
    _guarding = True
    try:
        yield
    finally:
        _guarding = False
