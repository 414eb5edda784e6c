"""SFrame from a real toolchain: binaries built here with ``gcc -Wa,--gsframe``, against objdump.

x86_64 with the host's gcc, aarch64 with the cross compiler: every header
field, function and row objdump prints, and every rule, must be what the
decoder finds.  The committed vectors are tests/unit/test_sframe.py.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from liveunwind.formats.unwind.sframe import SFrameSection
from tests.support.sframe_objdump import assert_matches_objdump, assert_rules_agree


def c_program() -> str:
    """Functions with tiny, 2-byte and 4-byte stack offsets, a VLA, and a >64 KiB body."""
    body = "\n".join(f"  p[{n % 7}] += {n};" for n in range(9000))
    return f"""
#include <stdio.h>
#include <string.h>
int big(volatile int *p) {{
{body}
  return p[0];
}}
__attribute__((noinline)) int medium(int n) {{
  volatile char buf[1000]; memset((char *)buf, n, sizeof buf); return buf[n % 1000];
}}
__attribute__((noinline)) int huge(int n) {{
  volatile char buf[70000]; memset((char *)buf, n, sizeof buf); return buf[n % 70000];
}}
__attribute__((noinline)) int vla(int n) {{
  volatile char buf[n + 1]; buf[n] = 1; return buf[n] + medium(n);
}}
__attribute__((noinline)) int recurse(int n) {{ return n ? recurse(n - 1) + vla(n) : 0; }}
int main(int argc, char **argv) {{
  int values[7] = {{0}};
  printf("%d\\n", recurse(argc) + huge(argc) + big(values));
  return 0;
}}
"""


@dataclass(frozen=True)
class Toolchain:
    gcc: str
    objdump: str


TOOLCHAINS = {
    "x86_64": Toolchain("gcc", "objdump"),
    "aarch64": Toolchain("aarch64-linux-gnu-gcc", "objdump"),
}
BUILDS = [
    ("x86_64", "O0", ["-O0"]),
    ("x86_64", "O2", ["-O2"]),
    ("x86_64", "omit-fp", ["-O2", "-fomit-frame-pointer"]),
    ("x86_64", "shared", ["-O2", "-fPIC", "-shared"]),
    ("aarch64", "O0", ["-O0"]),
    ("aarch64", "O2", ["-O2", "-fomit-frame-pointer"]),
    ("aarch64", "pac-ret", ["-O2", "-mbranch-protection=pac-ret"]),
    ("aarch64", "pac-ret-b-key", ["-O0", "-mbranch-protection=pac-ret+b-key"]),
]


def sframe_section(path: Path) -> tuple[bytes, int]:
    from elftools.elf.elffile import ELFFile

    with path.open("rb") as stream:
        section = ELFFile(stream).get_section_by_name(".sframe")
        assert section is not None, f"{path} has no .sframe"
        return section.data(), section["sh_addr"]


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("sframe")
    (directory / "prog.c").write_text(c_program())
    return directory


@pytest.mark.parametrize(("arch", "name", "flags"), BUILDS, ids=[f"{a}-{n}" for a, n, _ in BUILDS])
def test_built_binary_matches_objdump(build_dir: Path, arch: str, name: str, flags: list) -> None:
    tools = TOOLCHAINS[arch]
    for tool in (tools.gcc, tools.objdump):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    binary = build_dir / f"{arch}-{name}"
    command = [tools.gcc, "-Wa,--gsframe", *flags, str(build_dir / "prog.c"), "-o", str(binary)]
    built = subprocess.run(command, capture_output=True, text=True)
    if built.returncode != 0 and "gsframe" in built.stderr:
        pytest.skip(f"{tools.gcc} cannot write SFrame: {built.stderr.strip()[:200]}")
    assert built.returncode == 0, built.stderr
    dump = subprocess.run(
        [tools.objdump, "--sframe=.sframe", str(binary)], capture_output=True, text=True
    )
    assert dump.returncode == 0, dump.stderr
    data, address = sframe_section(binary)
    section = SFrameSection(data, address)
    assert section.arch == arch
    assert_matches_objdump(section, dump.stdout)
    assert assert_rules_agree(section) > 10
    functions = list(section.functions())
    assert any(function.size > 0xFFFF for function in functions)
    offsets = [abs(row.cfa.offset) for function in functions for row in function.rows]
    if "-O0" not in flags:  # frame-pointer CFAs at -O0 hide the stack size
        assert max(offsets) > 0x7FFF
    if "pac-ret" in name:
        assert any(row.ra_signed for function in functions for row in function.rows)
        assert any(function.pauth_key_b for function in functions) == name.endswith("b-key")
