"""``.debug_info``: the members of named structure types, by name, offset and type name.

What reading another program's data structures needs (Go's scheduler
records ``runtime.g``, ``runtime.m``, ``runtime.gobuf``): where each field
lies in its structure, taken from the DWARF of the very binary rather than
assumed, since the layouts change between releases.  Only the top level of
each unit is searched (Go's linker puts every type there); functions and
every other subtree are stepped over without being decoded.

Untrusted input: the walk stays inside each unit, reads at most
:data:`MAX_DIES` DIEs, and an offset that does not fit in its structure is
left out rather than believed.
"""

from __future__ import annotations

from liveunwind.formats.dwarf.forms import DwarfError
from liveunwind.formats.dwarf.info import DebugInfo, Die, DW_AT_name, Unit
from liveunwind.formats.leb128 import decode as _leb128

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Collection

DW_TAG_member = 0x0D
DW_TAG_structure_type = 0x13
DW_AT_byte_size = 0x0B
DW_AT_data_member_location = 0x38
DW_AT_type = 0x49

#: Top-level DIEs and members read at most over all units searched.
MAX_DIES = 1 << 21
_STRUCT_ATTRS = frozenset((DW_AT_name, DW_AT_byte_size))
_MEMBER_ATTRS = frozenset((DW_AT_name, DW_AT_data_member_location, DW_AT_type))
_NAME_ONLY = frozenset((DW_AT_name,))


class Structure:
    """One structure type: its size and its members, ``name → (offset, type name)``."""

    __slots__ = ("members", "name", "size")

    def __init__(self, name: str, size: int, members: dict[str, tuple[int, str | None]]) -> None:
        self.name = name
        self.size = size
        self.members = members

    def offset(self, member: str, type_name: str | None = None, width: int = 8) -> int | None:
        """Where ``member`` lies, if it has that type (when given) and ``width`` bytes fit."""
        found = self.members.get(member)
        if found is None:
            return None
        offset, kind = found
        if type_name is not None and kind != type_name:
            return None
        return offset if offset + width <= self.size else None


def structures(
    info: DebugInfo, names: Collection[str], first_units: Collection[str] = ()
) -> dict[str, Structure]:
    """The structure types called ``names`` at the top level of the units, each found once.

    Units named in ``first_units`` are searched first, the last of them
    first, then the others until every name is found.  Go's linker splits a
    package into several units and writes the runtime's types into the last
    ``runtime`` one: Go 1.19's first ``runtime`` unit holds 2,500 top-level
    DIEs without a type among them (1.4 s of a loaded machine's time to
    step over), its last finds the four structures in 300.
    """
    wanted = set(names)
    found: dict[str, Structure] = {}
    offsets = info.unit_offsets()
    preferred = [o for o in reversed(offsets) if info.unit_at(o).name in first_units]
    budget = [MAX_DIES]
    for offset in [*preferred, *(o for o in offsets if o not in preferred)]:
        if not wanted - found.keys():
            break
        _search_unit(info, info.unit_at(offset), wanted - found.keys(), found, budget)
    return found


def _search_unit(
    info: DebugInfo,
    unit: Unit,
    wanted: set[str],
    found: dict[str, Structure],
    budget: list[int],
) -> None:
    """Adds to ``found`` the wanted structures among ``unit``'s top-level DIEs.

    DIEs are stepped over and decoded with the unit walker's own helpers
    (``DebugInfo._after_die``, ``_attributes``, ``_skip_children``): one
    decoder of abbreviations and forms for the package.
    """
    if not unit.children:
        return
    data, end, abbrevs = info.info, unit.end, unit.abbrevs
    pos = unit.children
    while pos < end and budget[0] > 0:
        budget[0] -= 1
        code, pos = _leb128(data, pos, end, False, DwarfError)
        if code == 0:
            return
        abbrev = abbrevs.get(code)
        if abbrev is None:
            raise DwarfError(f"unknown abbreviation {code} in unit {unit.offset:#x}")
        if abbrev.tag != DW_TAG_structure_type:
            pos = info._after_die(unit, abbrev, pos)
            continue
        die_offset = pos
        attrs, pos = info._attributes(unit, abbrev, pos, _STRUCT_ATTRS)
        name = info.string(unit, attrs.get(DW_AT_name))
        if not abbrev.children:
            continue
        if name not in wanted or name in found:
            pos = info._skip_children(unit, None, pos)
            continue
        size = Die(unit, die_offset, abbrev.tag, attrs).constant(DW_AT_byte_size) or 0
        members, pos = _members(info, unit, pos, budget)
        found[name] = Structure(name, size, members)
        if wanted <= found.keys():
            return


def _members(
    info: DebugInfo, unit: Unit, pos: int, budget: list[int]
) -> tuple[dict[str, tuple[int, str | None]], int]:
    """The members among the children starting at ``pos``, and where the children end."""
    data, end, abbrevs = info.info, unit.end, unit.abbrevs
    members: dict[str, tuple[int, str | None]] = {}
    while pos < end and budget[0] > 0:
        budget[0] -= 1
        die_offset = pos
        code, pos = _leb128(data, pos, end, False, DwarfError)
        if code == 0:
            return members, pos
        abbrev = abbrevs.get(code)
        if abbrev is None:
            raise DwarfError(f"unknown abbreviation {code} in unit {unit.offset:#x}")
        if abbrev.tag != DW_TAG_member:
            pos = info._after_die(unit, abbrev, pos)
            continue
        attrs, after = info._attributes(unit, abbrev, pos, _MEMBER_ATTRS)
        pos = info._skip_children(unit, None, after) if abbrev.children else after
        die = Die(unit, die_offset, abbrev.tag, attrs)
        name = info.string(unit, attrs.get(DW_AT_name))
        offset = die.constant(DW_AT_data_member_location)
        if name is None or offset is None:
            continue  # a location expression: not one of the plain layouts read here
        kind = info.referenced(die, DW_AT_type, _NAME_ONLY)
        type_name = None if kind is None else info.string(kind.unit, kind.attrs.get(DW_AT_name))
        members[name] = (offset, type_name)
    raise DwarfError(f"structure members run past unit {unit.offset:#x}")
