"""Struct members out of C headers, as text: enough to find the members a
mediator must treat specially (embedded user pointers and file descriptors).

NVIDIA's ABI headers declare params structs in a small, regular dialect:
`typedef struct NAME { members } NAME;`, members `TYPE name[DIM];`, the
alignment wrappers `NV_DECLARE_ALIGNED(TYPE name, 8)` and
`TYPE name NV_ALIGN_BYTES(8)`, and inline struct/union members (NVOS32's
`data` union).  This reader handles exactly that and nothing more: no macro
expansion, no conditional compilation (both arms of an #if are read).  Sizes
and offsets never come from here (probe.py measures them); a member this
reader misses would be a missed pointer, so embedded.py reports every struct
it could not find as unknown rather than as "none".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_COMMENTS = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
_PREPROC = re.compile(r"^[ \t]*#.*?(?<!\\)$", re.M | re.S)
_ALIGNED = re.compile(r"NV_DECLARE_ALIGNED\s*\(\s*([^,()]+?)\s*,\s*\d+\s*\)")
_ALIGN_BYTES = re.compile(r"\bNV_ALIGN_BYTES\s*\(\s*\d+\s*\)")
_AGGREGATE = re.compile(r"\b(typedef\s+)?(struct|union)\s*(\w*)\s*\{")
_TYPEDEF = re.compile(r"\btypedef\s+(?:(?:struct|union)\s+)?(\w+)\s+\*?\s*(\w+)\s*;")
_DECLARATOR = re.compile(r"^(\**)\s*([A-Za-z_]\w*)\s*((?:\[[^\]]*\])*)\s*(?::\s*\w+)?$")
_QUALIFIERS = {"const", "volatile", "struct", "union", "enum"}


@dataclass
class Member:
    type: str                         # "NvP64", "NvU32", a struct name, or "" for inline
    name: str
    array: bool = False
    pointer: bool = False             # declared with '*' (a real pointer)
    inline: list["Member"] | None = None   # members of an inline struct/union


@dataclass
class Headers:
    """Every struct/union definition and typedef alias the headers hold."""
    structs: dict[str, list[Member]] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)

    def resolve(self, name: str) -> str:
        seen = set()
        while name in self.aliases and name not in self.structs and name not in seen:
            seen.add(name)
            name = self.aliases[name]
        return name

    def members(self, name: str) -> list[Member] | None:
        return self.structs.get(self.resolve(name))


def _clean(text: str) -> str:
    text = _COMMENTS.sub(" ", text.replace("\\\n", " "))
    text = _PREPROC.sub(" ", text)
    text = _ALIGNED.sub(r"\1", text)
    return _ALIGN_BYTES.sub(" ", text)


def _close(text: str, start: int) -> int:
    """Index just past the '}' matching the '{' at text[start]."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i + 1
    return len(text)


def split_top(body: str, sep: str) -> list[str]:
    """body split at sep outside brackets, parts stripped, empty ones dropped."""
    out, depth, cur = [], 0, []
    for ch in body:
        if ch in "{([":
            depth += 1
        elif ch in "})]":
            depth -= 1
        if ch == sep and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur))
    return [s.strip() for s in out if s.strip()]


def _declarators(type_: str, decls: str, inline=None) -> list[Member]:
    out = []
    for d in split_top(decls, ","):
        m = _DECLARATOR.match(d.strip())
        if m:
            out.append(Member(type_, m.group(2), bool(m.group(3)), bool(m.group(1)), inline))
    return out


def _members(body: str) -> list[Member]:
    out: list[Member] = []
    for stmt in split_top(body, ";"):
        if "{" in stmt:
            open_ = stmt.index("{")
            close = _close(stmt, open_)
            inner = _members(stmt[open_ + 1:close - 1])
            out += _declarators("", stmt[close:], inner) or [Member("", "", False, False, inner)]
            continue
        words = stmt.replace("*", " * ").split()
        words = [w for w in words if w not in _QUALIFIERS]
        if len(words) < 2:
            continue
        # The type is the words before the first declarator: the first word
        # (NVIDIA's types are single identifiers; "unsigned int" is joined).
        n = 2 if words[0] in ("unsigned", "signed") and len(words) > 2 else 1
        type_, rest = " ".join(words[:n]), " ".join(words[n:]).replace(" * ", "*").replace("* ", "*")
        out += _declarators(type_, rest)
    return out


def parse(text: str, into: Headers | None = None) -> Headers:
    """Add the struct/union definitions and typedef aliases of one header."""
    h = into or Headers()
    text = _clean(text)
    pos = 0
    while True:
        m = _AGGREGATE.search(text, pos)
        if not m:
            break
        close = _close(text, m.end() - 1)
        members = _members(text[m.end():close - 1])
        names = [m.group(3)] if m.group(3) else []
        end = text.find(";", close)
        if m.group(1) and end != -1:
            names += [d.group(2) for d in (_DECLARATOR.match(x) for x in split_top(text[close:end], ","))
                      if d and not d.group(1)]
        for name in names:
            h.structs.setdefault(name, members)
        pos = close
    for old, new in _TYPEDEF.findall(text):
        if old != new:
            h.aliases.setdefault(new, old)
    return h
