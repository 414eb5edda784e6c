"""Docker containers of our own programs, for the tests and the bench of ``pid --container``.

A Docker engine is used if one answers, else started here (as
docker/run-integration starts one: no bridge, no iptables rules) and stopped
by whoever started it.  The image is imported, not pulled (no registry
here): a small root file system of the programs asked for, /bin/sh and the
libraries they load, each at its path on this machine (``ldd`` lists them),
tagged by a hash of its files so that a second run reuses it.  What docker
itself says is the oracle: ``docker top`` lists a container's processes by
their pids on this machine, ``docker inspect`` gives its id and init's pid.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

from tests.support.waits import wait_until

#: Seconds a docker command may take (an import of the small root takes about one).
DOCKER_TIMEOUT = 120.0
#: Seconds a Docker engine started here may take to answer.
ENGINE_TIMEOUT = 60.0


class DockerUnavailable(Exception):
    """No docker here, or its engine would not start: the caller skips, saying this."""


def docker(*args: str, timeout: float = DOCKER_TIMEOUT) -> str:
    """``docker ARGS``, which must succeed; its output without the final newline."""
    result = subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    assert result.returncode == 0, f"docker {' '.join(args)}: {result.stderr}"
    return result.stdout.strip()


def _answers() -> bool:
    result = subprocess.run(["docker", "info"], capture_output=True, timeout=30, check=False)
    return result.returncode == 0


class Engine:
    """A Docker engine that answers; ``stop`` ends it only if it was started here."""

    def __init__(self, log: Path) -> None:
        if shutil.which("docker") is None or shutil.which("dockerd") is None:
            raise DockerUnavailable("needs docker and dockerd (Debian's docker.io)")
        self.started: subprocess.Popen[bytes] | None = None
        if _answers():
            return
        with log.open("wb") as output:
            self.started = subprocess.Popen(
                ["dockerd", "--bridge=none", "--iptables=false", "--ip6tables=false"],
                stdout=output,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        deadline = time.monotonic() + ENGINE_TIMEOUT
        while not _answers():
            if self.started.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise DockerUnavailable(f"dockerd did not start: {log.read_text()[-300:]}")
            time.sleep(0.2)

    def stop(self) -> None:
        if self.started is not None and self.started.poll() is None:
            self.started.terminate()
            try:
                self.started.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.started.kill()
                self.started.wait()
        self.started = None


def small_image(programs: list[Path], folder: str = "/prog") -> str:
    """An image of ``programs`` (at FOLDER/NAME), /bin/sh and their libraries; its tag.

    A folder of its own (the default) makes the programs' paths the
    container's alone; their folder here lets tools that do not look
    through /proc/PID/root (eu-stack) find them, as the bench needs.
    """
    files: dict[str, Path] = {f"{folder}/{program.name}": program for program in programs}
    files["/bin/sh"] = Path("/bin/sh")
    for executable in [*programs, Path("/bin/sh")]:
        for library in _libraries(executable):
            files.setdefault(library, Path(library))
    digest = hashlib.sha256()
    for inside, source in sorted(files.items()):
        digest.update(inside.encode() + b"\0" + source.read_bytes())
    tag = f"liveunwind-small:{digest.hexdigest()[:12]}"
    if subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode:
        archive = io.BytesIO()
        with tarfile.open(fileobj=archive, mode="w") as tar:
            for inside, source in sorted(files.items()):
                info = tar.gettarinfo(str(source.resolve()), arcname=inside.lstrip("/"))
                with source.open("rb") as stream:
                    tar.addfile(info, stream)
        subprocess.run(
            ["docker", "import", "-", tag],
            input=archive.getvalue(),
            capture_output=True,
            timeout=DOCKER_TIMEOUT,
            check=True,
        )
    return tag


def _libraries(executable: Path) -> list[str]:
    """The files ``ldd`` says ``executable`` loads (its interpreter among them)."""
    output = subprocess.run(
        ["ldd", str(executable)], capture_output=True, text=True, check=True
    ).stdout
    return re.findall(r"(/\S+) \(0x", output)


class Container:
    """A running container of ``image``: its id, init's pid here, and its processes here."""

    def __init__(self, image: str, command: list[str]) -> None:
        self.name = f"liveunwind-{os.getpid()}-{time.monotonic_ns()}"
        self.id = docker("run", "-d", "--network=none", "--name", self.name, image, *command)
        self.pid = int(docker("inspect", "-f", "{{.State.Pid}}", self.name))

    def exec(self, *command: str) -> None:
        """Starts ``command`` in the container (its cgroup and namespaces), not waiting for it."""
        docker("exec", "-d", self.name, *command)

    def pids(self) -> list[int]:
        """Its processes as docker lists them, by their pids here."""
        lines = docker("top", self.name, "-eo", "pid").splitlines()[1:]
        return sorted(int(line) for line in lines)

    def wait_parked(self, processes: int, threads: int) -> list[int]:
        """Waits until ``processes`` processes of ``threads`` threads each all sleep; their pids."""

        def parked() -> bool:
            pids = self.pids()
            return len(pids) == processes and all(_sleeping(pid, threads) for pid in pids)

        wait_until(parked, 60, f"{processes} processes parked in container {self.name}")
        return self.pids()

    def stop(self) -> None:
        subprocess.run(["docker", "rm", "-f", self.name], capture_output=True, timeout=60)


def _sleeping(pid: int, threads: int) -> bool:
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
        states = [
            Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            for tid in tasks
        ]
    except OSError:
        return False
    return len(states) == threads and set(states) == {"S"}
