"""The escapes table: every NV_ESC_* number and the params struct(s) the
driver checks its size against (rm-ioctl-table: nv.c, osapi.c, escape.c of
595.45.04; RM_ALLOC takes either NVOS21 or NVOS64)."""

from __future__ import annotations

from . import cdefs
from .probe import Result
from .release import Release, TreeFacts, hex_, size

COLUMNS = ("nr", "name", "params", "sizeof", "check", "params_from")


def defines(rel: Release) -> dict[str, cdefs.Define]:
    out = {}
    for path in rel.ioctl_headers():
        for d in cdefs.defines(path, path.parent):
            if d.name.startswith("NV_ESC_"):
                out.setdefault(d.name, d)
    return out


def sizes(tree: TreeFacts, defs: dict) -> set[str]:
    return {e.params for name in defs for e in tree.escapes.get(name, [])}


def rows(rel: Release, tree: TreeFacts, defs: dict, result: Result) -> list[dict]:
    out = []
    for name in defs:
        nr = hex_(result.values.get(name), 2)
        entries = [e for e in tree.escapes.get(name, []) if rel.exists(e.params)]
        if not entries:
            out.append(dict(nr=nr, name=name, params="", sizeof="", check="", params_from=""))
        for e in entries:
            out.append(dict(nr=nr, name=name, params=e.params, sizeof=size(result, e.params),
                            check=e.check, params_from=f"rm-ioctl-table:{e.source}"))
    return sorted(out, key=lambda r: (r["nr"], r["name"], r["params"]))
