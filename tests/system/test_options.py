"""BacktraceOptions: one options object, its defaults written once, taken by every entry point.

Adding an option is one edit (BacktraceOptions) plus its tests: these tests
check that every entry point takes ``options=`` and passes any option given
as a keyword of its own through the one place that turns keywords into
options, so no entry point lists the options itself.
"""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import pytest

import liveunwind
from liveunwind.backtrace.options import BacktraceOptions, chosen
from liveunwind.cli import main
from liveunwind.errors import UsageError
from liveunwind.unwinder import DEFAULT_MAX_FRAMES
from liveunwind.unwinder.stepper import AUTO_UNWINDERS

#: Every option and its default.
DEFAULTS = {
    "max_frames": DEFAULT_MAX_FRAMES,
    "unwinders": AUTO_UNWINDERS,
    "symbols": True,
    "verbose": False,
    "debug_dirs": (),
    "lines": False,
    "python": False,
}

ENTRY_POINTS = {
    "attach": liveunwind.attach,
    "open_core": liveunwind.open_core,
    "gdb_remote": liveunwind.gdb_remote,
    "local_backtrace": liveunwind.local_backtrace,
    "Session": liveunwind.Session.__init__,
}


def test_defaults() -> None:
    options = BacktraceOptions()
    assert {name: getattr(options, name) for name in DEFAULTS} == DEFAULTS
    assert liveunwind.BacktraceOptions is BacktraceOptions


def test_keyword_only() -> None:
    with pytest.raises(TypeError):
        BacktraceOptions(10)  # type: ignore[misc]


def test_read_only_and_compared_by_value() -> None:
    options = BacktraceOptions(debug_dirs=["/d"], unwinders=["cfi", "fp"])
    assert options.debug_dirs == ("/d",) and options.unwinders == ("cfi", "fp")
    same = BacktraceOptions(debug_dirs=("/d",), unwinders=("cfi", "fp"))
    assert options == same and hash(options) == hash(same)
    assert options != BacktraceOptions()
    assert {options: 1}[same] == 1  # local_backtrace keeps a backtracer per options
    with pytest.raises(AttributeError, match="read-only"):
        options.lines = True  # type: ignore[misc]
    with pytest.raises(AttributeError, match="read-only"):
        del options.lines
    with pytest.raises(AttributeError):
        options.colour = True  # type: ignore[attr-defined]


def test_replace_and_repr() -> None:
    options = BacktraceOptions(lines=True)
    changed = options.replace(max_frames=3, python=True)
    assert (changed.max_frames, changed.python, changed.lines) == (3, True, True)
    assert options.max_frames == DEFAULT_MAX_FRAMES and not options.python
    with pytest.raises(TypeError, match="colour"):
        options.replace(colour=True)
    assert repr(BacktraceOptions()) == (
        f"BacktraceOptions(max_frames={DEFAULT_MAX_FRAMES}, unwinders={AUTO_UNWINDERS!r}, "
        "symbols=True, verbose=False, debug_dirs=(), lines=False, python=False, "
        "python_locals=False, python_tasks=False)"
    )


def test_chosen_is_options_changed_by_keywords() -> None:
    assert chosen(None, {}) == BacktraceOptions()
    options = BacktraceOptions(verbose=True)
    assert chosen(options, {}) is options
    assert chosen(options, {"max_frames": 0}) == BacktraceOptions(verbose=True, max_frames=0)
    assert chosen(None, {"lines": True}) == BacktraceOptions(lines=True)
    with pytest.raises(TypeError, match="max_frame"):
        chosen(None, {"max_frame": 3})


@pytest.mark.parametrize("name", ENTRY_POINTS)
def test_every_entry_point_takes_options_and_lists_none(name: str) -> None:
    """``options=`` and ``**keywords``; no option is a parameter of its own, so none is repeated."""
    parameters = inspect.signature(ENTRY_POINTS[name]).parameters
    assert parameters["options"].kind is inspect.Parameter.KEYWORD_ONLY
    assert parameters["options"].default is None
    assert parameters["keywords"].kind is inspect.Parameter.VAR_KEYWORD
    assert not set(DEFAULTS) & set(parameters)


def test_local_backtrace_keywords_are_options() -> None:
    by_keyword = liveunwind.local_backtrace(max_frames=3, symbols=False)
    by_options = liveunwind.local_backtrace(options=BacktraceOptions(max_frames=3, symbols=False))
    for backtrace in (by_keyword, by_options):
        frames = backtrace.threads[0].frames
        assert len(frames) == 3 and all(frame.function is None for frame in frames)
        phases = list(backtrace.timings)
        assert phases[0] == "sample" and phases[-1] == "total"
    with pytest.raises(TypeError, match="max_frame"):
        liveunwind.local_backtrace(max_frame=3)
    with pytest.raises(UsageError, match="Python frames"):
        liveunwind.local_backtrace(python=True)


def test_attach_and_session_keywords_are_options(run_program) -> None:
    program = run_program("threads-O2")
    for backtrace in (
        liveunwind.attach(program.pid, max_frames=2),
        liveunwind.attach(program.pid, options=BacktraceOptions(max_frames=2)),
        liveunwind.Session(program.pid, max_frames=2).backtrace(),
    ):
        assert backtrace.threads and all(len(t.frames) <= 2 for t in backtrace.threads)
        assert any(len(t.frames) == 2 for t in backtrace.threads)


# -- the command: every walking command builds the same options from the same flags --

FLAGS = ["--max-frames", "7", "--unwinder", "cfi,fp", "--no-symbols", "--lines", "--python"]
FLAGS += ["--debug-dir", "/a", "--debug-dir", "/b"]
FROM_FLAGS = BacktraceOptions(
    max_frames=7,
    unwinders=("cfi", "fp"),
    symbols=False,
    debug_dirs=("/a", "/b"),
    lines=True,
    python=True,
)


class _Asked(Exception):
    """Raised by the stand-ins below, carrying the options the command passed."""


def _entry(*args: object, options: BacktraceOptions, **rest: object) -> None:
    """A stand-in entry point: stops the command with the options it was given."""
    raise _Asked(options)


@pytest.mark.parametrize(
    ("argv", "module", "name"),
    [
        (["core", "some.core", "--verbose"], "liveunwind.backtrace.api", "open_core"),
        (["gdb-remote", ":1234", "--verbose"], "liveunwind.backtrace.remote", "gdb_remote"),
        (["pid", "1", "--verbose"], "liveunwind.backtrace.session", "Session"),
    ],
)
def test_the_commands_pass_one_options_object(
    argv: list[str], module: str, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(f"{module}.{name}", _entry)
    with pytest.raises(_Asked) as asked:
        main([*argv, *FLAGS])
    assert asked.value.args[0] == FROM_FLAGS.replace(verbose=True)
    with pytest.raises(_Asked) as asked:
        main(argv[:2])
    assert asked.value.args[0] == BacktraceOptions()  # the command's defaults are the API's


def test_profile_passes_the_same_options_without_verbose(monkeypatch: pytest.MonkeyPatch) -> None:
    def profile_command(arguments: SimpleNamespace, options: BacktraceOptions) -> int:
        raise _Asked(options)

    monkeypatch.setattr("liveunwind.cli.profile.profile_command", profile_command)
    with pytest.raises(_Asked) as asked:
        main(["profile", "1", *FLAGS])
    assert asked.value.args[0] == FROM_FLAGS


def test_the_help_names_the_default_frame_limit(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pid", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())  # the help wraps its lines
    assert f"(default {DEFAULT_MAX_FRAMES}, 0 = no limit)" in text
