"""Source lines for frames: the file, line and inlined calls of each pc, from DWARF (``--lines``).

Physical frames stay as the walk found them: a frame gets the file and line
of its own function and, innermost first, the logical frames of the calls
inlined into it at its pc.  Nothing here is imported without ``--lines``.
"""

from __future__ import annotations

from liveunwind.modules.lines import locate

TYPE_CHECKING = False
if TYPE_CHECKING:
    from liveunwind.frames import ThreadBacktrace
    from liveunwind.modules.modulemap import ModuleMap


def add_source_lines(traces: list[ThreadBacktrace], modules: ModuleMap) -> None:
    """Fills ``file``, ``line`` and ``inlined`` of every frame whose module has DWARF."""
    for thread in traces:
        for frame in thread.frames:
            module = modules.find(frame.lookup_pc)
            if module is None:
                continue
            located = locate(module, frame.pc, frame.exact_pc)
            if located:
                frame.file, frame.line = located[-1].file, located[-1].line
                frame.inlined = tuple(located[:-1])
