"""Demangling of Rust's v0 symbol names (``_R…``, RFC 2603).

The C++ runtime's demangler reads Rust's older mangling (Itanium-style names
with a trailing hash) but not v0, which rustc emits with
``-C symbol-mangling-version=v0`` and by default on newer toolchains.  The
output follows rustc's own short form: paths with generic arguments and no
crate hashes, e.g. ``main::inner::deep::<alloc::vec::Vec<u8>>``.

Names come from untrusted files, so recursion depth and output length are
bounded; a malformed name is returned unchanged by :func:`demangle_v0`.
"""

from __future__ import annotations

from collections.abc import Callable

_BASIC_TYPES = {
    "a": "i8", "b": "bool", "c": "char", "d": "f64", "e": "str", "f": "f32", "h": "u8",
    "i": "isize", "j": "usize", "l": "i32", "m": "u32", "n": "i128", "o": "u128", "s": "i16",
    "t": "u16", "u": "()", "v": "...", "x": "i64", "y": "u64", "z": "!", "p": "_",
}  # fmt: skip
_MAX_DEPTH = 200
_MAX_OUTPUT = 4096


class _Invalid(Exception):
    """The name is not well-formed v0 mangling."""


class _Parser:
    """A recursive-descent reader of one mangled name, printing as it goes."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.depth = 0
        self.out: list[str] = []
        self.length = 0
        #: While positive, parsed parts are not printed (impl paths are only
        #: there to make names unique).
        self.silent = 0
        #: Lifetimes bound by enclosing ``for<…>`` binders ('a, 'b, … in order).
        self.bound_lifetimes = 0

    # -- low level ------------------------------------------------------------

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def eat(self, char: str) -> bool:
        if self.peek() == char:
            self.pos += 1
            return True
        return False

    def next(self) -> str:
        char = self.peek()
        if not char:
            raise _Invalid("unexpected end")
        self.pos += 1
        return char

    def emit(self, text: str) -> None:
        if self.silent:
            return
        self.length += len(text)
        if self.length > _MAX_OUTPUT:
            raise _Invalid("too long")
        self.out.append(text)

    def base62(self) -> int:
        """``_`` is 0; otherwise digits 0-9a-zA-Z then ``_``, plus one."""
        if self.eat("_"):
            return 0
        value = 0
        while not self.eat("_"):
            char = self.next()
            if char.isdigit():
                digit = ord(char) - ord("0")
            elif "a" <= char <= "z":
                digit = 10 + ord(char) - ord("a")
            elif "A" <= char <= "Z":
                digit = 36 + ord(char) - ord("A")
            else:
                raise _Invalid("bad base-62 digit")
            value = value * 62 + digit
            if value > 1 << 64:
                raise _Invalid("number too large")
        return value + 1

    def decimal(self) -> int:
        """A decimal number; a leading 0 is the whole number (``00`` is two zeros)."""
        if self.eat("0"):
            return 0
        start = self.pos
        while self.peek().isdigit():
            self.pos += 1
        if start == self.pos:
            raise _Invalid("expected a number")
        return int(self.text[start : self.pos])

    def lifetime(self, index: int) -> str:
        """Index 0 is an erased lifetime; others count back from the innermost binder."""
        if index == 0:
            return "'_"
        depth = self.bound_lifetimes - index
        if depth < 0:
            raise _Invalid("lifetime outside its binder")
        return "'" + chr(ord("a") + depth) if depth < 26 else f"'_{depth}"

    def binder(self, inner: Callable[[], None]) -> None:
        """An optional ``G`` binder: prints ``for<'a, …> `` and binds them while ``inner`` runs."""
        count = self.optional_index("G")
        if count:
            first = self.bound_lifetimes
            self.bound_lifetimes += count
            names = [
                self.lifetime(self.bound_lifetimes - depth) for depth in range(first, first + count)
            ]
            self.emit("for<" + ", ".join(names) + "> ")
        try:
            inner()
        finally:
            self.bound_lifetimes -= count

    def optional_index(self, tag: str) -> int:
        return self.base62() + 1 if self.eat(tag) else 0

    def identifier(self) -> tuple[int, str]:
        """(disambiguator, name): closures and shims are told apart by the number."""
        return self.optional_index("s"), self.undisambiguated_identifier()

    def undisambiguated_identifier(self) -> str:
        punycode = self.eat("u")
        length = self.decimal()
        self.eat("_")
        end = self.pos + length
        if end > len(self.text):
            raise _Invalid("identifier past the end")
        raw = self.text[self.pos : end]
        self.pos = end
        if not punycode:
            return raw
        basic, _, encoded = raw.rpartition("_")
        try:
            return (basic + "-" + encoded).encode("ascii").decode("punycode")
        except (UnicodeError, ValueError):
            raise _Invalid("bad punycode") from None

    def backref(self, parse: Callable[[], None]) -> None:
        """Parses ``parse`` at an earlier position, then resumes here.

        Positions count from after the ``_R`` prefix; a backref must point
        before its own ``B``, which also rules out loops.
        """
        own_position = self.pos - 1 - 2
        target = self.base62()
        if target >= own_position:
            raise _Invalid("backref does not point backwards")
        saved = self.pos
        self.pos = target + 2
        parse()
        self.pos = saved

    def nested(self, parse: Callable[[], None]) -> None:
        self.depth += 1
        if self.depth > _MAX_DEPTH:
            raise _Invalid("too deep")
        try:
            parse()
        finally:
            self.depth -= 1

    # -- grammar --------------------------------------------------------------

    def path(self, in_value: bool = True) -> None:
        """A path; in value position generic arguments are written ``::<…>``, in types ``<…>``."""
        self.nested(lambda: self._path(in_value))

    def _path(self, in_value: bool) -> None:
        tag = self.next()
        if tag == "C":
            self.emit(self.identifier()[1])
        elif tag == "M":
            self.impl_path()
            self.emit("<")
            self.type()
            self.emit(">")
        elif tag == "X":
            self.impl_path()
            self.emit("<")
            self.type()
            self.emit(" as ")
            self.path(in_value=False)
            self.emit(">")
        elif tag == "Y":
            self.emit("<")
            self.type()
            self.emit(" as ")
            self.path(in_value=False)
            self.emit(">")
        elif tag == "N":
            namespace = self.next()
            self.path(in_value)
            index, name = self.identifier()
            if namespace.isupper():
                kind = {"C": "closure", "S": "shim"}.get(namespace, namespace)
                self.emit("::{" + kind + (f":{name}" if name else "") + f"#{index}" + "}")
            elif name:
                self.emit("::" + name)
        elif tag == "I":
            self.path(in_value)
            self.emit("::<" if in_value else "<")
            self.generic_args()
        elif tag == "B":
            self.backref(lambda: self.path(in_value))
        else:
            raise _Invalid(f"unknown path tag {tag!r}")

    def impl_path(self) -> None:
        self.optional_index("s")
        self.silent += 1
        try:
            self.path()
        finally:
            self.silent -= 1

    def items(self, parse: Callable[[], None], separator: str = ", ") -> int:
        """Parses items up to the closing ``E``, ``separator`` between them; returns how many."""
        count = 0
        while not self.eat("E"):
            if count:
                self.emit(separator)
            parse()
            count += 1
        return count

    def generic_args(self, close: bool = True) -> None:
        """Arguments up to ``E``; the caller has written ``<`` and, if ``close``, gets ``>``."""
        self.items(self.generic_arg)
        if close:
            self.emit(">")

    def generic_arg(self) -> None:
        if self.eat("L"):
            self.emit(self.lifetime(self.base62()))
        elif self.eat("K"):
            self.const()
        else:
            self.type()

    def type(self) -> None:
        self.nested(self._type)

    def _type(self) -> None:
        tag = self.peek()
        if tag in _BASIC_TYPES:
            self.pos += 1
            self.emit(_BASIC_TYPES[tag])
            return
        if tag in "RQ":
            self.pos += 1
            self.emit("&")
            if self.eat("L"):
                index = self.base62()
                if index:
                    self.emit(self.lifetime(index) + " ")
            if tag == "Q":
                self.emit("mut ")
            self.type()
        elif tag in "PO":
            self.pos += 1
            self.emit("*const " if tag == "P" else "*mut ")
            self.type()
        elif tag == "A":
            self.pos += 1
            self.emit("[")
            self.type()
            self.emit("; ")
            self.const()
            self.emit("]")
        elif tag == "S":
            self.pos += 1
            self.emit("[")
            self.type()
            self.emit("]")
        elif tag == "T":
            self.pos += 1
            self.emit("(")
            count = self.items(self.type)
            self.emit(",)" if count == 1 else ")")
        elif tag == "F":
            self.pos += 1
            self.fn_signature()
        elif tag == "D":
            self.pos += 1
            self.dyn_bounds()
        elif tag == "B":
            self.pos += 1
            self.backref(self.type)
        else:
            self.path(in_value=False)

    def fn_signature(self) -> None:
        self.binder(self._fn_signature)

    def _fn_signature(self) -> None:
        if self.eat("U"):
            self.emit("unsafe ")
        if self.eat("K"):
            abi = "C" if self.eat("C") else self.undisambiguated_identifier().replace("_", "-")
            self.emit(f'extern "{abi}" ')
        self.emit("fn(")
        self.items(self.type)
        self.emit(")")
        if self.peek() == "u":
            self.pos += 1  # returns (): printed as nothing
        else:
            self.emit(" -> ")
            self.type()

    def dyn_bounds(self) -> None:
        self.emit("dyn ")
        self.binder(self._dyn_traits)
        if self.eat("L"):
            index = self.base62()
            if index:
                self.emit(" + " + self.lifetime(index))

    def _dyn_traits(self) -> None:
        self.items(self.dyn_trait, " + ")

    def dyn_trait(self) -> None:
        """A trait path whose associated-type bindings join its generic arguments."""
        open_generics = self.path_open_generics()
        while self.eat("p"):
            self.emit(", " if open_generics else "<")
            open_generics = True
            self.emit(f"{self.undisambiguated_identifier()} = ")
            self.type()
        if open_generics:
            self.emit(">")

    def path_open_generics(self) -> bool:
        """Prints a type-position path, leaving a trailing ``<args`` unclosed; True if so."""
        if self.eat("I"):
            self.path(in_value=False)
            self.emit("<")
            self.generic_args(close=False)
            return True
        if self.peek() == "B":
            self.pos += 1
            result = [False]

            def at_target() -> None:
                result[0] = self.path_open_generics()

            self.backref(at_target)
            return result[0]
        self.path(in_value=False)
        return False

    def const(self) -> None:
        if self.eat("B"):
            self.backref(self.const)
            return
        if self.eat("p"):
            self.emit("_")
            return
        kind = self.next()
        negative = self.eat("n")
        start = self.pos
        while self.peek() != "_":
            if self.next() not in "0123456789abcdef":
                raise _Invalid("bad const digit")
        digits = self.text[start : self.pos]
        self.pos += 1
        value = int(digits, 16) if digits else 0
        if kind == "b":
            self.emit("true" if value else "false")
        elif kind == "c":
            self.emit(repr(chr(value)) if value < 0x110000 else "'?'")
        else:
            self.emit(f"{'-' if negative else ''}{value}")


def demangle_v0(name: str) -> str:
    """Readable form of a v0-mangled Rust name; anything else comes back unchanged."""
    base, dot, suffix = name.partition(".")
    if suffix.startswith("llvm."):
        dot = suffix = ""  # LLVM's internal-linkage tag says nothing to a reader
    if not base.startswith("_R"):
        return name
    parser = _Parser(base)
    parser.pos = 2
    try:
        if parser.peek().isdigit():
            parser.decimal()  # encoding version
        parser.path()
    except (_Invalid, RecursionError):
        return name
    return "".join(parser.out) + (dot + suffix if dot else "")
