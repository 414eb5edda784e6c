"""A small declarative command-line parser for the ``liveunwind`` command.

Why not argparse: importing it (with ``re``, ``gettext``, ``locale`` and
``shutil`` behind it) and building the three sub-parsers cost about 10 ms at
every start, as much as eu-stack takes for a whole backtrace.  This parser
knows only what the command uses: sub-commands, positionals (one optional at
the end), ``--flag``, ``--option VALUE`` / ``--option=VALUE``, repeatable
options, ``--``, ``-h``/``--help`` and, before the sub-command,
``-V``/``--version``.  Every mistake is a UsageError (exit 64)
whose one line names the argument.
"""

from __future__ import annotations

import sys

from liveunwind.errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from types import SimpleNamespace
else:
    # The class types.py names so: a plain backtrace imports nothing else of types.py.
    SimpleNamespace = type(sys.implementation)

_HELP_WIDTH = 79
_HELP_COLUMN = 26


class Option:
    """``--name``: a flag (``value`` is False), a value, or a repeatable value.

    ``convert`` turns the text into the value and raises ValueError, with a
    message for the user, when it cannot.
    """

    __slots__ = ("choices", "convert", "default", "help", "metavar", "name", "repeat", "value")

    def __init__(
        self,
        name: str,
        help: str,
        *,
        value: bool = True,
        convert: Callable[[str], object] = str,
        default: object = None,
        metavar: str = "",
        choices: Sequence[str] = (),
        repeat: bool = False,
    ) -> None:
        self.name = name
        self.help = help
        self.value = value
        self.convert = convert
        self.default = [] if repeat else (False if not value else default)
        self.metavar = metavar or name.lstrip("-").upper().replace("-", "_")
        self.choices = tuple(choices)
        self.repeat = repeat

    @property
    def dest(self) -> str:
        return self.name.lstrip("-").replace("-", "_")

    def usage(self) -> str:
        if not self.value:
            return self.name
        metavar = "{" + ",".join(self.choices) + "}" if self.choices else self.metavar
        return f"{self.name} {metavar}"


class Positional:
    """A positional argument; an optional one, or one taking ``many`` values, may only come last.

    ``many``: every remaining argument, converted, as a list (possibly empty).
    """

    __slots__ = ("convert", "help", "many", "name", "optional")

    def __init__(
        self,
        name: str,
        help: str,
        *,
        convert: Callable[[str], object] = str,
        optional: bool = False,
        many: bool = False,
    ) -> None:
        self.name = name
        self.help = help
        self.convert = convert
        self.optional = optional or many
        self.many = many


class Command:
    """One sub-command: what it takes and what it is for."""

    __slots__ = ("help", "name", "options", "positionals")

    def __init__(
        self, name: str, help: str, positionals: Sequence[Positional], options: Sequence[Option]
    ) -> None:
        self.name = name
        self.help = help
        self.positionals = tuple(positionals)
        self.options = {option.name: option for option in options}


class HelpRequested(Exception):
    """``-h``/``--help`` was given: the text to print, then exit 0."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


class VersionRequested(Exception):
    """``-V``/``--version`` was given: print the version, then exit 0."""


def parse(
    prog: str, description: str, commands: Sequence[Command], argv: Sequence[str]
) -> SimpleNamespace:
    """The values of ``argv`` as attributes (``command`` names the sub-command).

    Raises UsageError for a mistake, HelpRequested for ``-h``/``--help`` and
    VersionRequested for ``-V``/``--version``.
    """
    by_name = {command.name: command for command in commands}
    if not argv:
        raise UsageError(f"a command is required ({', '.join(by_name)}); see {prog} --help")
    if argv[0] in ("-h", "--help"):
        raise HelpRequested(_top_help(prog, description, commands))
    if argv[0] in ("-V", "--version"):
        raise VersionRequested
    command = by_name.get(argv[0])
    if command is None:
        raise UsageError(f"unknown command {argv[0]!r}; choose from {', '.join(by_name)}")
    values = SimpleNamespace(command=command.name)
    for option in command.options.values():
        setattr(values, option.dest, option.default)
    positionals = _read_arguments(prog, command, argv[1:], values)
    _assign_positionals(command, positionals, values)
    return values


def _read_arguments(
    prog: str, command: Command, argv: Sequence[str], values: SimpleNamespace
) -> list[str]:
    """Sets the options' values; returns the positional arguments in order."""
    positionals: list[str] = []
    index = 0
    while index < len(argv):
        argument = argv[index]
        index += 1
        if argument == "--":
            positionals.extend(argv[index:])
            break
        if argument in ("-h", "--help"):
            raise HelpRequested(_command_help(prog, command))
        if not argument.startswith("-") or argument == "-" or _is_number(argument):
            positionals.append(argument)
            continue
        name, has_inline, inline = argument.partition("=")
        option = command.options.get(name)
        if option is None:
            raise UsageError(f"{command.name}: unknown option {name}")
        if not option.value:
            if has_inline:
                raise UsageError(f"{name} takes no value")
            setattr(values, option.dest, True)
            continue
        if has_inline:
            text = inline
        elif index < len(argv):
            text, index = argv[index], index + 1
        else:
            raise UsageError(f"{name} needs a value ({option.metavar})")
        value = _convert(name, option.convert, text)
        if option.choices and value not in option.choices:
            raise UsageError(f"{name}: {text!r} is not one of {', '.join(option.choices)}")
        if option.repeat:
            getattr(values, option.dest).append(value)
        else:
            setattr(values, option.dest, value)
    return positionals


