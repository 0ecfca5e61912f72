"""The allow-list file: escapes, classes, controls and UVM commands that a
slice forwards although its driver release's policy refuses them (or vgpu.ko
does not implement them yet); an operator's extension of a profile
(docs/config.md, "Audit mode and allow-lists").

Tab-separated text, UTF-8, the format ``vgpuctl audit C --allow-list FILE``
writes and ``[profiles.X] allow_list = FILE`` reads::

    # comments and blank lines are allowed anywhere
    kind	number	name
    control	0x20800145	NV2080_CTRL_CMD_GPU_ACQUIRE_COMPUTE_MODE_RESERVATION
    escape	0x5c

- the header ``kind<TAB>number<TAB>name`` is the first line that is not a
  comment or blank;
- then one item a line: ``kind`` one of escape, class, control, uvm;
  ``number`` hexadecimal with 0x (an escape's at most 0xff, any other's a
  u32); ``name`` informational (NVIDIA's name; may be empty or left out);
- an item may appear once; at most VGPU_MAX_ALLOW (4096) items.

Owned here: parsing with every problem reported as ``<file>:<line>: <quoted
value> <reason>``, rendering, and the atomic write.  Standard library only
(vgpuctl imports it for --allow-list).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from vgpu.abi.uapi import AUDIT_KINDS, VGPU_MAX_ALLOW
from vgpu.common.files import atomic_write
from vgpu.common.values import quote, read_utf8

__all__ = ["HEADER", "KINDS", "MAX_ITEMS", "AllowItem", "AllowListError", "parse", "load",
           "render", "write", "format_number"]

HEADER = ("kind", "number", "name")
KINDS = AUDIT_KINDS                 # index: enum vgpu_audit_kind
MAX_ITEMS = VGPU_MAX_ALLOW
MAX_ERRORS = 20                     # problems listed before "... and N more"
_HEX = set("0123456789abcdefABCDEF")


@dataclass(frozen=True, order=True)
class AllowItem:
    """One item: kind (escape, class, control, uvm), number, NVIDIA's name
    (informational: not compared)."""
    kind_value: int                 # enum vgpu_audit_kind (sort key: kind order, then number)
    number: int
    name: str = field(default="", compare=False)

    @property
    def kind(self) -> str:
        return KINDS[self.kind_value]

    @property
    def pair(self) -> tuple[int, int]:
        """(kind, number) as vgpu.vgpuko.client's slice_new/slice_set take it."""
        return self.kind_value, self.number

    @classmethod
    def of(cls, kind: str, number: int, name: str = "") -> "AllowItem":
        return cls(KINDS.index(kind), number, name or "")


class AllowListError(ValueError):
    """An invalid allow-list: ``errors`` holds one line per problem
    (``<file>:<line>: ...``); str() joins them with newlines."""

    def __init__(self, errors: list[str] | str):
        self.errors = [errors] if isinstance(errors, str) else list(errors)
        super().__init__("\n".join(self.errors))

    def __str__(self) -> str:
        return "\n".join(self.errors)


def format_number(kind: str, number: int) -> str:
    """The number as kmod/vgpu/policy/<release>.tsv writes it: 0xd4 for an
    escape, 0x20800145 (eight digits) for the others."""
    return f"0x{number:02x}" if kind == "escape" else f"0x{number:08x}"


def _number(kind: str, text: str) -> tuple[int | None, str]:
    """(value, "") or (None, why)."""
    if not (text[:2] in ("0x", "0X") and len(text) > 2 and set(text[2:]) <= _HEX):
        return None, "is not a hexadecimal number with 0x (e.g. 0x20800145)"
    v = int(text, 16)
    limit = 0xFF if kind == "escape" else 0xFFFFFFFF
    if v > limit:
        what = "an escape number (an ioctl's nr, 8 bits)" if kind == "escape" else "a u32"
        return None, f"is above {limit:#x}, the largest {what}"
    return v, ""


def parse(text: str, path: str = "<allow-list>") -> list[AllowItem]:
    """The items of an allow-list's text, sorted by kind and number.
    Raises AllowListError listing every problem."""
    errors: list[str] = []
    items: list[AllowItem] = []
    seen: dict[tuple[int, int], int] = {}
    header_line = 0

    def err(line: int, msg: str) -> None:
        errors.append(f"{path}:{line}: {msg}")

    for ln, raw in enumerate(text.split("\n"), start=1):
        line = raw.rstrip("\r")
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        cells = [c.strip() for c in line.split("\t")]
        if not header_line:
            header_line = ln
            if tuple(cells) != HEADER:
                err(ln, f"{quote(line)} is not the header kind<TAB>number<TAB>name "
                        f"(the first line that is not a comment)")
                return _raise(errors)
            continue
        if len(cells) < 2 or len(cells) > 3:
            err(ln, f"{quote(line)} is not kind<TAB>number<TAB>name "
                    f"({len(cells)} tab-separated field{'s' if len(cells) != 1 else ''})")
            continue
        kind, num = cells[0], cells[1]
        name = cells[2] if len(cells) == 3 else ""
        if kind not in KINDS:
            err(ln, f"kind {quote(kind)} is not one of {', '.join(KINDS)}")
            continue
        value, why = _number(kind, num)
        if value is None:
            err(ln, f"number {quote(num)} {why}")
            continue
        item = AllowItem.of(kind, value, name)
        if item.pair in seen:
            err(ln, f"{kind} {format_number(kind, value)} is listed twice (first on line "
                    f"{seen[item.pair]})")
            continue
        seen[item.pair] = ln
        if len(items) == MAX_ITEMS:
            err(ln, f"{kind} {format_number(kind, value)}: more than {MAX_ITEMS} items "
                    f"(VGPU_MAX_ALLOW, vgpu.ko's limit per slice)")
            continue
        items.append(item)
    if not header_line:
        err(1, "no header: the file must start with kind<TAB>number<TAB>name")
    if errors:
        _raise(errors)
    return sorted(items)


def _raise(errors: list[str]):
    if len(errors) > MAX_ERRORS:
        errors = errors[:MAX_ERRORS] + [f"... and {len(errors) - MAX_ERRORS} more problems"]
    raise AllowListError(errors)


def load(path: str | os.PathLike) -> list[AllowItem]:
    """Read and parse an allow-list file; AllowListError for a file that
    cannot be read or is not UTF-8, too."""
    return parse(read_utf8(path, AllowListError), str(path))


def render(items) -> str:
    """The file's text: the header, then the items sorted by kind and
    number (duplicates once), three columns each (an unknown name is an
    empty third column).  A name holding a tab or newline is left out (the
    file stays one item a line)."""
    lines = ["\t".join(HEADER)]
    done = set()
    for it in sorted(items):
        if it.pair in done:
            continue
        done.add(it.pair)
        name = it.name if it.name and not any(c in it.name for c in "\t\r\n") else ""
        lines.append(f"{it.kind}\t{format_number(it.kind, it.number)}\t{name}")
    return "\n".join(lines) + "\n"


def write(path: str | os.PathLike, items) -> int:
    """Write the file atomically (a temporary file in the same directory,
    fsync, rename: a reader sees the old file or the new one, never part of
    one); mode 0644.  Returns the number of items written; raises OSError."""
    text = render(items)
    path = os.fspath(path)
    atomic_write(path, text, mode=0o644)
    return text.count("\n") - 1
