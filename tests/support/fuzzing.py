"""The fuzz campaign: a seeded mutator, the targets, and workers bounded in time and memory.

A *target* is one way liveunwind reads untrusted bytes — a kernel core, a
gcore core, a Mach-O file or core, an ELF file's unwind sections, SFrame,
compact unwind, DWARF expressions, DWARF line and debug info, Go's
``.gopclntab``, GDB remote packets, perf.data files — with the real inputs it starts from.
Each input is a real one with a few edits, most of them inside the parts of
the file that matter (headers, notes, load commands, the section being
decoded): bit flips, interesting numbers (0, -1, 2^63, the file's size…),
bytes copied from elsewhere, a cut.  The edits are made by
``random.Random(f"{seed}:{index}")``, so ``(target, seed, index)`` names an
input for good — given the same base inputs, which are built on the spot and
may differ between machines (a path compiled in, a core's pids): a finding is
therefore pinned as the file itself, in the target's folder of the corpus
(:class:`Corpus`, ``tests/fuzz/corpus/TARGET/SEED-INDEX-BASE.bin``), which
``make test`` replays.  :func:`reproduce` runs one input again, from a seed
or a corpus file.

The inputs run in a worker process (``python -m tests.support.fuzzing worker …``)
whose address space is capped (RLIMIT_AS, :data:`MEMORY_BOUND` above what
it holds once set up), so an allocation sized by a corrupt field shows up as
a MemoryError rather than as a swapping machine.  The parent watches each
input's CPU time and wall time; an input that runs longer than
:data:`CPU_BOUND` CPU seconds (or :data:`WALL_BOUND` seconds, for one that
blocks) is a finding, the worker is killed and a new one goes on with the
next input.  Anything but a :class:`~liveunwind.errors.LiveUnwindError`
escaping the target is a finding; so is the worker dying.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import random
import select
import signal
import struct
import subprocess
import sys
import tempfile
import time
import traceback
import zlib
from collections.abc import Callable
from pathlib import Path

from tests.support.paths import ROOT

#: CPU seconds one input may take (a whole core backtrace takes ~0.1 s).
CPU_BOUND = 5.0
#: Wall seconds one input may take: catches an input that blocks instead of computing.
WALL_BOUND = 30.0
#: Bytes a worker may add to its address space for one input.
MEMORY_BOUND = 512 << 20
#: Seconds a worker may take to import and set up before its first input.
SETUP_BOUND = 120.0
#: The environment variable naming the folder where workers write their inputs.
SCRATCH = "LIVEUNWIND_FUZZ_SCRATCH"

#: Numbers that make decoders take the unusual branch.
INTERESTING = (
    0, 1, 2, 7, 8, 0x7F, 0x80, 0xFF, 0x100, 0xFFFF, 0x10000, 0x7FFFFFFF, 0x80000000,
    0xFFFFFFFF, 1 << 32, 1 << 62, (1 << 63) - 1, 1 << 63, (1 << 64) - 1,
)  # fmt: skip

#: An edit: (offset, what, argument) — "xor" a mask, "set" bytes, "copy" (from, length)
#: of the input's own bytes, "nudge" the byte there by a small amount.
Edit = tuple[int, str, object]
Region = tuple[int, int]


# -- the mutator --------------------------------------------------------------------------


def mutation(size: int, hot: list[Region], rng: random.Random) -> tuple[list[Edit], int | None]:
    """A few edits of a ``size``-byte input, most inside ``hot`` regions; and maybe a cut."""
    edits: list[Edit] = []
    for _ in range(rng.choice((1, 1, 2, 2, 3, 4, 6, 8, 16))):
        at = _position(size, hot, rng)
        kind = rng.randrange(10)
        if kind < 3:
            edits.append((at, "xor", 1 << rng.randrange(8)))
        elif kind < 5:  # an interesting number, 1, 2, 4 or 8 bytes wide, either byte order
            width = rng.choice((1, 2, 4, 8))
            mask = (1 << 8 * width) - 1
            value = rng.choice((*INTERESTING, size, size - 1, size + 1)) & mask
            if rng.random() < 0.3:
                value = -value & mask
            order = "little" if rng.random() < 0.85 else "big"
            edits.append((at, "set", value.to_bytes(width, order)))
        elif kind < 7:
            edits.append((at, "set", rng.randbytes(rng.choice((1, 1, 2, 4, 8, 16)))))
        elif kind < 9:
            edits.append((at, "copy", (rng.randrange(max(size, 1)), rng.choice((4, 8, 16, 64)))))
        else:
            edits.append((at, "nudge", rng.choice((-8, -2, -1, 1, 2, 8))))
    cut = None
    if size and rng.random() < 0.05:
        cut = rng.randrange(size) if rng.random() < 0.5 else _position(size, hot, rng)
    return edits, cut


def _position(size: int, hot: list[Region], rng: random.Random) -> int:
    if hot and rng.random() < 0.85:
        start, end = rng.choice(hot)
        length = end - start
        # Often near the region's start, where headers and counts are.
        offset = rng.randrange(min(length, 256)) if rng.random() < 0.5 else rng.randrange(length)
        return min(start + offset, max(size - 1, 0))
    return rng.randrange(max(size, 1))


def apply(data: bytes, edits: list[Edit], cut: int | None) -> bytes:
    """``data`` with the edits made (each clipped to the input), then cut to ``cut`` bytes."""
    out = bytearray(data)
    for at, kind, argument in edits:
        if at >= len(out):
            continue
        if kind == "xor":
            out[at] ^= argument  # type: ignore[operator]
        elif kind == "nudge":
            out[at] = (out[at] + argument) & 0xFF  # type: ignore[operator]
        else:
            if kind == "copy":
                source, length = argument  # type: ignore[misc]
                raw = bytes(out[source : source + length])
            else:
                raw = argument  # type: ignore[assignment]
            raw = raw[: len(out) - at]
            out[at : at + len(raw)] = raw
    if cut is not None:
        del out[cut:]
    return bytes(out)


def input_for(target: Target, seed: int, index: int) -> tuple[int, bytes]:
    """Which base input, mutated how: the input ``(seed, index)`` names."""
    rng = random.Random(f"{seed}:{index}")
    which = rng.randrange(len(target.bases))
    base = target.bases[which]
    edits, cut = mutation(len(base), target.hot[which], rng)
    return which, apply(base, edits, cut)


class Mutations:
    """Inputs 0, 1, 2… of a seed (``count`` of them, or as many as time allows)."""

    def __init__(self, seed: int, count: int | None = None) -> None:
        self.seed = seed
        self.count = count

    @property
    def spec(self) -> str:
        """How a worker's command line names these inputs: ``seed=SEED[/COUNT]``."""
        return f"seed={self.seed}" + (f"/{self.count}" if self.count is not None else "")

    def input(self, target: Target, index: int) -> tuple[int, bytes]:
        return input_for(target, self.seed, index)

    def label(self, index: int) -> str:
        """The name of input ``index``: its file name in the corpus (with the base it edits)."""
        return f"{self.seed}-{index}"


