"""Run inside a network namespace with only loopback (``unshare -n``) by test_debuginfod.py.

Brings loopback up, starts a real ``debuginfod`` serving one folder, and asks
liveunwind for the logical frames of a process whose debug file only that
server has: first through the server (with a dead server and a silent one
listed before it), then from the client cache with the server gone.  Prints
one JSON document on stdout; the test compares it with gdb's frames.

    python tests/support/debuginfod_probe.py PID SERVED CACHE WORK
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from liveunwind.modules import debuginfod
from tests.support.lines import liveunwind_logical_frames

PORT = 8002
READY_WITHIN = 30.0


def wait_for_server(url: str) -> None:
    """Until the server answers for the build-id it must have scanned (bounded)."""
    deadline = time.monotonic() + READY_WITHIN
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except (urllib.error.URLError, OSError):
            time.sleep(0.2)
    raise SystemExit(f"debuginfod did not serve {url} within {READY_WITHIN} s")


def frames_and_problems(pid: int) -> dict:
    debuginfod.forget_run_state()
    problems: list[str] = []
    frames, modules = liveunwind_logical_frames(pid, problems=problems)
    problems += [problem for module in modules for problem in module.problems]
    return {"frames": {str(tid): value for tid, value in frames.items()}, "problems": problems}


def main() -> None:
    pid, served, cache, work = int(sys.argv[1]), sys.argv[2], sys.argv[3], Path(sys.argv[4])
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    build_id = sys.argv[5]
    server = subprocess.Popen(
        [
            "debuginfod",
            "-F",
            "-p",
            str(PORT),
            "-d",
            str(work / "db.sqlite"),
            "-t",
            "0",
            "-g",
            "0",
            served,
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(work / "debuginfod.log", "wb"),  # noqa: SIM115 - open for the server's life
    )
    # A server that accepts connections and never answers: costs the timeout, once.
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    silent_url = f"http://127.0.0.1:{silent.getsockname()[1]}"
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    dead_url = f"http://127.0.0.1:{dead.getsockname()[1]}"  # bound, never listening: refused
    live_url = f"http://127.0.0.1:{PORT}"
    report: dict = {}
    try:
        wait_for_server(f"{live_url}/buildid/{build_id}/debuginfo")
        os.environ["DEBUGINFOD_URLS"] = f"{dead_url} {silent_url} {live_url}"
        os.environ["DEBUGINFOD_CACHE_PATH"] = cache
        os.environ["DEBUGINFOD_TIMEOUT"] = "2"
        started = time.monotonic()
        report["served"] = frames_and_problems(pid)
        report["served_seconds"] = time.monotonic() - started
        # Both broken servers are now known dead: another build-id costs nothing more.
        started = time.monotonic()
        other = debuginfod.fetch(bytes(20), "debuginfo", [])
        report["unknown_build_id"] = [other, time.monotonic() - started]
        report["executable"] = debuginfod.fetch(bytes.fromhex(build_id), "executable", [])
    finally:
        server.terminate()
        server.wait(timeout=30)
    os.environ["DEBUGINFOD_URLS"] = live_url  # nobody listens there any more
    started = time.monotonic()
    report["cached"] = frames_and_problems(pid)
    report["cached_seconds"] = time.monotonic() - started
    print(json.dumps(report))


main()
