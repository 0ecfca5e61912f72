"""Read #define lines and declared names out of C headers, as text.

This module only finds names: which macros a header defines, which names it
declares, and what NVIDIA's FINN generator wrote beside its numbers.  Values and sizes are never taken from the
text; probe.py asks the compiler for those.  The scan is deliberately shallow
(no conditional compilation, no macro expansion): every candidate it yields
is checked by compiling it, so a false candidate costs a probe line, not a
wrong answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)(?![\w(])[ \t]*(.*)$", re.M)
_COMMENT = re.compile(r"/\*(.*?)\*/|//(.*)$")
# Names a header declares: macros, "} NAME;" / "} NAME, *PNAME;" after a
# struct body, and the last word of "typedef ... NAME;".
_DECLARED = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)|\}\s*(\w+)\s*[;,]|\btypedef\s[^;{}]*?\b(\w+)\s*;",
                       re.M)
_INT = re.compile(r"^\(?\s*(0[xX][0-9a-fA-F]+|\d+)[uUlL]*\s*\)?\s*(?:/\*.*|//.*)?$")
# FINN writes where a generated number came from:  /* finn: Evaluated from "..." */
_FINN = re.compile(r'finn:\s*Evaluated from\s*"([^"]*)"')
_MESSAGE_ID = re.compile(r"\b([A-Za-z_]\w*)_MESSAGE_ID\b")


@dataclass(frozen=True)
class Define:
    """One object-like macro: its name, the rest of its line (value and
    comments, split only when asked: most of the 100,000 defines of a release
    are never looked at twice) and its header."""
    name: str
    rest: str
    header: str          # path relative to the include root it was found under

    @property
    def value(self) -> str:
        return _COMMENT.sub(" ", self.rest).split("/*")[0].strip()

    @property
    def comment(self) -> str:
        return " ".join(c.group(1) or c.group(2) or "" for c in _COMMENT.finditer(self.rest)).strip()

    def literal(self) -> int | None:
        """The value when it is a plain integer literal, else None."""
        m = _INT.match(self.rest)
        return int(m.group(1), 0) if m else None

    def finn(self) -> str | None:
        """The expression FINN says this value was evaluated from, if any."""
        m = _FINN.search(self.comment)
        return m.group(1) if m else None

    def finn_struct(self) -> str | None:
        """The struct FINN paired with this number: "(...) | FOO_MESSAGE_ID"
        names FOO.  An offset from another struct's id ("FOO_MESSAGE_ID + 1")
        names nothing."""
        expr = self.finn()
        if expr is None or "+" in expr:
            return None
        m = _MESSAGE_ID.search(expr)
        return m.group(1) if m else None


def defines(path: Path, root: Path) -> list[Define]:
    """Every object-like #define in path, in file order."""
    text = path.read_text(errors="replace").replace("\\\n", " ")
    header = path.relative_to(root).as_posix()
    return [Define(m.group(1), m.group(2), header) for m in _DEFINE.finditer(text)]


def declared(paths) -> set[str]:
    """Every name the given files declare as a macro or a typedef.  A params
    struct guessed from a naming convention is probed only if it is here."""
    names: set[str] = set()
    for path in paths:
        for m in _DECLARED.finditer(path.read_text(errors="replace")):
            names.add(m.group(1) or m.group(2) or m.group(3))
    return names