class Corpus:
    """Every input pinned in one target's folder: each a finding once, replayed for good.

    A file is named ``SEED-INDEX-BASE.bin`` (``.bin.gz`` when compressed): the
    input ``(SEED, INDEX)`` of the campaign that found it, an edit of the
    target's base input number ``BASE`` (which the target's probes and search
    paths are chosen by).
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.files = sorted(
            path for path in folder.glob("*") if path.name.endswith((".bin", ".bin.gz"))
        )
        self.count: int | None = len(self.files)

    @property
    def spec(self) -> str:
        return f"corpus={self.folder}"

    def input(self, target: Target, index: int) -> tuple[int, bytes]:
        path = self.files[index]
        data = path.read_bytes()
        if path.name.endswith(".gz"):
            data = gzip.decompress(data)
        which = int(path.name.split(".")[0].rsplit("-", 1)[1])
        assert which < len(target.bases), f"{path}: base {which} of {len(target.bases)}"
        return which, data

    def label(self, index: int) -> str:
        return self.files[index].name


Inputs = Mutations | Corpus


def inputs(spec: str) -> Inputs:
    """The inputs a worker's command line names: ``seed=SEED[/COUNT]`` or ``corpus=FOLDER``."""
    kind, _, value = spec.partition("=")
    if kind == "corpus":
        return Corpus(Path(value))
    seed, _, count = value.partition("/")
    return Mutations(int(seed), int(count) if count else None)


# -- targets --------------------------------------------------------------------------------


