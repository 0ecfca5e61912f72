#!/usr/bin/env python3
"""Generate vgpu.ko's netlink code and its mirrors from kmod/netlink/vgpu.yaml.

    python3 tools/ynl_gen.py            # write every output (make generate)
    python3 tools/ynl_gen.py --check    # exit 1 if a committed output differs
    python3 tools/ynl_gen.py --out DIR  # write under DIR instead of the tree

The spec's format is described at its head.  Outputs (each begins with a
"generated, do not edit" line and is committed: the kernel build needs no
Python):

    kmod/include/uapi/vgpu.h       uapi header: #defines and enums
    kmod/vgpu/netlink-gen.h        policies, ops table, mcast groups, handlers
    kmod/vgpu/netlink-gen.c        (declared in the .h; netlink.c registers them)
    vgpu/abi/uapi_gen.py           every value of the header, for vgpu/abi/uapi.py
    vgpu/vgpuko/messages_gen.py    every attribute's pyroute2 type

Standard library and PyYAML only.  The generator refuses a spec whose
request policies are not strict: every attribute of a set with a policy is
either refused or typed, and an integer or string it accepts has bounds (or
a stated reason, `unbounded`, why every value is meaningful).
"""

from __future__ import annotations

import argparse
import ast
import operator
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "kmod" / "netlink" / "vgpu.yaml"
SPEC_REL = "kmod/netlink/vgpu.yaml"

OUT_HEADER = "kmod/include/uapi/vgpu.h"
OUT_GEN_H = "kmod/vgpu/netlink-gen.h"
OUT_GEN_C = "kmod/vgpu/netlink-gen.c"
OUT_PY_UAPI = "vgpu/abi/uapi_gen.py"
OUT_PY_TYPES = "vgpu/vgpuko/messages_gen.py"
OUTPUTS = (OUT_HEADER, OUT_GEN_H, OUT_GEN_C, OUT_PY_UAPI, OUT_PY_TYPES)

GENERATED = f"Generated from {SPEC_REL} by tools/ynl_gen.py: do not edit (make generate)."

#: spec type -> (NLA type of a request policy, the header's type word, pyroute2 type)
TYPES = {
    "u8": ("NLA_U8", "u8", "uint8"),
    "u32": ("NLA_U32", "u32", "uint32"),
    "u64": ("NLA_U64", "u64", "uint64"),
    "s32": ("NLA_S32", "s32 (sent as u32)", "int32"),
    "string": ("NLA_NUL_STRING", "NUL-terminated string", "asciiz"),
    "binary": ("NLA_BINARY", "binary", "cdata"),
    "nest": ("NLA_NESTED", "nested", None),
    "pad": (None, "pad", "none"),
}
INT_TYPES = ("u8", "u32", "u64", "s32")
#: keys each part of the spec may carry (a typo is an error, not a default)
ATTR_KEYS = {"name", "type", "doc", "checks", "nested-attributes", "reply-only", "reject",
             "unbounded"}
CHECK_KEYS = {"min", "max", "max-len", "flags-mask"}
S16 = (-(1 << 15), (1 << 15) - 1)


class SpecError(Exception):
    pass


def cname(s: str) -> str:
    return s.upper().replace("-", "_")


# ------------------------------------------------------------ expressions
_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.BitOr: operator.or_, ast.BitAnd: operator.and_, ast.LShift: operator.lshift}


def c_eval(expr, names: dict[str, int]) -> int:
    """A check's or const's value: an int, or a C expression of names,
    numbers, + - * | & << and parentheses."""
    if isinstance(expr, bool):
        raise SpecError(f"{expr!r}: not a number")
    if isinstance(expr, int):
        return expr

    def ev(n):
        if isinstance(n, ast.Expression):
            return ev(n.body)
        if isinstance(n, ast.Constant) and isinstance(n.value, int):
            return n.value
        if isinstance(n, ast.Name):
            if n.id not in names:
                raise SpecError(f"{expr!r}: {n.id} is not defined in the spec")
            return names[n.id]
        if isinstance(n, ast.BinOp) and type(n.op) in _BINOPS:
            return _BINOPS[type(n.op)](ev(n.left), ev(n.right))
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            return -ev(n.operand)
        raise SpecError(f"{expr!r}: not a C expression the generator evaluates")
    return ev(ast.parse(str(expr).replace("1U <<", "1 <<"), mode="eval"))


