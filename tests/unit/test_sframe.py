"""SFrame decoder tests: objdump ground truth (the vectors), rules, byte order, headers, fuzz.

The vectors in ``tests/data/sframe-vectors`` hold sections written by binutils 2.40-2.46
together with what objdump printed for them.  The ground truth is parsed on
its own, token by token (tests/support/sframe_objdump.py), so a decoding
error cannot hide behind a matching renderer; the renderer is then also
compared line by line.  Binaries built here with gcc are
tests/system/test_sframe.py.
"""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from liveunwind.arch.aarch64 import AARCH64
from liveunwind.arch.x86_64 import X86_64
from liveunwind.errors import FormatError
from liveunwind.formats.unwind.rules import RegKind
from liveunwind.formats.unwind.sframe import (
    PcType,
    SFrameSection,
)
from tests.support.paths import DATA
from tests.support.sframe_objdump import (
    CONTENTS_LINE,
    assert_matches_objdump,
    assert_rules_agree,
    probe_addresses,
)

VECTOR_DIR = DATA / "sframe-vectors"
VECTORS = sorted(VECTOR_DIR.glob("*.json"))
ARCHES = {"x86_64": X86_64, "aarch64": AARCH64}


def load_vector(path: Path) -> tuple[bytes, int, str]:
    record = json.loads(path.read_text())
    return bytes(record["content"]), record["section_base"], record["groundtruth"]


def nonempty_vectors() -> list[tuple[bytes, int]]:
    loaded = (load_vector(path) for path in VECTORS)
    return [(data, base) for data, base, _ in loaded if data]


# -- the vectors -------------------------------------------------------------------------


def test_vector_folder_present() -> None:
    assert len(VECTORS) > 50
    assert (VECTOR_DIR / "LICENSE").is_file()


@pytest.mark.parametrize("path", VECTORS, ids=[path.stem for path in VECTORS])
def test_vector_matches_objdump(path: Path) -> None:
    data, base, dump = load_vector(path)
    if not data:
        # objdump printed no SFrame section at all: these links dropped it.
        assert CONTENTS_LINE not in dump
        with pytest.raises(FormatError, match="shorter than"):
            SFrameSection(data, base)
        return
    section = SFrameSection(data, base)
    assert_matches_objdump(section, dump)
    assert_rules_agree(section)


def vector(name: str) -> SFrameSection:
    data, base, _ = load_vector(VECTOR_DIR / f"{name}.json")
    if not data:
        pytest.fail(f"vector {name} is empty")
    return SFrameSection(data, base)


def test_x86_64_frame_pointer_rules() -> None:
    section = vector("cfi-sframe-x86_64-1-2.46")
    entry = section.rule_for(0x401000)
    assert (entry.cfa.register, entry.cfa.offset) == (7, 8)
    assert entry.registers == ((16, entry.rule_for(16)),)
    assert entry.rule_for(16).kind is RegKind.OFFSET and entry.rule_for(16).offset == -8
    body = section.rule_for(0x401017)
    assert (body.cfa.register, body.cfa.offset) == (6, 16)
    assert (body.rule_for(6).kind, body.rule_for(6).offset) == (RegKind.OFFSET, -16)
    assert (body.start, body.end) == (0x401000, 0x401019)
    assert section.rule_for(0x400FFF) is None
    assert section.rule_for(0x401019) is None


def test_aarch64_lr_signed_and_pauth_key() -> None:
    section = vector("cfi-sframe-aarch64-pac-ab-key-1-2.46")
    unsaved = section.rule_for(0x4000B4)
    assert unsaved.rule_for(30).kind is RegKind.SAME and unsaved.ra_signed
    assert unsaved.return_address_register == 30
    saved = section.rule_for(0x4000B8)
    assert (saved.cfa.register, saved.cfa.offset) == (31, 16)
    assert (saved.rule_for(30).kind, saved.rule_for(30).offset) == (RegKind.OFFSET, -8)
    assert (saved.rule_for(29).kind, saved.rule_for(29).offset) == (RegKind.OFFSET, -16)
    assert [f.pauth_key_b for f in section.functions()] == [False, True]
    assert not section.rule_for(0x4000B0).ra_signed


@pytest.mark.parametrize(
    ("name", "pc", "ra_column"),
    [
        ("cfi-sframe-x86_64-ra-undefined-1-2.46", 0x401005, 16),
        ("cfi-sframe-x86_64-ra-undefined-flex-1-2.46", 0x401006, 16),
        ("cfi-sframe-aarch64-ra-undefined-1-2.46", 0x4000B8, 30),
    ],
)
def test_outermost_row_has_undefined_ra(name: str, pc: int, ra_column: int) -> None:
    section = vector(name)
    before = section.rule_for(pc - 1)
    assert before.rule_for(ra_column).kind is not RegKind.UNDEFINED
    assert section.rule_for(pc).rule_for(ra_column).kind is RegKind.UNDEFINED


