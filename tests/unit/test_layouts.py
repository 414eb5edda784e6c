"""unwinder/layouts.py: a walk of one process moved onto another process of the same layout.

Synthetic mappings and walk records (what the stepper keeps of a walk);
system/test_many.py runs copies of a real program and checks that the
third takes the second's walks, moved, with the frames a walk of its own gives.
"""

from __future__ import annotations

import struct

from liveunwind.frames import Method, StopReason
from liveunwind.targets.base import Mapping
from liveunwind.unwinder.layouts import (
    MAX_LAYOUTS,
    STACK_ALIGNMENT,
    Layouts,
    Mover,
    layout_key,
)
from liveunwind.unwinder.layouts import _Template as Template
from liveunwind.unwinder.remembered import SuffixRecord

PC, SP, FP = 16, 7, 6  # x86_64's DWARF numbers
STACK_SIZE = 0x21000
LIBC = "/usr/lib/x86_64-linux-gnu/libc.so.6"


def _layout(
    program: int, libc: int, stack: int, *, data: str = "/tmp/heartbeat-1"
) -> list[Mapping]:
    """A program, a data file it mapped, libc and a thread's stack, at the given bases."""
    return [
        Mapping(program, program + 0x1000, "r--p", 0, 11, "/opt/prog", "08:01"),
        Mapping(program + 0x1000, program + 0x2000, "r-xp", 0x1000, 11, "/opt/prog", "08:01"),
        Mapping(program + 0x3000, program + 0x4000, "rw-s", 0, 99, data, "00:2a"),
        Mapping(libc, libc + 0x28000, "r--p", 0, 22, LIBC, "08:01"),
        Mapping(libc + 0x28000, libc + 0x1BD000, "r-xp", 0x28000, 22, LIBC, "08:01"),
        Mapping(stack, stack + STACK_SIZE, "rw-p", 0, 0, ""),
    ]


BEFORE = _layout(0x5555_5555_4000, 0x7F00_0000_0000, 0x7F10_0000_0000)
AFTER = _layout(0x5600_0001_0000, 0x7F20_0004_0000, 0x7F30_0001_0000, data="/tmp/heartbeat-2")
#: How far each mapping moved.
PROGRAM = AFTER[0].start - BEFORE[0].start
LIBC_MOVED = AFTER[3].start - BEFORE[3].start
STACK_MOVED = AFTER[5].start - BEFORE[5].start


def _record(
    *,
    method: Method = Method.CFI,
    signal: bool = False,
    reason: StopReason = StopReason.END_OF_STACK,
    value: int = 0,
    additive: bool = False,
    frame_pointer: int | None = None,
) -> SuffixRecord:
    """A three-frame walk on BEFORE's stack: libc's sleep, the program's caller and its caller.

    The walk read two words: the two return addresses; ``value`` is a third
    word read, a saved register's (0 by default).  ``additive``: its steps only added
    offsets and read words (SuffixRecord.additive); ``frame_pointer``: the first frame's
    rbp, a register the rest of the walk used.
    """
    stack = BEFORE[5].start + 0x20000
    libc_pc = BEFORE[4].start + 0x100
    program_pc = BEFORE[1].start + 0x40
    facts = (
        (libc_pc, stack, Method.CONTEXT, stack + 0x10, False, True, LIBC, 0x28100),
        (program_pc, stack + 0x10, method, stack + 0x20, signal, False, "/opt/prog", 0x1040),
        (
            program_pc + 0x20,
            stack + 0x20,
            Method.CFI,
            stack + 0x30,
            False,
            False,
            "/opt/prog",
            0x1060,
        ),
    )
    on = (BEFORE[5].start, BEFORE[5].end)
    states = [
        (True, Method.CONTEXT, None, False, on, False),
        (False, Method.CFI, stack + 0x10, False, on, False),
        (False, method, stack + 0x20, False, on, False),
    ]
    live: list[tuple[tuple[int, ...] | None, object]] = [
        ((SP, PC), (fact[1], fact[0])) for fact in facts
    ]
    if frame_pointer is not None:
        live[0] = ((FP, SP, PC), (frame_pointer, facts[0][1], facts[0][0]))
    addresses = [stack + 0x8, stack + 0x18, stack + 0x28]
    values = [program_pc, program_pc + 0x20, value]
    detail = f"the program's entry function, at {BEFORE[1].start + 0x60:#x}"
    return SuffixRecord(
        facts, states, live, [0, 1, 2], addresses, values, 0, reason, detail, additive=additive
    )


def _template(record: SuffixRecord) -> Template | None:
    return Template.of(record, [m.start for m in BEFORE], [m.end for m in BEFORE])


def _stack_copy(words: dict[int, int], start: int) -> tuple[int, bytes]:
    """A copy of the stack from ``start``, holding ``words`` (address: value), zeros elsewhere."""
    data = bytearray(0x100)
    for address, value in words.items():
        struct.pack_into("<Q", data, address - start, value)
    return start, bytes(data)


