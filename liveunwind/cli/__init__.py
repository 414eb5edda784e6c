"""The ``liveunwind`` command.

Exit codes: 0 every thread's walk reached the end of its stack, 1 some
thread's walk ended early, 2 the target could not be used (of a
many-process ``pid`` run: some process could not be backtraced; the others
are printed), 64 usage error, 74 an output could not be written (a full
disk), 130 interrupted (SIGINT), 143 terminated (SIGTERM).  Every failure is
one line on stderr, never a traceback, and the target is left as it was found.
"""

from __future__ import annotations

import gc
import os
import sys
import time

from liveunwind.cli.output import OutputError, emit
from liveunwind.cli.parse import (
    Command,
    HelpRequested,
    Option,
    Positional,
    VersionRequested,
    parse,
)
from liveunwind.errors import LiveUnwindError, UsageError
from liveunwind.unwinder import DEFAULT_MAX_FRAMES

TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal
    from collections.abc import Sequence
    from types import SimpleNamespace

    from liveunwind.backtrace.options import BacktraceOptions
    from liveunwind.frames import Backtrace
else:
    # signal.py's C module, without the enums signal.py makes (0.7 ms of a cold start)
    import _signal as signal

EXIT_COMPLETE = 0
EXIT_INCOMPLETE = 1
#: Frames in a crash signature (``core --group``); cli/group.py says why 3.
_GROUP_FRAMES = 3
#: 128 + the signal's number, as shells report a command a signal ended.
EXIT_INTERRUPTED = 128 + signal.SIGINT
EXIT_TERMINATED = 128 + signal.SIGTERM


def _count(text: str) -> int:
    try:
        value = int(text, 0)
    except ValueError:
        raise ValueError(f"not a number: {text!r}") from None
    if value < 0:
        raise ValueError(f"must not be negative: {text}")
    return value


#: ``perf --workers`` and ``pid --workers``: more than this many worker processes is refused.
_MAX_WORKERS = 64


def _workers(text: str) -> int:
    """``--workers``: 1 (no workers: one process) up to _MAX_WORKERS."""
    value = _count(text)
    if not 1 <= value <= _MAX_WORKERS:
        raise ValueError(f"must be from 1 to {_MAX_WORKERS}")
    return value


def _stack_bytes(text: str) -> int:
    """``--stack-cap``: a byte count; 0 is refused, not silently read as the default."""
    value = _count(text)
    if value == 0:
        raise ValueError("must be at least 1 byte (the default is 16 MiB)")
    return value


def _total_stack_bytes(text: str) -> int:
    """``--total-stack-cap``: a byte count of at least 1."""
    value = _count(text)
    if value == 0:
        raise ValueError("must be at least 1 byte (the default is 256 MiB)")
    return value


def _positive_seconds(text: str) -> float:
    value = _seconds(text)
    if value <= 0:
        raise ValueError("must be more than 0 seconds")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"not a number of seconds: {text!r}") from None
    if not value >= 0:
        raise ValueError(f"must not be negative: {text}")
    return value


def _pid(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"not a process id: {text!r}") from None
    if value <= 0:
        raise ValueError(f"not a process id: {text}")
    return value


def _address(text: str) -> int:
    try:
        return int(text, 16) if not text.isdigit() or text.startswith("0") else int(text)
    except ValueError:
        raise ValueError(f"not an address: {text!r}") from None


def _rate(text: str) -> float:
    from liveunwind.cli.profile import parse_rate

    return parse_rate(text)


def _sample_stack_size(text: str) -> int:
    from liveunwind.targets.perfevent.events import check_stack_size

    return check_stack_size(_count(text))


def _tid_list(text: str) -> list[int]:
    return [_pid(part) for part in text.split(",") if part.strip()]


def _unwinder_help() -> str:
    """``--unwinder``'s help: the registry's sources, what ``auto`` means and what each is."""
    from liveunwind.sources import AUTO_UNWINDERS, SOURCES

    each = "; ".join(f"{source.name}: {source.help}" for source in SOURCES)
    return (
        f"unwind sources to use, in order: auto (= {','.join(AUTO_UNWINDERS)}), "
        f"or a comma-separated list of: {each}"
    )