class Target:
    """What one campaign feeds: base inputs, where they matter, and the code that reads them."""

    def __init__(
        self,
        name: str,
        bases: list[bytes],
        hot: list[list[Region]],
        run: Callable[[bytes, int], None],
    ) -> None:
        self.name = name
        self.bases = bases
        self.hot = hot
        #: run(data, which base it came from); may raise LiveUnwindError, nothing else.
        self.run = run


def elf_regions(data: bytes, sections: tuple[str, ...] = ()) -> list[Region]:
    """Header, program and section header tables, notes, and the named sections of an ELF file."""
    from liveunwind.formats.elf import ElfImage

    image = ElfImage(data)
    regions = [(0, 64)]
    regions.append((image._phoff, image._phoff + image._phnum * image._phentsize))
    regions.append((image._shoff, image._shoff + image._shnum * image._shentsize))
    for header in image.segments:
        if header.type == 4:  # PT_NOTE
            regions.append((header.offset, header.offset + header.filesz))
    for name in sections:
        section = image.sections.get(name)
        if section is not None and section.type != 8:  # not SHT_NOBITS
            regions.append((section.offset, section.offset + section.size))
    return [(start, end) for start, end in regions if end > start]


def macho_regions(data: bytes) -> list[Region]:
    """Mach-O header and load commands, and what LC_NOTE, LC_SYMTAB and the sections point at."""
    magic, _, _, _, count, size, _ = struct.unpack_from("<7I", data)
    assert magic == 0xFEEDFACF, "base inputs are thin 64-bit Mach-O files"
    regions = [(0, 32 + size)]
    position = 32
    for _ in range(count):
        command, command_size = struct.unpack_from("<2I", data, position)
        if command == 0x31:  # LC_NOTE
            offset, length = struct.unpack_from("<2Q", data, position + 24)
            regions.append((offset, offset + min(length, 1 << 16)))
        elif command == 0x2:  # LC_SYMTAB
            symoff, nsyms, stroff, strsize = struct.unpack_from("<4I", data, position + 8)
            regions += [(symoff, symoff + 16 * nsyms), (stroff, stroff + strsize)]
        elif command == 0x19:  # LC_SEGMENT_64: its sections
            (nsects,) = struct.unpack_from("<I", data, position + 64)
            for index in range(nsects):
                header = position + 72 + 80 * index
                name = data[header : header + 16].rstrip(b"\0")
                _, size_of, offset = struct.unpack_from("<QQI", data, header + 32)
                if name in (b"__unwind_info", b"__eh_frame") and offset:
                    regions.append((offset, offset + size_of))
        position += command_size
    return [(start, end) for start, end in regions if end > start]


def _pick(data: bytes, count: int) -> int:
    """A number below ``count`` that depends on the input only (the same in every process)."""
    return zlib.crc32(data) % count


class Scratch:
    """One file a worker rewrites for each input that has to be read by path."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._path = ""

    @property
    def path(self) -> str:
        """In the campaign's folder (removed when it ends), or in a new one, made on first use."""
        if not self._path:
            folder = os.environ.get(SCRATCH) or tempfile.mkdtemp(prefix="liveunwind-fuzz-")
            self._path = os.path.join(folder, self.name)
        return self._path

    def write(self, data: bytes, suffix: str = "") -> str:
        path = self.path + suffix
        with open(path, "wb") as stream:
            stream.write(data)
        return path


def _core_target(name: str, paths: list[str], *, compress: bool) -> Target:
    """Whole cores through open_core: headers, notes, files, threads, walks, names."""
    from liveunwind.backtrace.api import open_core

    bases = [Path(path).read_bytes() for path in paths]
    hot = [elf_regions(base) for base in bases]
    scratch = Scratch("core")

    def run(data: bytes, which: int) -> None:
        path = scratch.write(data)
        kind = _pick(data, 8) if compress else -1
        if kind == 0:  # one input in eight goes through the gzip reader
            path = scratch.write(gzip.compress(data, compresslevel=1), ".gz")
        elif kind == 1:  # one through the lz4 reader, half of them with a compressed byte flipped
            import lz4.frame

            packed = bytearray(lz4.frame.compress(data, compression_level=0))
            if _pick(data, 16) >= 8:
                at = 7 + zlib.crc32(data[:64]) % max(1, len(packed) - 7)
                packed[at] ^= 0xFF
            path = scratch.write(bytes(packed), ".lz4")
        open_core(path, lines=_pick(data, 3) == 0)

    return Target(name, bases, hot, run)


