"""The perf record decoders against bytes ``perf record`` wrote, and against broken ones.

tests/data/perf/profiled.data is ``perf record --call-graph dwarf,1024 -F 200
-- timeout -s INT 0.3 testprogs/build/profiled`` (perf 6.1, Linux 6.18,
x86_64).  What it holds was read off it by perf itself, pinned here:
``perf report --stats`` (the counts of each record type), ``perf script -F
tid,time,ip,uregs --ns`` (the first sample and its registers), ``perf script
-D`` (its stack copy: 1024 bytes, all filled) and ``--show-mmap-events``
(the program's code mapping).  The broken files are that file with one
field changed: each must be one FormatError, never an exception of Python's
nor an allocation sized by the bad field.
"""

from __future__ import annotations

import struct
from collections import Counter
from pathlib import Path

import pytest

from liveunwind.arch import arch_by_name
from liveunwind.errors import FormatError
from liveunwind.formats import perfdata, perfevents
from liveunwind.targets.sample.perfdata import PerfDataError, PerfDataFile

DATA = Path(__file__).parent.parent / "data" / "perf" / "profiled.data"
#: perf script -D: the first sample's record (file offset and size).
FIRST_SAMPLE_AT, FIRST_SAMPLE_SIZE = 0x22F0, 0x4F8


def test_the_file_structure_is_perfs() -> None:
    with PerfDataFile(str(DATA)) as recording:
        attr = recording.attr
        assert recording.arch_name == "x86_64" and recording.events == 1
        assert attr.sample_regs_user == 0xFF0FFF and attr.sample_stack_user == 1024
        assert attr.sample_type & perfevents.SAMPLE_REGS_USER
        assert attr.sample_type & perfevents.SAMPLE_STACK_USER
        assert attr.freq and attr.sample_period == 200 and attr.sample_id_all
        assert attr.type == 1 and attr.config == 0  # cpu-clock
        build_ids = {entry.path: entry.build_id.hex() for entry in recording.build_ids}
        assert build_ids["[vdso]"] == "e95baaeaec8534edc5df3654182ddf12b19d9b23"


def test_the_records_are_those_perf_report_counts() -> None:
    with PerfDataFile(str(DATA)) as recording:
        records = list(recording.records())
        assert not recording.problems
        # perf report --stats: ID_INDEX, THREAD_MAP, CPU_MAP, FINISHED_INIT are perf's own.
        assert recording.skipped == {69: 1, 73: 1, 74: 1, 82: 1}
    kinds = Counter(type(record).__name__ for record in records)
    mmaps = [record for record in records if isinstance(record, perfevents.Mmap)]
    tasks = [record for record in records if isinstance(record, perfevents.Task)]
    assert kinds["Sample"] == 31 and kinds["Comm"] == 6 and len(mmaps) == 1 + 68
    assert sum(task.exit for task in tasks) == 5 and sum(not task.exit for task in tasks) == 4
    times = [record.time for record in records if isinstance(record, perfevents.Sample)]
    assert times == sorted(times)


def test_the_first_sample_is_perf_scripts() -> None:
    with PerfDataFile(str(DATA)) as recording:
        sample = next(r for r in recording.records() if isinstance(r, perfevents.Sample))
        attr = recording.attr
    assert (sample.pid, sample.tid, sample.time) == (25925, 25926, 22530080602591)
    assert sample.ip == 0x55681C0FA3A4 and sample.period == 5000000 and sample.user
    assert sample.abi == 2 and sample.dyn_size == 1024 and len(sample.stack) == 1024
    arch = arch_by_name("x86_64")
    assert arch.perf_registers is not None
    registers = arch.perf_registers.registers(attr.sample_regs_user, sample.registers)
    named = {arch.register_name(number): value for number, value in registers.items()}
    assert named == {
        "rax": 0xE124461318521348,
        "rbx": 0x7F1AA04C76C0,
        "rcx": 0x14057B7EF767814F,
        "rdx": 0x363,
        "rsi": 0x5851F42D4C957F2D,
        "rdi": 0x7011005162190001,
        "rbp": 0x0,
        "rsp": 0x7F1AA04C6ED0,
        "rip": 0x55681C0FA3A4,
        "r8": 0x7F1AA06B9000,
        "r9": 0x7FFC6D1BB3C7,
        "r10": 0x8,
        "r11": 0x246,
        "r12": 0xFFFFFFFFFFFFFF80,
        "r13": 0x16,
        "r14": 0x7FFC6D1BB2D0,
        "r15": 0x7F1A9FCC7000,
    }


