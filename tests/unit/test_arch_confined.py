"""An architecture is one place: nothing outside ``liveunwind/arch/`` asks which one it is.

Everything that differs between architectures is a field of ``Arch`` (or of a
part it holds), found through the registry in ``liveunwind/arch/__init__.py``.
This reads every other file of the package (its syntax tree, so docstrings
and messages that name an architecture are fine) and fails on what would
make adding an architecture an edit outside ``arch/``:

- a comparison with an architecture's name (``arch.name == "aarch64"``,
  ``name in ("x86_64", "amd64")``), or with an ``arch.name`` at all;
- a dict keyed by architecture names, or a subscript or ``case`` with one,
  or a table looked up with an ``arch.name``;
- an import of one architecture's folder (``liveunwind.arch.x86_64``)
  instead of the registry.

The registry itself is checked too: it lists every Arch the folder builds,
each answers to its own names and numbers, and the JSON Schema's ``arch``
enum names the same architectures.
"""

from __future__ import annotations

import ast
import importlib
import json
import pkgutil

import liveunwind.arch
from liveunwind.arch import (
    Arch,
    arch_by_elf_machine,
    arch_by_gdb_architecture,
    arch_by_macho_cpu_type,
    arch_by_name,
    arch_by_sframe_abi,
    architectures,
)
from tests.support.paths import ROOT

PACKAGE = ROOT / "liveunwind"
ARCH_FOLDER = PACKAGE / "arch"

#: Names of architectures liveunwind has, or may have: any of them in a
#: comparison outside arch/ is a branch on the architecture.
OTHER_NAMES = {"riscv64", "riscv", "i386", "i686", "armv7l", "ppc64le", "ppc64", "s390x",
               "loongarch64", "mips64"}  # fmt: skip
ARCH_NAMES = frozenset(
    name for arch in architectures() for name in (arch.name, *arch.aliases, *arch.gdb.architectures)
) | frozenset(OTHER_NAMES)


