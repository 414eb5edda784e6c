"""What a plain ``liveunwind pid`` imports, read off a real run, and the modules it must not."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support.paths import ROOT

#: Modules that cost milliseconds to import and that a plain text backtrace of
#: a live C program never needs (each is imported lazily where it is needed).
HEAVY = {
    "argparse",  # our own parser: liveunwind/cli/parse.py
    "ast",
    "collections",  # liveunwind/classes.py: namedtuple
    "ctypes",  # targets/live/ffi.py: the few names of it syscalls.py uses
    "dataclasses",
    "elftools",
    "enum",  # liveunwind/classes.py: Enum
    "functools",  # liveunwind/classes.py: cached_property, lru_cache
    "gettext",
    "inspect",
    "json",  # only --json
    "lief",  # only Mach-O
    "locale",
    "operator",  # operator.py's body: the unwinder takes itemgetter from _operator
    "pathlib",
    "psutil",
    "ptrace",  # python-ptrace: only the PEEKDATA fallback
    "re",  # only for demangling and --help
    "shutil",
    "signal",  # its enums: the command takes _signal, the C module under it
    "tokenize",
    "types",  # cli/parse.py takes SimpleNamespace from sys.implementation
    "typing",
}

_PROBE = """
import sys
from liveunwind.cli import main
status = main(sys.argv[1:])
print(" ".join(sorted(sys.modules)), file=sys.stderr)
raise SystemExit(status)
"""


def run_python(
    *argv: str, env: dict[str, str] | None = None, cwd: str | os.PathLike[str] = "/"
) -> subprocess.CompletedProcess[str]:
    """``python ARGV`` in a process of its own (this checkout on PYTHONPATH unless ``env``
    is given), its output captured; it must succeed within a minute."""
    result = subprocess.run(
        [sys.executable, *argv],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        env=dict(os.environ, PYTHONPATH=str(ROOT)) if env is None else env,
    )
    assert result.returncode == 0, result.stderr
    return result


def modules_a_backtrace_loaded(pid: int) -> set[str]:
    """The modules ``liveunwind pid PID`` loaded, run with nothing but this checkout."""
    result = run_python("-S", "-c", _PROBE, "pid", str(pid), cwd=ROOT)
    assert "main" in result.stdout  # a real backtrace was printed
    loaded = set(result.stderr.splitlines()[-1].split())
    assert "liveunwind.unwinder.stepper" in loaded
    return loaded


def modules_the_command_imported(*args: str) -> tuple[str, set[str]]:
    """``bin/liveunwind ARGS`` (what pip installs as the command) run without site (-S: the
    development venv's editable-install finder imports ``re``) and ``-X importtime``: its
    stdout, and every module it imported.  It must succeed."""
    result = run_python("-S", "-X", "importtime", str(ROOT / "bin" / "liveunwind"), *args)
    return result.stdout, {line.rpartition("|")[2].strip() for line in result.stderr.splitlines()}
