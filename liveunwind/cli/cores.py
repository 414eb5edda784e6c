"""``liveunwind core`` over several cores or folders of them: one run, one report.

The cores are read one after the other (a folder's entries in name order,
``targets/cores/store.py``), sharing what was read of the files they have
in common (``backtrace/shared.py``, by recorded path and build-id), so the
second core of a program costs its own notes, stacks and walk.  A core that
cannot be read — truncated, corrupt, not a core, not a regular file — is
one line of the report, and the run goes on.

Text is printed core by core as it comes (``Core PATH:`` and its
backtrace); ``--json`` is one document at the end (``cli/report.py``);
``--collapsed`` sums the folded stacks of every core under a first level
naming its program; ``--group`` prints crash signatures instead
(``cli/group.py``), and with ``--json`` adds them to the document.
"""

from __future__ import annotations

import os
import sys
import time

from liveunwind.cli.output import emit
from liveunwind.cli.report import CoreResult
from liveunwind.errors import LiveUnwindError, UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections import Counter
    from collections.abc import Callable
    from types import SimpleNamespace

    from liveunwind.backtrace.options import BacktraceOptions
    from liveunwind.backtrace.shared import SharedFiles
    from liveunwind.cli.group import Signature
    from liveunwind.frames import Backtrace
    from liveunwind.targets.cores.store import CoreEntry

#: ELF's e_type of a core file; Mach-O's 64-bit little-endian magic and its file type of a core.
_ET_CORE = 4
_MACH_O_64 = b"\xcf\xfa\xed\xfe"
_MH_CORE = 4
#: Exit codes (those of cli/__init__.py): every walk complete, some ended early.
_COMPLETE = 0
_INCOMPLETE = 1


def core_arguments(paths: list[str]) -> tuple[list[str], str | None]:
    """The cores (files and folders) ``core`` was given, and the executable if one was.

    ``core CORE EXE`` keeps its meaning: of two arguments, the second is the
    program that dumped the first unless it is itself a core (ELF or
    Mach-O, or compressed) or a folder — so a program that is not there, or
    not a program, is refused as it always was, in the executable's words.
    """
    if not paths:
        raise UsageError("core: name a core file, or a folder of cores")
    if len(paths) == 2 and not _is_core_or_folder(paths[1]):
        if os.path.isdir(paths[0]):
            raise UsageError(f"core: a program ({paths[1]}) goes with one core, not a folder")
        return [paths[0]], paths[1]
    return paths, None


def _is_core_or_folder(path: str) -> bool:
    """``path`` is a folder, a core file (ELF or Mach-O) or compressed data."""
    from liveunwind.targets.cores.coredata import compression_of
    from liveunwind.targets.files import FileError, open_file

    if os.path.isdir(path):
        return True
    try:
        with open_file(path) as file:
            header = file.read(18)
    except FileError:
        return False
    if compression_of(header[:6]) is not None:
        return True
    elf_core = header[:4] == b"\x7fELF" and header[16:18] == _ET_CORE.to_bytes(2, "little")
    mach_o_core = header[:4] == _MACH_O_64 and header[12:16] == _MH_CORE.to_bytes(4, "little")
    return elf_core or mach_o_core


