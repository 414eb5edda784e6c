"""Go's function table read from a Go program, as the Go tests check it."""

from __future__ import annotations

from pathlib import Path

from liveunwind.arch import arch_by_name
from liveunwind.formats.elf import ElfImage
from liveunwind.formats.unwind.gopclntab import GoPclnTab


def go_table(path: Path) -> tuple[GoPclnTab, ElfImage]:
    """The .gopclntab of an x86_64 Go program, and the program's image."""
    image = ElfImage(path.read_bytes(), origin=str(path))
    data = image.contents(image.sections[".gopclntab"])
    assert data is not None
    return GoPclnTab(data, arch_by_name("x86_64"), image.sections[".text"].address), image
