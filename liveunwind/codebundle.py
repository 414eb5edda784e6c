"""Every liveunwind module's compiled code in one file, served by one import finder.

Why: a cold ``liveunwind pid`` imports about 60 of liveunwind's modules, and
for each the ordinary import machinery asks every ``sys.path`` entry's finder,
lists or stats its folder, stats the source, opens, reads and checks its
``.pyc``: about 16 ms of a 34 ms run went to importing (docs/speed.md,
"The cold start again", has what this file saves: about 2 ms of CPU a run).

The file is a cache of compiled code, as Python's ``.pyc`` files are (but
without docstrings and functions' annotations, which the command never reads:
see :func:`_compiled_lean`), and is checked the same way: the interpreter's
bytecode magic in its header, and for each module the size and modification
time (in ns) its source had when the file was written, compared with the
source's now before the module is served; a module that differs is imported
the ordinary way, and the file is written again as the command ends. It lives
in the user's cache directory (``$XDG_CACHE_HOME/liveunwind``, else
``~/.cache/liveunwind``), one file per installed copy and interpreter, not
beside the ``.pyc`` files: installs and containers commonly set
``PYTHONDONTWRITEBYTECODE``, under which Python writes none there. Code run as
root from a user's folder would be a way in, so a file is used only if it and
its folder belong to the user running the command and nobody else may write to
them (``sudo`` keeping the user's ``XDG_CACHE_HOME`` finds a folder of another
owner and uses nothing); a file that is short, of another format or whose
index does not unmarshal is not used. Written to a temporary name and renamed
over the old one, so a reader sees a whole file.
"""

from __future__ import annotations

import marshal
import os
import sys
from stat import S_ISREG as stat_is_regular

TYPE_CHECKING = False
if TYPE_CHECKING:
    import ast
    from collections.abc import Sequence
    from importlib.machinery import ModuleSpec
    from types import CodeType, ModuleType

#: The import system's own modules, loaded before anything else (``importlib``
#: itself would import ``warnings``: 0.4 ms).
_bootstrap = sys.modules["_frozen_importlib"]
_bootstrap_external = sys.modules["_frozen_importlib_external"]

PACKAGE = "liveunwind"
PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
#: The first bytes of a bundle: this format, then the interpreter's bytecode magic.
FORMAT = b"liveunwind code bundle 1\n"
HEADER_SIZE = len(FORMAT) + 4 + 4
#: Bounds on what a bundle may claim: its index, and any one module's code.
MAX_INDEX_BYTES = 1 << 20
MAX_CODE_BYTES = 4 << 20

#: One module: (is a package, source path under PACKAGE_DIR, the source's
#: st_mtime_ns and st_size when written, offset of its code after the index, length).
Entry = tuple[bool, str, int, int, int, int]


def bundle_path() -> str | None:
    """This copy's bundle for this interpreter, or None where there can be none.

    Named after the package's folder, so two installed copies never share
    one (:func:`_bundle_name`).
    """
    tag = sys.implementation.cache_tag
    folder = cache_folder()
    if tag is None or folder is None:
        return None
    name = _bundle_name(tag, PACKAGE_DIR)
    if len(name.encode()) > 255:
        return None
    return os.path.join(folder, name)


def cache_folder() -> str | None:
    """``$XDG_CACHE_HOME/liveunwind`` (else ``~/.cache/liveunwind``); None for a relative one.

    The command's own files live there: this bundle, and the symbol indexes
    of modules/symbolindex.py.  What is read from it is used only if
    :func:`owned_by_us` holds for the file and the folder.
    """
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "liveunwind") if os.path.isabs(cache) else None


def _bundle_name(tag: str, folder: str) -> str:
    """``code-<cache tag>-<folder>.bin``, the folder percent-encoded (``%`` and ``/`` only)."""
    return f"code-{tag}-{folder.replace('%', '%25').replace('/', '%2F')}.bin"


def _bundled_folder(name: str) -> str | None:
    """The package folder a bundle's file name names, or None if it is not one's name."""
    tag_and_folder = name.removeprefix("code-").removesuffix(".bin")
    _, dash, escaped = tag_and_folder.partition("-%2F")
    if not name.startswith("code-") or not name.endswith(".bin") or not dash:
        return None
    head, *rest = escaped.split("%")
    folder = ["/", head]
    for part in rest:
        character = _ESCAPED.get(part[:2])
        if character is None:
            return None
        folder += (character, part[2:])
    return "".join(folder)


#: What :func:`_bundle_name` writes for ``%`` and ``/``.
_ESCAPED = {"25": "%", "2F": "/"}


def owned_by_us(status: os.stat_result) -> bool:
    """Whether a file or folder belongs to whoever runs this, and only they may write to it."""
    return status.st_uid == os.geteuid() and not status.st_mode & 0o022


#: The type of a module's code (``types.CodeType``, without importing ``types`` this early).
_CODE_TYPE = type(bundle_path.__code__)


