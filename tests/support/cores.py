"""Core files made on demand: a program run until it dies of a signal, with cores unlimited."""

from __future__ import annotations

import resource
import subprocess
from collections.abc import Callable
from pathlib import Path

MakeCore = Callable[..., Path]
"""The type of the ``kernel_core`` and ``qemu_core`` fixtures: (variant, mode) -> core."""


def unlimited_core() -> None:
    """``preexec_fn`` for a program whose core must be written whatever its size."""
    resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))


def kernel_writes_cores_here() -> str | None:
    """Why the kernel would not write a core into the working directory, or None."""
    pattern = Path("/proc/sys/kernel/core_pattern").read_text().strip()
    if pattern.startswith("|"):
        return f"kernel.core_pattern pipes cores to a program ({pattern})"
    if "/" in pattern:
        return f"kernel.core_pattern writes cores elsewhere ({pattern})"
    return None


def crash(
    folder: Path, command: list[str], *, glob: str, env: dict[str, str] | None = None
) -> Path:
    """Runs ``command`` in ``folder`` with unlimited cores and returns the core it left."""
    folder.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        command,
        cwd=folder,
        preexec_fn=unlimited_core,
        capture_output=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert result.returncode < 0, f"{command} did not die of a signal: {result}"
    cores = sorted(path for path in folder.glob(glob) if path.is_file())
    assert len(cores) == 1, f"{command} left {cores} in {folder}"
    return cores[0]
