"""The ``liveunwind`` command as a user runs it: ``python -m liveunwind`` in its own process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.paths import ROOT


def run_cli(
    *args: str, user: int | None = None, package_root: Path = ROOT, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``liveunwind ARGS``, run from ``/`` as ``user`` (if given), the package at ``package_root``.

    Returns its exit code and output; it may take ``timeout`` seconds.
    """
    command = [sys.executable, "-m", "liveunwind", *args]
    if user is not None:
        command = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *command]
    env = dict(os.environ, PYTHONPATH=str(package_root))
    return subprocess.run(
        command, capture_output=True, text=True, timeout=timeout, cwd="/", env=env
    )


def start_cli(*args: str, own_group: bool = False) -> subprocess.Popen[str]:
    """``liveunwind ARGS`` started from ``/`` and left running, its output in pipes;
    ``own_group``: in a process group of its own (a Ctrl-C sent to it reaches all of it)."""
    return subprocess.Popen(
        [sys.executable, "-m", "liveunwind", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd="/",
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        process_group=0 if own_group else None,
    )


def json_document(*args: str, timeout: float = 120) -> dict:  # type: ignore[type-arg]
    """``liveunwind ARGS --json``: it must succeed; its document, checked against the schema.

    The schema's validator is imported here, not at the top: scripts run from
    tests/support (its own ``platform.py`` then shadows the standard library's,
    which jsonschema's imports need) use this module too.
    """
    from tests.support.schema import VALIDATOR

    result = run_cli(*args, "--json", timeout=timeout)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    VALIDATOR.validate(document)
    return document  # type: ignore[no-any-return]