def many_cores(
    arguments: SimpleNamespace,
    options: BacktraceOptions,
    entries: list[CoreEntry],
    executable: str | None = None,
    *,
    print_stats: Callable[[Backtrace, str], None],
) -> int:
    """Backtraces every core of ``entries`` in order; the exit code is the worst of theirs.

    ``executable``: the program the one core given was dumped by (``core CORE EXE``).
    """
    from liveunwind.backtrace.shared import SharedFiles

    shared = SharedFiles(by_path=True)
    results: list[CoreResult] = []
    signatures: list[Signature | None] = []
    folded: Counter[tuple[str, ...]] | None = None
    if arguments.collapsed:
        from collections import Counter

        folded = Counter()
    status = _COMPLETE
    began = time.perf_counter()
    for index, entry in enumerate(entries):
        result = _read(entry, executable, arguments, options, shared)
        backtrace = result.backtrace
        if backtrace is None:
            status = max(status, result.exit_code)
        else:
            status = max(status, _COMPLETE if backtrace.complete else _INCOMPLETE)
            if arguments.stats:
                print_stats(backtrace, f"core {entry.path}: ")
        if arguments.group:
            signatures.append(_signature(result, arguments.group_frames))
            if not arguments.json:
                result.backtrace = None  # the text needs its signature and its line, no more
            results.append(result)
        elif folded is not None:
            _fold_core(folded, result, arguments.per_thread)
        elif arguments.json:
            results.append(result)
        else:
            from liveunwind.cli.report import format_core_text

            text = format_core_text(
                result, symbols=not arguments.no_symbols, verbose=arguments.verbose
            )
            emit(("\n" if index else "") + text)
    _finish(arguments, results, signatures, folded)
    if arguments.stats:
        seconds = time.perf_counter() - began
        print(
            f"liveunwind: stats: {len(entries)} cores in {seconds * 1000:.1f} ms; "
            f"{shared.adopted} modules taken from another core instead of read",
            file=sys.stderr,
        )
    return status


def _read(
    entry: CoreEntry,
    executable: str | None,
    arguments: SimpleNamespace,
    options: BacktraceOptions,
    shared: SharedFiles,
) -> CoreResult:
    """One core's backtrace, or the one line saying why it could not be read."""
    from liveunwind.backtrace.api import open_core

    try:
        backtrace = open_core(
            entry.path,
            executable,
            sysroot=arguments.sysroot,
            search_path=[part for part in arguments.search_path.split(":") if part],
            options=options,
            shared=shared,
        )
    except (LiveUnwindError, OSError) as error:
        code = error.exit_code if isinstance(error, LiveUnwindError) else 2
        return CoreResult(entry.path, entry.executable or "", None, _one_line(error), code)
    return CoreResult(entry.path, _program(entry, backtrace), backtrace)


def _finish(
    arguments: SimpleNamespace,
    results: list[CoreResult],
    signatures: list[Signature | None],
    folded: Counter[tuple[str, ...]] | None,
) -> None:
    """What is printed at the end: the groups, the folded stacks or the JSON document."""
    if arguments.group:
        from liveunwind.cli.group import Groups

        groups = Groups()
        for result, signature in zip(results, signatures, strict=True):
            if signature is not None:
                groups.add(signature, result.path)
        ordered = groups.sorted()
        index = {group.signature: number for number, group in enumerate(ordered)}
        for result, signature in zip(results, signatures, strict=True):
            result.group = None if signature is None else index[signature]
        if arguments.json:
            from liveunwind.cli.report import format_cores_json

            emit(format_cores_json(results, ordered))
        else:
            from liveunwind.cli.report import format_groups_text

            emit(format_groups_text(ordered, results))
    elif folded is not None:
        emit("".join(f"{';'.join(stack)} {count}\n" for stack, count in sorted(folded.items())))
    elif arguments.json:
        from liveunwind.cli.report import format_cores_json

        emit(format_cores_json(results, None))


def _program(entry: CoreEntry, backtrace: Backtrace) -> str:
    """The core's executable: as systemd-coredump named it, else as the core records it."""
    if entry.executable:
        return entry.executable
    return backtrace.crash.executable if backtrace.crash is not None else ""


def _signature(result: CoreResult, depth: int) -> Signature | None:
    from liveunwind.cli.group import signature

    if result.backtrace is None:
        return None
    return signature(result.backtrace, result.program, depth)


def _fold_core(folded: Counter[tuple[str, ...]], result: CoreResult, per_thread: bool) -> None:
    """The core's folded stacks under its program's name; an unread core is a line on stderr."""
    from liveunwind.cli.many import fold

    if result.backtrace is None:
        print(f"liveunwind: core {result.path}: not read: {result.error}", file=sys.stderr)
        return
    name = os.path.basename(result.program) or "?"
    fold(folded, name, result.backtrace, per_thread=per_thread)


def _one_line(error: BaseException) -> str:
    text = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
    return " ".join(str(text).split())