# -------------------------------------------------------------- the model
@dataclass
class Attr:
    name: str                   # spec name
    cname: str                  # C enum member
    value: int
    type: str
    doc: str = ""
    checks: dict = field(default_factory=dict)
    nested: str | None = None   # nested-attributes
    reject: str | None = None   # NLA_REJECT's message (reply-only: "reply-only attribute")
    rejected: bool = False
    unbounded: str | None = None


@dataclass
class AttrSet:
    name: str
    enum_name: str
    attrs: list[Attr]           # value order, UNSPEC first
    unspec: str
    cnt_name: str
    max_name: str
    policy: str | None
    doc: str = ""
    subset_of: str | None = None

    def by_name(self) -> dict[str, Attr]:
        return {a.name: a for a in self.attrs}


@dataclass
class Family:
    raw: dict
    name: str
    version: int
    consts: dict[str, int | str] = field(default_factory=dict)   # every C name -> value
    order: list[str] = field(default_factory=list)               # rendered names in order
    sets: dict[str, AttrSet] = field(default_factory=dict)
    ops: list[dict] = field(default_factory=list)
    mcgrps: list[dict] = field(default_factory=list)


def _check_keys(what: str, d: dict, allowed: set) -> None:
    extra = set(d) - allowed
    if extra:
        raise SpecError(f"{what}: unknown keys {sorted(extra)}")


def load(path: Path = SPEC) -> Family:
    raw = yaml.safe_load(path.read_text())
    fam = Family(raw, raw["name"], raw["version"])
    names: dict[str, int] = {}

    def define(n: str, v, render: bool = True):
        if n in fam.consts or n in names:
            raise SpecError(f"{n} defined twice")
        fam.consts[n] = v
        if isinstance(v, int):
            names[n] = v
        if render:
            fam.order.append(n)

    define(cname(raw["c-family-name"]), raw["name"])
    define(cname(raw["c-version-name"]), raw["version"])
    for g in raw["mcast-groups"]["list"]:
        define(cname(g["c-define-name"]), g["name"])
        fam.mcgrps.append(g)

    for d in raw["definitions"]:
        t = d["type"]
        if t == "const":
            v = d["value"]
            define(cname(d["name"]), v if isinstance(v, int) else c_eval(v, names),
                   render="header" not in d)
        elif t == "enum":
            prefix = cname(d["name-prefix"])
            for i, e in enumerate(d["entries"]):
                e = e if isinstance(e, dict) else {"name": e}
                define(prefix + cname(e["name"]), i)
            define(cname(d["enum-cnt-name"]), len(d["entries"]))
        elif t == "flags":
            prefix = cname(d["name-prefix"])
            allv = 0
            for i, e in enumerate(d["entries"]):
                e = e if isinstance(e, dict) else {"name": e}
                define(prefix + cname(e["name"]), 1 << i)
                allv |= 1 << i
            if "all-name" in d:
                define(cname(d["all-name"]), allv)
        else:
            raise SpecError(f"definition {d['name']}: unknown type {t}")

    ops = raw["operations"]
    oprefix = cname(ops["name-prefix"])
    define(oprefix + "UNSPEC", 0)
    for i, op in enumerate(ops["list"], 1):
        define(oprefix + cname(op["name"]), i)
        fam.ops.append(op)
    define("__" + oprefix + "MAX", len(ops["list"]) + 1)
    define(oprefix + "MAX", len(ops["list"]))

    # attribute sets: full ones first (they define enums), subsets after
    for s in raw["attribute-sets"]:
        if "subset-of" in s:
            continue
        prefix = cname(s["name-prefix"])
        unspec = cname(s.get("attr-unspec-name", s["name-prefix"] + "unspec"))
        cnt = cname(s.get("attr-cnt-name", "__" + s["name-prefix"] + "max"))
        mx = cname(s.get("attr-max-name", s["name-prefix"] + "max"))
        attrs = [Attr("unspec", unspec, 0, "unused")]
        define(unspec, 0)
        for i, a in enumerate(s["attributes"], 1):
            _check_keys(f"{s['name']}.{a['name']}", a, ATTR_KEYS)
            if a["type"] not in TYPES:
                raise SpecError(f"{s['name']}.{a['name']}: unknown type {a['type']}")
            at = Attr(a["name"], prefix + cname(a["name"]), i, a["type"],
                      doc=str(a.get("doc", "")).strip(), checks=dict(a.get("checks") or {}),
                      nested=a.get("nested-attributes"), unbounded=a.get("unbounded"))
            _check_keys(f"{s['name']}.{a['name']} checks", at.checks, CHECK_KEYS)
            _set_reject(at, a)
            define(at.cname, i)
            attrs.append(at)
        define(cnt, len(attrs))
        define(mx, len(attrs) - 1)
        fam.sets[s["name"]] = AttrSet(s["name"], s["enum-name"], attrs, unspec, cnt, mx,
                                      s.get("policy"), str(s.get("doc", "")).strip())
    for s in raw["attribute-sets"]:
        if "subset-of" not in s:
            continue
        parent = fam.sets[s["subset-of"]]
        pb = parent.by_name()
        attrs = [parent.attrs[0]]
        for a in s["attributes"]:
            _check_keys(f"{s['name']}.{a['name']}", a, ATTR_KEYS)
            if a["name"] not in pb:
                raise SpecError(f"{s['name']}: {a['name']} is not in {parent.name}")
            p = pb[a["name"]]
            at = Attr(p.name, p.cname, p.value, p.type, doc=p.doc,
                      checks=dict(a.get("checks") or {}),
                      nested=a.get("nested-attributes", p.nested), unbounded=a.get("unbounded"))
            _set_reject(at, a)
            attrs.append(at)
        attrs.sort(key=lambda x: x.value)
        fam.sets[s["name"]] = AttrSet(s["name"], parent.enum_name, attrs, parent.unspec,
                                      parent.cnt_name, parent.max_name, s.get("policy"),
                                      str(s.get("doc", "")).strip(), subset_of=parent.name)
    _validate(fam, names)
    return fam


