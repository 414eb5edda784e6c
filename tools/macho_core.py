"""Runs a Mach-O test binary in unicorn and writes a Mach-O core of a chosen moment.

    python tools/macho_core.py BINARY STOP_SYMBOL -o CORE [--hit N] [--slide N]
                               [--no-image-infos] [--image-path PATH]

The binary (x86_64 or arm64, built without libraries: see
testprogs/macho/Makefile) is loaded at its link-time addresses plus a slide,
started at ``_main`` with a zero return address, and stopped when
``STOP_SYMBOL`` is entered for the N-th time.  Meanwhile every function entry
is recorded (stack pointer, return address, registers), so at the stop the
live entries are the true call chain: for each caller frame its pc (the
return address), its sp, and the callee-saved registers it had at the call.

Writes CORE — MH_CORE with one LC_SEGMENT_64 per image segment and one for
the stack, LC_THREAD (thread state, and NEON state on arm64) and, unless
``--no-image-infos``, the "all image infos" LC_NOTE — and CORE.json with the
true frames.  This is a test oracle: it shares no code with liveunwind.
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
from dataclasses import dataclass, field
from typing import Any

STACK_TOP = 0x7FF7_BFF0_0000
STACK_SIZE = 0x40000
#: Mapping granule in unicorn, and the alignment of the slide and of core data (arm64 pages).
MAP_PAGE = 0x1000
PAGE = 0x4000
CPU = {"x86_64": (0x01000007, 3), "arm64": (0x0100000C, 0)}
#: Registers a callee must preserve (DWARF numbers), as recorded per caller frame.
CALLEE_SAVED = {
    "x86_64": (3, 6, 12, 13, 14, 15),
    "arm64": (*range(19, 30), *range(72, 80)),
}
MAX_INSTRUCTIONS = 5_000_000


@dataclass
class Image:
    arch: str
    segments: list[dict[str, Any]]
    functions: dict[int, str]
    uuid: bytes
    text_vmaddr: int


@dataclass
class Entry:
    sp: int
    return_address: int
    function: str
    registers: dict[int, int] = field(default_factory=dict)


def load_image(path: str) -> Image:
    import lief

    binary = lief.MachO.parse(path).at(0)
    arch = {0x01000007: "x86_64", 0x0100000C: "arm64"}[int(binary.header.cpu_type.value)]
    segments = [
        {
            "name": segment.name,
            "vmaddr": segment.virtual_address,
            "vmsize": segment.virtual_size,
            "content": bytes(segment.content),
            "prot": int(segment.init_protection),
        }
        for segment in binary.segments
        if segment.virtual_size and segment.name != "__PAGEZERO"
    ]
    sections = list(binary.sections)
    functions = {}
    for symbol in binary.symbols:
        raw = symbol.raw_type
        if raw & 0xE0 or raw & 0x0E != 0x0E or not 0 < symbol.numberof_sections <= len(sections):
            continue
        section = sections[symbol.numberof_sections - 1]
        flags = {flag.name for flag in section.flags_list}
        inside = section.virtual_address <= symbol.value < section.virtual_address + section.size
        if inside and flags & {"PURE_INSTRUCTIONS", "SOME_INSTRUCTIONS"}:
            functions[symbol.value] = symbol.name
    text = next(segment for segment in segments if segment["name"] == "__TEXT")
    return Image(arch, segments, functions, bytes(binary.uuid.uuid), text["vmaddr"])


class Machine:
    """A unicorn CPU with the image and a stack mapped, and DWARF-numbered register access."""

    def __init__(self, image: Image, slide: int) -> None:
        import unicorn

        self.image, self.slide, self.arch = image, slide, image.arch
        if self.arch == "x86_64":
            self.uc = unicorn.Uc(unicorn.UC_ARCH_X86, unicorn.UC_MODE_64)
        else:
            self.uc = unicorn.Uc(unicorn.UC_ARCH_ARM64, unicorn.UC_MODE_ARM)
        self.regions: list[tuple[str, int, int, int]] = []
        for segment in image.segments:
            start = segment["vmaddr"] + slide
            size = -(-segment["vmsize"] // MAP_PAGE) * MAP_PAGE
            self.uc.mem_map(start, size)
            self.uc.mem_write(start, segment["content"])
            self.regions.append((segment["name"], start, size, segment["prot"]))
        self.uc.mem_map(STACK_TOP - STACK_SIZE, STACK_SIZE)
        self.regions.append(("", STACK_TOP - STACK_SIZE, STACK_SIZE, 3))
        self._ids = _register_ids(self.arch)

    def get(self, number: int) -> int:
        return self.uc.reg_read(self._ids[number])

    def set(self, number: int, value: int) -> None:
        self.uc.reg_write(self._ids[number], value)

    def registers(self) -> dict[int, int]:
        return {number: self.get(number) for number in self._ids}

    @property
    def pc(self) -> int:
        return self.get(16 if self.arch == "x86_64" else 32)

    @property
    def sp(self) -> int:
        return self.get(7 if self.arch == "x86_64" else 31)

    def return_address(self) -> int:
        """At a function's first instruction: where it will return to."""
        if self.arch == "x86_64":
            return struct.unpack("<Q", self.uc.mem_read(self.sp, 8))[0]
        return self.get(30)


