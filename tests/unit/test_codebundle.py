"""The code bundle (liveunwind/codebundle.py): written whole, served only while it is right.

Each test writes a bundle of a copy of this checkout's package into its own
folder and reads it back in this process; tests/system/test_startup.py runs
the command with one, against a real process.
"""

from __future__ import annotations

import ast
import dis
import inspect
import os
import shutil
import sys
from types import CodeType

import pytest

from liveunwind import codebundle
from tests.support.paths import ROOT


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """A copy of this checkout's package and its bundle's bytes, written once (0.4 s)."""
    copy = tmp_path_factory.mktemp("site") / "liveunwind"
    shutil.copytree(ROOT / "liveunwind", copy, ignore=shutil.ignore_patterns("__pycache__"))
    path = tmp_path_factory.mktemp("cache") / "bundle.bin"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(codebundle, "PACKAGE_DIR", str(copy))
        codebundle.write_bundle(str(path))
    return copy, path.read_bytes()


@pytest.fixture
def package(written, tmp_path, monkeypatch):
    """The test's own copy of the package (sources' times kept) and of its bundle, written."""
    copy = tmp_path / "site" / "liveunwind"
    shutil.copytree(written[0], copy)  # copy2: the same sizes and modification times
    monkeypatch.setattr(codebundle, "PACKAGE_DIR", str(copy))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = codebundle.bundle_path()
    assert path is not None
    os.makedirs(os.path.dirname(path), mode=0o700)
    with open(path, "wb") as stream:
        stream.write(written[1])
    return copy, path


def _opened(path: str) -> codebundle.BundleFinder:
    finder = codebundle._open(path)
    assert finder is not None
    return finder


def test_every_module_is_served_as_python_compiles_it_but_docstrings_and_annotations(
    package,
) -> None:
    copy, path = package
    finder = _opened(path)
    modules = dict(codebundle._modules())
    assert "liveunwind.unwinder.stepper" in modules
    assert "liveunwind.cli" in modules and "liveunwind" not in modules
    for name, relative in modules.items():
        spec = finder.find_spec(name)
        assert spec is not None, name
        assert spec.origin == str(copy / relative)
        assert spec.loader is finder
        assert spec.cached == path  # the compiled code's file, as a .pyc's path would be
        if relative.endswith("__init__.py"):
            assert spec.submodule_search_locations == [str((copy / relative).parent)]
        source = (copy / relative).read_bytes()
        expected = compile(source, str(copy / relative), "exec", dont_inherit=True)
        served = finder._code(name, spec.origin)
        # The same functions, line for line; only docstrings and annotations are gone.
        assert _functions(served) == _functions(expected), name
        docstrings = _docstrings(source)
        assert _strings(served) <= _strings(expected) - docstrings, name
        assert _strings(expected) - _strings(served) <= docstrings | _annotations(source), name
    assert finder.find_spec("json") is None
    assert not finder.stale


def _all_code(code: CodeType) -> list[CodeType]:
    """``code`` and every code object nested in it (functions, classes, comprehensions)."""
    nested = [constant for constant in code.co_consts if isinstance(constant, CodeType)]
    return [code, *(inner for constant in nested for inner in _all_code(constant))]


def _functions(code: CodeType) -> list[tuple[str, list[tuple[str, object, int | None]]]]:
    """Each function's name and instructions, with the lines they start.

    Neither a docstring nor annotations are among a function's instructions,
    but those of the functions it defines are: such a function is left out
    (its nested ones are compared).
    """
    return [
        (inner.co_qualname, _instructions(inner))
        for inner in _all_code(code)
        if _is_function(inner) and not any(map(_is_named_function, inner.co_consts))
    ]


def _is_function(code: CodeType) -> bool:
    return bool(code.co_flags & inspect.CO_NEWLOCALS)


def _is_named_function(constant: object) -> bool:
    """Whether a constant is the code of a ``def`` (not a lambda or a comprehension)."""
    return isinstance(constant, CodeType) and not constant.co_name.startswith("<")