def _set_reject(at: Attr, a: dict) -> None:
    if a.get("reply-only") and "reject" in a:
        raise SpecError(f"{at.name}: reply-only and reject both given")
    if a.get("reply-only"):
        at.rejected, at.reject = True, "reply-only attribute"
    elif "reject" in a:
        at.rejected, at.reject = True, str(a["reject"])
    elif at.type == "pad":
        at.rejected = True


def strictness_problems(fam: Family) -> list[str]:
    """What makes a request policy less than strict (empty when none)."""
    bad = []
    for s in fam.sets.values():
        if s.policy is None:
            continue
        full = fam.sets[s.subset_of] if s.subset_of else s
        have = {a.name for a in s.attrs}
        for a in full.attrs[1:]:
            if a.name not in have:
                bad.append(f"{s.policy}: {a.cname} has no entry (a subset names every "
                           f"attribute: accepted or refused)")
        for a in s.attrs[1:]:
            where = f"{s.policy}[{a.cname}]"
            if a.rejected:
                if a.checks or a.unbounded:
                    bad.append(f"{where}: refused, yet has checks or unbounded")
                continue
            if a.type in INT_TYPES:
                bounded = {"min", "max", "flags-mask"} & set(a.checks)
                if bounded and a.unbounded:
                    bad.append(f"{where}: has bounds and says unbounded")
                if not bounded and not a.unbounded:
                    bad.append(f"{where}: {a.type} accepted without bounds (checks: min, max "
                               f"or flags-mask; or unbounded: why every value is meaningful)")
                if "max-len" in a.checks:
                    bad.append(f"{where}: max-len on an integer")
            elif a.type == "string":
                if "max-len" not in a.checks:
                    bad.append(f"{where}: string accepted without checks: max-len")
            elif a.type == "binary":
                if "max-len" not in a.checks:
                    bad.append(f"{where}: binary accepted without checks: max-len")
            elif a.type == "nest":
                target = fam.sets.get(a.nested)
                if target is None or target.policy is None:
                    bad.append(f"{where}: a nest accepted in requests needs nested-attributes "
                               f"naming a set with a policy")
            if a.unbounded and a.type not in INT_TYPES:
                bad.append(f"{where}: unbounded is for integers")
    return bad


