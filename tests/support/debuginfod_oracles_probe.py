"""Run inside a network namespace with only loopback (``unshare -n``) by test_debuginfod.py.

Brings loopback up, starts a real ``debuginfod`` serving one folder of debug
files, and for each process given asks liveunwind (the command, ``--json``),
gdb (``set debuginfod enabled on``) and eu-stack (libdw's debuginfod client)
for its frames, each tool with a client cache of its own, so each one asks
the server itself.  The server's request counter (``/metrics``) is read
before and after liveunwind's run.  Prints one JSON document on stdout.

    python tests/support/debuginfod_oracles_probe.py SERVED WORK PID...
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support.cli import run_cli
from tests.support.oracles import eu_stack_backtraces, gdb_backtraces

PORT = 8002
READY_WITHIN = 30.0
URL = f"http://127.0.0.1:{PORT}"
#: Seconds liveunwind may wait for the server: a local one answers in milliseconds.
TIMEOUT = "10"


def requests_served() -> int:
    """Requests the server has answered, but those for its metrics (one per call)."""
    with urllib.request.urlopen(f"{URL}/metrics", timeout=10) as response:
        text = response.read().decode()
    total = 0
    for line in text.splitlines():
        if line.startswith("http_requests_total{") and 'type="metrics"' not in line:
            total += int(float(line.rsplit(" ", 1)[1]))
    return total


def wait_for_server(files: int) -> None:
    """Until the server has scanned every file of the folder (its metrics say so), bounded."""
    deadline = time.monotonic() + READY_WITHIN
    wanted = f'scanned_files_total{{source="file"}} {files}'
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{URL}/metrics", timeout=2) as response:
                if wanted in response.read().decode().splitlines():
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"debuginfod did not scan {files} files within {READY_WITHIN} s")


def frames_of(pid: int, work: Path) -> dict:
    """One process as liveunwind, gdb and eu-stack see it through the server."""
    os.environ["DEBUGINFOD_TIMEOUT"] = TIMEOUT
    os.environ["DEBUGINFOD_CACHE_PATH"] = str(work / f"liveunwind-{pid}")
    before = requests_served()
    started = time.monotonic()
    ours = run_cli("pid", str(pid), "--json", timeout=120)
    seconds = time.monotonic() - started
    requests = requests_served() - before
    os.environ["DEBUGINFOD_CACHE_PATH"] = str(work / f"gdb-{pid}")
    gdb = gdb_backtraces(pid, debuginfod=True)
    os.environ["DEBUGINFOD_CACHE_PATH"] = str(work / f"eu-stack-{pid}")
    eu = eu_stack_backtraces(pid)
    return {
        "exit": ours.returncode,
        "stderr": ours.stderr,
        "ours": json.loads(ours.stdout) if ours.stdout else None,
        "requests": requests,
        "seconds": seconds,
        "gdb": {tid: [[f.pc, f.name, f.kind] for f in frames] for tid, frames in gdb.items()},
        "eu": {tid: [[f.pc, f.name] for f in frames] for tid, frames in eu.items()},
    }


def main() -> None:
    served, work, pids = sys.argv[1], Path(sys.argv[2]), [int(a) for a in sys.argv[3:]]
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    log = open(work / "debuginfod.log", "wb")  # noqa: SIM115 - open for the server's life
    database = str(work / "db.sqlite")
    server = subprocess.Popen(
        ["debuginfod", "-F", "-p", str(PORT), "-d", database, "-t", "0", "-g", "0", served],
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    os.environ["DEBUGINFOD_URLS"] = URL
    try:
        wait_for_server(len(list(Path(served).iterdir())))
        report = {str(pid): frames_of(pid, work) for pid in pids}
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()
    print(json.dumps(report))


main()
