"""SIGINT and SIGTERM at any instant (issue 29 item 3): 130/143, no traceback, the target as found.

The real command (``python -m liveunwind``, or the console script pip wrote)
runs against a real target and gets SIGINT or SIGTERM at
instants spread over its whole run (one in each slice of it, from a fixed
seed) — while Python imports it,
attaches, copies, walks, samples and writes.  After each: no traceback
(but what Python itself prints while it starts, before liveunwind's code
runs: ``tests.support.interrupts.python_start_up`` — allowed only when the
process had no SIGTERM handler yet, which liveunwind installs from its first
line), the exit code the
signal calls for (or the run's own, when it ended first), every thread of
the target neither stopped nor traced, and each output file either absent
or complete — valid JSON, an SVG that parses, folded stacks whole — with
no temporary file left beside it.

``make test`` sends 40 and 30 signals; ``make soak`` (SOAK=long) 100 each.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from xml.etree import ElementTree

import pytest

from tests.support.interrupts import assert_let_go, python_start_up
from tests.support.paths import ROOT
from tests.support.programs import RunningProgram, start_program
from tests.support.waits import wait_until

LONG = os.environ.get("SOAK") == "long"
#: How many signals each test sends, and over how long after the start.
PID_RUNS = 100 if LONG else 40
PROFILE_RUNS = 100 if LONG else 30
PID_SPREAD = 0.3
#: Half of pid's signals land in the first 0.02 s after its handlers are set (imports,
#: attach, the walk), the others anywhere in 0.3 s from its start.
PID_START = 0.02
#: profile samples for 0.3 s; half its signals land in the first 0.03 s after its
#: handlers are set (imports, attach, the first sample: where 130/143 is the answer; timed
#: from the handlers, not from the start, so a faster start does not move them into
#: sampling), the others anywhere in its run (mostly sampling: it ends, files written).
PROFILE_SPREAD = 0.8
PROFILE_START = 0.03
FOLDED_LINE = re.compile(r"^[^;\n]+(;[^;\n]+)* \d+$")
EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}
#: ``python -m liveunwind``, and the console script pip wrote (it imports
#: ``liveunwind.cli``; PYTHONPATH makes it this checkout's) where there is one.
SCRIPT = Path(sys.executable).with_name("liveunwind")
LAUNCHERS = [[sys.executable, "-m", "liveunwind"], *([[str(SCRIPT)]] if SCRIPT.exists() else [])]
MESSAGES = {signal.SIGINT: "liveunwind: interrupted", signal.SIGTERM: "liveunwind: terminated"}


@pytest.fixture(scope="module")
def target(testprogs_build: Path) -> RunningProgram:
    with start_program(testprogs_build, "threads-O2") as program:
        yield program


class Ending:
    """One run signalled at a random instant: what was sent, when, and how it ended."""

    def __init__(
        self,
        arguments: list[str],
        rng: random.Random,
        delay: float,
        *,
        after_handlers: bool = False,
    ) -> None:
        """``delay``: seconds after the start, or (``after_handlers``) after liveunwind's
        code set its signal handlers."""
        self.sent = rng.choice((signal.SIGINT, signal.SIGTERM))
        runner = subprocess.Popen(
            [*rng.choice(LAUNCHERS), *arguments],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd="/",
            env=dict(os.environ, PYTHONPATH=str(ROOT)),
        )
        if after_handlers:
            wait_until(lambda: catches_sigterm(runner.pid), 30, "liveunwind's handlers", 0.0005)
        time.sleep(delay)
        #: Whether liveunwind's code had run when the signal was sent: the package
        #: catches SIGTERM from its first line on, Python does not (its SigCgt mask).
        self.ours = catches_sigterm(runner.pid)
        runner.send_signal(self.sent)
        self.out, self.err = runner.communicate(timeout=60)
        self.status = runner.returncode

    def check(self, finished: set[int]) -> str:
        """The exit status and stderr fit the signal; how the run ended."""
        sent, status, err = self.sent, self.status, self.err
        if not self.ours and err.startswith(DROPPED_AT_START_UP):
            # CPython's start-up asks whether the script's path (argv[0]) is an import path
            # entry; an exception there, the KeyboardInterrupt too, is printed and dropped,
            # and the run goes on (Modules/main.c, pymain_get_importer): it ran to its end,
            # and the caller checks its output as any finished run's.
            assert status in finished, (sent, status, err)
            return "finished"
        if not self.ours and (python_start_up(err) or status == -sent):
            # Before liveunwind's code ran: Python's own way out, nothing was touched.
            assert status in (-sent, 1), (status, err)
            return "python start-up"
        if err.startswith("Exception ignored in: <function _get_module_lock.<locals>.cb"):
            # CPython's import system frees a module lock in a weakref callback, and an
            # exception a signal handler raises there is printed and dropped: the
            # interpreter's own limit, met only by a signal in the middle of an import.
            return "lost in an import lock"
        assert "Traceback" not in err, err
        if status == EXIT_CODES[sent]:
            # Silent while Python was still importing liveunwind, else one line.
            assert err.strip() in ("", MESSAGES[sent]), err
            return f"exit {status}"
        assert status in finished, (sent, status, self.ours, err)  # it ended before the signal
        return "finished"


#: What CPython prints when an exception interrupts its check of the script's path.
DROPPED_AT_START_UP = "Failed checking if argv[0] is an import path entry"


def catches_sigterm(pid: int) -> bool:
    """Whether process ``pid`` has a handler for SIGTERM (/proc/PID/status SigCgt)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True  # it ended already: it ran to its end
    caught = next(line for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(caught.split()[1], 16) & (1 << (signal.SIGTERM - 1)))


