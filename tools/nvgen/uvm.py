"""The UVM table: every /dev/nvidia-uvm ioctl command and its params struct
(UVM's own convention, enforced by its dispatch macros: command FOO takes
FOO_PARAMS).

uvm_ioctl.h includes uvm_types.h, which the headers archive does not carry.
Given a clone of NVIDIA/open-gpu-kernel-modules (--nvidia-git), the
release's own copies come from its tag (vendor.from_git; a file the tag
does not have either, nv_uvm_user_types.h before 580, is not part of the
release).  Otherwise the 595.45.04 tree's copy stands in (with
nv_uvm_user_types.h, which 535-575 lack too), so the headers compile; but a
struct that uses anything only the stand-in declares
(UvmGpuMappingAttributes, UVM_MAX_GPUS, ...) would be measured with another
release's layout, so its size is reported unknown instead.  Commands
defined only for Windows builds are left out.
"""

from __future__ import annotations

import re
from pathlib import Path

from . import cdefs
from .probe import HeaderSet, Result
from .release import DEFINES, UNKNOWN, UVM_TYPES, Release, TreeFacts, hex_, size
from .vendor import GitFiles

COLUMNS = ("cmd", "name", "params", "sizeof")

_TYPEDEF = re.compile(r"\btypedef\s+(?:struct|union)\s*\w*\s*\{")
_TAG = re.compile(r"\b(?:struct|union|enum)\s+(\w+)\s*\{")
_ENUM_BODY = re.compile(r"\benum\s*\w*\s*\{([^}]*)\}")
_ENUM_CONSTANT = re.compile(r"(?:^|,)\s*(?://[^\n]*\n\s*|/\*.*?\*/\s*)*([A-Za-z_]\w*)", re.S)
_WORD = re.compile(r"[A-Za-z_]\w*")


def defines(rel: Release) -> dict[str, cdefs.Define]:
    """UVM_IOCTL_BASE(n) in uvm_ioctl.h; the plain numbers of
    uvm_linux_ioctl.h (UVM_INITIALIZE 0x30000001)."""
    out = {}
    for d in cdefs.defines(rel.uvm / "uvm_ioctl.h", rel.uvm):
        if d.value.startswith("UVM_IOCTL_BASE("):
            out.setdefault(d.name, d)
    for d in cdefs.defines(rel.uvm / "uvm_linux_ioctl.h", rel.uvm):
        if d.literal() is not None:
            out.setdefault(d.name, d)
    return out


def sizes(rel: Release, defs: dict) -> set[str]:
    return {n + "_PARAMS" for n in defs if rel.exists(n + "_PARAMS")}


def lacking(root: Path) -> list[str]:
    """The UVM_TYPES files the headers archive does not carry for the
    release whose header tree is root (in UVM's or the common directory)."""
    dirs = {root / Path(f).parent for f in UVM_TYPES}
    return [f for f in UVM_TYPES if not any((d / Path(f).name).is_file() for d in dirs)]


def stand_ins(rel: Release, tree: TreeFacts, own: GitFiles | None = None) -> list[Path]:
    """The tree's files that stand in for ones this release lacks."""
    if rel.name == tree.release or own is not None:
        return []      # the tree's uvm_types.h is this release's own, or its tag gave its own
    return [tree.uvm_dir / Path(f).name for f in lacking(rel.root)]


def source(release: str, root: Path, tree: TreeFacts, own: GitFiles | None = None) -> str:
    """Where the UVM_TYPES files the archive lacks come from: "archive" (it
    lacks none), "tree" (595.45.04's own), "git:<tag>", "tree:<release>" (a
    release read from its own tree) or "stand-in:<tree>"."""
    if not lacking(root):
        return "archive"
    if release == tree.release:
        return "tree"
    return f"{own.origin}:{own.tag}" if own is not None else f"stand-in:{tree.release}"


def headerset(rel: Release, tree: TreeFacts, own: GitFiles | None = None) -> HeaderSet:
    """The release's own UVM headers first; then the files its tag gave, or
    else the tree's copies after them."""
    if own is not None:
        tag_dirs = [own.root / Path(f).parent for f in UVM_TYPES]
        return HeaderSet(["uvm_linux_ioctl.h"], [rel.uvm, rel.kcommon, *tag_dirs], [], DEFINES)
    return HeaderSet(["uvm_linux_ioctl.h"], [rel.uvm, rel.kcommon], [tree.uvm_dir], DEFINES)


def _typedef_bodies(text: str) -> dict[str, str]:
    """typedef struct/union { ... } NAME; -> NAME: body (braces matched)."""
    out = {}
    for m in _TYPEDEF.finditer(text):
        depth, i = 1, m.end()
        while depth and i < len(text):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        name = re.match(r"\s*(\w+)", text[i:])
        if name:
            out[name.group(1)] = text[m.end():i]
    return out


def _declared_only_by(paths: list[Path], rel: Release) -> set[str]:
    """Macros, typedefs, tags and enum constants that the stand-ins declare
    and the release's own headers do not."""
    names = cdefs.declared(paths)
    for path in paths:
        text = path.read_text(errors="replace")
        names.update(_TAG.findall(text))
        for body in _ENUM_BODY.findall(text):
            names.update(_ENUM_CONSTANT.findall(body))
    return names - rel.names


def borrowed_layouts(rel: Release, paths: list[Path]) -> set[str]:
    """The uvm_ioctl.h types whose layout depends on a stand-in: they name
    something only a stand-in declares, directly or through another type."""
    if not paths:
        return set()
    foreign = _declared_only_by(paths, rel)
    text = "".join((rel.uvm / f).read_text(errors="replace")
                   for f in ("uvm_ioctl.h", "uvm_linux_ioctl.h"))
    words = {name: set(_WORD.findall(body)) for name, body in _typedef_bodies(text).items()}
    tainted = {n for n, w in words.items() if w & foreign}
    while True:
        more = {n for n, w in words.items() if n not in tainted and w & tainted}
        if not more:
            return tainted
        tainted |= more


def rows(rel: Release, defs: dict, borrowed: set[str], result: Result) -> list[dict]:
    out = []
    for name in defs:
        typ = name + "_PARAMS" if rel.exists(name + "_PARAMS") else ""
        out.append(dict(cmd=hex_(result.values.get(name), 8), name=name, params=typ,
                        sizeof=UNKNOWN if typ in borrowed else size(result, typ)))
    return sorted(out, key=lambda r: (r["cmd"], r["name"]))
