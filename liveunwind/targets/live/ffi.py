"""The few ``ctypes`` names the ptrace calls use, made from ``_ctypes``, the C module under it.

Why: ``import ctypes`` cost a cold ``liveunwind pid`` 2.5 ms of CPU (31
alternating runs of ``python -S -c 'import _struct, types, _ctypes'``, 8.4 ms,
against the same with ``ctypes``, 10.9), for the ~40 classes its package
defines and checks and ``ctypes._endian``'s byte-swapped structures; the
calls of targets/live/syscalls.py need nine of the simple types, ``CDLL`` and
five functions, which ``_ctypes`` itself provides or which are one class
statement each.  Each type is the one ``ctypes`` defines (the same ``_type_``
code, so the same size and conversions; tests/unit/test_ffi.py holds them to
``ctypes``'s).  syscalls.py imports this module as ``ctypes`` and gives the
type checker the real one.
"""

from __future__ import annotations

from _ctypes import (
    FUNCFLAG_CDECL,
    FUNCFLAG_USE_ERRNO,
    POINTER,
    RTLD_LOCAL,
    Structure,
    _SimpleCData,
    addressof,
    byref,
    get_errno,
    sizeof,
)
from _ctypes import CFuncPtr as _CFuncPtr
from _ctypes import dlopen as _dlopen

__all__ = [
    "CDLL",
    "POINTER",
    "Structure",
    "addressof",
    "byref",
    "c_char",
    "c_char_p",
    "c_int",
    "c_long",
    "c_size_t",
    "c_ssize_t",
    "c_uint64",
    "c_ulong",
    "c_void_p",
    "create_string_buffer",
    "get_errno",
    "sizeof",
]


class c_int(_SimpleCData):  # ctypes's names
    _type_ = "i"


class c_long(_SimpleCData):
    _type_ = "l"


class c_ulong(_SimpleCData):
    _type_ = "L"


class c_char(_SimpleCData):
    _type_ = "c"


class c_char_p(_SimpleCData):
    _type_ = "z"


class c_void_p(_SimpleCData):
    _type_ = "P"


# What ctypes chooses on a 64-bit Linux (LP64): long is 64 bits, as are size_t and pointers.
if sizeof(c_long) != 8 or sizeof(c_void_p) != 8:
    raise ImportError("liveunwind's ptrace calls need a 64-bit (LP64) platform")
c_size_t = c_ulong
c_ssize_t = c_long
c_uint64 = c_ulong


def create_string_buffer(size: int) -> object:
    """A zeroed ``char[size]``, as ``ctypes.create_string_buffer(size)`` makes it."""
    return (c_char * size)()


class CDLL:
    """A loaded library whose functions are looked up by attribute, as ``ctypes.CDLL``.

    ``None`` is the program itself (``dlopen(NULL)``: libc's symbols); a
    function returns an ``int`` unless its ``restype`` says otherwise, and with
    ``use_errno`` its ``errno`` is kept for :func:`get_errno`.
    """

    def __init__(self, name: str | None, *, use_errno: bool = False) -> None:
        flags = FUNCFLAG_CDECL | (FUNCFLAG_USE_ERRNO if use_errno else 0)

        class _FuncPtr(_CFuncPtr):
            _flags_ = flags
            _restype_ = c_int

        self._name = name
        self._FuncPtr = _FuncPtr
        # None: dlopen(NULL), as ctypes.CDLL(None) calls it (the stub wants a path)
        self._handle = _dlopen(name, RTLD_LOCAL)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> object:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        function = self._FuncPtr((name, self))  # type: ignore[arg-type]  # reads _handle
        setattr(self, name, function)
        return function