class BundleFinder:
    """The meta-path finder and loader of the modules one bundle holds.

    ``stale`` is set when the bundle could not serve a module it should have
    (a source changed since it was written): the command writes it again.
    """

    def __init__(
        self, path: str, descriptor: int, index: dict[str, Entry], code_start: int
    ) -> None:
        self.path = path
        self._descriptor = descriptor
        self._index = index
        self._code_start = code_start
        self.stale = False

    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        entry = self._index.get(name) if name.startswith("liveunwind.") else None
        if entry is None:
            return None
        try:
            is_package, relative, mtime_ns, size, _offset, _length = entry
            origin = os.path.join(PACKAGE_DIR, relative)
            status = os.stat(origin)
        except (OSError, TypeError, ValueError):
            self.stale = True
            return None
        if status.st_mtime_ns != mtime_ns or status.st_size != size:
            self.stale = True
            return None
        spec: ModuleSpec = _bootstrap.ModuleSpec(name, self, origin=origin, is_package=is_package)
        if is_package:
            spec.submodule_search_locations = [os.path.dirname(origin)]
        spec.has_location = True  # __file__ is the source's path, as an ordinary import's
        # __cached__, the compiled code's file: said here, the import system would work out
        # the .pyc's path (cache_from_source) for every module, 0.3 ms a cold run.
        spec.cached = self.path
        return spec

    def create_module(self, spec: ModuleSpec) -> None:
        return None  # the default module

    def exec_module(self, module: ModuleType) -> None:
        spec = module.__spec__
        assert spec is not None and spec.origin is not None  # find_spec made it
        exec(self._code(spec.name, spec.origin), module.__dict__)

    def _code(self, name: str, origin: str) -> CodeType:
        """The module's code from the bundle; read the ordinary way if the bundle fails us."""
        _, _, _, _, offset, length = self._index[name]
        if 0 < length <= MAX_CODE_BYTES:
            try:
                data = os.pread(self._descriptor, length, self._code_start + offset)
                code = marshal.loads(data) if len(data) == length else None
            except (OSError, EOFError, ValueError, TypeError):
                code = None
            if isinstance(code, _CODE_TYPE):
                return code
        self.stale = True
        return _bootstrap_external.SourceFileLoader(name, origin).get_code(name)


#: The finder this process installed (None: no bundle was found usable).
_installed: BundleFinder | None = None
#: Whether this process should write the bundle before it ends.
_wanted = False


def install() -> None:
    """Serve liveunwind's modules from the bundle, if there is a usable one; else note it."""
    global _installed, _wanted
    path = bundle_path()
    if path is None:
        return
    finder = _open(path)
    if finder is None:
        _wanted = True
        return
    _installed = finder
    sys.meta_path.insert(0, finder)


def open_ours(path: str) -> tuple[int, os.stat_result] | None:
    """A file of the cache folder opened for reading, with its status, if it may be used.

    It must be a regular file (not followed as a link), and it and its folder
    the user's own, writable by nobody else (:func:`owned_by_us`); None otherwise.
    """
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        status = os.fstat(descriptor)
        if (
            stat_is_regular(status.st_mode)
            and owned_by_us(status)
            and owned_by_us(os.stat(os.path.dirname(path)))
        ):
            return descriptor, status
    except OSError:
        pass
    os.close(descriptor)
    return None


def _open(path: str) -> BundleFinder | None:
    opened = open_ours(path)
    if opened is None:
        return None
    descriptor = opened[0]
    try:
        header = os.pread(descriptor, HEADER_SIZE, 0)
        magic = _bootstrap_external.MAGIC_NUMBER
        if len(header) == HEADER_SIZE and header[: len(FORMAT) + 4] == FORMAT + magic:
            index_size = int.from_bytes(header[-4:], "little")
            if index_size <= MAX_INDEX_BYTES:
                data = os.pread(descriptor, index_size, HEADER_SIZE)
                index = marshal.loads(data) if len(data) == index_size else None
                if isinstance(index, dict):
                    return BundleFinder(path, descriptor, index, HEADER_SIZE + index_size)
    except (OSError, EOFError, ValueError, TypeError):
        pass
    os.close(descriptor)
    return None


def write_if_wanted() -> None:
    """Write the bundle if this run found it missing or stale.

    Called as the command ends, after its output: once per install (and
    after each upgrade).  Any failure leaves no file behind and says
    nothing: the next run imports as Python does.
    """
    stale = _installed is not None and _installed.stale
    path = bundle_path()
    if not (_wanted or stale) or path is None:
        return
    import contextlib  # only as a bundle is written: most runs write nothing

    with contextlib.suppress(OSError, SyntaxError, ValueError, ImportError):
        write_bundle(path)


