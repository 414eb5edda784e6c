"""Symbol names: C++ and Rust (legacy and v0) demangling against c++filt, and live Rust frames."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

import liveunwind
from liveunwind.modules.rust_demangle import demangle_v0
from liveunwind.modules.symbols import demangle
from tests.support.programs import RunningProgram

RUST_PROGRAM = """
mod inner {
    #[inline(never)]
    pub fn deep<T: std::fmt::Debug>(x: T) {
        println!("ready");
        std::thread::sleep(std::time::Duration::from_secs(600));
        println!("{:?}", x);
    }
}
fn main() {
    let worker = std::thread::Builder::new().name("worker".into())
        .spawn(|| inner::deep(vec![1u8])).unwrap();
    worker.join().unwrap();
}
"""


_CONST_TYPE = re.compile(r"(?<=[0-9a-z']): (?:[ui](?:8|16|32|64|128|size)|bool|char)(?=[,>\]])")


def cxxfilt(names: list[str]) -> list[str]:
    result = subprocess.run(
        ["c++filt"], input="\n".join(names) + "\n", capture_output=True, text=True, check=True
    )
    return result.stdout.splitlines()


def defined_names(binary: Path, prefix: str) -> list[str]:
    nm = subprocess.run(["nm", str(binary)], capture_output=True, text=True, check=True).stdout
    names = [line.split()[-1] for line in nm.splitlines() if len(line.split()) == 3]
    return sorted({name for name in names if name.startswith(prefix)})


@pytest.fixture(scope="module")
def rust_binaries(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    if shutil.which("rustc") is None:
        pytest.skip("rustc is not installed")
    folder = tmp_path_factory.mktemp("rust")
    source = folder / "main.rs"
    source.write_text(RUST_PROGRAM)
    # rustc's default is the legacy mangling; v0 must be asked for.
    binaries = {}
    for mangling, flags in (("legacy", []), ("v0", ["-C", "symbol-mangling-version=v0"])):
        binary = folder / mangling
        command = ["rustc", "-g", "-O", *flags, "-o", str(binary), str(source)]
        subprocess.run(command, check=True, capture_output=True)
        binaries[mangling] = binary
    return binaries


def test_cxx_names_match_cxxfilt(testprogs_build: Path) -> None:
    names = defined_names(testprogs_build / "cxxthrow-O2", "_Z")
    assert len(names) > 5
    # Symbol versions (``@GLIBCXX_3.4``) are dropped from names we show.
    unversioned = [name.partition("@")[0] for name in names]
    assert [demangle(name) for name in names] == cxxfilt(unversioned)


def test_rust_legacy_names_match_cxxfilt_without_hash(rust_binaries: dict[str, Path]) -> None:
    # The precompiled standard library is v0-mangled: only this program's own
    # code and its generic instances use the legacy scheme.
    names = defined_names(rust_binaries["legacy"], "_ZN")
    assert len(names) > 10
    expected = [re.sub(r"::h[0-9a-f]{16}$", "", text) for text in cxxfilt(names)]
    assert [demangle(name) for name in names] == expected


def test_rust_v0_names_match_cxxfilt_without_crate_hashes(rust_binaries: dict[str, Path]) -> None:
    names = defined_names(rust_binaries["v0"], "_R")
    assert len(names) > 100
    # c++filt prints the long form; ours is rustc's short one: no crate
    # hashes, no type after a const generic argument. c++filt also drops a
    # numbered suffix (``STATIC.0``), which we keep, like rustc's demangler.
    expected = [_CONST_TYPE.sub("", re.sub(r"\[[0-9a-f]+\]", "", text)) for text in cxxfilt(names)]
    ours = [re.sub(r"\.\d+$", "", demangle_v0(name)) for name in names]
    assert ours == expected


def test_live_rust_frames_are_demangled(rust_binaries: dict[str, Path]) -> None:
    # "ready" is printed before the worker reaches its sleep: wait until every thread sleeps.
    with RunningProgram(rust_binaries["v0"], []) as process:
        process.wait_ready(busy=(), timeout=10)
        backtrace = liveunwind.attach(process.pid)
        worker = next(thread for thread in backtrace.threads if thread.name == "worker")
        assert worker.complete, worker.stop_text
        functions = [frame.function for frame in worker.frames]
        assert "main::inner::deep::<alloc::vec::Vec<u8>>" in functions
        assert "std::thread::functions::sleep" in functions
