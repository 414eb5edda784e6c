"""Cheap stand-ins for ``namedtuple``, ``Enum``, ``cached_property`` and ``lru_cache``.

Why: ``enum`` imports ``functools``, which imports ``collections``; the three
cost a cold ``liveunwind pid`` 4.4 ms of CPU (31 alternating runs of
``python -c 'import ctypes, mmap, struct, bisect, errno, _signal, itertools'``,
12.9 ms, against the same plus ``enum``, 17.3), an eighth of the whole
command, which needs none of their machinery: three enums of string values,
eight named tuples, properties computed once and one bounded memo.  The
modules of a live backtrace import these under the standard library's names
and give the type checker the standard library's own (``if TYPE_CHECKING``),
so mypy checks them as enums and named tuples; tests/unit/test_classes.py
holds each to the standard library's behaviour where the code relies on it.
"""

from __future__ import annotations

import sys
from _collections import _tuplegetter  # type: ignore[import-not-found]  # namedtuple's own

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator
    from typing import Any, TypeVar

    Result = TypeVar("Result")


def namedtuple(
    typename: str,
    field_names: str | Iterable[str],
    *,
    defaults: Iterable[object] | None = None,
    module: str | None = None,
) -> type[tuple[Any, ...]]:
    """A tuple subclass with named fields, as ``collections.namedtuple`` makes one.

    The same ``_fields``, ``_field_defaults``, ``_make``, ``_replace``,
    ``_asdict``, ``__repr__``, ``__getnewargs__`` and ``__match_args__``, and
    the same fast field access (``_tuplegetter``); ``__new__`` is one shared
    function rather than one compiled per class with ``eval`` (that compiling
    is most of namedtuple's 80-135 µs a class).  Field names are not checked:
    the ones here are written in this package.
    """
    if isinstance(field_names, str):
        field_names = field_names.replace(",", " ").split()
    fields = tuple(field_names)
    defaults = tuple(defaults) if defaults is not None else ()
    if len(defaults) > len(fields):
        raise TypeError("got more default values than field names")
    field_defaults = dict(zip(fields[len(fields) - len(defaults) :], defaults))
    count = len(fields)
    required = count - len(defaults)

    def __new__(cls: type[tuple[Any, ...]], *values: Any, **named: Any) -> tuple[Any, ...]:
        if named or len(values) != count:
            if not named and required <= len(values) < count:  # the rest by default
                values += defaults[len(values) - required :]
            else:
                values = _complete(typename, fields, field_defaults, values, named)
        return tuple.__new__(cls, values)

    def _make(cls: type[tuple[Any, ...]], iterable: Iterable[Any]) -> tuple[Any, ...]:
        values = tuple(iterable)
        if len(values) != count:
            raise TypeError(f"Expected {count} arguments, got {len(values)}")
        return tuple.__new__(cls, values)

    def _replace(self: tuple[Any, ...], **changes: Any) -> tuple[Any, ...]:
        values = tuple(changes.pop(name, value) for name, value in zip(fields, self))
        if changes:
            raise ValueError(f"Got unexpected field names: {list(changes)!r}")
        return tuple.__new__(type(self), values)

    def _asdict(self: tuple[Any, ...]) -> dict[str, Any]:
        return dict(zip(fields, self))

    def __repr__(self: tuple[Any, ...]) -> str:
        inside = ", ".join(f"{name}={value!r}" for name, value in zip(fields, self))
        return f"{type(self).__name__}({inside})"

    def __getnewargs__(self: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(self)

    namespace: dict[str, Any] = {
        "__doc__": f"{typename}({', '.join(fields)})",
        "__slots__": (),
        "_fields": fields,
        "_field_defaults": field_defaults,
        "__new__": __new__,
        "_make": classmethod(_make),
        "_replace": _replace,
        "_asdict": _asdict,
        "__repr__": __repr__,
        "__getnewargs__": __getnewargs__,
        "__match_args__": fields,
    }
    for index, name in enumerate(fields):
        namespace[name] = _tuplegetter(index, f"Alias for field number {index}")
    made = type(typename, (tuple,), namespace)
    made.__module__ = module or sys._getframe(1).f_globals.get("__name__", "__main__")
    return made


def _complete(
    typename: str,
    fields: tuple[str, ...],
    field_defaults: dict[str, object],
    values: tuple[Any, ...],
    named: dict[str, Any],
) -> tuple[Any, ...]:
    """The values of every field from positional and keyword arguments and the defaults."""
    if len(values) > len(fields):
        raise TypeError(f"{typename}() takes {len(fields)} positional arguments")
    complete = list(values)
    for name in fields[len(values) :]:
        if name in named:
            complete.append(named.pop(name))
        elif name in field_defaults:
            complete.append(field_defaults[name])
        else:
            raise TypeError(f"{typename}() missing required argument: {name!r}")
    if named:
        raise TypeError(f"{typename}() got an unexpected keyword argument {next(iter(named))!r}")
    return tuple(complete)


class _EnumType(type):
    """The metaclass of :class:`Enum`: makes the members, iterates and looks them up."""

    _members_: tuple[Any, ...]
    _by_value_: dict[object, Any]

    def __new__(meta, name: str, bases: tuple[type, ...], namespace: dict[str, Any]) -> _EnumType:
        members = {
            key: value
            for key, value in namespace.items()
            if not key.startswith("_") and key.isupper() and not callable(value)
        }
        for key in members:
            del namespace[key]
        namespace.setdefault("__slots__", ())
        made = super().__new__(meta, name, bases, namespace)
        ordered: list[Any] = []
        make: Any = object.__new__
        for key, value in members.items():
            member = make(made)
            object.__setattr__(member, "name", key)
            object.__setattr__(member, "value", value)
            type.__setattr__(made, key, member)
            ordered.append(member)
        made._members_ = tuple(ordered)
        made._by_value_ = {member.value: member for member in reversed(ordered)}
        return made

    def __call__(cls, value: object) -> Any:
        """The member whose value is ``value`` (``Method("cfi")``), as Enum looks one up."""
        try:
            return cls._by_value_[value]
        except (KeyError, TypeError):
            raise ValueError(f"{value!r} is not a valid {cls.__qualname__}") from None

    def __getitem__(cls, name: str) -> Any:
        member = cls.__dict__.get(name)
        if not isinstance(member, cls):
            raise KeyError(name)
        return member

    def __iter__(cls) -> Iterator[Any]:
        return iter(cls._members_)

    def __len__(cls) -> int:
        return len(cls._members_)

    def __contains__(cls, member: object) -> bool:
        return isinstance(member, cls)

    def __repr__(cls) -> str:
        return f"<enum {cls.__name__!r}>"


class Enum(metaclass=_EnumType):
    """Members with a ``name`` and a ``value``, as ``enum.Enum`` has them.

    Its subclasses list members as upper-case class attributes holding their
    values; every other attribute stays what it is.  Members are the only
    instances, compared and hashed by identity, found by value (``Cls(value)``)
    and by name (``Cls[name]``), iterated in their order; copied and pickled
    as themselves.
    """

    __slots__ = ("name", "value")
    name: str
    value: Any

    def __setattr__(self, key: str, value: object) -> None:
        raise AttributeError(f"cannot change a member of {type(self).__name__}")

    def __repr__(self) -> str:
        return f"<{type(self).__name__}.{self.name}: {self.value!r}>"

    def __str__(self) -> str:
        return f"{type(self).__name__}.{self.name}"

    def __reduce__(self) -> tuple[object, tuple[object]]:
        return type(self), (self.value,)

    def __copy__(self) -> Enum:
        return self

    def __deepcopy__(self, memo: object) -> Enum:
        return self


class cached_property:  # the standard library's name: a drop-in
    """A method run once per instance, its result then an ordinary attribute.

    What ``functools.cached_property`` does, without its lock (Python 3.11
    takes one for every first access) and without importing ``functools``.
    """

    def __init__(self, function: Callable[[Any], Any]) -> None:
        self.function = function
        self.__doc__ = function.__doc__
        self.attribute = function.__name__

    def __set_name__(self, owner: type, name: str) -> None:
        self.attribute = name

    def __get__(self, instance: object, owner: type | None = None) -> Any:
        if instance is None:
            return self
        value = instance.__dict__[self.attribute] = self.function(instance)
        return value


def lru_cache(maxsize: int) -> Callable[[Callable[..., Result]], Callable[..., Result]]:
    """A memo of a function's results by its arguments, at most ``maxsize``, emptied when full.

    Not least-recently-used: the memos here are of demangled names and of
    the demangler, where emptying a full memo costs a few lookups again.
    """

    def decorate(function: Callable[..., Result]) -> Callable[..., Result]:
        results: dict[tuple[Any, ...], Result] = {}

        def cached(*arguments: Any) -> Result:
            try:
                return results[arguments]
            except KeyError:
                pass
            value = function(*arguments)
            if len(results) >= maxsize:
                results.clear()
            results[arguments] = value
            return value

        cached.__doc__ = function.__doc__
        cached.__name__ = function.__name__
        cached.__qualname__ = function.__qualname__
        cached.__wrapped__ = function  # type: ignore[attr-defined]
        return cached

    return decorate