#: The instants are drawn from a fixed seed, one in each of ``runs`` equal slices of the
#: spread: every stretch of a run (start-up, attach, sampling, writing) gets its share of
#: signals on every machine, however busy, rather than by luck.
SEED = 20261126


def instants(runs: int, spread: float) -> list[float]:
    rng = random.Random(SEED)
    return [spread * (slot + rng.random()) / runs for slot in range(runs)]


def check_endings(endings: Counter[str], runs: int) -> None:
    """Signals landed while liveunwind ran and ended it with 130 and 143 (a SIGTERM that
    killed the process outright, as before it was handled, never gives 143)."""
    assert endings["exit 130"] + endings["exit 143"] >= runs // 10, endings
    assert endings["exit 143"], endings


def test_pid_signalled_at_random_instants(target: RunningProgram) -> None:
    rng = random.Random(SEED)
    endings: Counter[str] = Counter()
    early = PID_RUNS // 2
    delays = [(delay, True) for delay in instants(early, PID_START)]
    delays += [(delay, False) for delay in instants(PID_RUNS - early, PID_SPREAD)]
    for delay, after_handlers in delays:
        arguments = ["pid", str(target.pid), "--json", *rng.choice(((), ("--no-snapshot",)))]
        run = Ending(arguments, rng, delay, after_handlers=after_handlers)
        ending = run.check({0, 1})
        endings[ending] += 1
        if ending == "finished":
            assert json.loads(run.out)["pid"] == target.pid
        assert_let_go(target.pid)
    check_endings(endings, PID_RUNS)


def test_profile_signalled_at_random_instants(target: RunningProgram, tmp_path: Path) -> None:
    """A signal while sampling ends sampling (exit 0, every file written); one before or
    after it ends liveunwind (130/143), and each file is then whole or absent."""
    rng = random.Random(SEED)
    endings: Counter[str] = Counter()
    early = PROFILE_RUNS // 2
    delays = [(delay, True) for delay in instants(early, PROFILE_START)]
    delays += [(delay, False) for delay in instants(PROFILE_RUNS - early, PROFILE_SPREAD)]
    for number, (delay, after_handlers) in enumerate(delays):
        folder = tmp_path / str(number)
        folder.mkdir()
        svg, folded = folder / "flame.svg", folder / "stacks.folded"
        arguments = ["profile", str(target.pid), "--duration", "0.3", "--rate", "200"]
        arguments += ["--json", "--svg", str(svg), "--collapsed-out", str(folded)]
        run = Ending(arguments, rng, delay, after_handlers=after_handlers)
        ending = run.check({0})
        endings[ending] += 1
        if ending == "finished":  # or sampling was asked to end, which is the same
            assert json.loads(run.out)["samples"] > 0
            assert svg.exists() and folded.exists(), run.err
        if svg.exists():
            assert ElementTree.parse(svg).getroot().tag.endswith("svg")
        if folded.exists():
            lines = folded.read_text().splitlines()
            assert lines and all(FOLDED_LINE.match(line) for line in lines), lines[-3:]
        assert sorted(path.name for path in folder.iterdir()) in (
            [],
            ["stacks.folded"],
            ["flame.svg", "stacks.folded"],
        )  # folded stacks are written first, and no temporary file is left
        assert_let_go(target.pid)
    assert endings["finished"], endings  # signals while sampling
    check_endings(endings, PROFILE_RUNS)
