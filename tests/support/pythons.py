"""The Python interpreters the --python tests run, and tests/data/python_parked.py parked in them.

Interpreters: Debian's python3 (stripped; with its debug file from
python3.X-dbg and without), CPython built with symbols (pyenv's, where
installed), and the newest CPython Debian has, in the sid root file system
(tools/sid-rootfs.sh), run in a chroot and read from outside.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.cores import unlimited_core
from tests.support.paths import DATA
from tests.support.waits import wait_until

PROGRAM = DATA / "python_parked.py"
SID_ROOT = Path(os.environ.get("LIVEUNWIND_SID_ROOT", "/var/cache/liveunwind/sid-rootfs"))
#: Where the program and its truth go inside a chroot (and, for the host, under tmp_path).
INSIDE = Path("/tmp/liveunwind-python")
THREADS = 9
START_TIMEOUT = 60.0

Truth = dict[int, list[tuple[str, str, int | None]]]


# -- the interpreters ---------------------------------------------------------------


class Python:
    """One interpreter to test: how to run it, where its root is, what its symbols name."""

    def __init__(
        self, name: str, executable: str, *, root: Path | None = None, debug: bool = True
    ) -> None:
        self.name = name
        self.executable = executable
        #: The root file system it runs in (a chroot), or None for the host's.
        self.root = root
        #: Whether separate debug files are looked for (False: the stripped binary alone).
        self.debug = debug

    def host_path(self, inside: Path) -> Path:
        """Where a path the interpreter sees is on the host."""
        return inside if self.root is None else self.root / inside.relative_to("/")

    def argv(self, *args: str) -> list[str]:
        command = [self.executable, *args]
        return command if self.root is None else ["chroot", str(self.root), *command]

    def __repr__(self) -> str:
        return self.name


def _pyenv_pythons() -> list[Python]:
    """CPython 3.11+ built with symbols, as pyenv installs it (PYENV_ROOT or ~/.pyenv)."""
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    found = []
    for executable in sorted(glob.glob(f"{root}/versions/3.1[1-9]*/bin/python3")):
        version = Path(executable).parents[1].name
        if "t" not in version:  # free-threaded builds are refused, not tested here
            found.append(Python(f"built-{version}", executable))
    return found


def _debian_python() -> Python | None:
    return Python("debian", "/usr/bin/python3") if Path("/usr/bin/python3").exists() else None


PYTHONS = [
    *([] if _debian_python() is None else [_debian_python()]),
    Python("debian-stripped", "/usr/bin/python3", debug=False),
    *_pyenv_pythons(),
    Python("sid", "/usr/bin/python3", root=SID_ROOT),
    Python("sid-3.15", "/usr/bin/python3.15", root=SID_ROOT),
    # Free-threaded (--disable-gil), built from Debian's source by make freethreaded-python.
    Python("sid-3.13t", "/opt/python3.13t/bin/python3.13t", root=SID_ROOT),
]


def available(python: Python) -> None:
    """Skips the test, saying why, when ``python`` cannot run here."""
    if os.geteuid() != 0:
        pytest.skip("ptrace of other processes and chroot need root")
    if python.root is not None and not python.host_path(Path(python.executable)).exists():
        pytest.skip(
            f"no {python.executable} in the Debian sid root file system at {python.root} "
            "(make sid-rootfs builds it and installs the Pythons the tests run)"
        )
    if python.root is None and not Path(python.executable).exists():
        pytest.skip(f"{python.executable} is not installed")


# -- the parked program -------------------------------------------------------------


class Parked:
    """python_parked.py running (or dead of os.abort()), and the truth it wrote."""

    def __init__(self, python: Python, folder: Path, *, abort: bool = False) -> None:
        self.python = python
        self.folder = folder  # as the interpreter sees it
        host = python.host_path(folder)
        shutil.rmtree(host, ignore_errors=True)
        host.mkdir(parents=True)
        shutil.copy(PROGRAM, host / PROGRAM.name)
        self.truth_path = host / "truth.json"
        self.process = subprocess.Popen(
            python.argv(
                str(folder / PROGRAM.name), str(folder / "truth.json"), *(["abort"] * abort)
            ),
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            cwd=host,
            preexec_fn=unlimited_core if abort else None,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if line != b"ready\n":
            self.stop()
            raise RuntimeError(f"{python}: python_parked.py printed {line!r}")
        self.truth: Truth = {
            int(tid): [tuple(frame) for frame in frames]  # type: ignore[misc]
            for tid, frames in json.loads(self.truth_path.read_text()).items()
        }
        #: Each thread's frames' f_locals, innermost first (see python_parked.py).
        self.locals_truth: dict[int, list[dict[str, list[object]] | None]] = {
            int(tid): frames
            for tid, frames in json.loads(Path(f"{self.truth_path}.locals").read_text()).items()
        }
        if abort:
            self.process.wait(timeout=START_TIMEOUT)
        else:
            self._wait_for_reporter()

    @property
    def pid(self) -> int:
        return self.process.pid

    def _wait_for_reporter(self) -> None:
        """Until the reporter thread has ended: every thread left is a parked one."""
        wait_until(
            lambda: len(os.listdir(f"/proc/{self.pid}/task")) == THREADS,
            START_TIMEOUT,
            f"{self.python}: the reporter thread of python_parked.py to end",
        )

    def thread_running(self, function: str) -> int:
        """The tid of the thread whose truth has ``function`` in it."""
        tids = [tid for tid, frames in self.truth.items() if any(f[0] == function for f in frames)]
        assert len(tids) == 1, f"{function}: {tids}"
        return tids[0]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


# -- other programs that write their own truth ----------------------------------------


class Started:
    """A program of tests/data run under ``python`` with a truth path; ready once it says so.

    Copied into ``folder`` as the interpreter sees it (inside its root), run
    as ``PROGRAM TRUTH_FILE [abort]``; ``truth_file(suffix)`` is where a file
    it wrote is on the host.  With ``abort`` the program ends in os.abort()
    and ``core`` is the core the kernel wrote beside it.
    """

    def __init__(self, python: Python, program: Path, folder: Path, *, abort: bool = False) -> None:
        self.python = python
        self.host = python.host_path(folder)
        shutil.rmtree(self.host, ignore_errors=True)
        self.host.mkdir(parents=True)
        shutil.copy(program, self.host / program.name)
        self.process = subprocess.Popen(
            python.argv(str(folder / program.name), str(folder / "truth"), *(["abort"] * abort)),
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            cwd=self.host,
            preexec_fn=unlimited_core if abort else None,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if line != b"ready\n":
            self.stop()
            raise RuntimeError(f"{python}: {program.name} printed {line!r}")
        if abort:
            self.process.wait(timeout=START_TIMEOUT)

    @property
    def pid(self) -> int:
        return self.process.pid

    def truth_file(self, suffix: str = "") -> Path:
        return self.host / f"truth{suffix}"

    @property
    def core(self) -> Path:
        (core,) = [path for path in self.host.glob("core*") if path.is_file()]
        return core

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
        shutil.rmtree(self.host, ignore_errors=True)
