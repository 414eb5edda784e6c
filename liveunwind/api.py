"""The public entry points: one call from a target to a finished Backtrace."""

from __future__ import annotations

from collections.abc import Sequence

from liveunwind.frames import Backtrace
from liveunwind.stepper import AUTO_UNWINDERS, DEFAULT_MAX_FRAMES, Stepper, unwind_all


def attach(
    pid: int,
    *,
    threads: Sequence[int] | None = None,
    max_frames: int = DEFAULT_MAX_FRAMES,
    unwinders: Sequence[str] = AUTO_UNWINDERS,
    symbols: bool = True,
) -> Backtrace:
    """Stops the live process ``pid``, walks the stacks of its threads, and lets it go.

    The process is running again (or still stopped, if it was) before this
    returns, whatever happens; symbols are looked up after it runs again.
    """
    from liveunwind.modules.modulemap import ModuleMap
    from liveunwind.targets.ptrace import PtraceProcess

    with PtraceProcess(pid, thread_ids=list(threads) if threads else None) as process:
        modules = ModuleMap(process)
        stepper = Stepper(
            process,
            modules,
            unwinders=unwinders,
            max_frames=max_frames,
            should_stop=lambda: process.interrupted,
        )
        traces = unwind_all(process, process.threads(), stepper)
    if symbols:
        from liveunwind.symbolizer import symbolize

        symbolize(traces, modules)
    problems = sorted({problem for module in modules.modules for problem in module.problems})
    return Backtrace(pid=pid, threads=traces, arch=process.arch.name, problems=problems)
