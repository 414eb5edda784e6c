"""The floors of ARCHITECTURE.md hold in the code: no import goes up a floor, no file cycle.

The floor of every room is read from the table in ARCHITECTURE.md, so the
map and this check cannot drift apart: a new package folder that the map
does not name fails here, and so does a room the map names that is gone.
Every import counts — module level, inside functions, and under
``TYPE_CHECKING`` — because a lazy import hides a dependency from ruff but
not from a reader.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.support.paths import ROOT

PACKAGE = ROOT / "liveunwind"
ROW = re.compile(r"^\|\s*(\d+)\s*\|\s*`(liveunwind/[^`]*)`")


def floors_from_map(text: str) -> dict[str, int]:
    """Room (a file or a folder ending in ``/``, relative to the repository) → floor."""
    return {match[2]: int(match[1]) for line in text.splitlines() if (match := ROW.match(line))}


def room_of(relative: str, rooms: dict[str, int]) -> str | None:
    """The most specific room holding a file (``liveunwind/cli/parse.py`` → ``liveunwind/cli/``)."""
    best = None
    for room in rooms:
        if (relative == room or (room.endswith("/") and relative.startswith(room))) and (
            best is None or len(room) > len(best)
        ):
            best = room
    return best


def module_file(name: str, package: Path) -> Path | None:
    """The file of a dotted ``liveunwind`` module name, or None if there is none."""
    base = package.parent.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def imports_of(path: Path, package: Path) -> set[Path]:
    """Every file of the package that ``path`` imports, wherever in the file the import is."""
    found: set[Path] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
            names = [n if module_file(n, package) else node.module for n in names]
        else:
            continue
        for name in names:
            if name == package.name or name.startswith(package.name + "."):
                target = module_file(name, package)
                if target is not None and target != path:
                    found.add(target)
    return found


def import_graph(package: Path) -> dict[Path, set[Path]]:
    return {path: imports_of(path, package) for path in sorted(package.rglob("*.py"))}


def upward_imports(graph: dict[Path, set[Path]], rooms: dict[str, int], root: Path) -> list[str]:
    """Each import from a lower floor to a higher one, as ``file (floor) -> file (floor)``."""
    found = []
    for source, targets in graph.items():
        source_floor = rooms[room_of(source.relative_to(root).as_posix(), rooms) or ""]
        for target in sorted(targets):
            target_floor = rooms[room_of(target.relative_to(root).as_posix(), rooms) or ""]
            if target_floor > source_floor:
                found.append(
                    f"{source.relative_to(root)} ({source_floor}) -> "
                    f"{target.relative_to(root)} ({target_floor})"
                )
    return found


def cycles(graph: dict[Path, set[Path]]) -> list[list[Path]]:
    """Strongly connected groups of more than one file (Tarjan's algorithm, iteratively)."""
    index: dict[Path, int] = {}
    low: dict[Path, int] = {}
    stack: list[Path] = []
    on_stack: set[Path] = set()
    groups: list[list[Path]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))
    return groups


def test_every_file_lives_in_a_room_of_the_map() -> None:
    rooms = floors_from_map((ROOT / "ARCHITECTURE.md").read_text())
    assert rooms, "ARCHITECTURE.md has no floor table"
    homeless = [
        path.relative_to(ROOT).as_posix()
        for path in PACKAGE.rglob("*.py")
        if room_of(path.relative_to(ROOT).as_posix(), rooms) is None
    ]
    assert homeless == []
    gone = [room for room in rooms if not (ROOT / room).exists()]
    assert gone == []


def test_no_import_goes_up_a_floor() -> None:
    rooms = floors_from_map((ROOT / "ARCHITECTURE.md").read_text())
    assert upward_imports(import_graph(PACKAGE), rooms, ROOT) == []


def test_no_import_cycle_between_files() -> None:
    found = cycles(import_graph(PACKAGE))
    assert [[path.relative_to(ROOT).as_posix() for path in group] for group in found] == []


def test_the_checks_catch_an_upward_import_and_a_cycle(tmp_path: Path) -> None:
    """The two checks above on a small package built to break both rules."""
    package = tmp_path / "liveunwind"
    (package / "low").mkdir(parents=True)
    (package / "high").mkdir()
    (package / "__init__.py").write_text("")
    (package / "low" / "__init__.py").write_text("")
    (package / "high" / "__init__.py").write_text("")
    (package / "low" / "a.py").write_text(
        "def f():\n    from liveunwind.high import b\n    return b\n"
    )
    (package / "high" / "b.py").write_text(
        "TYPE_CHECKING = False\nif TYPE_CHECKING:\n    from liveunwind.low.a import f\n"
    )
    rooms = floors_from_map(
        "| 0 | `liveunwind/low/` |\n| 1 | `liveunwind/high/` |\n| 2 | `liveunwind/__init__.py` |"
    )
    graph = import_graph(package)
    assert upward_imports(graph, rooms, tmp_path) == [
        "liveunwind/low/a.py (0) -> liveunwind/high/b.py (1)"
    ]
    assert cycles(graph) == [[package / "high" / "b.py", package / "low" / "a.py"]]


def test_every_public_name_resolves() -> None:
    """``liveunwind``'s lazy exports point at modules and names that exist."""
    import liveunwind

    for name in liveunwind.__all__:
        assert getattr(liveunwind, name).__name__ == name
