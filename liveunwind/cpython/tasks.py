"""``--tasks``: every asyncio task of a CPython 3.14+ process, and the coroutines it awaits in.

CPython 3.14 keeps every C ``asyncio.Task`` on a list (a ``llist_node`` in
the task) of the thread state whose loop made it, or of the interpreter
once that thread ended, and publishes where: the ``_AsyncioDebug`` record
(:func:`~liveunwind.cpython.layouts.asyncio_layout`) in the
``.AsyncioDebug`` section of the module that holds ``_asyncio``.  A thread
state names the task it runs now.  A task's coroutine embeds its frame
(``gi_iframe``); a coroutine suspended in ``await`` of another one
(``gi_frame_state``) holds that one on top of its frame's stack — which is
what ``cr_await`` reads — so the chain is followed from the task's
coroutine inwards for as long as each holds a coroutine.  Older versions
publish none of this: ``--tasks`` says so instead of guessing.

Every list and chain is bounded; what cannot be read is a problem, never
a guess.
"""

from __future__ import annotations

from liveunwind.cpython import layouts, objects, values
from liveunwind.cpython.collected import RawTask
from liveunwind.cpython.localvars import string_at
from liveunwind.errors import FormatError, LiveUnwindError, MemoryReadError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

    from liveunwind.cpython.collected import Collected
    from liveunwind.cpython.memory import Memory
    from liveunwind.modules.module import Module
    from liveunwind.targets.base import AddressSpace

#: Tasks read per backtrace (a server may have tens of thousands).
MAX_TASKS = 100_000
#: Coroutines followed per task.
MAX_AWAIT_DEPTH = 1024
#: Characters of a task's name read.
MAX_NAME = 200


def find_asyncio(
    space: AddressSpace, modules: Iterable[Module], problems: list[str]
) -> layouts.AsyncioLayout | None:
    """The ``_AsyncioDebug`` record of the module that holds ``_asyncio``, or None (and why)."""
    from liveunwind.formats.elf import ElfImage

    for module in modules:
        name = module.name.lower()
        if module.is_vdso or ("python" not in name and "_asyncio" not in name):
            continue
        image = module.image
        if not isinstance(image, ElfImage):
            continue
        try:
            section = image.sections.get(layouts.ASYNCIO_SECTION)
            if section is None:
                continue
            size = layouts.asyncio_record_size()
            address = section.address + module.load_bias
            try:
                data = space.read(address, size)
            except MemoryReadError:
                data = bytes(image.slice(section.offset, size))
            return layouts.asyncio_layout(data)
        except LiveUnwindError as error:
            problems.append(f"python: tasks: {module.name}: {error}")
            return None
    problems.append(
        "python: tasks: no _AsyncioDebug record (asyncio not imported, or CPython before 3.14, "
        "which does not publish where its tasks are)"
    )
    return None


def read_tasks(memory: Memory, collected: Collected, asyncio: layouts.AsyncioLayout) -> None:
    """Every task on the thread states' and interpreters' lists, with its await chain."""
    interpreter = collected.interpreter
    layout = interpreter.layout
    collected.tasks = []
    if layout.gen_iframe is None or collected.interpreters is None:
        collected.problems.append(
            f"python: tasks: CPython {interpreter.version_text} does not publish its coroutines' "
            "layout (3.14 and later do)"
        )
        return
    heads = [thread.thread_state + asyncio.tstate_tasks_head for thread in collected.threads]
    heads += [interp + asyncio.interp_tasks_head for interp in collected.interpreters]
    running: dict[int, int] = {}
    for thread in collected.threads:
        try:
            task = _word(memory, thread.thread_state + asyncio.tstate_running_task)
        except MemoryReadError:
            continue
        if task:
            running[task] = thread.native_id
    addresses = _listed_tasks(memory, heads, asyncio, collected.problems)
    memory.prefetch([(task, asyncio.task_node + 16) for task in addresses])
    for task in addresses:
        try:
            raw = RawTask(task, _task_name(memory, collected, task, asyncio), running.get(task))
            coroutine = _word(memory, task + asyncio.task_coro)
            _follow_awaits(memory, collected, coroutine, raw.chain)
        except (MemoryReadError, FormatError) as error:
            collected.problems.append(f"python: task at {task:#x}: {error}")
            continue
        collected.tasks.append(raw)


def _listed_tasks(
    memory: Memory, heads: list[int], asyncio: layouts.AsyncioLayout, problems: list[str]
) -> list[int]:
    """The tasks on the circular lists at ``heads`` (``llist_node``: next, then prev)."""
    found: dict[int, None] = {}
    for head in heads:
        try:
            node = _word(memory, head)
            steps = 0
            while node and node != head:
                if len(found) >= MAX_TASKS or steps > MAX_TASKS:
                    problems.append(f"python: tasks: more than {MAX_TASKS}; the rest not read")
                    return list(found)
                found[node - asyncio.task_node] = None
                node = _word(memory, node)
                steps += 1
        except MemoryReadError as error:
            problems.append(f"python: tasks: the list at {head:#x}: {error}")
    return list(found)


def _task_name(
    memory: Memory, collected: Collected, task: int, asyncio: layouts.AsyncioLayout
) -> str:
    """The task's name: its str, or ``Task-N`` for the counter a task named by default keeps."""
    interpreter = collected.interpreter
    layout = interpreter.layout
    name = _word(memory, task + asyncio.task_name)
    kind = _word(memory, name + layout.object_type)
    if kind == interpreter.types.get("PyLong_Type"):
        header = memory.read(name, layout.long_digits)
        count, sign = values.long_digit_count(layout, header)
        if count > 3:
            raise FormatError(f"a task counter of {count} digits")
        digits = memory.read(name + layout.long_digits, 4 * count) if count else b""
        return f"Task-{values.long_from_digits(digits, count, sign)}"
    text = string_at(memory, interpreter, name, MAX_NAME)
    if text is None:
        raise FormatError("its name is neither a str nor a counter")
    return text[0]


def _follow_awaits(
    memory: Memory, collected: Collected, coroutine: int, chain: list[tuple[int, int]]
) -> None:
    """Appends the frame of ``coroutine`` and of each coroutine it awaits, outermost first."""
    interpreter = collected.interpreter
    layout = interpreter.layout
    assert layout.gen_iframe is not None and layout.gen_frame_state is not None
    assert layout.frame_stackpointer is not None
    kinds = {interpreter.types.get("PyCoro_Type"), interpreter.types.get("PyGen_Type")} - {None}
    untag = ~layout.executable_tag_bits
    seen: set[int] = set()
    while coroutine and coroutine not in seen and len(chain) < MAX_AWAIT_DEPTH:
        seen.add(coroutine)
        if _word(memory, coroutine + layout.object_type) not in kinds:
            return  # a Future, another task: what the chain awaits, not a frame
        frame = coroutine + layout.gen_iframe
        code = _word(memory, frame + layout.frame_code) & untag
        chain.append((code, _word(memory, frame + layout.frame_instr)))
        state = int.from_bytes(
            memory.read(coroutine + layout.gen_frame_state, 1), "little", signed=True
        )
        if state not in layout.yield_from_states:
            return
        stack = _word(memory, frame + layout.frame_stackpointer)
        coroutine = _word(memory, stack - 8 * layout.awaited_depth) & untag


def _word(memory: Memory, address: int) -> int:
    return objects.word(memory.read(address, 8), 0)
