"""liveunwind/classes.py's stand-ins behave as the standard library's where the code relies on it.

Each is set beside the standard library's own on the same definitions; the
public enums of frames.py (``Method``, ``Trust``, ``StopReason``) are ours.
"""

from __future__ import annotations

import collections
import copy
import enum
import functools
import pickle

import pytest

from liveunwind import classes
from liveunwind.frames import Method, StopReason, Trust
from liveunwind.targets.base import Mapping


def _both(*arguments, **keywords):
    return [make(*arguments, **keywords) for make in (collections.namedtuple, classes.namedtuple)]


def test_a_named_tuple_is_a_tuple_with_named_fields() -> None:
    for made in _both("Point", "x y, z", defaults=(0,)):
        point = made(1, 2)
        assert point == (1, 2, 0) and isinstance(point, tuple)
        assert (point.x, point.y, point.z) == (1, 2, 0)
        assert made(1, z=3, y=2) == (1, 2, 3)
        assert made._fields == ("x", "y", "z") == made.__match_args__
        assert made._field_defaults == {"z": 0}
        assert repr(point) == "Point(x=1, y=2, z=0)"
        assert point._asdict() == {"x": 1, "y": 2, "z": 0}
        assert point._replace(y=5) == (1, 5, 0) and type(point._replace(y=5)) is made
        assert made._make([4, 5, 6]) == (4, 5, 6)
        assert hash(point) == hash((1, 2, 0))
        assert not hasattr(point, "__dict__")
        assert made.__module__ == __name__


@pytest.mark.parametrize(
    "call",
    [
        lambda made: made(1),  # y missing
        lambda made: made(1, 2, 3, 4),  # too many
        lambda made: made(1, 2, w=1),  # no such field
        lambda made: made._make([1]),
    ],
)
def test_a_named_tuple_refuses_what_the_standard_one_refuses(call) -> None:
    for made in _both("Point", "x y z", defaults=(0,)):
        with pytest.raises(TypeError):
            call(made)
    for made in _both("Point", "x y"):
        with pytest.raises(ValueError):
            made(1, 2)._replace(w=3)


def test_a_subclass_of_a_named_tuple_keeps_its_methods_and_copies() -> None:
    mapping = Mapping(0x1000, 0x2000, "r-xp", 0, 42, "/lib/libc.so.6")
    assert mapping.device == "00:00"
    assert copy.copy(mapping) == mapping and copy.deepcopy(mapping) == mapping
    assert pickle.loads(pickle.dumps(mapping)) == mapping
    assert type(pickle.loads(pickle.dumps(mapping))) is Mapping
    assert mapping._replace(end=0x3000).end == 0x3000


class _Colour(classes.Enum):
    RED = "red"
    GREEN = "green"
    CRIMSON = "red"  # an alias, as Enum makes one: the first member stands for the value

    @staticmethod
    def warm(colour: _Colour) -> bool:
        return colour is _Colour.RED


class _StandardColour(enum.Enum):
    RED = "red"
    GREEN = "green"
    CRIMSON = "red"


def test_an_enum_has_members_with_a_name_and_a_value() -> None:
    for colours in (_Colour, _StandardColour):
        assert colours("red") is colours.RED
        assert colours["GREEN"] is colours.GREEN
        assert (colours.RED.name, colours.RED.value) == ("RED", "red")
        assert isinstance(colours.RED, colours)
        assert colours.RED in colours and colours.RED != colours.GREEN
        assert copy.deepcopy(colours.GREEN) is colours.GREEN
        with pytest.raises(ValueError):
            colours("blue")
        with pytest.raises(KeyError):
            colours["BLUE"]
        with pytest.raises(AttributeError):
            colours.RED.value = "blue"
    assert [colour.name for colour in _Colour] == ["RED", "GREEN", "CRIMSON"]
    assert [colour.name for colour in _StandardColour] == ["RED", "GREEN"]
    assert _Colour.warm(_Colour.RED) and not _Colour.warm(_Colour.GREEN)
    assert repr(_Colour.RED) == "<_Colour.RED: 'red'>" and str(_Colour.RED) == "_Colour.RED"


@pytest.mark.parametrize("public", [Method, Trust, StopReason])
def test_the_public_enums_are_what_they_were(public) -> None:
    members = list(public)
    assert len({member.value for member in members}) == len(members) == len(public)
    for member in members:
        assert public(member.value) is member is public[member.name]
        assert getattr(public, member.name) is member
        assert pickle.loads(pickle.dumps(member)) is member
        assert f"{member}" == f"{public.__name__}.{member.name}"
    assert Trust.of(Method.CFI) is Trust.HIGH and Trust.of(Method.SCAN) is Trust.LOW


def test_a_cached_property_runs_once_per_instance() -> None:
    calls = []

    for decorate in (functools.cached_property, classes.cached_property):

        class Thing:
            @decorate
            def answer(self) -> int:
                """The answer."""
                calls.append(self)
                return 42

        first, second = Thing(), Thing()
        assert first.answer == first.answer == 42 == second.answer
        assert calls == [first, second]
        assert vars(first) == {"answer": 42}
        assert Thing.answer.__doc__ == "The answer."
        calls.clear()


def test_a_memo_keeps_at_most_its_size() -> None:
    calls = []

    @classes.lru_cache(maxsize=2)
    def double(number: int) -> int:
        calls.append(number)
        return 2 * number

    assert [double(1), double(1), double(2), double(1)] == [2, 2, 4, 2]
    assert calls == [1, 2]
    double(3)  # full: emptied, then 3 kept
    double(1)
    assert calls == [1, 2, 3, 1]
    assert double.__name__ == "double"

    @classes.lru_cache(maxsize=1)
    def made() -> object:
        return object()

    assert made() is made()
