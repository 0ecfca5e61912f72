"""The controls table: every RM control command, its params struct (FINN's
pairing, else the release's own export table where its tree is vendored,
595.45.04's otherwise, else NVIDIA's naming convention) and, for each release
whose whole tree is vendored (535.261.03, 595.45.04), what its own export
table entry says: the params type the driver checks, who may call
(rm_privilege), all flags, required access rights and the exporting NVOC
classes.  rm_privilege is empty when the release's driver exports no such
command (it answers NV_ERR_NOT_SUPPORTED: resControlLookup, rs_resource.c);
the commands its driver exports that no header names are rows without a
name.

"""

from __future__ import annotations

from . import cdefs, rmsrc
from .probe import Result
from .release import NOT_HERE, UNKNOWN, Release, TreeFacts, hex_, pick, size

COLUMNS = ("cmd", "name", "header", "params", "sizeof", "params_from",
           "rm_params", "rm_privilege", "rm_flags", "rm_access", "rm_class")


def defines(rel: Release) -> dict[str, cdefs.Define]:
    """The ctrl headers' macros that FINN evaluated from an interface id,
    "(FINN_..._INTERFACE_ID << 8) | ...".  Their names do not always hold
    _CTRL_CMD_ (NV906F_CTRL_GET_CLASS_ENGINEID); the _CTRL_CMD_ macros
    without such a comment are field values, not commands."""
    out = {}
    for path in sorted((rel.sdk / "ctrl").rglob("*.h")):
        for d in cdefs.defines(path, rel.sdk):
            if "INTERFACE_ID" in (d.finn() or ""):
                out.setdefault(d.name, d)
    return out


def _candidates(src, d: cdefs.Define) -> list[tuple[str | None, str]]:
    """src: the release's own export tables if its tree is vendored, else
    the 595.45.04 tree's (applied by name)."""
    cands = [(d.finn_struct(), "finn")]
    cands += [(e.params, "rm-export") for e in src.exports.get(d.literal(), []) if e.params]
    cands.append((d.name.replace("_CTRL_CMD_", "_CTRL_", 1) + "_PARAMS", "name"))
    cands.append((d.name + "_PARAMS", "name"))
    return cands


# Controls NVIDIA's own user space of a release issues under a number the
# release's SDK headers do not define and its open RM does not export,
# found by running that user space (docs/cuda.md): (release prefix, cmd,
# params struct).  libcuda 535.261.03's cuCtxCreate sets the CUDA
# performance limit as 0x809909 (NV0080_CTRL_PERF | LEGACY_NON_PRIVILEGED,
# message 0x9: NV0080_CTRL_PERF_CUDA_LIMIT_CONTROL_PARAMS, ctrl0080perf.h),
# which 550 and later name NV0080_CTRL_CMD_PERF_CUDA_LIMIT_SET_CONTROL at
# 0x801909.  Unnamed here, as the driver's own unnamed exports are.
USERSPACE_ONLY = (
    ("535.", 0x00809909, "NV0080_CTRL_PERF_CUDA_LIMIT_CONTROL_PARAMS"),
)


def _userspace_only(rel: Release) -> list[tuple[int, str]]:
    return [(cmd, typ) for pre, cmd, typ in USERSPACE_ONLY if rel.name.startswith(pre)]


def own_exports(rel: Release, tree: TreeFacts,
                own: rmsrc.ExportTables | None) -> rmsrc.ExportTables | None:
    """The release's own export tables: own (read from its vendored tree),
    the 595.45.04 tree's for that release, else None (headers only)."""
    if own is not None:
        return own
    if rel.name == tree.release:
        return rmsrc.ExportTables(tree.release, tree.exports, tree.flag_names)
    return None


def sizes(rel: Release, tree: TreeFacts, defs: dict, own: rmsrc.ExportTables | None = None) -> set[str]:
    own = own_exports(rel, tree, own)
    out = {t for d in defs.values() for t, _ in _candidates(own or tree, d)}
    if own is not None:
        out |= {e.params for entries in own.exports.values() for e in entries}
    out |= {typ for _, typ in _userspace_only(rel)}
    return out


def _export_columns(tree, entries, access_names: dict[int, str]) -> dict:
    """One value per distinct export entry (a command several NVOC classes
    export, such as NV0090's on channels, groups and contexts, agrees)."""
    def joined(values):
        return "|".join(dict.fromkeys(values))
    return dict(
        rm_params=joined(e.params for e in entries),
        rm_privilege=joined(rmsrc.control_privilege(e.flags, tree.flag_names) for e in entries),
        rm_flags=joined(rmsrc.bit_names(e.flags, tree.flag_names) for e in entries),
        rm_access=joined(rmsrc.bit_names(e.access, access_names) for e in entries),
        rm_class=joined(e.cls for e in entries))


def rows(rel: Release, tree: TreeFacts, defs: dict, result: Result,
         own: rmsrc.ExportTables | None = None) -> list[dict]:
    """own: the release's export tables read from its own vendored tree
    (None: 595.45.04's own, or none for a release with headers only)."""
    own = own_exports(rel, tree, own)
    access_names = rmsrc.access_right_names(rel.sdk / "rs_access.h") if own else {}
    out, seen = [], set()
    for name, d in defs.items():
        params, sizeof, src = pick(rel, result, _candidates(own or tree, d))
        cmd = result.values.get(name)
        row = dict(cmd=hex_(cmd, 8), name=name, header=d.header,
                   params=params, sizeof=sizeof, params_from=src)
        if own:
            row.update(_export_columns(own, own.exports.get(cmd, []), access_names))
        else:
            row.update({k: NOT_HERE for k in COLUMNS[6:]})
        seen.add(cmd)
        out.append(row)
    if own:
        # Commands the driver exports but no header macro names: no name.
        for cmd, entries in own.exports.items():
            if cmd not in seen:
                typ = entries[0].params
                row = dict(cmd=hex_(cmd, 8), name="", header="", params=typ,
                           sizeof=size(result, typ), params_from="rm-export" if typ else "")
                row.update(_export_columns(own, entries, access_names))
                out.append(row)
                seen.add(cmd)
    for cmd, typ in _userspace_only(rel):
        if hex_(cmd, 8) in seen or cmd in seen:
            continue
        row = dict(cmd=hex_(cmd, 8), name="", header="", params=typ,
                   sizeof=size(result, typ), params_from="userspace")
        row.update(_export_columns(own, [], access_names) if own else
                   {k: NOT_HERE for k in COLUMNS[6:]})
        out.append(row)
    return sorted(out, key=lambda r: (r["cmd"], r["name"]))


def mismatches(rows: list[dict], result: Result) -> list[dict]:
    """Controls whose header-paired struct differs in size from the one the
    driver's export table checks (none in 595.45.04: its 72 differing names
    are typedef aliases).  The driver's size is what a caller must pass."""
    out = []
    for r in rows:
        for typ in filter(None, r["rm_params"].split("|")):
            if typ != r["params"] and result.sizes.get(typ) != result.sizes.get(r["params"]):
                out.append(dict(table="controls", name=r["name"] or r["cmd"], probe=f"sizeof({typ})",
                                reason=f"the driver checks {typ} ({result.sizes.get(typ, UNKNOWN)} "
                                       f"bytes), not {r['params'] or 'nothing'}"))
    return out
