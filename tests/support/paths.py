"""Where things are: the checkout, its test programs, the tests' data."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The checkout: pyproject.toml, liveunwind/, testprogs/, tests/."""
TESTPROGS = ROOT / "testprogs"
"""The C, C++, assembly, Go and Rust programs that give the tests real stacks."""
DATA = ROOT / "tests" / "data"
"""Committed test inputs: SFrame vectors, CFI sources, Python targets."""
SUPPORT = ROOT / "tests" / "support"
"""This package: also the scripts gdb and ``unshare`` run."""
AARCH64_SYSROOT = Path("/usr/aarch64-linux-gnu")
"""Debian's aarch64 libraries (libc6-arm64-cross), for QEMU and gdb-multiarch."""
