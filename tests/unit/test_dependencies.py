"""pyproject.toml declares exactly what is imported: by liveunwind/, by the tests, by `make lint`.

Every ``import`` of every file is read with ``ast`` (function-level imports
included), its top-level name mapped to the installed distribution that
provides it, and compared with the declared requirements.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions

from tests.support.paths import ROOT

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
#: Modules no Python distribution provides: gdb's own API (tests/support/gdb_frames.py runs
#: inside gdb), ``compression`` (the standard library's from Python 3.14, whose
#: ``compression.zstd`` liveunwind prefers to the backports.zstd it declares before 3.14),
#: and the standard library's private subinterpreter modules of 3.11-3.13, which
#: tests/data/python_subinterpreters.py imports under whichever interpreter runs it.
PROVIDED_BY_PROGRAMS = {"gdb", "compression", "_interpreters", "_xxsubinterpreters"}
#: Extras that only speed things up: liveunwind works the same without them.
ACCELERATORS = {"fast"}
LOCAL = {"liveunwind", "tests", "tools"}


def distribution_name(requirement: str) -> str:
    """PEP 503's normal form of the name a requirement starts with."""
    match = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert match is not None, requirement
    return re.sub(r"[-_.]+", "-", match.group()).lower()


def declared(extra: str | None = None) -> set[str]:
    requirements = (
        PROJECT["dependencies"] if extra is None else PROJECT["optional-dependencies"][extra]
    )
    return {distribution_name(requirement) for requirement in requirements}


def third_party_imports(*folders: str) -> dict[str, bool]:
    """Top-level names imported from outside the standard library and this project.

    Each maps to whether some import of it runs when its file is imported
    (True), rather than only inside a function (False).
    """
    found: dict[str, bool] = {}
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*.py")):
            _collect(ast.parse(path.read_text(), str(path)), False, found)
    return found


def _collect(node: ast.AST, in_function: bool, found: dict[str, bool]) -> None:
    for child in ast.iter_child_nodes(node):
        names: list[str] = []
        if isinstance(child, ast.Import):
            names = [alias.name for alias in child.names]
        elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
            names = [child.module]
        for name in names:
            top = name.partition(".")[0]
            if top not in sys.stdlib_module_names and top not in LOCAL:
                found[top] = found.get(top, False) or not in_function
        inner = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
        _collect(child, inner, found)


def distributions(modules: set[str]) -> set[str]:
    """The installed distributions that provide ``modules``."""
    providers = packages_distributions()
    missing = modules - providers.keys() - PROVIDED_BY_PROGRAMS
    assert not missing, f"imported but provided by no installed distribution: {sorted(missing)}"
    return {
        distribution_name(name)
        for module in modules - PROVIDED_BY_PROGRAMS
        for name in providers[module]
    }


def test_runtime_dependencies_and_the_extras_are_what_liveunwind_imports() -> None:
    imported = distributions(set(third_party_imports("liveunwind")))
    extras = set().union(*(declared(extra) for extra in PROJECT["optional-dependencies"]))
    assert declared() | (extras - declared("test")) == imported


def test_optional_packages_are_imported_only_inside_functions() -> None:
    """``import liveunwind`` and every ELF path work without the extras installed."""
    eager = {module for module, at_import in third_party_imports("liveunwind").items() if at_import}
    for extra in PROJECT["optional-dependencies"]:
        assert not distributions(eager) & declared(extra)


def test_every_extra_only_speeds_things_up() -> None:
    """Every target is read with the dependencies alone: no extra but ``test`` is needed.

    (Mach-O needed lief until liveunwind read it itself: an extra that a
    target needs would want a one-line error naming it again.)
    """
    assert set(PROJECT["optional-dependencies"]) - {"test"} == ACCELERATORS


def test_everything_the_tests_and_their_tools_import_is_declared() -> None:
    imported = distributions(set(third_party_imports("tests", "tools")))
    missing = imported - set().union(declared(), *map(declared, PROJECT["optional-dependencies"]))
    assert not missing, f"imported by tests or tools/ but not declared: {sorted(missing)}"


def test_the_test_extra_holds_only_what_tests_and_make_lint_use() -> None:
    makefile = (ROOT / "Makefile").read_text()
    run_by_make = set(re.findall(r"\$\(VPY\) -m (\w+)", makefile)) - LOCAL
    used = distributions(set(third_party_imports("tests", "tools")) | run_by_make)
    assert declared("test") <= used, f"declared but unused: {sorted(declared('test') - used)}"