def _validate(fam: Family, names: dict[str, int]) -> None:
    errors = strictness_problems(fam)
    for s in fam.sets.values():
        for a in s.attrs[1:]:
            if a.type == "nest":
                if a.nested not in fam.sets:
                    errors.append(f"{a.cname}: nested-attributes {a.nested!r} is no set")
                elif not s.subset_of:
                    # the header's comment names the nest's entries: its first word
                    # must be a member (or the PREFIX*) of the nested enum
                    t = fam.sets[a.nested]
                    word = a.doc.split(" ")[0].rstrip(",;:")
                    members = [x.cname for x in t.attrs[1:]]
                    ok = word in members or (word.endswith("*") and
                                             all(m.startswith(word[:-1]) for m in members))
                    if not ok:
                        errors.append(f"{a.cname}: its doc must start with an entry of "
                                      f"{t.enum_name} or its PREFIX*, not {word!r}")
            for k, v in a.checks.items():
                try:
                    c_eval(v, names)
                except SpecError as e:
                    errors.append(f"{a.cname}: checks.{k}: {e}")
    for op in fam.ops:
        s = fam.sets[op["attribute-set"]]
        by = s.by_name()
        for kind in ("do", "dump"):
            part = op.get(kind)
            if part is None:
                continue
            if "handler" not in part:
                errors.append(f"{op['name']}.{kind}: no handler")
            for a in (part.get("request") or {}).get("attributes", []):
                if a not in by:
                    errors.append(f"{op['name']}.{kind}.request: {a} is not in {s.name}")
                elif by[a].rejected:
                    errors.append(f"{op['name']}.{kind}.request: {a} is refused by "
                                  f"{s.policy}")
            for a in (part.get("reply") or {}).get("attributes", []):
                if a not in by:
                    errors.append(f"{op['name']}.{kind}.reply: {a} is not in {s.name}")
        if ("do" in op or "dump" in op) != ("mcgrp" not in op):
            errors.append(f"{op['name']}: either do/dump or mcgrp + event")
        if ("do" in op or "dump" in op) and "admin-perm" not in op.get("flags", []):
            errors.append(f"{op['name']}: every command of this family is admin-perm")
        for a in (op.get("event") or {}).get("attributes", []):
            if a not in by:
                errors.append(f"{op['name']}.event: {a} is not in {s.name}")
    if errors:
        raise SpecError("\n".join(errors))


# ------------------------------------------------------------ C rendering
def _comment_block(text: str, indent: str = "") -> list[str]:
    lines = text.rstrip("\n").split("\n")
    if len(lines) == 1:
        return [f"{indent}/* {lines[0]} */"]
    return [f"{indent}/*"] + [f"{indent} * {ln}".rstrip() for ln in lines] + [f"{indent} */"]


def _define(name: str, value: str, doc: str = "") -> str:
    line = f"#define {name:<23} {value}"
    if doc:
        line = f"{line:<43} /* {doc} */"
    return line


def _c_value(v) -> str:
    return f'"{v}"' if isinstance(v, str) else str(v)


def _member(name: str, comment: str = "") -> str:
    line = f"\t{name},"
    if comment:
        pad = max(1, 28 - len(name) - 1)
        line = f"\t{name},{' ' * pad}/* {comment} */"
    return line


def _attr_comment(a: Attr) -> str:
    word = TYPES[a.type][1]
    if a.type == "nest":
        return f"nested: {a.doc}"
    if not a.doc:
        return word
    if a.doc[0] in ",:;":
        return f"{word}{a.doc}"
    return f"{word}, {a.doc}"