def write_bundle(path: str) -> None:
    """Write every module of the package (but its ``__init__``) to ``path``, atomically.

    The folder is made only the user's; one of another owner or that others
    may write to is left alone (its bundle would never be used).
    """
    folder = os.path.dirname(path)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    if not owned_by_us(os.stat(folder)):
        return
    # Made first: a folder it cannot be written to costs no compiling.
    temporary = f"{path}.{os.getpid()}.tmp"
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        with os.fdopen(descriptor, "wb") as stream:
            stream.write(_bundle_bytes())
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise
    _remove_left_behind(folder)


#: Entries of the cache folder looked at for bundles left behind, at most.
MAX_FOLDER_ENTRIES = 1000
#: A temporary file older than this (seconds) belongs to a writer that was killed.
ABANDONED_AFTER = 3600


def _remove_left_behind(folder: str) -> None:
    """Removes the bundles of copies no longer installed, and abandoned temporary files.

    A copy installed in a venv that is later deleted (bench/run.py makes one
    a run) leaves its bundle here: 2 MB that nothing would read again.
    """
    import contextlib
    import time  # both only as a bundle is written

    with os.scandir(folder) as entries:
        for count, entry in enumerate(entries):
            if count >= MAX_FOLDER_ENTRIES:
                break
            if not entry.name.startswith("code-") or not entry.is_file(follow_symlinks=False):
                continue
            if entry.name.endswith(".tmp"):
                gone = entry.stat(follow_symlinks=False).st_mtime < time.time() - ABANDONED_AFTER
            else:
                package = _bundled_folder(entry.name)
                gone = package is not None and not os.path.isdir(package)
            if gone:
                with contextlib.suppress(FileNotFoundError):  # another run removed it first
                    os.unlink(entry.path)


def _bundle_bytes() -> bytes:
    """The header, the index and the code of every module, as a bundle holds them."""
    index: dict[str, Entry] = {}
    blobs: list[bytes] = []
    offset = 0
    for name, relative in _modules():
        source = os.path.join(PACKAGE_DIR, relative)
        status = os.stat(source)  # before the code: a later change makes the entry stale
        blob = marshal.dumps(_compiled_lean(source))
        is_package = relative.endswith("__init__.py")
        index[name] = (is_package, relative, status.st_mtime_ns, status.st_size, offset, len(blob))
        blobs.append(blob)
        offset += len(blob)
    index_bytes = marshal.dumps(index)
    header = FORMAT + _bootstrap_external.MAGIC_NUMBER + len(index_bytes).to_bytes(4, "little")
    return b"".join([header, index_bytes, *blobs])


def _compiled_lean(source: str) -> CodeType:
    """The module's code as Python compiles it, but for docstrings and functions' annotations.

    Unmarshalling the code is the bulk of a cold import from the bundle, and
    nothing the command runs reads a docstring (``-OO`` drops them too) or a
    function's annotations (no ``typing.get_type_hints``, no
    ``singledispatch``; dataclasses read their class's annotations, which
    stay).  The 40 modules a cold ``liveunwind pid`` of CPython loads: 642 kB
    of code, 515 kB without docstrings, 480 kB without annotations too
    (docs/speed.md has what the imports saved).  Asserts stay, unlike under
    ``-OO``.  Parsing every source costs the run that writes the bundle about
    0.5 s of CPU, once per install.
    """
    import ast  # only as a bundle is written

    with open(source, "rb") as stream:
        tree = ast.parse(stream.read(), source)
    with_docstring = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    for node in ast.walk(tree):
        if isinstance(node, with_docstring) and ast.get_docstring(node, clean=False) is not None:
            del node.body[0]
            if not node.body and not isinstance(node, ast.Module):
                node.body.append(ast.Pass(lineno=node.lineno, col_offset=node.col_offset))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node.returns = None
            for argument in _arguments(node.args):
                argument.annotation = None
    code: CodeType = compile(tree, source, "exec", dont_inherit=True)
    return code


def _arguments(arguments: ast.arguments) -> list[ast.arg]:
    """Every parameter of a function: positional, ``*args``, keyword-only, ``**kwargs``."""
    found = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
    return found + [extra for extra in (arguments.vararg, arguments.kwarg) if extra is not None]


def _modules() -> list[tuple[str, str]]:
    """(module name, source path under PACKAGE_DIR) of every module below the package."""
    found = []
    for folder, subfolders, files in os.walk(PACKAGE_DIR):
        # Only packages (a folder with an __init__.py) hold modules; __pycache__ and
        # cli/schemas do not.
        subfolders[:] = sorted(
            entry
            for entry in subfolders
            if os.path.isfile(os.path.join(folder, entry, "__init__.py"))
        )
        relative_folder = os.path.relpath(folder, PACKAGE_DIR)
        parts = [] if relative_folder == os.curdir else relative_folder.split(os.sep)
        for file in sorted(files):
            if not file.endswith(".py"):
                continue
            module_parts = parts if file == "__init__.py" else [*parts, file[:-3]]
            if module_parts:  # the package itself is imported before the finder
                found.append((".".join([PACKAGE, *module_parts]), os.path.join(*parts, file)))
    return found