def _is_arch_name(node: ast.AST | None) -> bool:
    """A string constant naming an architecture, or a literal collection holding one."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value in ARCH_NAMES
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_is_arch_name(element) for element in node.elts)
    return False


def _is_arch_name_attribute(node: ast.AST) -> bool:
    """``<…>arch.name``: the name of an Arch, read to compare it."""
    if not (isinstance(node, ast.Attribute) and node.attr == "name"):
        return False
    owner = node.value
    name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
    return name.lower().endswith("arch")


def _is_lookup_by_arch_name(node: ast.AST) -> bool:
    """``table[arch.name]`` or ``table.get(arch.name)``: a table outside arch/ keyed by arch."""
    if isinstance(node, ast.Subscript):
        return _is_arch_name_attribute(node.slice)
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "get"
        and any(_is_arch_name_attribute(argument) for argument in node.args[:1])
    )


def _is_one_architecture(module: str) -> bool:
    """``liveunwind.arch.<folder>`` (or below) for a folder that builds one architecture."""
    parts = module.split(".")
    return (
        len(parts) >= 3
        and parts[:2] == ["liveunwind", "arch"]
        and (ARCH_FOLDER / parts[2]).is_dir()
    )


def _imported(node: ast.AST) -> list[str]:
    """The modules an import statement names (``from a import b``: ``a`` and ``a.b``)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        return [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
    return []


def branches_on_architecture(source: str, filename: str = "<source>") -> list[str]:
    """``filename:line: what`` for every place in ``source`` that asks which architecture it is."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source, filename)):
        what = ""
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(_is_arch_name(operand) for operand in operands):
                what = "compares with an architecture's name"
            elif any(_is_arch_name_attribute(operand) for operand in operands):
                what = "compares an Arch's name"
        elif isinstance(node, ast.Dict) and any(_is_arch_name(key) for key in node.keys):
            what = "a dict keyed by architecture names"
        elif isinstance(node, ast.Subscript) and _is_arch_name(node.slice):
            what = "looks up an architecture's name"
        elif _is_lookup_by_arch_name(node):
            what = "looks up an Arch's name"
        elif isinstance(node, ast.MatchValue) and _is_arch_name(node.value):
            what = "a case on an architecture's name"
        elif any(_is_one_architecture(module) for module in _imported(node)):
            what = "imports one architecture instead of asking the registry"
        if what:
            found.append((getattr(node, "lineno", 0), what))
    return [f"{filename}:{line}: {what}" for line, what in sorted(found)]


def test_nothing_outside_arch_asks_which_architecture_it_is() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if ARCH_FOLDER in path.parents:
            continue
        relative = path.relative_to(ROOT).as_posix()
        found += branches_on_architecture(path.read_text(), relative)
    assert found == []


def test_the_check_catches_each_kind_of_branch() -> None:
    source = '''
"""Docstrings may say x86_64 and aarch64."""
from liveunwind.arch import arch_by_name
from liveunwind.arch.aarch64 import AARCH64
import liveunwind.arch.x86_64.registers

def f(arch, space, name, table):
    message = f"only {arch.name} and x86_64 are known"
    if arch.name == "aarch64":
        return {"x86_64": 1, "aarch64": 2}
    if name in ("amd64", "riscv64"):
        return table["arm64"]
    if space.arch.name != name:
        return table[space.arch.name] or table.get(arch.name)
    match name:
        case "i386:x86-64":
            return 3
    return arch_by_name(name), message
'''
    assert branches_on_architecture(source) == [
        "<source>:4: imports one architecture instead of asking the registry",
        "<source>:5: imports one architecture instead of asking the registry",
        "<source>:9: compares with an architecture's name",
        "<source>:10: a dict keyed by architecture names",
        "<source>:11: compares with an architecture's name",
        "<source>:12: looks up an architecture's name",
        "<source>:13: compares an Arch's name",
        "<source>:14: looks up an Arch's name",
        "<source>:14: looks up an Arch's name",
        "<source>:16: a case on an architecture's name",
    ]


def _built_architectures() -> set[Arch]:
    """Every Arch instance a package under ``liveunwind/arch/`` builds."""
    built = set()
    for module in pkgutil.walk_packages(liveunwind.arch.__path__, "liveunwind.arch."):
        loaded = importlib.import_module(module.name)
        built |= {value for value in vars(loaded).values() if isinstance(value, Arch)}
    return built


def test_the_registry_lists_every_architecture_built() -> None:
    assert _built_architectures() == set(architectures())


def test_each_architecture_answers_to_its_own_names_and_numbers() -> None:
    """No two architectures claim the same name, machine, CPU type, GDB name or SFrame id."""
    for arch in architectures():
        assert all(arch_by_name(name) is arch for name in (arch.name, *arch.aliases))
        assert arch_by_elf_machine(arch.elf_machine) is arch
        assert all(arch_by_gdb_architecture(name) is arch for name in arch.gdb.architectures)
        assert all(arch_by_sframe_abi(abi) is arch for abi in arch.sframe_abis)
        if arch.macho is not None:
            assert arch_by_macho_cpu_type(arch.macho.cpu_type) is arch


def test_the_registry_names_each_architecture_as_its_folder_does() -> None:
    """The registry knows each architecture's names before loading its folder; they agree."""
    for entry in liveunwind.arch._ENTRIES:
        arch = arch_by_name(entry.name)
        assert (entry.name, entry.aliases, entry.elf_machine) == (
            arch.name,
            arch.aliases,
            arch.elf_machine,
        )
        assert entry.gdb_architectures == arch.gdb.architectures
        assert set(entry.sframe_abis) == set(arch.sframe_abis)
        assert entry.macho_cpu_type == (arch.macho.cpu_type if arch.macho else None)


def test_the_schema_names_the_registered_architectures() -> None:
    schema = json.loads((PACKAGE / "cli" / "schemas" / "backtrace.schema.json").read_text())
    assert schema["properties"]["arch"]["enum"] == [arch.name for arch in architectures()]
