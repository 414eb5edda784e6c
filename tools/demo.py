"""`make demo`: start a multi-threaded test program and print its backtraces."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = ROOT / "testprogs" / "build" / "threads-O2"


def main() -> int:
    target = subprocess.Popen([PROGRAM], stdout=subprocess.PIPE, text=True)
    try:
        assert target.stdout is not None
        if target.stdout.readline().strip() != "ready":
            print("demo: the test program did not start", file=sys.stderr)
            return 1
        time.sleep(0.2)  # let the last thread reach its blocking call
        print(f"$ liveunwind pid {target.pid}", flush=True)
        return subprocess.call([sys.executable, "-m", "liveunwind", "pid", str(target.pid)])
    finally:
        target.kill()
        target.wait()


if __name__ == "__main__":
    raise SystemExit(main())
