"""The classes table: every class number, its allocation params struct (the
header's FINN pairing, else 595.45.04's resource_list.h) and, for 595.45.04,
how its RM allocates it (rm_alloc: required/optional params or none;
rm_privilege: who may).  Class numbers the 595 resource list does not name
cannot be allocated by that driver (NV_ERR_INVALID_CLASS)."""

from __future__ import annotations

import re

from . import cdefs, rmsrc
from .probe import Result
from .release import NOT_HERE, Release, TreeFacts, hex_, pick

COLUMNS = ("id", "name", "header", "params", "sizeof", "params_from", "rm_alloc", "rm_privilege")

_CLASS_FILE = re.compile(r"^cl([0-9a-fA-F]{4})")


def defines(rel: Release, tree: TreeFacts) -> dict[str, cdefs.Define]:
    """A class header's macros whose value is the header's own number
    (cl0070.h: NV01_MEMORY_VIRTUAL 0x70; notifier headers such as
    cl0000_notification.h hold only indexes), plus the resource list's
    classes defined elsewhere (nvos.h: NV01_ROOT_CLIENT; cl84a0.h's lists)."""
    out, everything = {}, {}
    for path in sorted((rel.sdk / "class").glob("cl*.h")) + [rel.sdk / "nvos.h"]:
        m = _CLASS_FILE.match(path.name)
        own = m and not path.stem.endswith("_notification")
        for d in cdefs.defines(path, rel.sdk):
            everything.setdefault(d.name, d)
            if own and d.literal() == int(m.group(1), 16) and not d.name.endswith("_MESSAGE_ID"):
                out.setdefault(d.name, d)
    for name in tree.classes:
        if name not in out and name in everything:
            out[name] = everything[name]
    return out


def sizes(tree: TreeFacts, defs: dict) -> set[str]:
    return {d.finn_struct() for d in defs.values()} | {a.params for a in tree.classes.values()}


def _allocs_by_id(tree: TreeFacts, result: Result) -> dict[int, rmsrc.ClassAlloc]:
    """The resource list keyed by number: RM looks a class up by number, so
    every alias (NV01_MEMORY_USER for NV01_MEMORY_LOCAL_USER) allocates alike."""
    return {result.values[n]: a for n, a in tree.classes.items() if n in result.values}


def rows(rel: Release, tree: TreeFacts, defs: dict, result: Result) -> list[dict]:
    by_id = _allocs_by_id(tree, result)
    out = []
    for name, d in defs.items():
        alloc = by_id.get(result.values.get(name))
        cands = [(d.finn_struct(), "finn")]
        if alloc and alloc.params:
            cands.append((alloc.params, "rm-resource-list"))
        params, sizeof, src = pick(rel, result, cands)
        if rel.name != tree.release:
            rm_alloc = rm_priv = NOT_HERE
        elif alloc is None:
            rm_alloc = rm_priv = ""
        else:
            rm_alloc, rm_priv = f"{alloc.rule} {alloc.params}".strip(), alloc.privilege
        out.append(dict(id=hex_(result.values.get(name), 8), name=name, header=d.header,
                        params=params, sizeof=sizeof, params_from=src,
                        rm_alloc=rm_alloc, rm_privilege=rm_priv))
    return sorted(out, key=lambda r: (r["id"], r["name"]))