def test_signal_frame_without_rows() -> None:
    section = vector("cfi-sframe-x86_64-signal-1-2.46")
    assert section.rule_for(0x401001) is None
    function = section.function_for(0x401001)
    assert function.signal_frame and function.rows == ()


def test_flex_drap_cfa_and_saved_fp_become_expressions() -> None:
    section = vector("cfi-sframe-x86_64-esc-expr-1-2.46")
    drap = section.rule_for(0x401009)
    assert (drap.cfa.register, drap.cfa.offset) == (10, 0)  # CFA = r10
    realigned = section.rule_for(0x40101A)
    assert realigned.cfa.expression == bytes([0x76, 0x78, 0x06])  # *(rbp - 8)
    fp = realigned.rule_for(6)
    assert (fp.kind, fp.expression) == (RegKind.EXPRESSION, bytes([0x76, 0x00]))  # *(rbp + 0)
    assert realigned.rule_for(16).offset == -8  # padding: RA at its fixed place


def test_flex_ra_and_fp_in_registers() -> None:
    ra_in_rbx = vector("cfi-sframe-x86_64-6-2.46").rule_for(0x401008)
    assert (ra_in_rbx.rule_for(16).kind, ra_in_rbx.rule_for(16).register) == (RegKind.REGISTER, 3)
    fp_in_rbx = vector("cfi-sframe-x86_64-esc-expr-3-2.46").rule_for(0x40100C)
    assert (fp_in_rbx.rule_for(6).kind, fp_in_rbx.rule_for(6).register) == (RegKind.REGISTER, 3)
    cfa_slot = vector("cfi-sframe-x86_64-esc-expr-3-2.46").rule_for(0x401010)
    assert (cfa_slot.rule_for(6).kind, cfa_slot.rule_for(6).offset) == (RegKind.OFFSET, 16)


def test_pcmask_plt_rows_repeat_per_block() -> None:
    section = vector("complex")
    plt = next(f for f in section.functions() if f.pc_type is PcType.MASK)
    assert (plt.start, plt.size, plt.rep_size) == (0x1030, 8, 8)
    for pc in (0x1030, 0x1037):
        assert section.rule_for(pc).cfa.offset == 16
    assert section.rule_for(0x1038) is None


# -- byte order ----------------------------------------------------------------------------


def to_big_endian(data: bytes) -> bytes:
    """Re-encodes a little-endian aarch64 section in big-endian order, field by field."""
    out = bytearray(data)
    header = struct.unpack_from("<HBBBbbBIIIII", data)
    version, aux, num_fdes, freoff = header[1], header[6], header[7], header[11]
    struct.pack_into(">HBBBbbBIIIII", out, 0, *header)
    out[4] = 1  # SFRAME_ABI_AARCH64_ENDIAN_BIG
    fde_formats = {1: "iIIIB", 2: "iIIIBBH", 3: "qII"}
    fde_size = struct.calcsize("<" + fde_formats[version])
    fre_base = 28 + aux + freoff
    for index in range(num_fdes):
        position = 28 + aux + header[10] + index * fde_size
        fields = struct.unpack_from("<" + fde_formats[version], data, position)
        struct.pack_into(">" + fde_formats[version], out, position, *fields)
        fre = fre_base + fields[-1 if version == 3 else 2]
        if version == 3:
            num_fres, info, info2, rep = struct.unpack_from("<HBBB", data, fre)
            struct.pack_into(">HBBB", out, fre, num_fres, info, info2, rep)
            fre += 5
        else:
            num_fres, info = fields[3], fields[4]
        address = "<" + "BHI"[info & 0xF]
        for _ in range(num_fres):
            struct.pack_into(">" + address[1], out, fre, *struct.unpack_from(address, data, fre))
            fre += struct.calcsize(address)
            word_info = data[fre]
            words = f"{(word_info >> 1) & 0xF}{'bhi'[(word_info >> 5) & 3]}"
            values = struct.unpack_from("<" + words, data, fre + 1)
            struct.pack_into(">" + words, out, fre + 1, *values)
            fre += 1 + struct.calcsize("<" + words)
    return bytes(out)


@pytest.mark.parametrize(
    "name", ["test-fp-aarch64-2.40", "test-fp-aarch64-2.44", "cfi-sframe-aarch64-pac-ab-key-1-2.46"]
)
def test_big_endian_aarch64_decodes_like_little_endian(name: str) -> None:
    data, base, _ = load_vector(VECTOR_DIR / f"{name}.json")
    little = SFrameSection(data, base)
    big_data = to_big_endian(data)
    assert big_data != data
    big = SFrameSection(big_data, base)
    assert big.big_endian and big.arch == "aarch64"
    assert list(big.functions()) == list(little.functions())
    for function in little.functions():
        for pc, _ in probe_addresses(function):
            assert big.rule_for(pc) == little.rule_for(pc)


