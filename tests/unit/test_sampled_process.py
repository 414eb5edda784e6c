"""SampledProcess: a process's mappings as its mmap records make them (``targets/sample``).

A new mapping replaces whatever it overlaps, as ``mmap(MAP_FIXED)`` and
``mprotect`` do (perf reports an mprotect that splits a mapping as a new
MMAP2 of the part); the parts left keep their file offsets.  Against a
model: a page → (path, file offset) dictionary, every mapping applied in turn.
"""

from __future__ import annotations

import itertools
import random
import time

import pytest

from liveunwind.arch import arch_by_name
from liveunwind.errors import MemoryReadError
from liveunwind.targets.filefinder import FileFinder
from liveunwind.targets.sample.process import NOT_IN_SAMPLE, RecordedFiles, SampledProcess

PAGE = 0x1000


def process() -> SampledProcess:
    return SampledProcess(arch_by_name("x86_64"), 7, RecordedFiles(FileFinder(), []))


def test_a_new_mapping_cuts_what_it_overlaps_keeping_file_offsets() -> None:
    sampled = process()
    sampled.map(0x10000, 0x20000, 0x3000, "/lib/a.so", prot=5)
    sampled.map(0x14000, 0x16000, 0, "/lib/b.so", prot=1)
    assert [(m.start, m.end, m.offset, m.path, m.perms) for m in sampled.mappings()] == [
        (0x10000, 0x14000, 0x3000, "/lib/a.so", "r-xp"),
        (0x14000, 0x16000, 0, "/lib/b.so", "r--p"),
        (0x16000, 0x20000, 0x3000 + 0x6000, "/lib/a.so", "r-xp"),
    ]
    # One file's mappings share an inode (the module map groups by it); another's differ.
    inodes = {m.path: m.inode for m in sampled.mappings()}
    assert inodes["/lib/a.so"] and inodes["/lib/a.so"] != inodes["/lib/b.so"]


def test_mappings_follow_a_model_of_pages_through_random_records() -> None:
    rng, sampled, model = random.Random(26), process(), {}
    for index in range(2000):
        start = rng.randrange(0, 256) * PAGE
        end = start + rng.randrange(1, 32) * PAGE
        offset = rng.randrange(0, 64) * PAGE
        sampled.map(start, end, offset, f"/f{index}", prot=1)
        for page in range(start, end, PAGE):
            model[page] = (f"/f{index}", offset + page - start)
    seen = {}
    mappings = sampled.mappings()
    assert all(a.end <= b.start for a, b in itertools.pairwise(mappings))
    for mapping in mappings:
        for page in range(mapping.start, mapping.end, PAGE):
            seen[page] = (mapping.path, mapping.offset + page - mapping.start)
    assert seen == model
    assert sampled.mapping_at(mappings[0].start) == mappings[0]


def test_tens_of_thousands_of_records_stay_cheap() -> None:
    sampled = process()
    started = time.process_time()
    for index in range(60_000):
        start = 0x10000 + index * 2 * PAGE
        sampled.map(start, start + PAGE, 0, f"/lib/{index % 50}.so", prot=5)
    assert len(sampled.mappings()) == 60_000
    assert time.process_time() - started < 5  # 0.2 s here: no list rebuilt per record


def test_exec_forgets_and_fork_copies() -> None:
    sampled = process()
    sampled.map(0x10000, 0x20000, 0, "/bin/a", prot=5)
    generation = sampled.generation
    child = sampled.copy(8)
    sampled.forget_mappings()
    assert sampled.mappings() == [] and sampled.generation > generation
    assert [m.path for m in child.mappings()] == ["/bin/a"] and child.pid == 8


def test_memory_outside_read_only_files_is_not_in_the_sample() -> None:
    sampled = process()
    sampled.map(0x10000, 0x20000, 0, "//anon", prot=3)
    sampled.map(0x20000, 0x21000, 0, "[vdso]", prot=5)
    for address in (0x10000, 0x20000, 0x30000):  # anonymous, the vDSO unknown, unmapped
        with pytest.raises(MemoryReadError, match="not in the"):
            sampled.read(address, 8)
    sampled.vdso = bytes(range(256)) * 16
    assert sampled.read(0x20010, 4) == bytes([16, 17, 18, 19])
    assert "kernel copied only" in NOT_IN_SAMPLE


def test_only_files_and_code_make_a_new_generation() -> None:
    """malloc's and Python's anonymous blocks come and go all along: each would make the module
    map anew for the next sample (0.14 ms against 0.03 for the sample itself, measured)."""
    sampled = process()
    sampled.map(0x10000, 0x20000, 0, "/lib/a.so", prot=5)
    generation = sampled.generation
    sampled.map(0x40000, 0x80000, 0, "//anon", prot=3)  # data: no new module map
    assert sampled.generation == generation and len(sampled.mappings()) == 2
    sampled.map(0x80000, 0x81000, 0, "//anon", prot=7)  # JIT code
    assert sampled.generation == generation + 1
    sampled.map(0x18000, 0x19000, 0, "//anon", prot=3)  # data over a file's pages
    assert sampled.generation == generation + 2
    sampled.map(0x90000, 0x91000, 0, "/lib/b.so", prot=1)  # a file
    assert sampled.generation == generation + 3
