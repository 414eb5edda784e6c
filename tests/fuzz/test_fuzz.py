"""The fuzz campaign of issue 14: every reader of untrusted bytes, fed real inputs with edits.

Each target (see ``tests/support/fuzzing.py``) starts from real inputs the
other tests make: kernel cores and a gcore core, Mach-O files and the cores
``tools/macho_core.py`` writes of them, ELF files with
``.eh_frame``/``.sframe``/symbols, DWARF 2–5 and compressed debug info, a Go
program's ``.gopclntab`` and scheduler layout (DWARF), the SFrame vectors,
compact unwind tables, DWARF expressions, GDB remote replies and a perf.data.  Only typed
errors may come out, each input within its CPU and wall time bounds and its
memory bound.

``make test`` (no ``FUZZ_SEED``) draws nothing: it replays every finding ever
made, pinned as a file under ``tests/fuzz/corpus/TARGET/`` (:func:`test_corpus`),
and a fixed number of inputs of :data:`FIXED_SEED` per target
(:data:`FIXED_COUNTS`), so CI gives the same result on every run and a change
cannot fail on an input unrelated to it.  ``make fuzz`` sets ``FUZZ_SEED`` to
a new seed and runs each target for ``FUZZ_SECONDS``; each finding's input is
written into the target's corpus folder (``FUZZ_FINDINGS`` overrides it) with
its report, to be fixed and committed, and ``python -m tests.support.fuzzing
reproduce TARGET FILE PATHS`` runs it again with its whole traceback.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.support import fuzzing
from tests.support.builds import build
from tests.support.cores import crash
from tests.support.macho import ARCHES, make_core
from tests.support.paths import DATA
from tests.support.programs import start_command

#: ``make fuzz``'s seed, new each run; None in ``make test``.
SEED = int(os.environ["FUZZ_SEED"]) if os.environ.get("FUZZ_SEED") else None
SECONDS = float(os.environ.get("FUZZ_SECONDS", "300"))
#: The seed ``make test`` replays, and how many of its inputs per target: about 3 s of CPU
#: each (measured in one process: from 7 gcore cores a second to 40,000 DWARF expressions).
FIXED_SEED = 20261126
FIXED_COUNTS = {
    "kernel-core": 200, "gcore-core": 30, "macho-core": 3000, "macho-file": 3000,
    "elf-unwind": 4000, "dwarf-lines": 1500, "gopclntab": 8000, "go-runtime": 1000,
    "sframe": 50000, "compact": 20000, "dwarf-expr": 50000, "rsp": 30000, "perf-data": 300,
}  # fmt: skip
CORPUS = Path(__file__).parent / "corpus"
SFRAME_VECTORS = DATA / "sframe-vectors"


def _kernel_writes_cores_here() -> None:
    pattern = Path("/proc/sys/kernel/core_pattern").read_text().strip()
    if pattern.startswith("|") or "/" in pattern:
        pytest.skip(f"kernel.core_pattern does not write cores here ({pattern})")


def _needs(*tools: str) -> None:
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)}")


def kernel_cores(folder: Path) -> list[str]:
    _kernel_writes_cores_here()
    programs = build("crash")
    return [
        str(crash(folder / name, [str(programs / name), mode], glob="core*"))
        for name, mode in (("crash-O2", "leaf"), ("crash-O0", "thread"))
    ]


def gcore_cores(folder: Path, testprogs_build: Path) -> list[str]:
    _needs("gdb")
    from tests.support.oracles import gdb_gcore

    core = folder / "threads.core"
    with start_command([str(testprogs_build / "threads-O2")]) as program:
        gdb_gcore(program.pid, core)
    return [str(core)]


def macho_files() -> list[str]:
    programs = build("macho")
    return [str(programs / f"chain-{arch}") for arch in ARCHES]


def macho_cores(folder: Path) -> list[str]:
    pytest.importorskip("unicorn")
    binaries = [Path(path) for path in macho_files()]
    cores = [str(make_core(binary, folder)[0]) for binary in binaries]
    return cores + [str(binary.parent) for binary in binaries]


def elf_files(testprogs_build: Path) -> list[str]:
    return [str(testprogs_build / name) for name in ("threads-O2", "sframe-O2", "libtpshared.so")]


def dwarf_files() -> list[str]:
    programs = build("lines")
    names = ("lines-dwarf5", "lines-dwarf4", "lines-dwarf2", "lines-zlib", "lines-noaranges")
    return [str(programs / name) for name in names]


def go_files() -> list[str]:
    return [str(build("go") / "goroutines")]


def go_switch_files() -> list[str]:
    folder = build("go")
    return [str(folder / "goswitch"), str(folder / "goswitch-dwarf")]


def sframe_vectors() -> list[str]:
    return sorted(str(path) for path in SFRAME_VECTORS.glob("*.json"))


TARGETS = {
    "kernel-core": lambda folder, build: kernel_cores(folder),
    "gcore-core": gcore_cores,
    "macho-core": lambda folder, build: macho_cores(folder),
    "macho-file": lambda folder, build: macho_files(),
    "elf-unwind": lambda folder, build: elf_files(build),
    "dwarf-lines": lambda folder, build: dwarf_files(),
    "gopclntab": lambda folder, build: go_files(),
    "go-runtime": lambda folder, build: go_switch_files(),
    "sframe": lambda folder, build: sframe_vectors(),
    "compact": lambda folder, build: macho_files(),
    "dwarf-expr": lambda folder, build: [],
    "rsp": lambda folder, build: [],
    "perf-data": lambda folder, build: [
        str(DATA / "perf" / "profiled.data"),
        str(DATA / "perf" / "profiled-zstd.data"),
    ],
}


def test_every_target_is_fuzzed() -> None:
    assert set(TARGETS) == set(fuzzing.BUILDERS) == set(FIXED_COUNTS)
    assert {folder.name for folder in CORPUS.iterdir()} <= set(TARGETS)


def _no_findings(campaign: fuzzing.Campaign, saved: list[Path], paths: list[str]) -> None:
    reproduce = (
        f"python -m tests.support.fuzzing reproduce {campaign.name} INPUT '{json.dumps(paths)}'"
    )
    assert not campaign.findings, (
        f"{len(campaign.findings)} finding(s) in {campaign.inputs} inputs, saved as "
        f"{[str(path) for path in saved]}; run again with: {reproduce}\n\n"
        + "\n\n".join(str(finding) for finding in campaign.findings.values())
    )


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_fuzz(name: str, tmp_path: Path, testprogs_build: Path) -> None:
    """``make test``: FIXED_COUNTS[name] inputs of FIXED_SEED; ``make fuzz``: SECONDS of SEED's."""
    paths = TARGETS[name](tmp_path, testprogs_build)
    if SEED is None:
        campaign = fuzzing.Campaign(name, paths, fuzzing.Mutations(FIXED_SEED, FIXED_COUNTS[name]))
    else:
        campaign = fuzzing.Campaign(name, paths, fuzzing.Mutations(SEED), SECONDS)
    campaign.run()
    print(f"{name}: {campaign.inputs} inputs, {campaign.workers} workers, "
          f"{len(campaign.findings)} findings")  # fmt: skip
    folder = Path(os.environ.get("FUZZ_FINDINGS") or CORPUS) / name
    _no_findings(campaign, campaign.save(folder) if SEED is not None else [], paths)
    assert campaign.inputs == FIXED_COUNTS[name] if SEED is None else campaign.inputs > 0


