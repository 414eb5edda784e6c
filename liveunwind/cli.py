"""The ``liveunwind`` command.

Exit codes: 0 every thread's walk reached the end of its stack, 1 some
thread's walk ended early, 2 the target could not be used, 64 usage error,
130 interrupted.  Every failure is one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
import time

from liveunwind.errors import LiveUnwindError, UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from liveunwind.frames import Backtrace

EXIT_COMPLETE = 0
EXIT_INCOMPLETE = 1
EXIT_INTERRUPTED = 130


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is a LiveUnwindError (exit 64), not exit 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


def _positive_int(text: str) -> int:
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {text}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {text}")
    return value


def _pid(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a process id: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"not a process id: {text}")
    return value


def _address(text: str) -> int:
    try:
        return int(text, 16) if not text.isdigit() or text.startswith("0") else int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an address: {text!r}") from None


def _tid_list(text: str) -> list[int]:
    return [_pid(part) for part in text.split(",") if part.strip()]


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="liveunwind",
        description="Native backtraces of Linux processes, saying how each frame was found.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    pid = commands.add_parser("pid", help="backtrace every thread of a running process")
    pid.add_argument("pid", type=_pid, help="process id")
    pid.add_argument("--threads", type=_tid_list, metavar="TID,...", help="only these threads")
    pid.add_argument(
        "--no-snapshot",
        action="store_true",
        help="keep the process stopped for the whole walk instead of unwinding a copy",
    )
    pid.add_argument(
        "--repeat",
        type=_positive_int,
        default=1,
        metavar="N",
        help="take N backtraces, keeping what was learned about the process between them",
    )
    pid.add_argument(
        "--interval",
        type=_seconds,
        default=0.0,
        metavar="SECONDS",
        help="wait this long between --repeat backtraces (default 0)",
    )
    pid.add_argument(
        "--collapsed",
        action="store_true",
        help="print folded stacks (thread;outer;...;inner count) over all backtraces",
    )
    pid.add_argument(
        "--stack-cap",
        type=_positive_int,
        metavar="BYTES",
        help="bytes of each thread stack to copy (default 16 MiB)",
    )
    _add_walk_options(pid)
    core = commands.add_parser("core", help="backtrace every thread recorded in a core file")
    core.add_argument("core", help="the core file (.gz and .xz are read as they are)")
    core.add_argument("executable", nargs="?", help="the program that dumped it")
    core.add_argument("--sysroot", metavar="DIR", help="look for the core's files under DIR")
    core.add_argument(
        "--search-path",
        metavar="DIR[:DIR...]",
        default="",
        help="folders to look for the core's executable and libraries in, by name",
    )
    _add_walk_options(core)
    info = commands.add_parser(
        "unwind-info", help="print the unwind tables of a binary, or the rule at one address"
    )
    info.add_argument("file", help="an ELF executable, library or object")
    info.add_argument("--format", choices=("cfi", "sframe", "compact"), help="only this format")
    info.add_argument(
        "--pc", type=_address, metavar="ADDR", help="show only the rule at this link-time address"
    )
    return parser


def _add_walk_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--max-frames",
        type=_positive_int,
        default=256,
        metavar="N",
        help="stop each walk after N frames (default 256, 0 = no limit)",
    )
    parser.add_argument(
        "--unwinder",
        default="auto",
        metavar="LIST",
        help=(
            "unwind sources to use, in order: auto (= cfi,sframe,fp,scan), or a list of "
            "dynamic, compact, cfi, sframe, fp, scan"
        ),
    )
    parser.add_argument(
        "--verbose", action="store_true", help="explain under each frame why a fallback was used"
    )
    parser.add_argument(
        "--debug-dir",
        action="append",
        default=[],
        metavar="DIR",
        help="also look for separate debug files here (before /usr/lib/debug); repeatable",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--no-symbols", action="store_true", help="do not look up function names")
    parser.add_argument(
        "--stats", action="store_true", help="print time spent per phase (and the freeze) to stderr"
    )


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _run(argv)
    except LiveUnwindError as error:
        print(f"liveunwind: {error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        print("liveunwind: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_COMPLETE


def _run(argv: Sequence[str] | None) -> int:
    arguments = build_parser().parse_args(argv)
    if arguments.command == "unwind-info":
        from liveunwind.unwindinfo import describe_file

        text, found = describe_file(arguments.file, arguments.format, arguments.pc)
        sys.stdout.write(text)
        return EXIT_COMPLETE if found else EXIT_INCOMPLETE
    from liveunwind.stepper import parse_unwinders

    unwinders = parse_unwinders(arguments.unwinder)
    if arguments.command == "pid":
        return _pid_command(arguments, unwinders)
    if arguments.command == "core":
        from liveunwind.api import open_core

        backtrace = open_core(
            arguments.core,
            arguments.executable,
            sysroot=arguments.sysroot,
            search_path=[part for part in arguments.search_path.split(":") if part],
            max_frames=arguments.max_frames,
            unwinders=unwinders,
            symbols=not arguments.no_symbols,
            verbose=arguments.verbose,
            debug_dirs=arguments.debug_dir,
        )
        return _print(arguments, backtrace)
    raise UsageError(f"unknown command {arguments.command}")


def _pid_command(arguments: argparse.Namespace, unwinders: tuple[str, ...]) -> int:
    """``liveunwind pid``: one backtrace, or ``--repeat`` of them printed as they come."""
    from liveunwind.report import format_collapsed
    from liveunwind.session import Session
    from liveunwind.walker import WalkOptions

    options = WalkOptions(
        max_frames=arguments.max_frames,
        unwinders=unwinders,
        symbols=not arguments.no_symbols,
        verbose=arguments.verbose,
        debug_dirs=tuple(arguments.debug_dir),
    )
    session = Session(
        arguments.pid,
        threads=arguments.threads,
        options=options,
        snapshot=not arguments.no_snapshot,
        stack_cap=arguments.stack_cap,
    )
    samples = []
    status = EXIT_COMPLETE
    for index in range(max(arguments.repeat, 1)):
        if index and arguments.interval:
            time.sleep(arguments.interval)
        backtrace = session.backtrace()
        if arguments.collapsed:
            samples.append(backtrace)
            status = _stats(arguments, backtrace, status)
        else:
            status = max(status, _print(arguments, backtrace))
    if arguments.collapsed:
        sys.stdout.write(format_collapsed(samples))
    return status


def _stats(arguments: argparse.Namespace, backtrace: Backtrace, status: int) -> int:
    if arguments.stats:
        _print_stats(backtrace)
    return max(status, EXIT_COMPLETE if backtrace.complete else EXIT_INCOMPLETE)


def _print(arguments: argparse.Namespace, backtrace: Backtrace) -> int:
    from liveunwind.report import format_json, format_text

    if arguments.json:
        sys.stdout.write(format_json(backtrace))
    else:
        sys.stdout.write(
            format_text(backtrace, symbols=not arguments.no_symbols, verbose=arguments.verbose)
        )
    sys.stdout.flush()
    return _stats(arguments, backtrace, EXIT_COMPLETE)


def _print_stats(backtrace: Backtrace) -> None:
    phases = ", ".join(
        f"{name} {seconds * 1000:.2f} ms" for name, seconds in backtrace.timings.items()
    )
    frames = sum(len(thread.frames) for thread in backtrace.threads)
    walk = backtrace.timings.get("unwind", 0.0) + backtrace.timings.get("symbolize", 0.0)
    rate = f", {frames / walk:,.0f} frames/s" if walk else ""
    print(f"liveunwind: stats: {phases}; {frames} frames{rate}", file=sys.stderr)
