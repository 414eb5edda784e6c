"""SIGINT and SIGTERM at any instant (issue 29 item 3): 130/143, no traceback, the target as found.

The real command runs against a real target and gets SIGINT or SIGTERM at
random instants spread over its whole run — while Python imports it,
attaches, copies, walks, samples and writes.  After each: no traceback
(but what Python itself prints while it starts, before liveunwind's code
runs: ``tests.support.interrupts.python_start_up``), the exit code the
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

LONG = os.environ.get("SOAK") == "long"
#: How many signals each test sends, and over how long after the start.
PID_RUNS = 100 if LONG else 40
PROFILE_RUNS = 100 if LONG else 30
PID_SPREAD = 0.3
#: profile starts slower (psutil, the cold first sample) and samples for 0.3 s.
PROFILE_SPREAD = 0.8
FOLDED_LINE = re.compile(r"^[^;\n]+(;[^;\n]+)* \d+$")
EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}
MESSAGES = {signal.SIGINT: "liveunwind: interrupted", signal.SIGTERM: "liveunwind: terminated"}


@pytest.fixture(scope="module")
def target(testprogs_build: Path) -> RunningProgram:
    with start_program(testprogs_build, "threads-O2") as program:
        yield program


def signalled(arguments: list[str], rng: random.Random, spread: float) -> tuple[int, int, str, str]:
    """Runs ``liveunwind ARGS`` and signals it at a random instant: (signal, status, out, err)."""
    sent = rng.choice((signal.SIGINT, signal.SIGTERM))
    runner = subprocess.Popen(
        [sys.executable, "-m", "liveunwind", *arguments],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd="/",
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    time.sleep(rng.uniform(0, spread))
    runner.send_signal(sent)
    out, err = runner.communicate(timeout=60)
    return sent, runner.returncode, out, err


def check_ending(sent: int, status: int, err: str, finished: set[int]) -> str:
    """The exit status and stderr fit the signal; how the run ended."""
    if python_start_up(err) or status == -sent:
        # Before liveunwind's code ran: Python's own way out, nothing was touched.
        assert status in (-sent, 1), (status, err)
        return "python start-up"
    assert "Traceback" not in err, err
    if status == EXIT_CODES[sent]:
        # Silent while Python was still importing liveunwind, else one line.
        assert err.strip() in ("", MESSAGES[sent]), err
        return f"exit {status}"
    assert status in finished, (sent, status, err)  # it ended before the signal came
    return "finished"


def check_endings(endings: Counter[str], runs: int) -> None:
    """The signals landed mid-run, and liveunwind ended more runs (130 or 143) than Python's
    start-up did: a SIGTERM that killed the process outright would count as start-up."""
    handled = endings["exit 130"] + endings["exit 143"]
    assert handled >= runs // 4 and endings["exit 143"], endings
    assert handled > endings["python start-up"], endings


def test_pid_signalled_at_random_instants(target: RunningProgram) -> None:
    rng = random.Random()
    endings: Counter[str] = Counter()
    for _ in range(PID_RUNS):
        arguments = ["pid", str(target.pid), "--json", *rng.choice(((), ("--no-snapshot",)))]
        sent, status, out, err = signalled(arguments, rng, PID_SPREAD)
        ending = check_ending(sent, status, err, {0, 1})
        endings[ending] += 1
        if ending == "finished":
            assert json.loads(out)["pid"] == target.pid
        assert_let_go(target.pid)
    check_endings(endings, PID_RUNS)


def test_profile_signalled_at_random_instants(target: RunningProgram, tmp_path: Path) -> None:
    """A signal while sampling ends sampling (exit 0, every file written); one before or
    after it ends liveunwind (130/143), and each file is then whole or absent."""
    rng = random.Random()
    endings: Counter[str] = Counter()
    for run in range(PROFILE_RUNS):
        folder = tmp_path / str(run)
        folder.mkdir()
        svg, folded = folder / "flame.svg", folder / "stacks.folded"
        arguments = ["profile", str(target.pid), "--duration", "0.3", "--rate", "200"]
        arguments += ["--json", "--svg", str(svg), "--collapsed-out", str(folded)]
        sent, status, out, err = signalled(arguments, rng, PROFILE_SPREAD)
        ending = check_ending(sent, status, err, {0})
        endings[ending] += 1
        if ending == "finished":  # or sampling was asked to end, which is the same
            assert json.loads(out)["samples"] > 0
            assert svg.exists() and folded.exists(), err
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
    assert endings["finished"] >= PROFILE_RUNS // 5, endings  # signals while sampling
    check_endings(endings, PROFILE_RUNS)
