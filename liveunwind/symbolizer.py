"""Names for frames: the function and offset of each pc, from its module's symbol tables."""

from __future__ import annotations

from collections.abc import Iterable

from liveunwind.frames import ThreadBacktrace
from liveunwind.modules.modulemap import ModuleMap
from liveunwind.modules.symbols import demangle


def symbolize(threads: Iterable[ThreadBacktrace], modules: ModuleMap) -> None:
    """Fills ``function`` and ``offset`` of every frame whose module has symbols.

    A return address can lie just past the end of a function that ends in a
    call (``noreturn`` callees), so caller frames are looked up at ``pc - 1``
    and the offset is then measured from the real pc.
    """
    for thread in threads:
        for frame in thread.frames:
            module = modules.find(frame.lookup_pc)
            if module is None:
                continue
            match = module.symbolize(frame.lookup_pc)
            if match is None:
                continue
            frame.function = demangle(match.name)
            frame.offset = match.offset + (frame.pc - frame.lookup_pc)