@pytest.mark.parametrize("name", sorted(folder.name for folder in CORPUS.iterdir()))
def test_corpus(name: str, tmp_path: Path, testprogs_build: Path) -> None:
    """Every finding ever made for the target, pinned as a file: none may fail again."""
    corpus = fuzzing.Corpus(CORPUS / name)
    paths = TARGETS[name](tmp_path, testprogs_build)
    campaign = fuzzing.Campaign(name, paths, corpus).run()
    _no_findings(campaign, [], paths)
    assert campaign.inputs == len(corpus.files) > 0


# -- the harness itself can fail ------------------------------------------------------------


def test_the_mutator_is_deterministic_and_edits_the_hot_regions() -> None:
    target = fuzzing.Target("t", [bytes(4096)], [[(100, 110)]], lambda data, which: None)
    first = [fuzzing.input_for(target, 7, index)[1] for index in range(200)]
    assert first == [fuzzing.input_for(target, 7, index)[1] for index in range(200)]
    assert first != [fuzzing.input_for(target, 8, index)[1] for index in range(200)]
    changed = [
        offset for data in first for offset, byte in enumerate(data[:4096]) if byte
    ]  # the base is all zeros: every non-zero byte is an edit
    inside = sum(100 <= offset < 110 + 16 for offset in changed)
    assert inside > len(changed) // 2


def test_a_campaign_finds_errors_hangs_and_crashes_and_its_corpus_replays_them(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A target planted with each kind of failure: the campaign reports every one, and what
    ``make fuzz`` writes into a corpus folder ``make test`` reads back as the same findings.

    Counted, not timed, so a busy machine runs the same inputs: the first nine of seed 1
    hold every kind (a timed campaign of 20 s could end before the spinning input's
    bound, and did at a load of 60).
    """
    monkeypatch.setattr(fuzzing, "CPU_BOUND", 1.0)
    monkeypatch.setattr(fuzzing, "WALL_BOUND", 5.0)  # the spinning input, on a busy machine
    found = fuzzing.Campaign("planted", [], fuzzing.Mutations(1, 9)).run()  # every kind once
    assert found.inputs == 9  # and not one more: the workers stop at the count
    assert {"IndexError", "MemoryError", "timeout", "crash"} <= {
        f.kind for f in found.findings.values()
    }
    saved = found.save(tmp_path)
    assert len(saved) == len(found.findings) and all(path.suffix == ".bin" for path in saved)
    replayed = fuzzing.Campaign("planted", [], fuzzing.Corpus(tmp_path)).run()
    assert replayed.inputs == len(saved)
    assert {f.key for f in replayed.findings.values()} == {f.key for f in found.findings.values()}
    assert {f.label for f in replayed.findings.values()} == {path.name for path in saved}