def render_header(fam: Family) -> str:
    raw = fam.raw
    out = ["/* SPDX-License-Identifier: (GPL-2.0 WITH Linux-syscall-note) OR MIT */",
           f"/* {GENERATED} */"]
    out += _comment_block(raw["doc"])
    guard = raw["uapi-guard"]
    out += [f"#ifndef {guard}", f"#define {guard}", ""]
    for n in (cname(raw["c-family-name"]), cname(raw["c-version-name"])):
        out.append(_define(n, _c_value(fam.consts[n])))
    for g in fam.mcgrps:
        out.append(_define(cname(g["c-define-name"]), _c_value(g["name"])))

    for d in raw["definitions"]:
        if "header" in d:
            continue
        lead = d.get("header-doc") or (d.get("doc") if d["type"] == "enum" else None)
        if lead or d["type"] != "const":
            out.append("")
        if lead:
            out += _comment_block(str(lead).strip())
        if d["type"] == "const":
            v = d["value"]
            out.append(_define(cname(d["name"]), str(v), str(d.get("doc", "")).strip()))
        elif d["type"] == "enum":
            prefix = cname(d["name-prefix"])
            out.append(f"enum {d['enum-name']} {{")
            for e in d["entries"]:
                e = e if isinstance(e, dict) else {"name": e}
                out.append(_member(prefix + cname(e["name"]), str(e.get("doc", "")).strip()))
            out.append(f"\t{cname(d['enum-cnt-name'])},")
            out.append("};")
        elif d["type"] == "flags":
            prefix = cname(d["name-prefix"])
            ents = [e if isinstance(e, dict) else {"name": e} for e in d["entries"]]
            for i, e in enumerate(ents):
                out.append(_define(prefix + cname(e["name"]), f"(1U << {i})",
                                   str(e.get("doc", "")).strip()))
            if "all-name" in d:
                out.append(_define(cname(d["all-name"]),
                                   "(" + " | ".join(prefix + cname(e["name"]) for e in ents)
                                   + ")"))

    ops = raw["operations"]
    oprefix = cname(ops["name-prefix"])
    out += ["", f"enum {ops['enum-name']} {{", f"\t{oprefix}UNSPEC,"]
    out += [f"\t{oprefix}{cname(op['name'])}," for op in fam.ops]
    out += [f"\t__{oprefix}MAX,", "};", f"#define {oprefix}MAX (__{oprefix}MAX - 1)", ""]

    out += _comment_block(
        "Attribute enums (enum vgpu_*attr): the comment of every member but\n"
        "*_UNSPEC starts with the attribute's type, one of\n"
        "  u8, u32, u64              the netlink integer of that size\n"
        "  s32 (sent as u32)         a signed value put as a u32\n"
        "  binary                    bytes (nla_put)\n"
        "  NUL-terminated string     NLA_NUL_STRING\n"
        "  nested: NAME entries      a nest of the enum that has member NAME\n"
        "  nested: PREFIX*           a nest of the enum whose members are PREFIX*\n"
        "  pad                       nla_put_u64_64bit's alignment attribute\n"
        "followed by the end of the comment or by \",\", \":\", \";\" or \" \".\n"
        "tests/host/test_uapi.py parses these and checks them against the kernel's\n"
        "policies and nla_put/nla_get calls and against vgpu/vgpuko/messages.py's types;\n"
        f"the spec ({SPEC_REL}) states each once.")
    for s in fam.sets.values():
        if s.subset_of:
            continue
        out.append("")
        if s.doc:
            out += _comment_block(s.doc)
        out.append(f"enum {s.enum_name} {{")
        out.append(f"\t{s.unspec},")
        out += [_member(a.cname, _attr_comment(a)) for a in s.attrs[1:]]
        out += [f"\t{s.cnt_name},", "};", f"#define {s.max_name} ({s.cnt_name} - 1)"]
    out += ["", f"#endif /* {guard} */", ""]
    return "\n".join(out)


def _policy_entry(fam: Family, a: Attr) -> str:
    if a.rejected:
        if a.reject:
            return f'{{ .type = NLA_REJECT, .reject_message = "{a.reject}" }}'
        return "{ .type = NLA_REJECT }"
    nla = TYPES[a.type][0]
    if a.type == "nest":
        return f"NLA_POLICY_NESTED({fam.sets[a.nested].policy})"
    if a.type == "string":
        return f"{{ .type = {nla}, .len = {a.checks['max-len']} }}"
    if a.type == "binary":
        return f"{{ .type = {nla}, .len = {a.checks['max-len']} }}"
    c = a.checks
    if "flags-mask" in c:
        return f"NLA_POLICY_MASK({nla}, {c['flags-mask']})"
    if "min" in c and "max" in c:
        if _fits_s16(fam, c["min"]) and _fits_s16(fam, c["max"]):
            return f"NLA_POLICY_RANGE({nla}, {c['min']}, {c['max']})"
        return f"NLA_POLICY_FULL_RANGE({nla}, &{_range_name(a)})"
    if "min" in c:
        return f"NLA_POLICY_MIN({nla}, {c['min']})"
    if "max" in c:
        return f"NLA_POLICY_MAX({nla}, {c['max']})"
    return f"{{ .type = {nla} }}"