def test_the_programs_code_mapping_is_perf_scripts() -> None:
    with PerfDataFile(str(DATA)) as recording:
        code = [
            record
            for record in recording.records()
            if isinstance(record, perfevents.Mmap)
            and record.path.endswith("/profiled")
            and record.executable
        ]
    assert [(m.start, m.length, m.pgoff, m.inode, m.prot) for m in code] == [
        (0x55681C0FA000, 0x1000, 0x1000, 5490017, 5)
    ]


# -- broken inputs ----------------------------------------------------------------------


def _attr() -> perfevents.EventAttr:
    with PerfDataFile(str(DATA)) as recording:
        return recording.attr


def _first_sample() -> bytearray:
    return bytearray(DATA.read_bytes()[FIRST_SAMPLE_AT : FIRST_SAMPLE_AT + FIRST_SAMPLE_SIZE])


def test_the_pinned_record_decodes() -> None:
    record, size = perfevents.decode(_attr(), bytes(_first_sample()))
    assert isinstance(record, perfevents.Sample) and size == FIRST_SAMPLE_SIZE


@pytest.mark.parametrize("cut", [4, 8, 100, FIRST_SAMPLE_SIZE - 1])
def test_a_cut_record_is_a_format_error(cut: int) -> None:
    with pytest.raises(FormatError):
        perfevents.decode(_attr(), bytes(_first_sample()[:cut]))


@pytest.mark.parametrize("size", [0, 4, 7])
def test_a_record_smaller_than_its_header_is_a_format_error(size: int) -> None:
    raw = _first_sample()
    struct.pack_into("<H", raw, 6, size)
    with pytest.raises(FormatError, match="says it is"):
        perfevents.decode(_attr(), bytes(raw))


def _stack_field(raw: bytearray) -> int:
    """Offset of the stack copy's size in the pinned sample: 8 + 4 + 8 + 8 + 8 + 8 + 8 (ip…period,
    read values) + 8 + 8 (callchain count 0?) are not assumed: found by the size perf wrote."""
    return bytes(raw).index(struct.pack("<Q", 1024), 8)


def test_a_huge_stack_size_is_a_format_error() -> None:
    raw = _first_sample()
    struct.pack_into("<Q", raw, _stack_field(raw), 1 << 62)
    with pytest.raises(FormatError, match="cut short in its stack copy"):
        perfevents.decode(_attr(), bytes(raw))


def test_a_dyn_size_beyond_the_copy_is_a_format_error() -> None:
    raw = _first_sample()
    dyn_size_at = _stack_field(raw) + 8 + 1024
    struct.pack_into("<Q", raw, dyn_size_at, 1025)
    with pytest.raises(FormatError, match="dyn_size 1025 exceeds"):
        perfevents.decode(_attr(), bytes(raw))


def test_a_huge_callchain_count_is_a_format_error() -> None:
    attr = perfevents.EventAttr(perfevents.SAMPLE_IP | perfevents.SAMPLE_CALLCHAIN)
    body = struct.pack("<QQ", 0x1000, 1 << 60)
    raw = struct.pack("<IHH", perfevents.RECORD_SAMPLE, 2, 8 + len(body)) + body
    with pytest.raises(FormatError, match="callchain"):
        perfevents.decode(attr, raw)