def _register_ids(arch: str) -> dict[int, int]:
    if arch == "x86_64":
        from unicorn import x86_const as x

        names = ("RAX", "RDX", "RCX", "RBX", "RSI", "RDI", "RBP", "RSP", "R8", "R9", "R10")
        names += ("R11", "R12", "R13", "R14", "R15", "RIP")
        return {number: getattr(x, f"UC_X86_REG_{name}") for number, name in enumerate(names)}
    from unicorn import arm64_const as a

    ids = {number: getattr(a, f"UC_ARM64_REG_X{number}") for number in range(29)}
    ids.update({29: a.UC_ARM64_REG_FP, 30: a.UC_ARM64_REG_LR, 31: a.UC_ARM64_REG_SP})
    ids[32] = a.UC_ARM64_REG_PC
    ids.update({64 + n: getattr(a, f"UC_ARM64_REG_D{n}") for n in range(32)})
    return ids


def run(machine: Machine, stop: str, hit: int) -> tuple[dict[int, int], list[Entry]]:
    """Runs from _main to the ``hit``-th entry of ``stop``; returns its registers and live calls."""
    import unicorn

    image, slide = machine.image, machine.slide
    entries = {address + slide: name for address, name in image.functions.items()}
    by_name = {name: address for address, name in entries.items()}
    if stop not in by_name and "_" + stop in by_name:
        stop = "_" + stop
    if stop not in by_name or "_main" not in by_name:
        raise SystemExit(f"macho_core: no symbol {stop!r} (or _main) in the binary")
    stop_address = by_name[stop]
    sp = STACK_TOP - 0x1000
    if machine.arch == "x86_64":
        sp -= 8
        machine.uc.mem_write(sp, bytes(8))  # main's return address: 0 ends the chain
    else:
        machine.set(30, 0)
        machine.set(29, 0)
    machine.set(7 if machine.arch == "x86_64" else 31, sp)
    live: list[Entry] = []
    state = {"hits": 0, "stopped": None}

    def on_code(uc: Any, address: int, size: int, _data: Any) -> None:
        name = entries.get(address)
        if name is None:
            return
        entry_sp = machine.sp
        while live and live[-1].sp <= entry_sp:
            live.pop()  # returned: a live caller's sp is above every callee's
        live.append(Entry(entry_sp, machine.return_address(), name, machine.registers()))
        if address == stop_address:
            state["hits"] += 1
            if state["hits"] == hit:
                state["stopped"] = machine.registers()
                uc.emu_stop()

    text = next(r for r in machine.regions if r[0] == "__TEXT")
    machine.uc.hook_add(unicorn.UC_HOOK_CODE, on_code, begin=text[1], end=text[1] + text[2])
    machine.uc.emu_start(by_name["_main"], 0, count=MAX_INSTRUCTIONS)
    if state["stopped"] is None:
        raise SystemExit(f"macho_core: {stop} was not entered {hit} time(s)")
    return state["stopped"], live


def true_frames(machine: Machine, stopped: dict[int, int], live: list[Entry]) -> list[dict]:
    """Frame 0 at the stop, then each live caller: pc, sp, callee-saved registers.

    ``live`` runs from _main's entry (outermost) to the stop function's; the
    entry of each callee tells its caller's pc (the return address), sp and
    the registers the caller had when it made the call.
    """
    arch = machine.arch
    pc_number, sp_number = (16, 7) if arch == "x86_64" else (32, 31)
    frames = [
        {
            "pc": stopped[pc_number],
            "sp": stopped[sp_number],
            "function": live[-1].function,
            "registers": {},
        }
    ]
    for index in range(len(live) - 1, 0, -1):
        callee, caller = live[index], live[index - 1]
        frames.append(
            {
                "pc": callee.return_address,
                "sp": callee.sp + (8 if arch == "x86_64" else 0),
                "function": caller.function,
                "registers": {
                    str(number): callee.registers[number] for number in CALLEE_SAVED[arch]
                },
            }
        )
    return frames