def _names(fam: Family) -> dict[str, int]:
    return {k: v for k, v in fam.consts.items() if isinstance(v, int)}


def _fits_s16(fam: Family, v) -> bool:
    x = c_eval(v, _names(fam))
    return S16[0] <= x <= S16[1]


def _range_name(a: Attr) -> str:
    return f"vgpu_{a.name.replace('-', '_')}_range"


def _policy_order(fam: Family) -> list[AttrSet]:
    """Sets with a policy, each after the policies its nests name."""
    done, out = set(), []

    def visit(s: AttrSet):
        if s.name in done:
            return
        done.add(s.name)
        for a in s.attrs[1:]:
            if a.type == "nest" and not a.rejected:
                visit(fam.sets[a.nested])
        out.append(s)
    for s in fam.sets.values():
        if s.policy:
            visit(s)
    return out


def _handlers(fam: Family) -> list[tuple[str, str]]:
    """(function, prototype) of every handler the ops table names."""
    out = []
    for op in fam.ops:
        if "do" in op:
            out.append((op["do"]["handler"], "struct sk_buff *skb, struct genl_info *info"))
        if "dump" in op:
            d = op["dump"]
            if "pre" in d:
                out.append((d["pre"], "struct netlink_callback *cb"))
            out.append((d["handler"], "struct sk_buff *skb, struct netlink_callback *cb"))
            if "post" in d:
                out.append((d["post"], "struct netlink_callback *cb"))
    return out


def _cmd_ops(fam: Family) -> list[dict]:
    return [op for op in fam.ops if "do" in op or "dump" in op]


def render_gen_h(fam: Family) -> str:
    out = ["/* SPDX-License-Identifier: GPL-2.0 */", f"/* {GENERATED} */",
           "#ifndef _VGPU_NETLINK_GEN_H", "#define _VGPU_NETLINK_GEN_H", "",
           "#include <net/netlink.h>", "#include <net/genetlink.h>", "",
           '#include "uapi/vgpu.h"', ""]
    for s in _policy_order(fam):
        out.append(f"extern const struct nla_policy {s.policy}[{s.max_name} + 1];")
    out += ["", "/* The multicast groups, by their place in vgpu_mcgrps. */", "enum {"]
    out += [f"\t{g['id-name']}," for g in fam.mcgrps]
    out += ["};",
            f"extern const struct genl_multicast_group vgpu_mcgrps[{len(fam.mcgrps)}];", "",
            "/* The handlers (netlink.c) of the ops table. */"]
    out += [f"int {fn}({proto});" for fn, proto in _handlers(fam)]
    table = fam.raw["operations"]["ops-table"]
    out += [f"extern const struct genl_ops {table}[{len(_cmd_ops(fam))}];", "",
            "#endif /* _VGPU_NETLINK_GEN_H */", ""]
    return "\n".join(out)