def _walk_options() -> list[Option]:
    """The options of every command that walks stacks."""
    return [
        Option(
            "--max-frames",
            f"stop each walk after N frames (default {DEFAULT_MAX_FRAMES}, 0 = no limit)",
            convert=_count,
            default=DEFAULT_MAX_FRAMES,
            metavar="N",
        ),
        Option("--unwinder", _unwinder_help(), default="auto", metavar="LIST"),
        Option("--verbose", "explain under each frame why a fallback was used", value=False),
        Option(
            "--debug-dir",
            "also look for separate debug files here (before /usr/lib/debug); repeatable",
            metavar="DIR",
            repeat=True,
        ),
        Option("--json", "print one JSON document", value=False),
        Option("--no-symbols", "do not look up function names", value=False),
        Option(
            "--lines",
            "give each frame its source file and line, and the calls inlined into it (DWARF)",
            value=False,
        ),
        Option(
            "--python",
            "show the Python frames each frame of CPython's eval loop runs (CPython 3.11-3.15)",
            value=False,
        ),
        Option(
            "--locals",
            "show each Python frame's arguments and local variables (implies --python)",
            value=False,
        ),
        Option(
            "--tasks",
            "list the asyncio tasks with the coroutines each awaits in, CPython 3.14+ "
            "(implies --python)",
            value=False,
        ),
        Option("--stats", "print time spent per phase (and the freeze) to stderr", value=False),
    ]


def _per_thread_option() -> Option:
    """``--per-thread``: folded stacks, flame graph and thread table by tid, not by name."""
    return Option(
        "--per-thread",
        "count each thread apart (name-tid) instead of every thread of a name together "
        "(the default, which keeps a run over short-lived threads bounded)",
        value=False,
    )


def _file_tables() -> tuple[str, ...]:
    """``unwind-info --format``: the registry's tables a file can carry."""
    from liveunwind.sources import SOURCES, TABLE

    return tuple(source.name for source in SOURCES if source.kind == TABLE and not source.run_time)