# -- header validation ----------------------------------------------------------------------


def header(**fields: int) -> bytearray:
    values = {"magic": 0xDEE2, "version": 2, "flags": 1, "abi": 3, "fp": 0, "ra": -8, "aux": 0}
    values |= {"fdes": 0, "fres": 0, "fre_len": 0, "fdeoff": 0, "freoff": 0} | fields
    return bytearray(struct.pack("<HBBBbbBIIIII", *values.values()))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (bytes(header())[:27], "shorter than"),
        (header(magic=0x1234), "bad magic"),
        (header(version=4), "unsupported SFrame version"),
        (header(version=3, flags=2), "unknown flags"),
        (header(version=1, flags=4), "unknown flags"),
        (header(abi=4), "unsupported ABI"),
        (header(abi=1), "contradicts the byte order"),
        (header(fdes=1), "FDE sub-section"),
        (header(fdes=0xFFFFFFFF), "FDE sub-section"),
        (header(aux=200), "runs past"),
        (header(fre_len=0xFFFFFFFF), "FRE sub-section"),
        (header(fres=0xFFFFFFFF), "cannot fit"),
    ],
)
def test_corrupt_header_is_a_format_error(data: bytes, message: str) -> None:
    with pytest.raises(FormatError, match=message):
        SFrameSection(data, 0x1000)


def test_empty_but_valid_section() -> None:
    section = SFrameSection(bytes(header()), 0x1000)
    assert (section.version, section.num_fdes, section.fixed_ra_offset) == (2, 0, -8)
    assert section.rule_for(0x1000) is None
    assert list(section.functions()) == []


def test_fdes_claiming_too_many_fres_are_rejected() -> None:
    data = bytearray(load_vector(VECTOR_DIR / "test-x86_64-2.44.json")[0])
    for index in range(6):  # every FDE claims FDE 0's two rows: 12 FREs, the header has 11
        struct.pack_into("<II", data, 28 + index * 20 + 8, 0, 2)
    with pytest.raises(FormatError, match="claim"):
        list(SFrameSection(data, 0x2130).functions())


# -- fuzz ------------------------------------------------------------------------------------

#: Generous: a well-formed section of this size decodes in well under a millisecond.
TIME_BOUND = 2.0


def exercise(data: bytes, base: int, pcs: list[int]) -> None:
    """Everything a caller may do with a section; only FormatError may escape."""
    try:
        section = SFrameSection(data, base)
        section.format_objdump()
        for pc in pcs:
            section.rule_for(pc)
            section.function_for(pc)
    except FormatError:
        pass


def seeds() -> list[tuple[bytes, int]]:
    sections = nonempty_vectors()
    big_endian = [
        (to_big_endian(data), base) for data, base in sections if data[4] == 2 and data[2] > 1
    ]
    return sections + big_endian[:3]


SEEDS = seeds()

mutation = st.one_of(
    st.tuples(st.just("byte"), st.integers(0, 1 << 16), st.integers(0, 255)),
    st.tuples(
        st.just("u32"),
        st.integers(0, 1 << 16),
        st.sampled_from([0, 1, 0x7F, 0xFF, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF]),
    ),
    st.tuples(st.just("truncate"), st.integers(0, 1 << 16), st.just(0)),
)


def mutate(data: bytes, mutations: list[tuple[str, int, int]]) -> bytes:
    out = bytearray(data)
    for kind, position, value in mutations:
        if not out:
            break
        position %= len(out)
        if kind == "byte":
            out[position] = value
        elif kind == "u32" and position + 4 <= len(out):
            struct.pack_into("<I", out, position, value)
        elif kind == "truncate":
            del out[position:]
    return bytes(out)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.sampled_from(range(len(SEEDS) or 1)),
    mutations=st.lists(mutation, min_size=1, max_size=6),
    extra_pc=st.integers(0, 1 << 64),
)
def test_fuzzed_sections_only_raise_format_error(
    seed: int, mutations: list[tuple[str, int, int]], extra_pc: int
) -> None:
    data, base = SEEDS[seed]
    original = SFrameSection(data, base)
    pcs = [extra_pc] + [f.start + f.size // 2 for f in original.functions()]
    pcs += [f.start for f in original.functions()]
    started = time.process_time()  # CPU seconds: the work is bounded, however busy the machine
    exercise(mutate(data, mutations), base, pcs)
    assert time.process_time() - started < TIME_BOUND