def _thread_command(arch: str, stopped: dict[int, int]) -> bytes:
    """LC_THREAD: x86_THREAD_STATE64, or ARM_THREAD_STATE64 followed by ARM_NEON_STATE64."""
    if arch == "x86_64":
        order = (0, 3, 2, 1, 5, 4, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16)
        values = [stopped[n] for n in order] + [0x202, 0x2B, 0, 0]
        states = struct.pack("<2I", 4, 42) + struct.pack("<21Q", *values)
    else:
        values = [stopped[n] for n in range(33)]
        states = struct.pack("<2I", 6, 68) + struct.pack("<33Q2I", *values, 0x60000000, 0)
        neon = b"".join(struct.pack("<2Q", stopped.get(64 + n, 0), 0) for n in range(32))
        states += struct.pack("<2I", 17, 130) + neon + struct.pack("<2I", 0, 0)
    return struct.pack("<2I", 0x4, 8 + len(states)) + states


def _image_infos(machine: Machine, offset: int, image_path: str) -> bytes:
    """The "all image infos" note placed at file ``offset``: header, one entry, segments, path."""
    image = machine.image
    named = [(name, start) for name, start, _size, _prot in machine.regions if name]
    segments = b"".join(struct.pack("<16s2Q", name.encode(), start, 0) for name, start in named)
    entries = offset + 24
    segments_at = entries + 48
    path_at = segments_at + len(segments)
    load = image.text_vmaddr + machine.slide
    note = struct.pack("<2IQ2I", 1, 1, entries, 48, 0)
    note += struct.pack("<Q16s2Q2I", path_at, image.uuid, load, segments_at, len(named), 0)
    return note + segments + image_path.encode() + b"\0"


def core_bytes(
    machine: Machine, stopped: dict[int, int], image_infos: bool, image_path: str
) -> bytes:
    """An MH_CORE of the machine's memory and the stopped thread."""
    thread = _thread_command(machine.arch, stopped)
    memory = [
        (name, start, size, prot, bytes(machine.uc.mem_read(start, size)))
        for name, start, size, prot in machine.regions
    ]
    ncmds = 1 + len(memory) + (1 if image_infos else 0)
    sizeofcmds = len(thread) + 72 * len(memory) + (40 if image_infos else 0)
    position = 32 + sizeofcmds
    commands = [thread]
    note, note_offset = b"", position
    if image_infos:
        note_offset = (position + 7) // 8 * 8
        note = _image_infos(machine, note_offset, image_path)
        owner = b"all image infos"
        commands.append(struct.pack("<2I16s2Q", 0x31, 40, owner, note_offset, len(note)))
        position = note_offset + len(note)
    data_offset = (position + PAGE - 1) // PAGE * PAGE
    placed = []
    for name, start, size, prot, data in memory:
        segment = struct.pack(
            "<2I16s4Q4I", 0x19, 72, name.encode(), start, size, data_offset, size, prot, prot, 0, 0
        )
        commands.append(segment)
        placed.append((data_offset, data))
        data_offset += size
    cpu_type, cpu_subtype = CPU[machine.arch]
    out = bytearray(
        struct.pack("<7I4x", 0xFEEDFACF, cpu_type, cpu_subtype, 4, ncmds, sizeofcmds, 0)
    )
    out += b"".join(commands)
    out += bytes(note_offset - len(out)) + note
    for offset, data in placed:
        out += bytes(offset - len(out)) + data
    return bytes(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("binary")
    parser.add_argument("stop", help="function whose entry is the moment of the core")
    parser.add_argument("-o", "--output", required=True, help="core file to write")
    parser.add_argument("--hit", type=int, default=1, help="stop at the N-th entry (default 1)")
    parser.add_argument("--slide", type=lambda text: int(text, 0), default=0x2C000)
    parser.add_argument("--no-image-infos", action="store_true")
    parser.add_argument("--image-path", help="path recorded in the image-infos note")
    args = parser.parse_args(argv)
    if args.slide % PAGE:
        parser.error(f"the slide must be a multiple of {PAGE:#x}")
    image = load_image(args.binary)
    machine = Machine(image, args.slide)
    stopped, live = run(machine, args.stop, args.hit)
    frames = true_frames(machine, stopped, live)
    image_path = args.image_path or args.binary
    with open(args.output, "wb") as stream:
        stream.write(core_bytes(machine, stopped, not args.no_image_infos, image_path))
    truth = {
        "arch": image.arch,
        "slide": args.slide,
        "uuid": image.uuid.hex(),
        "frames": frames,
        "registers": {str(number): value for number, value in stopped.items()},
    }
    with open(args.output + ".json", "w") as stream:
        json.dump(truth, stream, indent=1)
    for index, frame in enumerate(frames):
        print(f"#{index} {frame['pc']:#x} sp={frame['sp']:#x} {frame.get('function', '?')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
