"""Build one release's tables: escapes, classes, controls, UVM commands,
and the list of numbers the compiler could not give (failures).

Names come from the release's headers (cdefs.py), pairings of names with
params structs from FINN's comments, NVIDIA's naming convention and the
595.45.04 driver source (rmsrc.py), and every number from the compiler
(probe.py).  Each row says where its params struct came from:

  finn                the header's FINN comment: "... | FOO_MESSAGE_ID"
  name                NVIDIA's naming convention (FOO_CTRL_CMD_X -> FOO_CTRL_X_PARAMS)
  rm-ioctl-table:F    the driver's ioctl size table in F (nv.c, osapi.c, escape.c)
  rm-resource-list    the driver's resource_list.h
  rm-export           the driver's generated control export tables

The rm-* pairings are read from the 595.45.04 source tree and applied to
older releases where the struct exists; the sizes are always measured
against the release's own headers.  A release whose own whole tree is
vendored (535.261.03) takes its controls' pairings and export columns from
its own export tables.  Columns that only a release's own tree can answer
(rm_privilege, rm_flags, ...) are "-" for the others.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from . import classes, controls, escapes, rmsrc, uvm
from .probe import HeaderSet, Result, measure
from .release import ABSENT, DEFINES, UNKNOWN, Release, TreeFacts
from .vendor import GitFiles

FAILURE_COLUMNS = ("table", "name", "probe", "reason")


@dataclass
class Tables:
    escapes: list[dict]
    classes: list[dict]
    controls: list[dict]
    uvm: list[dict]
    failures: list[dict]


def _undefined(result: Result) -> set[str]:
    """Names whose own value gcc calls undeclared: their #define sits under a
    condition false on Linux (UVM's WIN32-only commands)."""
    return {name for (kind, name), reason in result.failed.items()
            if kind == "value" and reason.startswith(f"'{name}' undeclared")}


def _failures(table: str, rows: list[dict], key: str, result: Result,
              why: dict | None = None, context: str = "") -> list[dict]:
    """Why each unknown number of a table is unknown: why[params] if given,
    else gcc's reason (followed by context) or that nothing declares it."""
    def reason(item):
        return result.failed[item] + context if item in result.failed else ABSENT

    out = []
    for r in rows:
        if r["sizeof"] == UNKNOWN:
            out.append(dict(table=table, name=r["name"], probe=f"sizeof({r['params']})",
                            reason=(why or {}).get(r["params"]) or reason(("sizeof", r["params"]))))
        if r[key] == UNKNOWN:
            out.append(dict(table=table, name=r["name"], probe=key, reason=reason(("value", r["name"]))))
    return out


def _left_out(table: str, names: set[str], result: Result) -> list[dict]:
    return [dict(table=table, name=n, probe="left out", reason=result.failed[("value", n)])
            for n in sorted(names)]


def build(release: str, root: Path, tree: TreeFacts, workdir: Path,
          own: GitFiles | None = None, rm_own: rmsrc.ExportTables | None = None) -> Tables:
    """All tables of one release; workdir takes the probe programs; own, the
    UVM type headers its git tag gave (--nvidia-git), if any; rm_own, the
    control export tables of its own vendored tree (not 595.45.04's), if any."""
    rel = Release(release, root)
    esc, cls, ctl, uvc = (escapes.defines(rel), classes.defines(rel, tree),
                          controls.defines(rel), uvm.defines(rel))
    anchors = [root, tree.uvm_dir] + ([own.root] if own else [])

    wanted = escapes.sizes(tree, esc) | classes.sizes(tree, cls) | controls.sizes(rel, tree, ctl, rm_own)
    rm_set = HeaderSet([p.name for p in rel.ioctl_headers()] + rel.sdk_headers(),
                       [rel.sdk, rel.unix], [rel.kcommon], DEFINES)
    rm = measure(rm_set, {t for t in wanted if rel.exists(t)}, set(esc) | set(cls) | set(ctl),
                 workdir / "rm", anchors)
    uvm_result = measure(uvm.headerset(rel, tree, own), uvm.sizes(rel, uvc), set(uvc),
                         workdir / "uvm", anchors)

    stand_ins = uvm.stand_ins(rel, tree, own)
    lacking = "/".join(p.name for p in stand_ins)
    borrowed = uvm.borrowed_layouts(rel, stand_ins)
    why = {t: f"its layout depends on declarations from {lacking}, missing from the "
              f"headers archive for this release" for t in borrowed}
    context = f" ({tree.release}'s {lacking} standing in)" if stand_ins else ""
    if own and own.taken:
        whence = f"git tag {own.tag}" if own.origin == "git" else f"the {own.tag} tree"
        context = f" ({'/'.join(Path(f).name for f in own.taken)} from {whence})"

    gone_rm, gone_uvm = _undefined(rm), _undefined(uvm_result)
    esc = {k: v for k, v in esc.items() if k not in gone_rm}
    cls = {k: v for k, v in cls.items() if k not in gone_rm}
    ctl = {k: v for k, v in ctl.items() if k not in gone_rm}
    uvc = {k: v for k, v in uvc.items() if k not in gone_uvm}

    t = Tables(escapes=escapes.rows(rel, tree, esc, rm),
               classes=classes.rows(rel, tree, cls, rm),
               controls=controls.rows(rel, tree, ctl, rm, rm_own),
               uvm=uvm.rows(rel, uvc, borrowed, uvm_result),
               failures=[])
    t.failures = (_failures("escapes", t.escapes, "nr", rm)
                  + _failures("classes", t.classes, "id", rm)
                  + _failures("controls", t.controls, "cmd", rm)
                  + _failures("uvm", t.uvm, "cmd", uvm_result, why, context)
                  + _left_out("rm", gone_rm, rm) + _left_out("uvm", gone_uvm, uvm_result))
    if release == tree.release or rm_own is not None:
        t.failures += controls.mismatches(t.controls, rm)
    return t
