"""aarch64 SFrame from real cores: QEMU user-mode crashes unwound with SFrame alone.

crash-O2-sframe and crash-O2-sframe-pac (pointer-authenticated return
addresses, which QEMU's default CPU signs for real) carry SFrame in the
program's own code; libc has none. With ``--unwinder sframe`` the crashing
thread's walk must give the same frames as with CFI, from the faulting leaf
to the first libc frame.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from liveunwind.backtrace.api import open_core
from liveunwind.frames import Method, StopReason
from tests.support.paths import AARCH64_SYSROOT

VARIANTS = ["crash-O2-sframe", "crash-O2-sframe-pac"]


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("mode", ["leaf", "abort"])
def test_sframe_alone_equals_cfi_on_qemu_cores(
    qemu_core, crash_build: Path, variant: str, mode: str
) -> None:
    core = str(qemu_core(variant, mode))
    exe = str(crash_build / "build-aarch64" / variant)
    sysroot = str(AARCH64_SYSROOT)
    sframe = open_core(core, exe, sysroot=sysroot, unwinders=("sframe",)).threads[0]
    cfi = open_core(core, exe, sysroot=sysroot, unwinders=("cfi",)).threads[0]
    assert cfi.complete, cfi.stop_text
    ours = [(frame.pc, frame.sp) for frame in sframe.frames]
    assert ours == [(frame.pc, frame.sp) for frame in cfi.frames][: len(ours)]
    # Frame 0 may be in libc (abort): then SFrame cannot step at all.
    sframe_steps = [frame.method for frame in sframe.frames[1:]]
    assert set(sframe_steps) <= {Method.SFRAME}
    assert sframe.stop_reason is StopReason.NO_UNWIND_INFO
    assert "libc" in (sframe.frames[-1].module or "")
    if mode == "leaf":
        assert len(sframe.frames) >= 4
        names = [frame.function for frame in sframe.frames]
        assert "main" in names
        # Signed return addresses come back as plain code addresses.
        assert all(frame.pc < 1 << 48 for frame in sframe.frames)