def _decoded_by(decoder, attr: perfevents.EventAttr, raw: bytes) -> object:  # type: ignore[no-untyped-def]
    """Every field of the sample ``decoder`` makes of ``raw`` (a record), or its error's text."""
    misc = struct.unpack_from("<H", raw, 4)[0]
    try:
        sample = decoder(attr, misc, memoryview(raw)[8:])
    except FormatError as error:
        return str(error)
    return [bytes(sample.stack), *(getattr(sample, name) for name in perfevents.Sample.__slots__)]


def test_the_fast_sample_decoder_is_the_field_by_field_one_on_every_cut_and_change() -> None:
    """The one-struct prefix (perfevents._SamplePrefix) gives what the field-by-field decoder
    gives, and the same error, for perf's sample cut at every length and with each of its
    words before the stack copy's end set to a large and a small value."""
    attr, raw = _attr(), bytes(_first_sample())
    assert attr._prefix is not None  # --call-graph dwarf's layout has one
    fast, by_field = perfevents.decode_sample, perfevents._decode_sample_by_field
    assert _decoded_by(fast, attr, raw) == _decoded_by(by_field, attr, raw)
    errors = set()
    for cut in range(8, len(raw)):
        found = _decoded_by(fast, attr, raw[:cut])
        assert found == _decoded_by(by_field, attr, raw[:cut]), cut
        errors.add(found if isinstance(found, str) else "")
    assert len(errors) > 4  # cuts in several fields, each its own message
    for at in range(8, len(raw) - 7, 8):
        for value in (1 << 40, 3):
            changed = bytearray(raw)
            struct.pack_into("<Q", changed, at, value)
            found = _decoded_by(fast, attr, bytes(changed))
            assert found == _decoded_by(by_field, attr, bytes(changed)), (at, value)


def test_a_short_mmap2_is_a_format_error() -> None:
    attr = perfevents.EventAttr(0)
    raw = struct.pack("<IHH", perfevents.RECORD_MMAP2, 0, 8 + 40) + bytes(40)
    with pytest.raises(FormatError, match="MMAP2"):
        perfevents.decode(attr, raw)


def test_a_build_id_longer_than_twenty_bytes_is_a_format_error() -> None:
    attr = perfevents.EventAttr(0)
    body = struct.pack("<IIQQQ", 1, 1, 0x1000, 0x1000, 0) + bytes([21]) + bytes(23)
    body += struct.pack("<II", 5, 2) + b"/bin/true\0\0\0\0\0\0\0"
    raw = struct.pack("<IHH", perfevents.RECORD_MMAP2, perfevents.MISC_MMAP_BUILD_ID, 8 + len(body))
    with pytest.raises(FormatError, match="build-id is 21 bytes"):
        perfevents.decode(attr, raw + body)


def test_an_unknown_record_is_skipped_by_its_size() -> None:
    raw = struct.pack("<IHH", 99, 0, 24) + bytes(16)
    record, size = perfevents.decode(perfevents.EventAttr(0), raw)
    assert isinstance(record, perfevents.Other) and (record.type, size) == (99, 24)


def _header_with(offset: int, value: int) -> bytes:
    raw = bytearray(DATA.read_bytes())
    struct.pack_into("<Q", raw, offset, value)
    return bytes(raw)


@pytest.mark.parametrize(
    ("changed", "message"),
    [
        (lambda data: b"PERFILE1" + data[8:], "not a perf.data file"),
        (lambda data: b"2ELIFREP" + data[8:], "big-endian"),
        (lambda data: data[:8] + struct.pack("<Q", 16) + data[16:], "pipe-mode"),
        (lambda data: data[:60], "shorter than perf.data's header"),
        (lambda data: _header_with(16, 3), "not a perf_file_attr"),  # attr_size
        (lambda data: _header_with(24, 1 << 60), "runs past the end"),  # attrs offset
        (lambda data: _header_with(32, 7), "not whole entries"),  # attrs size
        (lambda data: _header_with(48, 0), "data section is empty"),  # data size
    ],
)
def test_a_broken_header_is_a_format_error(changed, message: str) -> None:  # type: ignore[no-untyped-def]
    data = changed(DATA.read_bytes())
    with pytest.raises(FormatError, match=message):
        header = perfdata.read_header(data, len(data))
        perfdata.read_attrs(header, data[header.attrs.offset : header.attrs.end], len(data))