def commands() -> list[Command]:
    """What ``liveunwind`` accepts."""
    pid = Command(
        "pid",
        "backtrace every thread of running processes, one at a time",
        [Positional("pid", "process ids", convert=_pid, many=True)],
        [
            Option(
                "--all",
                "every process we may trace (not kernel threads, not liveunwind and the "
                "processes above it)",
                value=False,
            ),
            Option(
                "--name",
                "the processes whose command name or argv[0] (its last part) matches REGEX",
                metavar="REGEX",
            ),
            Option("--exe", "the processes running this file (/proc/PID/exe)", metavar="PATH"),
            Option(
                "--cgroup",
                "the processes of this cgroup and those below it (under /sys/fs/cgroup, or "
                "as /proc/PID/cgroup writes it)",
                metavar="PATH",
            ),
            Option(
                "--container",
                "the processes of a container: by its id (the cgroup naming it), or by one of "
                "its pids (that cgroup, else that pid namespace)",
                metavar="ID-or-PID",
            ),
            Option(
                "--per-process",
                "with several processes, --collapsed counts each apart (name:pid) instead of "
                "every process of a name together",
                value=False,
            ),
            Option(
                "--workers",
                "with many processes, the processes they are backtraced in, taking turns to "
                "stop them (default: one per CPU this may run on that nothing else runs on now, "
                "none below 16 processes; 1: no workers)",
                convert=_workers,
                metavar="N",
            ),
            Option("--threads", "only these threads", convert=_tid_list, metavar="TID,..."),
            Option(
                "--no-snapshot",
                "keep the process stopped for the whole walk instead of unwinding a copy",
                value=False,
            ),
            Option(
                "--repeat",
                "take N backtraces, keeping what was learned about the process between them",
                convert=_count,
                default=1,
                metavar="N",
            ),
            Option(
                "--interval",
                "wait this long between --repeat backtraces (default 0)",
                convert=_seconds,
                default=0.0,
                metavar="SECONDS",
            ),
            Option(
                "--collapsed",
                "print folded stacks (thread;outer;...;inner count) over all backtraces",
                value=False,
            ),
            _per_thread_option(),
            Option(
                "--stack-cap",
                "bytes of each thread stack to copy, from the stack pointer up "
                "(default 16 MiB; at least 1)",
                convert=_stack_bytes,
                metavar="BYTES",
            ),
            Option(
                "--total-stack-cap",
                "bytes of stack to copy for all threads together, shared equally when "
                "more is wanted; what was cut is noted (default 256 MiB; at least 1)",
                convert=_total_stack_bytes,
                metavar="BYTES",
            ),
            Option(
                "--stop-timeout",
                "give each thread this long to stop; one that does not is let go and "
                "reported as not stopped, the others are walked (default 0.5)",
                convert=_positive_seconds,
                default=0.5,
                metavar="SECONDS",
            ),
            *_walk_options(),
        ],
    )
    core = Command(
        "core",
        "backtrace every thread recorded in a core file",
        [
            Positional(
                "core",
                "core files (.gz, .xz, .zst, .bz2 and .lz4 are read as they are) or folders "
                "of them (systemd-coredump's /var/lib/systemd/coredump); after one core, the "
                "program that dumped it may follow",
                many=True,
            ),
        ],
        [
            Option(
                "--group",
                "print crash signatures (program, signal, first frames in its own code), "
                "each with its number of cores and examples, most first",
                value=False,
            ),
            Option(
                "--group-frames",
                f"frames of the program's own code in a crash signature (default {_GROUP_FRAMES})",
                convert=_count,
                default=_GROUP_FRAMES,
                metavar="N",
            ),
            Option(
                "--collapsed",
                "print folded stacks (program;thread;outer;...;inner count) summed over the cores",
                value=False,
            ),
            _per_thread_option(),
            Option("--sysroot", "look for the core's files under DIR", metavar="DIR"),
            Option(
                "--search-path",
                "folders to look for the core's executable and libraries in, by name",
                default="",
                metavar="DIR[:DIR...]",
            ),
            *_walk_options(),
        ],
    )
    remote = Command(
        "gdb-remote",
        "backtrace every thread of a process behind a GDB remote stub (gdbserver, qemu -g)",
        [
            Positional("address", "the stub: HOST:PORT, [IPv6]:PORT or :PORT"),
            Positional(
                "executable", "the program's file here, if the stub's path is not", optional=True
            ),
        ],
        [
            Option("--sysroot", "look for the target's files under DIR", metavar="DIR"),
            Option(
                "--search-path",
                "folders to look for the executable and libraries in, by name",
                default="",
                metavar="DIR[:DIR...]",
            ),
            Option(
                "--after",
                "let the target run this long before interrupting it",
                convert=_seconds,
                metavar="SECONDS",
            ),
            Option(
                "--attach",
                "have a gdbserver --multi attach to this process",
                convert=_pid,
                metavar="PID",
            ),
            Option(
                "--timeout",
                "give up on a stub that does not answer within this long (default 3)",
                convert=_positive_seconds,
                metavar="SECONDS",
            ),
            *_walk_options(),
        ],
    )
    info = Command(
        "unwind-info",
        "print the unwind tables of a binary, or the rule at one address",
        [Positional("file", "an ELF executable, library or object")],
        [
            Option("--format", "only this format", choices=_file_tables()),
            Option(
                "--pc",
                "show only the rule at this link-time address",
                convert=_address,
                metavar="ADDR",
            ),
        ],
    )
    profile = Command(
        "profile",
        "sample a running process: CPU per thread, hottest stacks, folded stacks, flame graph",
        [Positional("pid", "process id", convert=_pid)],
        [
            Option(
                "--duration",
                "sample for this long (default: until Ctrl-C)",
                convert=_positive_seconds,
                metavar="SECONDS",
            ),
            Option(
                "--rate",
                "samples per second (default 100)",
                convert=_rate,
                default=100.0,
                metavar="HZ",
            ),
            Option("--threads", "only these threads", convert=_tid_list, metavar="TID,..."),
            Option(
                "--on-cpu",
                "let the kernel sample each thread on its CPU clock (perf_event_open) and "
                "unwind the samples later: the process is never stopped, threads off the CPU "
                "are not seen (default: the wall clock, stopping the process for each sample)",
                value=False,
            ),
            Option(
                "--stack-size",
                "with --on-cpu, bytes of stack the kernel copies per sample, from the stack "
                "pointer up; a walk needing more ends there (default 8192, a multiple of 8, "
                "at most 65528)",
                convert=_sample_stack_size,
                default=8192,
                metavar="BYTES",
            ),
            Option("--svg", "write an interactive flame graph (SVG) to FILE", metavar="FILE"),
            Option(
                "--pprof",
                "write the profile as pprof (profile.proto, gzipped) to FILE",
                metavar="FILE",
            ),
            Option("--speedscope", "write the profile as speedscope JSON to FILE", metavar="FILE"),
            Option(
                "--collapsed-out",
                "write folded stacks (thread;outer;...;inner count) to FILE",
                metavar="FILE",
            ),
            _per_thread_option(),
            Option(
                "--merge",
                "one tower for all threads in --svg and --collapsed-out "
                "(default: one per thread name)",
                value=False,
            ),
            # Per-frame notes have no place in a sum of samples: every walk option but --verbose.
            *(
                option
                for option in _walk_options()
                if option.name not in ("--verbose", "--locals", "--tasks")
            ),
        ],
    )
    perf = Command(
        "perf",
        "unwind the samples of a perf record --call-graph dwarf file: the outputs of profile",
        [Positional("file", "the perf.data file (not a pipe-mode one)")],
        [
            Option("--pid", "only the samples of this process", convert=_pid, metavar="PID"),
            Option("--tid", "only these threads", convert=_tid_list, metavar="TID,..."),
            Option("--sysroot", "look for the recording's files under DIR", metavar="DIR"),
            Option(
                "--search-path",
                "folders to look for the recording's files in, by name",
                default="",
                metavar="DIR[:DIR...]",
            ),
            Option(
                "--workers",
                "processes the samples are unwound in, each reading the whole file "
                "(default: one per CPU this may run on that nothing else runs on now; 1: no "
                "workers)",
                convert=_workers,
                metavar="N",
            ),
            *(option for option in profile.options.values() if option.name not in _PROFILE_ONLY),
        ],
    )
    return [pid, core, remote, info, profile, perf]