def _assign_positionals(command: Command, given: list[str], values: SimpleNamespace) -> None:
    expected = command.positionals
    required = [positional for positional in expected if not positional.optional]
    if len(given) < len(required):
        missing = ", ".join(positional.name for positional in required[len(given) :])
        raise UsageError(f"{command.name}: missing {missing}")
    if expected and expected[-1].many:
        last = expected[-1]
        rest = given[len(expected) - 1 :]
        given = given[: len(expected) - 1]
        setattr(values, last.name, [_convert(last.name, last.convert, text) for text in rest])
        expected = expected[:-1]
    if len(given) > len(expected):
        raise UsageError(f"{command.name}: unexpected argument {given[len(expected)]!r}")
    for index, positional in enumerate(expected):
        value = (
            _convert(positional.name, positional.convert, given[index])
            if index < len(given)
            else None
        )
        setattr(values, positional.name, value)


def _convert(name: str, convert: Callable[[str], object], text: str) -> object:
    try:
        return convert(text)
    except ValueError as error:
        raise UsageError(f"{name}: {error}") from None


def _is_number(text: str) -> bool:
    """A negative number is a value, not an option (``--max-frames -1`` is then refused)."""
    return text[1:2].isdigit()


def _top_help(prog: str, description: str, commands: Sequence[Command]) -> str:
    lines = [f"usage: {prog} COMMAND ...", "", description, "", "commands:"]
    lines += [_entry(command.name, command.help) for command in commands]
    lines += ["", "options:", _entry("-h, --help", "show this help and exit")]
    lines.append(_entry("-V, --version", "print the version and exit"))
    lines += ["", f"{prog} COMMAND --help describes a command's arguments."]
    return "\n".join(lines) + "\n"


def _command_help(prog: str, command: Command) -> str:
    words = [f"usage: {prog} {command.name} [options]"]
    for positional in command.positionals:
        label = f"[{positional.name}...]" if positional.many else f"[{positional.name}]"
        words.append(label if positional.optional else positional.name)
    lines = [" ".join(words), "", command.help[:1].upper() + command.help[1:] + ".", ""]
    if command.positionals:
        lines.append("arguments:")
        lines += [_entry(positional.name, positional.help) for positional in command.positionals]
        lines.append("")
    lines.append("options:")
    lines.append(_entry("-h, --help", "show this help and exit"))
    lines += [_entry(option.usage(), option.help) for option in command.options.values()]
    return "\n".join(lines) + "\n"


def _entry(label: str, text: str) -> str:
    """``  label   text``, the text wrapped into its column."""
    import textwrap  # only for --help; it imports re

    indent = " " * _HELP_COLUMN
    head = f"  {label}"
    head = head.ljust(_HELP_COLUMN) if len(head) < _HELP_COLUMN - 1 else head + "\n" + indent
    body = textwrap.wrap(text, _HELP_WIDTH - _HELP_COLUMN) or [""]
    return head + ("\n" + indent).join(body)
