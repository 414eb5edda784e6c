"""Names for frames: the function and offset of each pc, from its module's symbol tables."""

from __future__ import annotations

from liveunwind.modules.symbols import demangle

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

    from liveunwind.frames import Frame, ThreadBacktrace
    from liveunwind.modules.jit import DynamicRegistry
    from liveunwind.modules.modulemap import ModuleMap
    from liveunwind.unwinder.cache import UnwindCache


def symbolize(threads: Iterable[ThreadBacktrace], modules: ModuleMap, cache: UnwindCache) -> None:
    """Fills ``function`` and ``offset`` of every frame whose module has symbols.

    A return address can lie just past the end of a function that ends in a
    call (``noreturn`` callees), so caller frames are looked up at ``pc - 1``
    and the offset is then measured from the real pc.  Deep stacks repeat the
    same return addresses, so each address is looked up once; the target's
    ``cache`` (whose owner drops it when the modules move) keeps the answers
    for later backtraces, and its ``files`` for other processes of the run
    mapping the same file (JIT names are not kept: a JIT may reuse its memory).
    """
    named = cache.names
    for thread in threads:
        for frame in thread.frames:
            pc = frame.pc
            address = pc if frame.exact_pc else pc - 1  # Frame.lookup_pc, without the call
            if address in named:
                found = named[address]
            else:
                found = _function_at(address, modules, cache)
                cache.remember_name(address, found)
            if found is not None:
                frame.function, offset = found
                frame.offset = offset + (pc - address)
            elif modules.registry is not None:
                _name_jit_frame(frame, modules.registry)


def _function_at(address: int, modules: ModuleMap, cache: UnwindCache) -> tuple[str, int] | None:
    """The readable name of the function holding ``address`` and the offset into it.

    Kept by the module's file and link-time address too: another process
    mapping the same file finds it there (``UnwindCache.files``).
    """
    module = modules.find(address)
    if module is None:
        return None
    key = (module.file_key, address - module.load_bias)
    known = cache.files.names
    if key in known:
        return known[key]
    match = module.symbolize(address)
    found = None if match is None else (demangle(match.name), match.offset)
    cache.remember_file_name(key, found)
    return found


def _name_jit_frame(frame: Frame, registry: DynamicRegistry) -> None:
    """Names code no file describes from what the JIT compiler registered (or its perf map).

    The module column says who registered it, e.g. ``[jit libunwind]``, so
    such frames stand out.
    """
    found = registry.range_for(frame.lookup_pc)
    if found is not None:
        frame.function = demangle(found.name)
        frame.offset = frame.pc - found.start
        frame.module = f"[jit {found.source}]"
