"""``profile --on-cpu``'s event attributes: what perf_event_open is asked for, read back.

The attribute block is packed by hand (targets/perfevent/events.py); the
decoder of perf records (formats/perfevents.py, written apart from it)
reads it back as perf.data keeps it, and the two must agree on every field
the records' layout depends on.  The events themselves, the rings and the
refusals are tests/system/test_oncpu.py's (a real kernel).
"""

from __future__ import annotations

import errno
import struct

import pytest

from liveunwind.arch import architectures
from liveunwind.formats.perfevents import EventAttr
from liveunwind.targets.perfevent.events import (
    ATTR_SIZE,
    MAX_STACK_SIZE,
    SAMPLE_TYPE,
    attr_bytes,
    check_stack_size,
    open_error,
)


@pytest.mark.parametrize("arch", architectures(), ids=lambda arch: arch.name)
def test_the_attributes_decode_to_what_was_asked(arch) -> None:  # type: ignore[no-untyped-def]
    assert arch.perf_registers is not None and arch.perf_event_open is not None
    mask = arch.perf_registers.unwind_mask
    packed = attr_bytes(rate=99, regs_mask=mask, stack_size=4096, wakeup_bytes=1 << 17)
    assert len(packed) == ATTR_SIZE
    decoded = EventAttr.from_bytes(packed)
    assert decoded.sample_type == SAMPLE_TYPE
    assert decoded.sample_regs_user == mask
    assert decoded.sample_stack_user == 4096
    assert decoded.sample_id_all  # every side record says its thread, time and CPU
    # type 1 (software), config 0 (the CPU clock), the frequency in place of the period.
    kind, size, config, frequency = struct.unpack_from("<IIQQ", packed)
    assert (kind, size, config, frequency) == (1, ATTR_SIZE, 0, 99)
    flags = struct.unpack_from("<Q", packed, 40)[0]
    for bit, what in [(0, "disabled"), (1, "inherit"), (5, "exclude_kernel"), (8, "mmap"),
                      (9, "comm"), (10, "freq"), (13, "task"), (23, "mmap2")]:  # fmt: skip
        assert flags >> bit & 1, what


@pytest.mark.parametrize("size", [8, 8192, MAX_STACK_SIZE])
def test_stack_sizes_the_kernel_takes_are_taken(size: int) -> None:
    assert check_stack_size(size) == size


@pytest.mark.parametrize("size", [0, 4, 12, MAX_STACK_SIZE + 8, 1 << 20])
def test_stack_sizes_the_kernel_refuses_are_refused(size: int) -> None:
    with pytest.raises(ValueError, match="multiple of 8"):
        check_stack_size(size)


@pytest.mark.parametrize(
    ("code", "says"),
    [
        (errno.ENOSYS, "perf_event_open is not implemented here"),
        (errno.EOPNOTSUPP, "this kernel cannot sample user stacks"),
        (errno.EPERM, "kernel.perf_event_paranoid is"),
    ],
)
def test_a_refused_perf_event_open_names_why(code: int, says: str) -> None:
    """One line each; no perf_event_open at all (QEMU user mode's ENOSYS) is not blamed on
    the kernel's configuration alone."""
    error = open_error(code, 1234)
    assert says in str(error)
    assert "\n" not in str(error)