def test_a_data_section_past_the_end_is_read_as_far_as_it_goes(tmp_path: Path) -> None:
    cut = tmp_path / "cut.data"
    cut.write_bytes(DATA.read_bytes()[: FIRST_SAMPLE_AT + 3 * FIRST_SAMPLE_SIZE])
    with PerfDataFile(str(cut)) as recording:
        samples = [r for r in recording.records() if isinstance(r, perfevents.Sample)]
        assert recording.header.data_cut and 1 <= len(samples) <= 3
        assert any("it is truncated" in problem for problem in recording.problems)


def test_a_corrupt_record_ends_the_records_saying_where(tmp_path: Path) -> None:
    raw = bytearray(DATA.read_bytes())
    struct.pack_into("<H", raw, FIRST_SAMPLE_AT + 6, 2)
    broken = tmp_path / "broken.data"
    broken.write_bytes(bytes(raw))
    with PerfDataFile(str(broken)) as recording:
        records = list(recording.records())
        assert not any(isinstance(record, perfevents.Sample) for record in records)
        assert recording.problems == [
            f"{broken}: corrupt record at offset {FIRST_SAMPLE_AT:#x} "
            "(perf record says it is 2 bytes); "
            "the records after it are not read"
        ]


def _records_read_by(path: Path, chunk: int, monkeypatch: pytest.MonkeyPatch) -> tuple:  # type: ignore[type-arg]
    """Each record's type, time, pid and stack copy, and the problems, read ``chunk`` bytes at
    a time."""
    monkeypatch.setattr("liveunwind.targets.sample.perfdata.CHUNK", chunk)
    with PerfDataFile(str(path)) as recording:
        records = [
            (type(r).__name__, getattr(r, "time", None), getattr(r, "pid", None))
            + ((bytes(r.stack), r.registers) if isinstance(r, perfevents.Sample) else ())
            for r in recording.records()
        ]
        return records, recording.problems, recording.skipped