def _macho_core_target(paths: list[str]) -> Target:
    from liveunwind.backtrace.api import open_core

    cores, search = paths[: len(paths) // 2], paths[len(paths) // 2 :]
    bases = [Path(path).read_bytes() for path in cores]
    scratch = Scratch("macho.core")

    def run(data: bytes, which: int) -> None:
        open_core(scratch.write(data), search_path=[search[which]])

    return Target("macho-core", bases, [macho_regions(base) for base in bases], run)


def _macho_file_target(paths: list[str]) -> Target:
    from liveunwind.cli.unwindinfo import describe_file
    from liveunwind.modules.macho import MachOImage

    bases = [Path(path).read_bytes() for path in paths]
    scratch = Scratch("image")
    probes = [_text_probes(MachOImage(path)) for path in paths]

    def run(data: bytes, which: int) -> None:
        path = scratch.write(data)
        image = MachOImage(path)
        problems: list[str] = []
        for source in image.unwind_tables(problems):
            for pc in probes[which]:
                source.rule_for(pc)
        for pc in probes[which]:
            image.symbols.lookup(pc)
        describe_file(path, None, None)
        describe_file(path, None, probes[which][_pick(data, len(probes[which]))])

    return Target("macho-file", bases, [macho_regions(base) for base in bases], run)


def _text_probes(image: object) -> list[int]:
    text = image.section("__TEXT", "__text")  # type: ignore[attr-defined]
    return [text.address + step * text.size // 24 for step in range(24)]


_ELF_UNWIND_SECTIONS = (
    ".eh_frame", ".eh_frame_hdr", ".debug_frame", ".sframe", ".symtab", ".strtab", ".dynsym",
    ".dynstr", ".note.gnu.build-id", ".gnu_debuglink", ".gnu_debugdata",
)  # fmt: skip


def _elf_file_target(paths: list[str]) -> Target:
    """An ELF file's unwind tables, symbols and build-id, and unwind-info's dump of it."""
    from liveunwind.cli.unwindinfo import describe_file
    from liveunwind.formats.elf import ElfImage
    from liveunwind.modules.sources import unwind_tables
    from liveunwind.modules.symbols import SymbolTable

    bases = [Path(path).read_bytes() for path in paths]
    hot = [elf_regions(base, _ELF_UNWIND_SECTIONS) for base in bases]
    probes = []
    for base in bases:
        text = ElfImage(base).sections[".text"]
        probes.append([text.address + step * text.size // 32 for step in range(33)])
    scratch = Scratch("elf")

    def run(data: bytes, which: int) -> None:
        image = ElfImage(data, origin="fuzzed")
        image.build_id  # noqa: B018 - reading it is the test
        problems: list[str] = []
        for source in unwind_tables(image, problems):
            for pc in probes[which]:
                source.rule_for(pc)
        symbols = SymbolTable(image)
        for pc in probes[which]:
            symbols.lookup(pc)
        if _pick(data, 4) == 0:  # the dump walks every entry: one input in four
            describe_file(scratch.write(data), None, None)

    return Target("elf-unwind", bases, hot, run)


_DWARF_SECTIONS = (
    ".debug_info", ".debug_abbrev", ".debug_line", ".debug_str", ".debug_line_str",
    ".debug_aranges", ".debug_rnglists", ".debug_ranges", ".debug_loclists",
)  # fmt: skip


def _dwarf_lines_target(paths: list[str]) -> Target:
    """Units, scopes (inlined calls) and line tables of a pc: what --lines reads; and the
    function a pc is in, what names the frames of a module without ``.symtab``."""
    from liveunwind.formats.elf import ElfImage
    from liveunwind.modules.lines import ModuleLines

    bases = [Path(path).read_bytes() for path in paths]
    hot = [elf_regions(base, _DWARF_SECTIONS) for base in bases]
    probes = []
    for base in bases:
        text = ElfImage(base).sections[".text"]
        probes.append([text.address + step * text.size // 48 for step in range(49)])

    def run(data: bytes, which: int) -> None:
        lines = ModuleLines(ElfImage(data, origin="fuzzed"))
        for pc in probes[which]:
            lines.locate(pc)
            lines.info.function_at(pc)

    return Target("dwarf-lines", bases, hot, run)


def _section_of(path: str, name: str) -> tuple[bytes, int, int]:
    """(contents, address, .text address) of a section of an ELF file."""
    from liveunwind.formats.elf import ElfImage

    image = ElfImage(Path(path).read_bytes())
    section = image.sections[name]
    contents = image.contents(section)
    assert contents is not None
    return bytes(contents), section.address, image.sections[".text"].address


def _gopclntab_target(paths: list[str]) -> Target:
    from liveunwind.arch.x86_64 import X86_64
    from liveunwind.formats.unwind.gopclntab import GoPclnTab

    data, _, text = _section_of(paths[0], ".gopclntab")
    table = GoPclnTab(data, X86_64, text)
    probes = [table.function(index).entry + 1 for index in range(0, len(table), 37)][:64]

    def run(data: bytes, which: int) -> None:
        table = GoPclnTab(data, X86_64, text)
        for index in range(0, min(len(table), 4096), 97):
            function = table.function(index)
            table.name(function)
            table.ends_stack(function)
            for _ in zip(range(64), table.rows(function), strict=False):
                pass
        for pc in probes:
            table.rule_for(pc)

    return Target("gopclntab", [data], [[(0, min(len(data), 1 << 16)), (0, len(data))]], run)


def _go_runtime_target(paths: list[str]) -> Target:
    """A Go program's scheduler layout: runtime.allm and its structures' members from DWARF."""
    from liveunwind.formats.elf import ElfImage
    from liveunwind.modules.goruntime import read_runtime
    from liveunwind.modules.lines import ModuleLines

    bases = [Path(path).read_bytes() for path in paths]
    hot = [elf_regions(base, (".debug_info", ".debug_abbrev", ".symtab")) for base in bases]

    def run(data: bytes, which: int) -> None:
        image = ElfImage(data, origin="fuzzed")
        read_runtime(image, lambda: ModuleLines(image))

    return Target("go-runtime", bases, hot, run)


def _sframe_target(paths: list[str]) -> Target:
    from liveunwind.formats.unwind.sframe import SFrameSection

    bases, addresses, probes = [], [], []
    for path in paths:
        vector = json.loads(Path(path).read_text())
        data, base = bytes(vector["content"]), int(vector["section_base"])
        if not data:
            continue
        bases.append(data)
        addresses.append(base)
        functions = list(SFrameSection(data, base).functions())
        probes.append(
            [0, base, (1 << 64) - 1]
            + [f.start for f in functions]
            + [f.start + f.size // 2 for f in functions]
            + [f.start + f.size for f in functions]
        )

    def run(data: bytes, which: int) -> None:
        section = SFrameSection(data, addresses[which])
        section.format_objdump()
        for pc in probes[which]:
            section.rule_for(pc)
            section.function_for(pc)

    return Target("sframe", bases, [[(0, len(base))] for base in bases], run)


def _compact_target(paths: list[str]) -> Target:
    from liveunwind.formats.unwind.compact import CompactUnwindTable
    from liveunwind.modules.macho import MachOImage

    bases, arguments, probes = [], [], []
    for path in paths:
        image = MachOImage(path)
        data = image.section_data("__TEXT", "__unwind_info")
        assert data is not None
        bases.append(data)
        arguments.append(
            dict(arch=image.arch, image_base=image.text_base, read_code=image.read)
        )  # eh_frame left out: the cfi targets fuzz it
        probes.append(_text_probes(image))

    def run(data: bytes, which: int) -> None:
        table = CompactUnwindTable(data, 0, eh_frame=None, **arguments[which])
        for count, entry in enumerate(table.entries()):
            if count >= 256:
                break
            table.rule_for(entry.start)
            table.describe_encoding(entry.encoding)
        for pc in probes[which]:
            table.rule_for(pc)
        table.format_dump()

    return Target("compact", bases, [[(0, len(base))] for base in bases], run)


#: Expressions compilers write (CFA of a PLT, a signal frame's saved registers…), to mutate.
_EXPRESSIONS = [
    bytes.fromhex("770880003f1a3b2a332422"),  # the PLT's CFA (gcc)
    bytes.fromhex("770806"),  # DW_OP_breg7 8; DW_OP_deref
    bytes.fromhex("0300100000000000002304 9404 28feff 09ff 96"),
    bytes.fromhex("9203 78 9006 56"),  # bregx, regx, reg6
    bytes.fromhex("10ffffffff0f 11 7f 1c 1e 1b 1d 20 21 22 27 2f0100 30 31 38 3f 12 13 14 15 16"),
    bytes.fromhex("0c78563412 0a3412 0878 0e8877665544332211 e0 96 9f"),
]


def _dwarf_expression_target(paths: list[str]) -> Target:
    from liveunwind.formats.unwind.dwarf_expr import decode, describe, evaluate

    class Anything:
        """Every register and every byte of memory is defined."""

        def register(self, number: int) -> int:
            return number * 0x1000 + 0x7FFF0000

        def read_memory(self, address: int, size: int) -> bytes:
            return (address & 0xFF).to_bytes(1, "little") * size

    def run(data: bytes, which: int) -> None:
        for size in (4, 8):
            evaluate(data, Anything(), address_size=size, initial_stack=(0x1000,))
        describe(data)
        list(decode(data))

    return Target("dwarf-expr", _EXPRESSIONS, [[(0, len(e))] for e in _EXPRESSIONS], run)


def _rsp_target(paths: list[str]) -> Target:
    from liveunwind.targets.remote import rsp
    from tests.support.rsp_replies import (
        DECODERS,
        GDBSERVER_STOP,
        QEMU_FEATURES,
        QEMU_TARGET,
        SVR4,
        THREADS,
    )

    bases = [GDBSERVER_STOP, QEMU_FEATURES, QEMU_TARGET, SVR4, THREADS]
    bases.append(rsp.encode_packet(GDBSERVER_STOP) + b"+" + rsp.encode_packet(SVR4))

    def run(data: bytes, which: int) -> None:
        for decode in DECODERS:
            with contextlib.suppress(rsp.FormatError):
                decode(data)
        reader = rsp.PacketReader()
        for start in range(0, len(data), 7):
            reader.feed(data[start : start + 7])
            while reader.next() is not None:
                pass

    return Target("rsp", bases, [[(0, len(base))] for base in bases], run)


def _perf_data_target(paths: list[str]) -> Target:
    """A perf.data through ``liveunwind perf``'s reading: header, attrs, features, every
    record, each sample walked against the recorded files."""
    from types import SimpleNamespace

    from liveunwind.backtrace.options import BacktraceOptions
    from liveunwind.cli.perf import replay
    from liveunwind.formats.perfdata import read_header
    from liveunwind.targets.sample.perfdata import PerfDataFile

    bases = [Path(path).read_bytes() for path in paths]
    hot = []
    for base in bases:  # the header and attrs, the first records (or zstd), the feature table
        header = read_header(base, len(base))
        first = header.data.offset
        hot.append([(0, first), (first, first + 0x2000), (header.data.end, len(base))])
    scratch = Scratch("perf.data")
    arguments = SimpleNamespace(pid=None, threads=None, sysroot=None, search_path="")

    def run(data: bytes, which: int) -> None:
        with PerfDataFile(scratch.write(data)) as recording:
            _replay, unwound = replay(recording, arguments, BacktraceOptions())
            for _ in unwound:
                pass

    return Target("perf-data", bases, hot, run)


#: Target name → how a worker builds it from the paths of its base inputs.
BUILDERS: dict[str, Callable[[list[str]], Target]] = {
    "kernel-core": lambda paths: _core_target("kernel-core", paths, compress=True),
    "gcore-core": lambda paths: _core_target("gcore-core", paths, compress=False),
    "macho-core": _macho_core_target,
    "macho-file": _macho_file_target,
    "elf-unwind": _elf_file_target,
    "dwarf-lines": _dwarf_lines_target,
    "gopclntab": _gopclntab_target,
    "go-runtime": _go_runtime_target,
    "sframe": _sframe_target,
    "compact": _compact_target,
    "dwarf-expr": _dwarf_expression_target,
    "rsp": _rsp_target,
    "perf-data": _perf_data_target,
}


def _planted_target(paths: list[str]) -> Target:
    """Fails in every way a finding can (for the harness's own test): by base input."""

    def run(data: bytes, which: int) -> None:
        if which == 0:
            raise IndexError("planted")
        if which == 1:
            bytearray(MEMORY_BOUND * 2)
        elif which == 2:
            while True:
                pass
        elif which == 3:
            os.kill(os.getpid(), signal.SIGSEGV)
        from liveunwind.errors import FormatError

        raise FormatError("typed: not a finding")

    bases = [bytes([which]) for which in range(5)]
    return Target("planted", bases, [[] for _ in bases], run)


#: Targets that test the harness, not liveunwind.
HARNESS_BUILDERS: dict[str, Callable[[list[str]], Target]] = {"planted": _planted_target}

# -- the worker -----------------------------------------------------------------------------


def _where(error: BaseException) -> str:
    """The innermost frame of liveunwind's own code in the traceback (file:line function)."""
    frames = traceback.extract_tb(error.__traceback__)
    ours = [frame for frame in frames if "/liveunwind/" in frame.filename] or frames
    frame = ours[-1]
    return f"{Path(frame.filename).name}:{frame.lineno} {frame.name}"


def _address_space() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) << 10
    return 0


def worker(name: str, spec: str, start: int, paths: list[str]) -> None:
    """Runs inputs ``start``, ``start + 1``… of a target, saying each on stdout.

    Until killed, or for a corpus until its last file ("end").
    """
    import resource
    import warnings

    from liveunwind.errors import LiveUnwindError

    target = {**BUILDERS, **HARNESS_BUILDERS}[name](paths)
    source = inputs(spec)
    warnings.simplefilter("error")  # a warning would be a second line under a one-line error
    limit = _address_space() + MEMORY_BOUND
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    out = sys.stdout
    out.write("ready\n")
    out.flush()
    index = start
    while source.count is None or index < source.count:
        which, data = source.input(target, index)
        out.write(f"> {index}\n")
        out.flush()
        try:
            target.run(data, which)
        except LiveUnwindError:
            pass
        except (Exception, RecursionError) as error:  # every other error is a finding
            report = {"kind": type(error).__name__, "where": _where(error), "message": str(error)}
            report["traceback"] = "".join(traceback.format_exception(error))[-4000:]
            out.write(f"! {index} {json.dumps(report)}\n")
            out.flush()
        index += 1
    out.write("end\n")
    out.flush()


# -- the campaign ---------------------------------------------------------------------------


class Finding:
    """One input that made liveunwind fail in a way it must not."""

    def __init__(self, target: str, label: str, index: int, kind: str, where: str, text: str):
        self.target = target
        #: Which input: ``SEED-INDEX``, or the corpus file's name.
        self.label = label
        self.index = index
        #: The exception's class, "timeout", or "crash".
        self.kind = kind
        self.where = where
        self.text = text

    @property
    def key(self) -> tuple[str, str, str]:
        return self.target, self.kind, self.where

    def __str__(self) -> str:
        return f"{self.target} input {self.label}: {self.kind} at {self.where}\n{self.text}"


class Campaign:
    """Inputs of one target, in as many workers as it takes.

    Every one of them when they are counted (a corpus, or a fixed number of
    a seed's: what ``make test`` runs, the same every time), else as many as
    ``seconds`` allow (``make fuzz``).
    """

    def __init__(
        self, name: str, paths: list[str], source: Inputs, seconds: float | None = None
    ) -> None:
        assert source.count is not None or seconds is not None, "endless: give a count or a time"
        self.name = name
        self.paths = paths
        self.source = source
        self.seconds = seconds
        self.findings: dict[tuple[str, str, str], Finding] = {}
        self.inputs = 0
        self.workers = 0

    def run(self) -> Campaign:
        deadline = time.monotonic() + (self.seconds if self.seconds is not None else float("inf"))
        count = self.source.count
        index = 0
        with tempfile.TemporaryDirectory(prefix="liveunwind-fuzz-") as scratch:
            while time.monotonic() < deadline and (count is None or index < count):
                index = self._one_worker(index, deadline, scratch)
        return self

    def _one_worker(self, start: int, deadline: float, scratch: str) -> int:
        """Runs a worker from input ``start`` until the deadline or its end; the next input."""
        self.workers += 1
        stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed in finally
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.fuzzing", "worker", self.name, self.source.spec,
             str(start), json.dumps(self.paths)],
            stdout=subprocess.PIPE,
            stderr=stderr,
            cwd=ROOT,
            env=dict(os.environ, PYTHONPATH=str(ROOT), **{SCRATCH: scratch}),
        )  # fmt: skip
        assert process.stdout is not None
        lines = _Lines(process.stdout.fileno())
        current: int | None = None
        wall = cpu = 0.0
        setup_deadline = time.monotonic() + SETUP_BOUND
        try:
            while True:
                line = lines.next(0.05)
                now = time.monotonic()
                if line is None:
                    if lines.closed:  # every line it wrote is read: it has ended
                        process.wait()
                        if current is None:
                            raise RuntimeError(f"{self.name}: worker failed: {_tail(stderr)}")
                        self._found(current, "crash", f"exit {process.returncode}", _tail(stderr))
                        return current + 1
                    if current is None:
                        if now > setup_deadline:
                            raise RuntimeError(f"{self.name}: worker set-up took too long")
                        continue
                    spent = _cpu_seconds(process.pid) - cpu
                    if spent > CPU_BOUND or now - wall > WALL_BOUND:
                        took = f"{spent:.1f} s of CPU, {now - wall:.1f} s of wall time"
                        self._found(
                            current, "timeout", f"bounds {CPU_BOUND} s, {WALL_BOUND} s", took
                        )
                        return current + 1
                    if now > deadline:
                        return current
                    continue
                if line == "end":  # a counted source, run to its last input
                    return self.source.count or 0
                if line.startswith("> "):
                    current = int(line[2:])
                    self.inputs += 1
                    wall, cpu = now, _cpu_seconds(process.pid)
                    if now > deadline:
                        return current
                elif line.startswith("! "):
                    number, _, body = line[2:].partition(" ")
                    report = json.loads(body)
                    self._found(int(number), report["kind"], report["where"], report["traceback"])
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
            process.wait()
            stderr.close()

    def _found(self, index: int, kind: str, where: str, text: str) -> None:
        finding = Finding(self.name, self.source.label(index), index, kind, where, text)
        self.findings.setdefault(finding.key, finding)

    def save(self, folder: Path) -> list[Path]:
        """Each new finding's input and report in ``folder`` (a corpus folder: ``Corpus``).

        ``SEED-INDEX-BASE.bin`` (gzip-compressed, ``.bin.gz``, above 64 KiB)
        and ``SEED-INDEX-BASE.txt``: the input, ready to commit and replay,
        and what it did.
        """
        saved: list[Path] = []
        if not self.findings or not isinstance(self.source, Mutations):
            return saved
        folder.mkdir(parents=True, exist_ok=True)
        target = {**BUILDERS, **HARNESS_BUILDERS}[self.name](self.paths)
        for finding in self.findings.values():
            which, data = self.source.input(target, finding.index)
            stem = f"{finding.label}-{which}"
            path = folder / f"{stem}.bin"
            if len(data) > 1 << 16:
                path, data = folder / f"{stem}.bin.gz", gzip.compress(data, mtime=0)
            path.write_bytes(data)
            (folder / f"{stem}.txt").write_text(str(finding) + "\n")
            saved.append(path)
        return saved


class _Lines:
    """Lines from a pipe, each waited for at most a given time."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buffer = b""
        self.closed = False

    def next(self, timeout: float) -> str | None:
        while b"\n" not in self.buffer:
            if self.closed or not select.select([self.fd], [], [], timeout)[0]:
                return None
            chunk = os.read(self.fd, 65536)
            if not chunk:
                self.closed = True
                return None
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line.decode()


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _tail(stream: object) -> str:
    stream.seek(0)  # type: ignore[attr-defined]
    return stream.read().decode(errors="replace")[-4000:]  # type: ignore[attr-defined]


def reproduce(name: str, paths: list[str], input_: str) -> None:
    """Runs one input (``SEED:INDEX``, or a corpus file) here: its error shows its traceback."""
    target = {**BUILDERS, **HARNESS_BUILDERS}[name](paths)
    if Path(input_).is_file():
        corpus = Corpus(Path(input_).parent)
        which, data = corpus.input(target, corpus.files.index(Path(input_)))
    else:
        seed, _, index = input_.partition(":")
        which, data = input_for(target, int(seed), int(index))
    target.run(data, which)


if __name__ == "__main__":
    if sys.argv[1] == "worker":
        worker(sys.argv[2], sys.argv[3], int(sys.argv[4]), json.loads(sys.argv[5]))
    elif sys.argv[1] == "reproduce":
        reproduce(sys.argv[2], json.loads(sys.argv[4]), sys.argv[3])