def test_a_layout_is_its_mappings_sizes_rights_offsets_and_code_files_in_order() -> None:
    # Moved elsewhere, and a data file of another name: the same layout.
    assert layout_key(BEFORE) == layout_key(AFTER)
    other_libc = [*AFTER[:3], AFTER[3]._replace(inode=23), AFTER[4]._replace(inode=23), AFTER[5]]
    assert layout_key(other_libc) != layout_key(BEFORE)
    bigger_stack = [*AFTER[:5], AFTER[5]._replace(end=AFTER[5].end + 0x1000)]
    assert layout_key(bigger_stack) != layout_key(BEFORE)


def test_addresses_move_with_their_mapping_and_others_stay() -> None:
    mover = Mover(BEFORE, AFTER)
    assert mover.move(BEFORE[4].start + 5) == AFTER[4].start + 5
    assert mover.move(BEFORE[5].end - 8) == AFTER[5].end - 8
    assert mover.move(0) == 0 and mover.move(0x1234) == 0x1234


def test_a_walk_moved_is_taken_where_the_moved_words_and_registers_are() -> None:
    template = _template(_record())
    assert template is not None
    found = Mover(BEFORE, AFTER).moved_record(template)
    assert found is not None
    moved, at = found
    assert at == 0  # the walk read only words from its first frame
    stack = AFTER[5].start + 0x20000
    libc_pc, program_pc = AFTER[4].start + 0x100, AFTER[1].start + 0x40
    assert [fact[:4] for fact in moved.facts] == [
        (libc_pc, stack, Method.CONTEXT, stack + 0x10),
        (program_pc, stack + 0x10, Method.CFI, stack + 0x20),
        (program_pc + 0x20, stack + 0x20, Method.CFI, stack + 0x30),
    ]
    assert [fact[6:] for fact in moved.facts] == [fact[6:] for fact in _record().facts]
    assert moved.detail == f"the program's entry function, at {AFTER[1].start + 0x60:#x}"
    assert moved.addresses == [stack + 0x8, stack + 0x18, stack + 0x28]
    assert moved.values == [program_pc, program_pc + 0x20, 0]
    state = (True, Method.CONTEXT, None, False, (AFTER[5].start, AFTER[5].end), False)
    registers = {SP: stack, PC: libc_pc, 3: 0x1234}
    block = _stack_copy({stack + 0x8: program_pc, stack + 0x18: program_pc + 0x20}, stack)
    assert moved.holds_at(0, registers, state, set(), 0, 256, block)
    # Another word there, another pc, or the walk met at a later frame: not taken.
    changed = _stack_copy({stack + 0x8: program_pc, stack + 0x18: program_pc + 0x30}, stack)
    assert not moved.holds_at(0, registers, state, set(), 0, 256, changed)
    assert not moved.holds_at(0, {**registers, PC: libc_pc + 4}, state, set(), 0, 256, block)
    later = (False, Method.CFI, stack + 0x10, False, state[4], False)
    assert not moved.holds_at(1, registers, later, set(), 1, 256, block)