#: ``profile``'s options that sample a live process: ``perf`` has a recording instead.
_PROFILE_ONLY = ("--duration", "--rate", "--threads", "--python", "--on-cpu", "--stack-size")


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM, raised where the command is, so that what it holds is let go.

    A KeyboardInterrupt, so that whatever ends early on Ctrl-C ends on
    SIGTERM too; ``exit_code`` says which it was.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.exit_code = 128 + signum


def _raise_interrupted(signum: int, _frame: object) -> None:
    """The first SIGINT or SIGTERM: ignore the next ones, unwind from here.

    The way out (letting go of the target, removing a half-written
    temporary file, one line on stderr) is short and must not itself be cut
    short by a second Ctrl-C; SIGKILL still ends everything.
    """
    for each in (signal.SIGINT, signal.SIGTERM):
        signal.signal(each, signal.SIG_IGN)
    raise Interrupted(signum)


def _exit_at_once(signum: int, _frame: object) -> None:
    """Once everything is written: a signal ends the process, 128 + its number."""
    os._exit(128 + signum)


def run() -> None:
    """The command's entry point: :func:`main`, then exit without tearing Python down.

    SIGINT and SIGTERM raise :class:`Interrupted` wherever the command is
    (a live target holds them back until it is let go), and end it with
    130 or 143.  Tearing down the interpreter (freeing every module,
    mapping and cached table) takes 5–10 ms after a cold backtrace, a
    quarter of the whole run, and nothing needs it: the target is already
    let go and every file was only read.  So the output is flushed and the
    process ends at once (having written liveunwind's code bundle if the
    start found none usable: liveunwind/codebundle.py, and the symbol
    indexes of the tables it had to build: modules/symbolindex.py).
    """
    from liveunwind.modules import symbolindex

    symbolindex.enable()
    try:
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, _raise_interrupted)
        status = main()
        # Inside the try: a signal between main()'s return and the switch is caught below.
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, _exit_at_once)
    except KeyboardInterrupt as interrupt:  # it came while main() was saying something else
        status = getattr(interrupt, "exit_code", EXIT_INTERRUPTED)
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, _exit_at_once)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, ValueError):
            pass  # the reader went away (or the stream is closed): nothing left to say
        except OSError as error:  # stdout on a full disk
            if status != OutputError.exit_code:  # else main() said so already
                print(f"liveunwind: cannot write the output: {error.strerror}", file=sys.stderr)
                status = OutputError.exit_code
    bundle = sys.modules.get("liveunwind.codebundle")
    if bundle is not None:  # the command's start looked for it: write it if it was not usable
        bundle.write_if_wanted()
    symbolindex.write_pending()
    os._exit(status)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _run(argv)
    except LiveUnwindError as error:
        print(f"liveunwind: {error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt as interrupt:
        return _interrupted(interrupt)
    except RuntimeError as error:
        # Python 3.11 wraps a Ctrl-C that lands while a class body binds a
        # descriptor (a lazy import defining a class) in a RuntimeError.
        if not isinstance(error.__cause__, KeyboardInterrupt):
            raise
        return _interrupted(error.__cause__)
    except BrokenPipeError:
        return EXIT_COMPLETE


def _interrupted(interrupt: KeyboardInterrupt) -> int:
    """One line for a SIGINT (or a KeyboardInterrupt of the API) or a SIGTERM; its exit code."""
    status = getattr(interrupt, "exit_code", EXIT_INTERRUPTED)
    print(
        f"liveunwind: {'terminated' if status == EXIT_TERMINATED else 'interrupted'}",
        file=sys.stderr,
    )
    return status


def _run(argv: Sequence[str] | None) -> int:
    try:
        arguments = parse(
            "liveunwind",
            "Native backtraces of Linux processes, saying how each frame was found.",
            commands(),
            sys.argv[1:] if argv is None else argv,
        )
    except HelpRequested as help:
        emit(help.text)
        return EXIT_COMPLETE
    except VersionRequested:
        emit(f"liveunwind {_version()}\n")
        return EXIT_COMPLETE
    if arguments.command == "unwind-info":
        from liveunwind.cli.unwindinfo import describe_file

        text, found = describe_file(arguments.file, arguments.format, arguments.pc)
        emit(text)
        return EXIT_COMPLETE if found else EXIT_INCOMPLETE
    from liveunwind.sources import parse_unwinders

    unwinders = parse_unwinders(arguments.unwinder)
    if arguments.command == "pid":
        return _pid_command(arguments, unwinders)
    if arguments.command == "core":
        return _core_command(arguments, unwinders)
    if arguments.command == "gdb-remote":
        return _remote_command(arguments, unwinders)
    if arguments.command == "profile":
        from liveunwind.cli.profile import profile_command

        return profile_command(arguments, _backtrace_options(arguments, unwinders))
    if arguments.command == "perf":
        from liveunwind.cli.perf import perf_command

        arguments.python = False
        arguments.threads = arguments.tid
        return perf_command(arguments, _backtrace_options(arguments, unwinders))
    raise UsageError(f"unknown command {arguments.command}")


def _version() -> str:
    """The installed distribution's version: pyproject.toml's, the one place it is written."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("liveunwind")
    except PackageNotFoundError:
        raise LiveUnwindError(
            "version unknown: this copy of liveunwind is not installed (pip install .)"
        ) from None


def _remote_command(arguments: SimpleNamespace, unwinders: tuple[str, ...]) -> int:
    """``liveunwind gdb-remote``: one backtrace through the stub, then the target runs on."""
    from liveunwind.backtrace.remote import gdb_remote

    counters: dict[str, int] = {}
    # The API's default timeout unless one was given: the help text names it.
    timeout = {} if arguments.timeout is None else {"timeout": arguments.timeout}
    backtrace = gdb_remote(
        arguments.address,
        arguments.executable,
        sysroot=arguments.sysroot,
        search_path=[part for part in arguments.search_path.split(":") if part],
        after=arguments.after,
        attach=arguments.attach,
        **timeout,
        stats=counters,
        options=_backtrace_options(arguments, unwinders),
    )
    status = _print(arguments, backtrace)
    if arguments.stats:
        traffic = ", ".join(f"{name.replace('_', ' ')} {value}" for name, value in counters.items())
        print(f"liveunwind: stats: protocol: {traffic}", file=sys.stderr)
    return status


def _pid_command(arguments: SimpleNamespace, unwinders: tuple[str, ...]) -> int:
    """``liveunwind pid``: one process (the document of one backtrace), or many (a list)."""
    from liveunwind.cli.targets import choose

    chosen = choose(
        arguments.pid,
        every=arguments.all,
        name=arguments.name,
        exe=arguments.exe,
        cgroup=arguments.cgroup,
        container=arguments.container,
    )
    if arguments.verbose and chosen.how:
        print(f"liveunwind: {len(chosen.pids)} processes of {chosen.how}", file=sys.stderr)
    if chosen.single:
        return _one_process(arguments, unwinders, chosen.pids[0])
    if arguments.repeat > 1 or arguments.threads:
        raise UsageError("pid: --repeat and --threads take one process")
    from liveunwind.cli.many import many_processes

    return many_processes(
        arguments,
        _backtrace_options(arguments, unwinders),
        chosen.pids,
        print_stats=_print_stats,
    )


def _core_command(arguments: SimpleNamespace, unwinders: tuple[str, ...]) -> int:
    """``liveunwind core``: one core (the document of one backtrace), or many (a list).

    ``core CORE EXE`` keeps its meaning (``cli.cores.core_arguments``): a
    second argument that is not itself a core or a folder is the program
    that dumped the first.  ``--group`` and ``--collapsed`` take the
    many-core path even for one core.
    """
    from liveunwind.cli.cores import core_arguments

    if arguments.group and arguments.collapsed:
        raise UsageError("core: --group and --collapsed print different things; choose one")
    if arguments.group_frames == 0:
        raise UsageError("core: --group-frames must be at least 1")
    cores, executable = core_arguments(arguments.core)
    options = _backtrace_options(arguments, unwinders)
    many = arguments.group or arguments.collapsed or len(cores) > 1 or os.path.isdir(cores[0])
    if not many:
        from liveunwind.backtrace.api import open_core

        backtrace = open_core(
            cores[0],
            executable,
            sysroot=arguments.sysroot,
            search_path=[part for part in arguments.search_path.split(":") if part],
            options=options,
        )
        return _print(arguments, backtrace)
    from liveunwind.cli.cores import many_cores
    from liveunwind.targets.cores.store import StoreError, core_entries

    try:
        entries = core_entries(cores)
    except StoreError as error:
        raise UsageError(f"core: {error}") from None
    return many_cores(arguments, options, entries, executable, print_stats=_print_stats)


def _one_process(arguments: SimpleNamespace, unwinders: tuple[str, ...], pid: int) -> int:
    """One process: one backtrace, or ``--repeat`` of them printed as they come.

    ``--collapsed`` counts each backtrace's stacks as it comes (by thread
    name, or by tid with ``--per-thread``), bounded as ``profile`` is; what
    was counted together is said on stderr.
    """
    if arguments.repeat <= 1:
        # One backtrace, then the process ends at once (run()): the cyclic garbage
        # collector would only scan, 20-odd times, the objects that imports and tables
        # keep for good (~2 ms, 5 % of a cold run); what one backtrace leaves goes
        # with the process.  Many processes, --repeat and profile keep collecting.
        # Before the import below: its modules' objects alone made 4 collections (0.6 ms).
        gc.disable()
    from liveunwind.backtrace.session import Session

    session = Session(
        pid,
        threads=arguments.threads,
        options=_backtrace_options(arguments, unwinders),
        snapshot=not arguments.no_snapshot,
        stack_cap=arguments.stack_cap,
        total_cap=arguments.total_stack_cap,
        stop_timeout=arguments.stop_timeout,
        once=arguments.repeat <= 1,
    )
    folded = None
    if arguments.collapsed:
        from liveunwind.backtrace.profile import Profile

        folded = Profile(pid, 1.0, per_thread=arguments.per_thread)
    status = EXIT_COMPLETE
    for index in range(max(arguments.repeat, 1)):
        if index and arguments.interval:
            time.sleep(arguments.interval)
        backtrace = session.backtrace()
        if folded is not None:
            folded.add(backtrace)
            status = _stats(arguments, backtrace, status)
        else:
            status = max(status, _print(arguments, backtrace))
    if folded is not None:
        from liveunwind.cli.profile import folding_notes, format_folded

        emit(format_folded(folded))
        for note in folding_notes(folded):
            print(f"liveunwind: {note}", file=sys.stderr)
    return status


def _backtrace_options(arguments: SimpleNamespace, unwinders: tuple[str, ...]) -> BacktraceOptions:
    """What the flags of :func:`_walk_options` ask for, as every walking command passes it on.

    ``profile`` takes ``--python`` too (its folded stacks then have a level
    per Python frame), but not ``--verbose``, ``--locals`` or ``--tasks``;
    those two imply ``--python``.
    """
    from liveunwind.backtrace.options import BacktraceOptions

    return BacktraceOptions(
        max_frames=arguments.max_frames,
        unwinders=unwinders,
        symbols=not arguments.no_symbols,
        verbose=getattr(arguments, "verbose", False),  # profile has no --verbose
        debug_dirs=tuple(arguments.debug_dir),
        lines=arguments.lines,
        python=arguments.python
        or getattr(arguments, "locals", False)
        or getattr(arguments, "tasks", False),
        python_locals=getattr(arguments, "locals", False),
        python_tasks=getattr(arguments, "tasks", False),
    )


def _stats(arguments: SimpleNamespace, backtrace: Backtrace, status: int) -> int:
    if arguments.stats:
        _print_stats(backtrace)
    return max(status, EXIT_COMPLETE if backtrace.complete else EXIT_INCOMPLETE)


def _print(arguments: SimpleNamespace, backtrace: Backtrace) -> int:
    from liveunwind.cli.report import format_json, format_text

    if arguments.json:
        emit(format_json(backtrace))
    else:
        emit(format_text(backtrace, symbols=not arguments.no_symbols, verbose=arguments.verbose))
    return _stats(arguments, backtrace, EXIT_COMPLETE)


def _print_stats(backtrace: Backtrace, label: str = "") -> None:
    """``liveunwind: stats: [LABEL: ]phases; frames``: one line on stderr."""
    phases = ", ".join(
        f"{name} {seconds * 1000:.2f} ms" for name, seconds in backtrace.timings.items()
    )
    frames = sum(len(thread.frames) for thread in backtrace.threads)
    walk = backtrace.timings.get("unwind", 0.0) + backtrace.timings.get("symbolize", 0.0)
    rate = f", {frames / walk:,.0f} frames/s" if walk else ""
    print(f"liveunwind: stats: {label}{phases}; {frames} frames{rate}", file=sys.stderr)