@pytest.mark.parametrize("cut", [None, FIRST_SAMPLE_AT + 3 * FIRST_SAMPLE_SIZE + 100])
def test_records_are_the_same_in_chunks_of_any_size(
    cut: int | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record begun at a chunk's end is read again with the next chunk: whether chunks end
    inside headers, samples, or are smaller than a record, the records and problems are those
    of one read of the whole file (a file cut inside a record too)."""
    path = tmp_path / "profiled.data"
    path.write_bytes(DATA.read_bytes()[:cut])
    whole = _records_read_by(path, 1 << 30, monkeypatch)
    assert len(whole[0]) > (10 if cut else 100)
    assert bool(whole[1]) == bool(cut)
    for chunk in (7, 100, 1000, FIRST_SAMPLE_SIZE, 4096, 10_000):
        assert _records_read_by(path, chunk, monkeypatch) == whole, chunk


def test_a_file_that_is_not_one_is_a_perf_data_error(tmp_path: Path) -> None:
    with pytest.raises(PerfDataError, match=r"not a perf\.data file"):
        PerfDataFile(str(Path(__file__)))
    with pytest.raises(PerfDataError, match="No such file"):
        PerfDataFile(str(tmp_path / "missing.data"))


# -- perf record -z -------------------------------------------------------------------------

#: ``perf record -z --call-graph dwarf -F 200 -- timeout -s INT 0.3 profiled``: its records are
#: three PERF_RECORD_COMPRESSED pieces of one zstd stream (perf report --stats: 43 samples,
#: 68 MMAP2 and 1 MMAP, 6 COMM, 4 FORK, 5 EXIT; perf script: the first sample below).
ZSTD_DATA = DATA.parent / "profiled-zstd.data"


def test_compressed_records_are_perfs() -> None:
    with PerfDataFile(str(ZSTD_DATA)) as recording:
        records = list(recording.records())
        assert not recording.problems
    kinds = Counter(type(record).__name__ for record in records)
    assert kinds["Sample"] == 43 and kinds["Mmap"] == 69 and kinds["Comm"] == 6
    assert kinds["Task"] == 9
    first = next(record for record in records if isinstance(record, perfevents.Sample))
    assert (first.tid, first.time, first.ip) == (3834, 23193718159621, 0x5612253B33A4)
    assert first.dyn_size == len(first.stack) > 0


def test_a_corrupt_compressed_stream_ends_the_records_saying_so(tmp_path: Path) -> None:
    raw = bytearray(ZSTD_DATA.read_bytes())
    header = perfdata.read_header(bytes(raw), len(raw))
    at = header.data.offset
    while struct.unpack_from("<I", raw, at)[0] != 81:  # the first compressed record
        at += struct.unpack_from("<H", raw, at + 6)[0]
    for offset in range(at + 8 + 4, at + 8 + 64):  # past the zstd magic: the frame's header
        raw[offset] ^= 0x5A
    broken = tmp_path / "broken.data"
    broken.write_bytes(bytes(raw))
    with PerfDataFile(str(broken)) as recording:
        records = list(recording.records())
        assert not any(isinstance(record, perfevents.Sample) for record in records)
        assert len(recording.problems) == 1
        assert "compressed records" in recording.problems[0]


@pytest.mark.parametrize(
    ("arch_name", "perf_numbers"),
    [
        # arch/x86/include/uapi/asm/perf_regs.h: ax bx cx dx si di bp sp ip flags cs ss ds es fs gs
        # r8..r15; perf record asks 0xff0fff (no ds es fs gs).
        ("x86_64", {"rax": 0, "rbx": 1, "rcx": 2, "rdx": 3, "rbp": 6, "rsp": 7, "rip": 8,
                    "r8": 16, "r15": 23}),
        # arch/arm64/include/uapi/asm/perf_regs.h: x0..x28, x29 (fp), lr, sp, pc.
        ("aarch64", {"x0": 0, "x28": 28, "fp": 29, "lr": 30, "sp": 31, "pc": 32}),
        # arch/riscv/include/uapi/asm/perf_regs.h: pc, ra, sp, gp, tp, t0-t2, s0, s1, a0-a7...
        ("riscv64", {"pc": 0, "ra": 1, "sp": 2, "fp": 8, "a0": 10, "s2": 18, "t6": 31}),
    ],
)  # fmt: skip
def test_each_architecture_numbers_perf_registers_as_its_kernel(
    arch_name: str, perf_numbers: dict[str, int]
) -> None:
    arch = arch_by_name(arch_name)
    perf = arch.perf_registers
    assert perf is not None
    # Each register's value at its perf number, with every register an unwind needs asked.
    values = tuple(range(1000, 1000 + bin(perf.unwind_mask).count("1")))
    registers = perf.registers(perf.unwind_mask, values)
    bits = [bit for bit in range(64) if perf.unwind_mask >> bit & 1]
    for name, number in perf_numbers.items():
        assert registers[arch.register_number(name)] == values[bits.index(number)], name
    assert arch.pc in registers and arch.sp in registers and arch.fp in registers


def test_records_held_for_ordering_are_bounded_and_none_is_lost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The file's one round holds 31 samples of 1 KiB stack copies: with room for three,
    the oldest go on before the round ends, and every record still comes out once."""
    from liveunwind.targets.sample import perfdata as reader

    monkeypatch.setattr(reader, "MAX_PENDING_BYTES", 3 * 1024)
    with PerfDataFile(str(DATA)) as recording:
        records = list(recording.records())
    kinds = Counter(type(record).__name__ for record in records)
    assert kinds["Sample"] == 31 and len(records) == 31 + 6 + 69 + 9
    times = [record.time for record in records if isinstance(record, perfevents.Sample)]
    assert len(set(times)) == 31