def test_a_main_threads_walk_moves_by_its_stack_pointers_distance_where_its_steps_add() -> None:
    """A main thread's stack lies below a random offset in its mapping: two processes parked
    alike hold the same frames at the same distance from their stack pointers.  A walk whose
    steps add offsets and read words moves by that distance; one with any other step keeps
    moving with the mapping (its frames then lie elsewhere and are not offered)."""
    before_sp = BEFORE[5].start + 0x20000
    distance = STACK_MOVED + 0x7F0  # a multiple of 16, not of the page
    after_sp = before_sp + distance
    saved = before_sp + 0x40  # a saved frame pointer: a word on the stack, read
    template = _template(_record(additive=True, value=saved))
    assert template is not None
    mover = Mover(BEFORE, AFTER, (before_sp, after_sp))
    found = mover.moved_record(template)
    assert found is not None
    moved, at = found
    libc_pc, program_pc = AFTER[4].start + 0x100, AFTER[1].start + 0x40
    assert [fact[:4] for fact in moved.facts] == [
        (libc_pc, after_sp, Method.CONTEXT, after_sp + 0x10),
        (program_pc, after_sp + 0x10, Method.CFI, after_sp + 0x20),
        (program_pc + 0x20, after_sp + 0x20, Method.CFI, after_sp + 0x30),
    ]
    assert moved.addresses == [after_sp + 0x8, after_sp + 0x18, after_sp + 0x28]
    assert moved.values == [program_pc, program_pc + 0x20, saved + distance]
    # The stack walked on is the other process's mapping, whatever the offset inside it.
    state = (True, Method.CONTEXT, None, False, (AFTER[5].start, AFTER[5].end), False)
    assert moved.states[at] == state
    block = _stack_copy(
        {
            after_sp + 0x8: program_pc,
            after_sp + 0x18: program_pc + 0x20,
            after_sp + 0x28: saved + distance,
        },
        after_sp,
    )
    registers = {SP: after_sp, PC: libc_pc}
    assert moved.holds_at(0, registers, state, set(), 0, 256, block)
    # A walk with another step (an expression may mask an address to a larger alignment)
    # moves with the mapping, as every walk of a thread's own stack mapping does.
    plain = _template(_record(value=saved))
    assert plain is not None
    found = mover.moved_record(plain)
    assert found is not None and found[0].facts[0][1] == before_sp + STACK_MOVED
    # A distance that breaks a word's alignment, or a main stack not in the paired mapping:
    # the mapping's distance.
    for after in (after_sp + STACK_ALIGNMENT // 2, AFTER[4].start):
        found = Mover(BEFORE, AFTER, (before_sp, after)).moved_record(template)
        assert found is not None and found[0].facts[0][1] == before_sp + STACK_MOVED
    # A value that would move past the end of the other stack mapping: not moved; nor a
    # register the walk uses that would (a frame pointer near the top of the stack).
    beyond = STACK_MOVED + 0x1000 - 0x40
    assert Mover(BEFORE, AFTER, (before_sp, before_sp + beyond)).moved_record(template) is None
    high = BEFORE[5].end - 0x10
    used = _template(_record(additive=True, value=saved, frame_pointer=high))
    assert used is not None
    assert Mover(BEFORE, AFTER, (before_sp, before_sp + STACK_MOVED - 0x100)).moved_record(used)
    assert Mover(BEFORE, AFTER, (before_sp, after_sp)).moved_record(used) is None


def test_walks_that_may_not_be_moved() -> None:
    assert _template(_record(method=Method.SCAN)) is None  # a guess
    assert _template(_record(method=Method.FRAMEPOINTER)) is None
    assert _template(_record(signal=True)) is None
    assert _template(_record(reason=StopReason.FRAME_LIMIT)) is None
    # A word the first process does not map but the other does: a walk may ask
    # whether it is code, and the answers would differ.
    template = _template(_record(value=AFTER[4].start + 0x10))
    assert template is not None
    assert Mover(BEFORE, AFTER).moved_record(template) is None


def test_a_walk_is_offered_at_its_first_frame_that_read_only_words() -> None:
    """A pc first seen has its code read (is it a signal trampoline?): not only words."""
    record = _record()
    record.pure_from = 1
    template = _template(record)
    assert template is not None
    found = Mover(BEFORE, AFTER).moved_record(template)
    assert found is not None
    moved, at = found
    assert at == 1
    stack = AFTER[5].start + 0x20000
    state = (False, Method.CFI, stack + 0x10, False, (AFTER[5].start, AFTER[5].end), False)
    assert moved.states[1] == state and moved.states[0] != _record().states[0]
    assert moved.live[1] == ((SP, PC), (stack + 0x10, AFTER[1].start + 0x40))


def test_the_second_process_of_a_layout_records_and_later_ones_take_its_walks() -> None:
    layouts = Layouts()
    assert layouts.begin(BEFORE, {}) is None  # the first: only walked
    recorded: dict[tuple[int, int], tuple[SuffixRecord, int]] = {}
    assert layouts.begin(BEFORE, recorded) == {}  # the second records here
    record = _record()
    for index, fact in enumerate(record.facts):  # kept at each frame, as a cache does
        recorded[fact[:2]] = (record, index)
    other = [*BEFORE[:5], BEFORE[5]._replace(end=BEFORE[5].end + 0x1000)]
    assert layouts.begin(other, {}) is None  # another layout: its first
    offered = layouts.begin(AFTER, {})
    assert offered is not None
    ((key, (moved, index)),) = offered.items()
    assert key == (AFTER[4].start + 0x100, AFTER[5].start + 0x20000) and index == 0
    assert moved.facts[0][:2] == key


def test_a_layout_found_plain_is_known_for_processes_laid_out_alike_and_bounded() -> None:
    layouts = Layouts()
    assert not layouts.known_plain(BEFORE)
    layouts.found_plain(BEFORE)
    assert layouts.known_plain(AFTER)  # moved elsewhere: the same layout
    jit = [*AFTER, Mapping(0x7F0000000000, 0x7F0000001000, "rwxp", 0, 0, "")]
    assert not layouts.known_plain(jit)  # an anonymous executable mapping more
    other_libc = [*AFTER[:3], AFTER[3]._replace(inode=23), AFTER[4]._replace(inode=23), AFTER[5]]
    assert not layouts.known_plain(other_libc)
    for size in range(1, MAX_LAYOUTS + 1):  # as many other layouts: the first goes
        layouts.found_plain([*AFTER[:5], AFTER[5]._replace(end=AFTER[5].end + size * 0x1000)])
    assert not layouts.known_plain(BEFORE)
    assert layouts.known_plain([*AFTER[:5], AFTER[5]._replace(end=AFTER[5].end + 0x1000)])
