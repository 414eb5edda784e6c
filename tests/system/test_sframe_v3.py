"""SFrame version 3 from a real toolchain: Debian sid's binutils, in a root file system of its own.

The sid root file system (tools/sid-rootfs.sh, cached outside the checkout)
has an assembler that writes SFrame v3. The test programs are compiled and
run inside it with chroot; liveunwind, outside, finds their files through
/proc/PID/root — the way it sees processes in containers — and unwinds them
with SFrame alone.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import liveunwind
from liveunwind.cli.unwindinfo import load_image
from liveunwind.formats.unwind.sframe import SFrameSection
from liveunwind.frames import Method, StopReason
from tests.support.oracles import gdb_backtraces, pcs
from tests.support.paths import ROOT
from tests.support.programs import RunningProgram

SID_ROOT = Path(os.environ.get("LIVEUNWIND_SID_ROOT", "/var/cache/liveunwind/sid-rootfs"))
VARIANTS = {
    "sframe3-O0": ["-O0"],
    "sframe3-O2": ["-O2", "-fno-omit-frame-pointer"],
    "sframe3-O2-nofp": ["-O2", "-fomit-frame-pointer"],
}


@pytest.fixture(scope="module")
def sid_build() -> Iterator[Path]:
    """Compiles the SFrame test program inside the sid root; yields its folder there."""
    if not (SID_ROOT / "usr/bin/gcc").exists():
        pytest.skip(f"no Debian sid root file system at {SID_ROOT} (make sid-rootfs builds it)")
    if os.geteuid() != 0:
        pytest.skip("chroot needs root")
    inside = Path("/tmp/liveunwind-sframe3")
    folder = SID_ROOT / inside.relative_to("/")
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for source in ("sframe.c", "tp.h"):
        shutil.copy(ROOT / "testprogs" / source, folder / source)
    for name, flags in VARIANTS.items():
        command = ["gcc", "-g", "-pthread", "-fno-ipa-icf", "-Wa,--gsframe", *flags]
        command += ["-o", str(inside / name), str(inside / "sframe.c")]
        subprocess.run(["chroot", str(SID_ROOT), *command], check=True, capture_output=True)
    yield inside
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_real_version_3_sections(sid_build: Path, name: str) -> None:
    binary = SID_ROOT / sid_build.relative_to("/") / name
    image = load_image(str(binary))
    section = image.sections[".sframe"]
    decoded = SFrameSection(image.contents(section), section.address)
    assert decoded.version == 3
    objdump = subprocess.run(
        ["chroot", str(SID_ROOT), "objdump", "--sframe", str(sid_build / name)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "SFRAME_VERSION_3" in objdump
    ours = decoded.format_objdump()
    assert _function_blocks(ours) == _function_blocks(objdump)


def _function_blocks(text: str) -> list[str]:
    body = text.split("Function Index :", 1)[1]
    blocks = [" ".join(block.split()) for block in body.strip().split("\n\n")]
    return [block for block in blocks if block.startswith("func idx")]


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_version_3_alone_unwinds_a_chrooted_process(sid_build: Path, gdb: str, name: str) -> None:
    program = RunningProgram(Path("/usr/sbin/chroot"), [str(SID_ROOT), str(sid_build / name)])
    with program:
        program.wait_ready(busy=(), timeout=20)
        backtrace = liveunwind.attach(program.pid, unwinders=("sframe",))
        oracle = gdb_backtraces(
            program.pid,
            gdb=gdb,
            sysroot=f"/proc/{program.pid}/root",
            executable=f"/proc/{program.pid}/exe",
        )
    for thread in backtrace.threads:
        frames = thread.frames
        assert [frame.method for frame in frames[1:]] == [Method.SFRAME] * (len(frames) - 1)
        assert thread.stop_reason is StopReason.NO_UNWIND_INFO, thread.stop_text
        assert "libc" in (frames[-1].module or "")
        expected = pcs(oracle[thread.tid])
        assert [frame.pc for frame in frames] == expected[: len(frames)], thread.name
    # Thread names cannot be set inside a chroot without /proc: find the
    # chain thread by its deepest frame instead.
    chain = max(backtrace.threads, key=lambda thread: len(thread.frames))
    names = [frame.function for frame in chain.frames]
    assert names[:14] == ["sf_park", *(f"sf_chain_{n}" for n in range(12, 0, -1)), "chain_thread"]
