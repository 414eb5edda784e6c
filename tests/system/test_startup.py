"""Start-up stays lean: a plain ``liveunwind pid`` imports nothing it does not need.

Start-up is most of a cold backtrace's time (see docs/speed.md),
so a stray import of a heavy module on the hot path is a regression.  This
checks which modules a real backtrace of a running program loaded; it does
not time anything.  The modules it must not load, and the run that reads
them, are in tests/support/startup.py (the JIT tests check the same).
"""

from __future__ import annotations

import os
import shutil
import subprocess

from tests.support.paths import ROOT
from tests.support.startup import (
    HEAVY,
    modules_a_backtrace_loaded,
    modules_the_command_imported,
    run_python,
)


def test_a_live_backtrace_imports_no_heavy_module(run_program) -> None:
    loaded = modules_a_backtrace_loaded(run_program("threads-O2").pid)
    assert not HEAVY & loaded, f"imported on the hot path: {sorted(HEAVY & loaded)}"


#: Needed only by a process with JIT code: the readers of the run-time registries and of a
#: perf map (which is looked for apart, modules/perfmapfile.py); and importlib (the
#: architecture registry uses __import__).  Go's table and crossings: only by a Go program.
NOT_FOR_A_C_PROGRAM = {
    "array",
    "importlib",
    "liveunwind.formats.unwind.dynamic",
    "liveunwind.formats.unwind.gopclntab",
    "liveunwind.formats.unwind.perfmap",
    "liveunwind.modules.jit",
    "liveunwind.targets.linkedlist",
    "liveunwind.unwinder.goswitch",
}


def test_a_live_backtrace_of_a_c_program_imports_no_jit_reader(run_program) -> None:
    loaded = modules_a_backtrace_loaded(run_program("threads-O2").pid)
    assert not NOT_FOR_A_C_PROGRAM & loaded, f"imported: {sorted(NOT_FOR_A_C_PROGRAM & loaded)}"


#: Read from a core only: a live walk takes AT_ENTRY from formats/auxv.py (docs/speed.md).
CORES_ONLY = {"liveunwind.targets.cores", "liveunwind.targets.cores.notes"}


def test_a_live_backtrace_imports_no_core_reader(run_program) -> None:
    loaded = modules_a_backtrace_loaded(run_program("threads-O2").pid)
    assert not CORES_ONLY & loaded, f"imported: {sorted(CORES_ONLY & loaded)}"


#: Prints the named tuples and enums the modules of a ``pid`` backtrace defined.
_CLASS_PROBE = """
import io, sys
from liveunwind.classes import Enum
from liveunwind.cli import main
out, sys.stdout = sys.stdout, io.StringIO()
status = main(sys.argv[1:])
sys.stdout = out
for name, module in list(sys.modules.items()):
    for value in vars(module).values() if name.startswith("liveunwind") else ():
        if isinstance(value, type) and value.__module__ == name:
            if (issubclass(value, Enum) and value is not Enum) or (
                issubclass(value, tuple) and hasattr(value, "_fields")
            ):
                print(f"{name}.{value.__qualname__}")
raise SystemExit(status)
"""

#: The only named tuples and enums a live backtrace of a C program may define: each costs
#: 70-250 us of a cold start (docs/speed.md).  The public enums of frames.py; the unwind
#: rules (hashed at C speed, as tuples, by the stepper's plan cache); and the few others.
CLASSES_ALLOWED = {
    "liveunwind.arch.base.CallSite",
    "liveunwind.arch.base.PrologueFrame",
    "liveunwind.formats.unwind.rules.CfaRule",
    "liveunwind.formats.unwind.rules.RegisterRule",
    "liveunwind.formats.unwind.rules.UnwindRule",
    "liveunwind.frames.CrashInfo",
    "liveunwind.frames.Method",
    "liveunwind.frames.SourceLocation",
    "liveunwind.frames.StopReason",
    "liveunwind.frames.Trust",
    "liveunwind.targets.base.Mapping",
}


def test_a_live_backtrace_defines_few_named_tuples_and_enums(run_program) -> None:
    pid = run_program("threads-O2").pid
    result = run_python("-S", "-c", _CLASS_PROBE, "pid", str(pid))
    defined = set(result.stdout.split())
    assert "liveunwind.frames.Method" in defined  # the probe sees the classes
    assert defined <= CLASSES_ALLOWED, f"defined: {sorted(defined - CLASSES_ALLOWED)}"


def test_the_installed_script_imports_no_re(run_program) -> None:
    """bin/liveunwind (what pip installs as the command) runs a backtrace without ``re``,
    which the wrapper pip writes for an entry point imports first (docs/speed.md)."""
    output, imported = modules_the_command_imported("pid", str(run_program("threads-O2").pid))
    assert "main" in output  # a real backtrace was printed
    assert "liveunwind.unwinder.stepper" in imported
    assert "re" not in imported


#: The command's start (bin/liveunwind's), then which loader served each of liveunwind's modules.
_BUNDLE_PROBE = """
import sys
from liveunwind.codebundle import install
install()
from liveunwind.cli import main
status = main(sys.argv[1:])
for name, module in sorted(sys.modules.items()):
    if name.startswith("liveunwind"):
        print(name, type(module.__spec__.loader).__name__, file=sys.stderr)
raise SystemExit(status)
"""


def test_the_command_serves_its_modules_from_the_code_bundle(run_program, tmp_path) -> None:
    """The first run writes the bundle (liveunwind/codebundle.py) as it ends; the next one
    imports every module of ours but the two before the finder from it, and prints the
    same backtrace; a changed source is imported from the source, and the bundle rewritten."""
    pid = run_program("threads-O2").pid
    site = tmp_path / "site"  # a copy whose sources the test may change
    shutil.copytree(
        ROOT / "liveunwind", site / "liveunwind", ignore=shutil.ignore_patterns("__pycache__")
    )
    command = shutil.copy(ROOT / "bin" / "liveunwind", tmp_path / "liveunwind")
    cache = tmp_path / "cache"
    env = dict(os.environ, PYTHONPATH=str(site), XDG_CACHE_HOME=str(cache))

    def run(*command: str) -> subprocess.CompletedProcess[str]:
        result = run_python("-S", *command, "pid", str(pid), env=env)
        assert "main" in result.stdout  # a real backtrace
        return result

    def loaders() -> tuple[str, dict[str, str]]:
        result = run("-c", _BUNDLE_PROBE)
        return result.stdout, dict(line.split() for line in result.stderr.splitlines())

    first = run(command)
    (bundle,) = (cache / "liveunwind").glob("code-*")
    output, served = loaders()
    assert output == first.stdout
    assert served.pop("liveunwind") == served.pop("liveunwind.codebundle") == "SourceFileLoader"
    assert "liveunwind.unwinder.stepper" in served
    assert set(served.values()) == {"BundleFinder"}, served

    written = bundle.stat().st_mtime_ns
    with open(site / "liveunwind" / "frames.py", "a") as source:
        source.write("# changed\n")
    assert loaders()[1]["liveunwind.frames"] == "SourceFileLoader"
    run(command)  # stale: written again as it ends
    assert bundle.stat().st_mtime_ns != written
    assert loaders()[1]["liveunwind.frames"] == "BundleFinder"
