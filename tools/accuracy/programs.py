"""The programs measured: real programs from Debian packages, started busy, and put away after.

Each program starts in a session of its own (``start_new_session``) in a
scratch folder, so that everything it starts — a JIT runtime's helper, a
browser's zygotes, renderers and crash handler, PostgreSQL's backends — can be
found and killed after: the processes of its process group and its
descendants, whatever happened. ``subjects`` names the processes compared
(all of them, or the ones running the work: PostgreSQL's backend).
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import textwrap
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from tests.support.waits import wait_until

SETUP_TIMEOUT = 300.0
"""Seconds a set-up step (javac, initdb, filling a table) may take on the shared machine."""
BUSY_TIMEOUT = 600.0
"""Seconds a program has to get busy: its subjects using ``busy_cpu`` seconds of CPU (niced
on a loaded machine, Erlang's schedulers took more than 120 s to use 3)."""


class ProgramUnavailableError(RuntimeError):
    """A package the program needs is not installed: the program is skipped, saying which."""


@dataclass
class Running:
    """A started program: its first process, and the extra processes it asked to have killed."""

    leader: subprocess.Popen[bytes]
    subjects: Callable[[], list[int]]
    helpers: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def processes(self) -> list[int]:
        """Every process the program started: its process group and the leader's descendants."""
        found: set[int] = set()
        with suppress(psutil.Error):
            found.update(child.pid for child in psutil.Process(self.leader.pid).children(True))
        group = self.leader.pid
        for process in psutil.process_iter():
            try:
                if os.getpgid(process.pid) == group:
                    found.add(process.pid)
            except (ProcessLookupError, PermissionError):
                continue
        found.add(self.leader.pid)
        return sorted(found)


@dataclass(frozen=True)
class Program:
    """A program to measure: the packages it comes from and how it starts busy."""

    name: str
    what: str
    packages: tuple[str, ...]
    needs: tuple[str, ...]
    start: Callable[[Path], Running]
    busy_cpu: float = 1.5
    """CPU seconds the subjects must have used before the first instant."""

    def missing(self) -> list[str]:
        """The files among ``needs`` that are not there (their package is not installed)."""
        return [path for path in self.needs if shutil.which(path) is None]


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return [psutil.Process(pid), *psutil.Process(pid).children(True)]
    except psutil.Error:
        return []


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants."""
    return [process.pid for process in _descendants(pid)]


def cpu_seconds(pids: list[int]) -> float:
    """The CPU time the processes used so far (0 for a process that is gone)."""
    total = 0.0
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


def _popen(argv: list[str], folder: Path) -> subprocess.Popen[bytes]:
    """Start ``argv`` in ``folder``, in a session of its own, its output in ``folder/output``."""
    output = (folder / "output").open("ab")
    try:
        return subprocess.Popen(
            argv,
            cwd=folder,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    finally:
        output.close()


def _setup(argv: list[str], folder: Path) -> None:
    """Run one set-up step to its end; a failure names the step and what it printed."""
    result = subprocess.run(
        argv, cwd=folder, capture_output=True, text=True, timeout=SETUP_TIMEOUT, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:3])} failed: {result.stderr.strip()[-300:]}")


JAVA_SOURCE = """\
import java.util.*;

public class Busy {
    static volatile long sink;

    static long work(int seed) {
        Random random = new Random(seed);
        HashMap<Integer, String> map = new HashMap<>();
        long sum = 0;
        for (int i = 0; i < 20000; i++) {
            int key = random.nextInt(50000);
            map.put(key, Integer.toHexString(key));
        }
        for (String value : map.values()) sum += value.hashCode();
        int[] numbers = random.ints(20000).toArray();
        Arrays.sort(numbers);
        StringBuilder text = new StringBuilder();
        for (int i = 0; i < 2000; i++) text.append(i % 10);
        return sum + numbers[numbers.length / 2] + text.toString().hashCode();
    }

    public static void main(String[] args) {
        int threads = Integer.parseInt(args[0]);
        for (int t = 0; t < threads; t++) {
            final int id = t;
            new Thread(() -> {
                for (int i = 0; ; i++) sink += work(id * 100000 + i);
            }, "busy-" + t).start();
        }
    }
}
"""


def _start_java(folder: Path) -> Running:
    """OpenJDK 17: four threads hashing, sorting and building strings (C2 code, a busy GC)."""
    (folder / "Busy.java").write_text(JAVA_SOURCE)
    _setup(["javac", "Busy.java"], folder)
    java = _popen(["java", "-Xmx256m", "-cp", str(folder), "Busy", "4"], folder)
    return Running(java, lambda: _tree(java.pid))


ERLANG_PROGRAM = textwrap.dedent(
    """\
    Work = fun Loop(Seed) ->
        Sorted = lists:sort([erlang:phash2({Seed, I}) || I <- lists:seq(1, 2000)]),
        Map = maps:from_list([{K, K * 2} || K <- lists:sublist(Sorted, 500)]),
        Loop(Seed + maps:size(Map))
    end,
    Pong = fun Echo() -> receive {From, N} -> From ! N + 1, Echo() end end,
    Ping = fun Send(P, N) -> P ! {self(), N}, receive M -> Send(P, M) end end,
    [spawn(fun() -> Work(S) end) || S <- lists:seq(1, 6)],
    [spawn(fun() -> Ping(spawn(Pong), 0) end) || _ <- lists:seq(1, 2)],
    receive after infinity -> ok end.
    """
)


def _start_erlang(folder: Path) -> Running:
    """Erlang/OTP 25 (BEAM JIT): processes sorting and building maps, two pairs passing messages."""
    erl = _popen(["erl", "-noshell", "-noinput", "-eval", ERLANG_PROGRAM], folder)
    return Running(erl, lambda: _tree(erl.pid))


def _start_ffmpeg(folder: Path) -> Running:
    """ffmpeg encoding a test pattern with libx264 (hand-written assembly, no CFI), 4 threads."""
    argv = ["ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error"]
    argv += ["-f", "lavfi", "-i", "testsrc=size=1280x720:rate=30"]
    argv += ["-c:v", "libx264", "-preset", "medium", "-threads", "4", "-f", "null", "-"]
    ffmpeg = _popen(argv, folder)
    return Running(ffmpeg, lambda: _tree(ffmpeg.pid))


POSTGRES_BIN = Path("/usr/lib/postgresql/15/bin")
POSTGRES_QUERY = (
    "SELECT b, count(*), sum(a), avg(length(c)), max(a * 2 + b), min(a % 1000 - b),"
    " sum(CASE WHEN a % 5 = 0 THEN a ELSE b - a END), bool_and(a > b), stddev(a + b)"
    " FROM t WHERE a % 3 <> 0 AND c <> 'x' GROUP BY b;"
)
"""Expressions, aggregates and deforming, all compiled by the JIT, over every row."""
POSTGRES_ROWS = 300_000
"""Small enough (about 20 MB) to stay in shared buffers: time goes to expressions, not reads."""
POSTGRES_CLIENTS = 2
"""Clients sending the query, each served by a backend of its own: two threads per instant."""
POSTGRES_LOOPS = 20_000
"""Queries the client sends: far more than a run lasts (each takes a good part of a second)."""


def _as_postgres(argv: list[str]) -> list[str]:
    return ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", *argv]


def _start_postgres(folder: Path) -> Running:
    """PostgreSQL 15, jit_above_cost=0: clients' aggregate queries in a loop (LLVM JIT code)."""
    user = pwd.getpwnam("postgres")
    folder.chmod(0o755)
    data = folder / "data"
    data.mkdir()
    os.chown(data, user.pw_uid, user.pw_gid)
    initdb = [str(POSTGRES_BIN / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"]
    _setup(_as_postgres([*initdb, "--no-sync"]), folder)
    settings = ["listen_addresses=", f"unix_socket_directories={data}", "fsync=off"]
    settings += ["jit=on", "jit_above_cost=0", "max_parallel_workers_per_gather=0"]
    server_argv = [str(POSTGRES_BIN / "postgres"), "-D", str(data)]
    for setting in settings:
        server_argv += ["-c", setting]
    server = _popen(_as_postgres(server_argv), folder)
    running = Running(server, lambda: _backends(server.pid))
    try:
        wait_until(
            lambda: (data / ".s.PGSQL.5432").exists() or server.poll() is not None,
            SETUP_TIMEOUT,
            "PostgreSQL to listen",
        )
        if server.poll() is not None:
            raise RuntimeError(f"postgres exited {server.returncode}: see {folder}/output")
        psql = ["psql", "-X", "-q", "-h", str(data), "-U", "postgres", "-d", "postgres"]
        table = (
            "CREATE TABLE t AS SELECT g AS a, g % 97 AS b, md5(g::text) AS c"
            f" FROM generate_series(1, {POSTGRES_ROWS}) g"
        )
        # Two -c: VACUUM cannot share the implicit transaction of one -c string.
        fill = [*psql, "-v", "ON_ERROR_STOP=1", "-c", table, "-c", "VACUUM ANALYZE t"]
        _setup(_as_postgres(fill), folder)
        script = folder / "loop.sql"
        script.write_text("\\o /dev/null\n" + (POSTGRES_QUERY + "\n") * POSTGRES_LOOPS)
        script.chmod(0o644)
        for _ in range(POSTGRES_CLIENTS):
            running.helpers.append(_popen(_as_postgres([*psql, "-f", str(script)]), folder))
    except BaseException:
        put_away(running)
        raise
    return running


def _backends(postmaster: int) -> list[int]:
    """The client backends of a postmaster ("postgres: user db [local] ..."), not its helpers."""
    found = []
    for process in _descendants(postmaster)[1:]:
        try:
            if "[local]" in " ".join(process.cmdline()):
                found.append(process.pid)
        except psutil.Error:
            continue
    return found


CHROMIUM = "/usr/lib/chromium/chromium"
CHROMIUM_PAGE = (
    "data:text/html,<script>"
    "function work(){let a=[];for(let i=0;i<100000;i++){a.push({x:i*Math.sqrt(i),s:'k'+i})}"
    "a.sort((p,q)=>q.x-p.x);document.title=a[7].s;setTimeout(work,0)}work()"
    "</script>"
)


def _start_chromium(folder: Path) -> Running:
    """Chromium headless on a page whose script allocates and sorts without end (V8's JITs)."""
    argv = [CHROMIUM, "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run"]
    argv += ["--disable-crash-reporter", "--disable-breakpad", f"--user-data-dir={folder}/profile"]
    chromium = _popen([*argv, CHROMIUM_PAGE], folder)
    return Running(chromium, lambda: _tree(chromium.pid))


PROGRAMS = (
    Program(
        "openjdk",
        "OpenJDK 17, 4 busy Java threads (C1/C2 code, G1)",
        ("openjdk-17-jdk-headless",),
        ("java", "javac"),
        _start_java,
        busy_cpu=3.0,  # C2 compiles the hot loops only after a while
    ),
    Program(
        "erlang",
        "Erlang/OTP 25, BEAM JIT, 10 busy Erlang processes",
        ("erlang-base",),
        ("erl",),
        _start_erlang,
    ),
    Program(
        "ffmpeg",
        "ffmpeg + libx264 (hand-written assembly), 1280x720 test pattern, -threads 4",
        ("ffmpeg",),
        ("ffmpeg",),
        _start_ffmpeg,
    ),
    Program(
        "postgresql",
        "PostgreSQL 15, jit_above_cost=0, an aggregate query in a loop (2 clients' backends)",
        ("postgresql-15",),
        (str(POSTGRES_BIN / "postgres"), "psql", "setpriv"),
        _start_postgres,
    ),
    Program(
        "chromium",
        "Chromium headless, a page allocating and sorting in a loop (every process)",
        ("chromium",),
        (CHROMIUM,),
        _start_chromium,
    ),
)
"""Every program, in the order they run."""

PACKAGES = sorted({package for program in PROGRAMS for package in program.packages})
"""The Debian packages of all programs (the Makefile's accuracy-deps installs them)."""


def put_away(running: Running) -> None:
    """Kill every process the program started (continued first, so none stays stopped), reap."""
    for pid in reversed(running.processes()):
        for signum in (signal.SIGCONT, signal.SIGKILL):
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                break
    for popen in [*running.helpers, running.leader]:
        if popen.poll() is None:
            popen.kill()
        try:
            popen.wait(timeout=30)
        except subprocess.TimeoutExpired:
            continue


@contextmanager
def started(program: Program, folder: Path) -> Iterator[Running]:
    """The program started in ``folder`` and busy; put away on the way out, whatever happened."""
    missing = program.missing()
    if missing:
        raise ProgramUnavailableError(
            f"{', '.join(missing)} not found: install {' '.join(program.packages)}"
        )
    running = program.start(folder)
    try:
        start = cpu_seconds(running.subjects())
        try:
            wait_until(
                lambda: (
                    running.subjects()
                    and cpu_seconds(running.subjects()) - start >= program.busy_cpu
                ),
                BUSY_TIMEOUT,
                f"{program.name} to get busy",
            )
        except AssertionError as exc:
            used = cpu_seconds(running.subjects()) - start
            printed = (folder / "output").read_bytes()[-300:].decode(errors="replace").strip()
            raise RuntimeError(f"{exc} ({used:.1f} CPU s used; it printed: {printed!r})") from None
        yield running
    finally:
        put_away(running)