def _instructions(code: CodeType) -> list[tuple[str, object, int | None]]:
    """Operations, their arguments' values (nested code by name) and the lines they start."""
    return [
        (
            instruction.opname,
            instruction.argval.co_qualname
            if isinstance(instruction.argval, CodeType)
            else instruction.argval,
            instruction.starts_line,
        )
        for instruction in dis.get_instructions(code)
    ]


def _strings(code: CodeType) -> set[str]:
    """Every string constant of ``code`` and the code nested in it."""
    return {c for inner in _all_code(code) for c in inner.co_consts if isinstance(c, str)}


def _docstrings(source: bytes) -> set[str]:
    """The docstrings of a module's source: its own, its classes' and functions'."""
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    nodes = [node for node in ast.walk(ast.parse(source)) if isinstance(node, kinds)]
    found = (ast.get_docstring(node, clean=False) for node in nodes)
    return {text for text in found if text is not None}


def _annotations(source: bytes) -> set[str]:
    """What functions' annotations put among the constants: names, ``return``, the types."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            found |= {"return", *(ast.unparse(node.returns) for _ in [0] if node.returns)}
            for argument in ast.walk(node.args):
                if isinstance(argument, ast.arg) and argument.annotation is not None:
                    found |= {argument.arg, ast.unparse(argument.annotation)}
    return found


def test_served_code_runs_without_docstrings_and_function_annotations(package) -> None:
    """Run from the bundle, functions and classes keep working: a dataclass keeps its fields."""
    from liveunwind.formats import macho

    _copy, path = package
    finder = _opened(path)
    spec = finder.find_spec(macho.__name__)
    assert spec is not None and spec.origin is not None
    served: dict[str, object] = {"__name__": macho.__name__}
    exec(finder._code(macho.__name__, spec.origin), served)
    record = served["MachOSegment"]
    assert isinstance(record, type)
    assert served.get("__doc__") is None and macho.__doc__
    assert list(record.__dataclass_fields__) == list(macho.MachOSegment.__dataclass_fields__)
    assert record("__TEXT", 1, 2, 3, 4, 5).vmsize == 2  # type: ignore[call-arg]
    function = served["load_commands"]
    assert callable(function) and macho.load_commands.__annotations__
    assert function.__annotations__ == {} and function.__doc__ is None
    # One load command (LC_UUID, 24 bytes) after the 32-byte header.
    data = bytes(32) + (0x1B).to_bytes(4, "little") + (24).to_bytes(4, "little") + bytes(16)
    assert function(data, 1, 24) == macho.load_commands(data, 1, 24) == [(0x1B, 32, 24)]  # type: ignore[operator]


def test_a_changed_source_is_imported_the_ordinary_way(package) -> None:
    copy, path = package
    with open(copy / "frames.py", "a") as stream:
        stream.write("# changed\n")
    finder = _opened(path)
    assert finder.find_spec("liveunwind.frames") is None
    assert finder.stale
    assert finder.find_spec("liveunwind.errors") is not None


def test_a_source_touched_but_the_same_size_is_stale_too(package) -> None:
    copy, path = package
    status = os.stat(copy / "errors.py")
    os.utime(copy / "errors.py", ns=(status.st_atime_ns, status.st_mtime_ns + 1))
    finder = _opened(path)
    assert finder.find_spec("liveunwind.errors") is None
    assert finder.stale


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: data[:10],  # short header
        lambda data: b"x" + data[1:],  # another format
        lambda data: data[:24] + b"\0\0\0\0" + data[28:],  # another interpreter's magic
        lambda data: data[: codebundle.HEADER_SIZE + 100],  # the index cut short
        lambda data: data[: codebundle.HEADER_SIZE - 4] + b"\xff\xff\xff\x7f" + data[-100:],
    ],
)
def test_a_damaged_bundle_is_not_used(package, damage) -> None:
    _, path = package
    with open(path, "rb") as stream:
        data = stream.read()
    with open(path, "wb") as stream:
        stream.write(damage(data))
    assert codebundle._open(path) is None


def test_code_cut_short_is_read_from_the_source(package) -> None:
    copy, path = package
    size = os.path.getsize(path)
    os.truncate(path, size - 10)  # the last module's code
    finder = _opened(path)
    name, relative = max(codebundle._modules(), key=lambda item: finder._index[item[0]][4])
    spec = finder.find_spec(name)
    assert spec is not None
    code = finder._code(name, spec.origin)
    assert code.co_filename == str(copy / relative)
    assert finder.stale


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give files away")
@pytest.mark.parametrize("whose", ["file", "folder"])
def test_a_bundle_others_may_write_or_own_is_not_used(package, whose) -> None:
    _, path = package
    target = path if whose == "file" else os.path.dirname(path)
    mode = os.stat(target).st_mode & 0o777
    os.chmod(target, mode | 0o002)
    assert codebundle._open(path) is None
    os.chmod(target, mode)
    assert codebundle._open(path) is not None
    os.chown(target, 1, -1)
    assert codebundle._open(path) is None


def test_the_folder_is_made_for_the_user_alone(package) -> None:
    _, path = package
    shutil.rmtree(os.path.dirname(path))
    codebundle.write_bundle(path)
    assert os.stat(os.path.dirname(path)).st_mode & 0o777 == 0o700
    assert [entry.name for entry in os.scandir(os.path.dirname(path))] == [os.path.basename(path)]


def test_where_the_bundle_lives(monkeypatch) -> None:
    monkeypatch.setattr(codebundle, "PACKAGE_DIR", "/usr/lib/python3/dist-packages/liveunwind")
    monkeypatch.setenv("XDG_CACHE_HOME", "/var/cache/someone")
    folder = "%2Fusr%2Flib%2Fpython3%2Fdist-packages%2Fliveunwind"
    name = f"code-{sys.implementation.cache_tag}-{folder}.bin"
    assert codebundle.bundle_path() == f"/var/cache/someone/liveunwind/{name}"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")  # the XDG spec: ignored
    assert codebundle.bundle_path() is None
    monkeypatch.setenv("XDG_CACHE_HOME", "")
    monkeypatch.setenv("HOME", "/home/someone")
    assert codebundle.bundle_path() == f"/home/someone/.cache/liveunwind/{name}"


@pytest.mark.parametrize(
    "folder", ["/usr/lib/liveunwind", "/a%b/c%%d/liveunwind", "/x-y/%/liveunwind", "/a/%2F/b"]
)
def test_a_bundles_name_says_its_folder(folder) -> None:
    name = codebundle._bundle_name("cpython-311", folder)
    assert "/" not in name
    assert codebundle._bundled_folder(name) == folder
    assert codebundle._bundled_folder(name.replace("%2F", "%2G", 2)) is None
    assert codebundle._bundled_folder("debuginfo.db") is None


def test_bundles_of_copies_gone_and_abandoned_writes_are_removed(package, tmp_path) -> None:
    copy, path = package
    cache = os.path.dirname(path)
    gone = os.path.join(cache, codebundle._bundle_name("cpython-311", str(tmp_path / "gone")))
    here = os.path.join(cache, codebundle._bundle_name("cpython-312", str(copy)))
    abandoned = os.path.join(cache, f"{os.path.basename(here)}.1.tmp")
    writing = os.path.join(cache, f"{os.path.basename(here)}.2.tmp")
    other = os.path.join(cache, "debuginfo.db")
    for each in (gone, here, abandoned, writing, other):
        with open(each, "wb"):
            pass
    os.utime(abandoned, (0, 0))
    codebundle.write_bundle(path)
    assert sorted(os.listdir(cache)) == sorted(
        os.path.basename(each) for each in (path, here, writing, other)
    )
