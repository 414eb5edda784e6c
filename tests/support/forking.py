"""``os.fork`` made to fail as a machine out of processes makes it fail (EAGAIN)."""

from __future__ import annotations

import errno
import os

import pytest


def fork_failing_after_one(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """``os.fork`` succeeds once, then raises EAGAIN; the list holds the pid it made."""
    real_fork, forks = os.fork, []

    def fork() -> int:
        if forks:
            raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN))
        forks.append(real_fork())
        return forks[-1]

    monkeypatch.setattr(os, "fork", fork)
    return forks
