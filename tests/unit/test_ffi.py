"""targets/live/ffi.py's ctypes names are ctypes's: the same types, and calls that work.

The ptrace calls themselves (ptrace, process_vm_readv, openat2) run in every
system test of a live process; here the types are set beside ctypes's and a
few harmless libc calls are made in this process.
"""

from __future__ import annotations

import ctypes
import errno
import os

import pytest

from liveunwind.targets.live import ffi, syscalls


@pytest.mark.parametrize(
    "name",
    ["c_int", "c_long", "c_ulong", "c_char", "c_char_p", "c_void_p", "c_size_t", "c_ssize_t",
     "c_uint64"],
)  # fmt: skip
def test_each_type_is_ctypes_own(name) -> None:
    ours, theirs = getattr(ffi, name), getattr(ctypes, name)
    assert ours._type_ == theirs._type_
    assert ffi.sizeof(ours) == ctypes.sizeof(theirs)
    assert ctypes.alignment(ours) == ctypes.alignment(theirs)


def test_values_convert_as_ctypes_converts_them() -> None:
    assert ffi.c_long(-1).value == -1
    assert ffi.c_ulong(-1).value == 2**64 - 1
    assert ffi.c_char_p(b"abc").value == b"abc"
    assert ffi.c_void_p(0x1234).value == 0x1234
    buffer = ffi.create_string_buffer(16)
    assert buffer.raw == bytes(16) and ffi.sizeof(buffer) == 16
    data = bytearray(b"xyz")
    anchor = ffi.c_char.from_buffer(data)
    assert ctypes.string_at(ffi.addressof(anchor), 3) == b"xyz"


def test_a_libc_call_returns_and_keeps_errno() -> None:
    libc = ffi.CDLL(None, use_errno=True)
    assert libc.getpid() == os.getpid()
    assert libc.getpid is libc.getpid  # looked up once
    close = libc.close
    close.argtypes = [ffi.c_int]
    assert close(-1) == -1
    assert ffi.get_errno() == errno.EBADF
    assert not hasattr(libc, "no_such_function_in_libc")


def test_structures_pass_by_reference() -> None:
    """A struct iovec for the regset read, filled the way get_regset fills it."""
    buffer = ffi.create_string_buffer(8)
    vector = syscalls._IoVec(ffi.addressof(buffer), 8)
    assert (vector.base, vector.length) == (ffi.addressof(buffer), 8)
    assert ffi.sizeof(syscalls._OpenHow) == 24
    libc = ffi.CDLL(None, use_errno=True)
    memset = libc.memset
    memset.argtypes = [ffi.c_void_p, ffi.c_int, ffi.c_size_t]
    memset.restype = ffi.c_void_p
    memset(vector.base, 0x41, vector.length)
    assert buffer.raw == b"A" * 8
    pointer = ffi.byref(vector)
    assert type(pointer).__name__ == "CArgObject"