def render_gen_c(fam: Family) -> str:
    out = ["// SPDX-License-Identifier: GPL-2.0", f"/* {GENERATED} */",
           "/*",
           " * The request policies of the family (one per attribute set that a request",
           " * carries; an attribute no request may carry is NLA_REJECT, so it is",
           " * refused with an extack message naming it), its ops table and its",
           " * multicast groups.  netlink.c registers them and implements the handlers.",
           " */",
           '#include "vgpu.h"', '#include "netlink-gen.h"', ""]
    for s in _policy_order(fam):
        for a in s.attrs[1:]:
            c = a.checks
            if (not a.rejected and a.type in INT_TYPES and "min" in c and "max" in c
                    and not (_fits_s16(fam, c["min"]) and _fits_s16(fam, c["max"]))):
                out += [f"/* {a.cname}: above s16, the policy's own min/max cannot hold it",
                        " * (not const: this kernel's nla_policy points to a mutable one). */",
                        f"static struct netlink_range_validation {_range_name(a)} __ro_after_init = {{",
                        f"\t.min = {c['min']},", f"\t.max = {c['max']},", "};", ""]
    for s in _policy_order(fam):
        if s.doc and s.subset_of:
            out += _comment_block(s.doc)
        out.append(f"const struct nla_policy {s.policy}[{s.max_name} + 1] = {{")
        for a in s.attrs[1:]:
            out.append(f"\t[{a.cname}] = {_policy_entry(fam, a)},")
        out += ["};", ""]
    out.append("const struct genl_multicast_group vgpu_mcgrps[] = {")
    for g in fam.mcgrps:
        if g.get("doc"):
            out += _comment_block(str(g["doc"]).strip(), "\t")
        flags = " | ".join("GENL_MCAST_" + cname(f) for f in g.get("flags", []))
        out += [f"\t[{g['id-name']}] = {{", f"\t\t.name = {cname(g['c-define-name'])},"]
        if flags:
            out.append(f"\t\t.flags = {flags},")
        out.append("\t},")
    out += ["};", ""]
    table = fam.raw["operations"]["ops-table"]
    oprefix = cname(fam.raw["operations"]["name-prefix"])
    out.append(f"const struct genl_ops {table}[] = {{")
    for op in _cmd_ops(fam):
        parts = [f".cmd = {oprefix}{cname(op['name'])}"]
        if "do" in op:
            parts.append(f".doit = {op['do']['handler']}")
        if "dump" in op:
            d = op["dump"]
            if "pre" in d:
                parts.append(f".start = {d['pre']}")
            parts.append(f".dumpit = {d['handler']}")
            if "post" in d:
                parts.append(f".done = {d['post']}")
        flags = " | ".join("GENL_" + cname(f) for f in op.get("flags", []))
        if flags:
            parts.append(f".flags = {flags}")
        out += ["\t{"] + [f"\t\t{p}," for p in parts] + ["\t},"]
    out += ["};", ""]
    return "\n".join(out)


# ------------------------------------------------------- Python rendering
def render_py_uapi(fam: Family) -> str:
    out = [f'"""{GENERATED}', "",
           "Every #define and enum member of kmod/include/uapi/vgpu.h with its value;",
           'vgpu/abi/uapi.py re-exports them.  Standard library only."""', "",
           "# flake8: noqa", ""]
    for n in fam.order:
        v = fam.consts[n]
        out.append(f"{n} = {v!r}")
    out += ["", "__all__ = ["] + [f"    {n!r}," for n in fam.order] + ["]", ""]
    return "\n".join(out)


def render_py_types(fam: Family) -> str:
    out = [f'"""{GENERATED}', "",
           "The pyroute2 type of every attribute of every attribute set, in enum order",
           '(a nest: the name of its nla class in vgpu/vgpuko/messages.py)."""', ""]
    # a subset decodes with its parent's class (the enum is the same)
    sets = {s["name"]: s for s in fam.raw["attribute-sets"]}
    classes = {}
    for n, s in sets.items():
        base = sets[s.get("subset-of", n)]
        classes[n] = base.get("py-class", base["name"].replace("-", "_"))
    for s in fam.sets.values():
        if s.subset_of:
            continue
        out.append(f"{cname(s.name)}_ATTR_TYPES = {{")
        out.append(f'    "{s.unspec}": "none",')
        for a in s.attrs[1:]:
            t = classes[a.nested] if a.type == "nest" else TYPES[a.type][2]
            out.append(f'    "{a.cname}": "{t}",')
        out += ["}", ""]
    return "\n".join(out).rstrip("\n") + "\n"


def render_all(fam: Family) -> dict[str, str]:
    return {OUT_HEADER: render_header(fam), OUT_GEN_H: render_gen_h(fam),
            OUT_GEN_C: render_gen_c(fam), OUT_PY_UAPI: render_py_uapi(fam),
            OUT_PY_TYPES: render_py_types(fam)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spec", type=Path, default=SPEC)
    ap.add_argument("--out", type=Path, default=ROOT, help="root to write under")
    ap.add_argument("--check", action="store_true",
                    help="write nothing; exit 1 if a committed output differs")
    args = ap.parse_args(argv)
    try:
        files = render_all(load(args.spec))
    except SpecError as e:
        print(f"{args.spec}: {e}", file=sys.stderr)
        return 2
    stale = []
    for rel, text in files.items():
        p = args.out / rel
        if args.check:
            if not p.exists() or p.read_text() != text:
                stale.append(rel)
            continue
        p.parent.mkdir(parents=True, exist_ok=True)
        if not p.exists() or p.read_text() != text:
            p.write_text(text)
            print(f"wrote {rel}")
    if stale:
        print("out of date with the spec (make generate): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
