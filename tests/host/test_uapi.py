"""vgpu/abi/uapi.py against kmod/include/uapi/vgpu.h, the netlink API's one source
of truth.

A C program generated from the Python names prints every value as the
compiler sees it (gcc against the header); the values must match.  The header
is also parsed for its `#define VGPU_*` names and the members of its enums:
each must exist in uapi.py, and uapi.py must name nothing the header lacks.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

from vgpu.abi import uapi

HEADER = ROOT / "kmod" / "include" / "uapi" / "vgpu.h"
HEADER_GUARD = "_UAPI_VGPU_H"


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def header_names() -> tuple[set[str], set[str]]:
    """(object-like #define names, enum member names) of the header that
    start with VGPU_ or __VGPU_."""
    text = _strip_comments(HEADER.read_text())
    defines = set()
    for m in re.finditer(r"^[ \t]*#[ \t]*define[ \t]+(\w+)(\(?)", text, re.M):
        if m.group(2) == "(" or m.group(1) == HEADER_GUARD:
            continue
        defines.add(m.group(1))
    members = set()
    for body in re.findall(r"\benum\b[^{;]*\{(.*?)\}", text, re.S):
        for item in body.split(","):
            item = item.strip()
            if not item:
                continue
            members.add(re.match(r"(\w+)", item).group(1))
    return defines, members


def test_header_parses():
    defines, members = header_names()
    assert "VGPU_GENL_NAME" in defines and "VGPU_CMD_SLICE_NEW" in members
    assert len(defines) >= 10 and len(members) >= 30


def test_every_header_name_is_mirrored_and_nothing_more():
    defines, members = header_names()
    in_header = {n for n in defines | members if n.lstrip("_").startswith("VGPU_")}
    others = sorted(n for n in defines | members if not n.lstrip("_").startswith("VGPU_"))
    assert not others, f"uapi/vgpu.h defines names outside the VGPU_ namespace: {others}"
    mirrored = set(uapi.uapi_constants())
    missing = sorted(in_header - mirrored)
    extra = sorted(mirrored - in_header)
    assert not missing, f"in uapi/vgpu.h but missing from vgpu/abi/uapi.py: {missing}"
    assert not extra, f"in vgpu/abi/uapi.py but not in uapi/vgpu.h: {extra}"


def _c_program() -> str:
    lines = ["#include <stdio.h>", '#include "vgpu.h"', "int main(void) {"]
    for name, val in sorted(uapi.uapi_constants().items()):
        if isinstance(val, str):
            lines.append(f'  printf("S %s %s\\n", "{name}", {name});')
        else:
            lines.append(f'  printf("I %s %lld\\n", "{name}", (long long)({name}));')
    lines.append("  return 0;\n}")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def c_values(tmp_path_factory):
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        pytest.skip("gcc not available: C value comparison skipped")
    d = tmp_path_factory.mktemp("uapi")
    src, exe = d / "uapi.c", d / "uapi"
    src.write_text(_c_program())
    r = subprocess.run([gcc, "-std=gnu11", "-Wall", "-Werror", "-o", str(exe), str(src),
                        "-I", str(HEADER.parent)], capture_output=True, text=True)
    assert r.returncode == 0, f"compiling against uapi/vgpu.h failed:\n{r.stderr[-6000:]}"
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    vals = {}
    for line in out.splitlines():
        kind, name, value = line.split(" ", 2)
        vals[name] = value if kind == "S" else int(value)
    return vals


def test_values_match_c(c_values):
    consts = uapi.uapi_constants()
    assert set(c_values) == set(consts)
    bad = [f"{n}: python {v!r} != C {c_values[n]!r}" for n, v in sorted(consts.items())
           if c_values[n] != v]
    assert not bad, "\n".join(bad)


def test_attribute_tables_follow_enums():
    assert [getattr(uapi, n) for n in uapi.SLICE_ATTRS] == list(range(uapi.VGPU_A_MAX + 1))
    assert [getattr(uapi, n) for n in uapi.GPU_ATTRS] == list(range(uapi.VGPU_GPU_A_MAX + 1))
    assert [getattr(uapi, n) for n in uapi.LIST_ATTRS] == list(range(uapi.VGPU_A_LIST_MAX + 1))
    assert [getattr(uapi, n) for n in uapi.AUDIT_ATTRS] == list(range(uapi.VGPU_AUDIT_A_MAX + 1))
    assert not set(uapi.SLICE_ATTRS) & set(uapi.LIST_ATTRS)


def test_audit_names_follow_enums():
    """The names the API and the allow-list files give kinds and verdicts
    follow enum vgpu_audit_kind / vgpu_audit_verdict."""
    assert [uapi.AUDIT_KINDS.index(k) for k in ("escape", "class", "control", "uvm")] == [
        uapi.VGPU_AUDIT_ESCAPE, uapi.VGPU_AUDIT_CLASS, uapi.VGPU_AUDIT_CONTROL,
        uapi.VGPU_AUDIT_UVM]
    assert len(uapi.AUDIT_KINDS) == uapi.__VGPU_AUDIT_KIND_MAX
    assert uapi.AUDIT_VERDICT_NAMES == {
        uapi.VGPU_AUDIT_FORWARD: "forward", uapi.VGPU_AUDIT_REWRITE: "rewrite",
        uapi.VGPU_AUDIT_VIRTUALISE: "virtualise", uapi.VGPU_AUDIT_REFUSE: "refuse",
        uapi.VGPU_AUDIT_NOT_IMPLEMENTED: "not-implemented"}
    assert len(uapi.AUDIT_VERDICT_NAMES) == uapi.__VGPU_AUDIT_VERDICT_MAX


def test_kernel_client_maps_every_attribute():
    """vgpu/vgpuko/messages.py's pyroute2 nla_maps name every attribute of the header."""
    from vgpu.vgpuko import messages
    assert [n for n, _t in messages.vgpumsg.nla_map] == uapi.SLICE_ATTRS
    assert [n for n, _t in messages.vgpumsg.slice_list.nla_map] == uapi.LIST_ATTRS
    assert [n for n, _t in messages.vgpumsg.slice_list.gpu.nla_map] == uapi.GPU_ATTRS
    assert [n for n, _t in messages.vgpumsg.slice_list.audit_entry.nla_map] == uapi.AUDIT_ATTRS
    assert [n for n, _t in messages.vgpumsg.trace.nla_map] == uapi.TRACE_ATTRS
    assert [n for n, _t in messages.vgpumsg.trace.trace_list.nla_map] == uapi.TRACE_LIST_ATTRS
    # and gives each an explicit type (a new attribute would decode as hex)
    assert list(messages.SLICE_ATTR_TYPES) == uapi.SLICE_ATTRS
    assert list(messages.LIST_ATTR_TYPES) == uapi.LIST_ATTRS
    assert list(messages.GPU_ATTR_TYPES) == uapi.GPU_ATTRS
    assert list(messages.AUDIT_ATTR_TYPES) == uapi.AUDIT_ATTRS
    assert list(messages.TRACE_ATTR_TYPES) == uapi.TRACE_ATTRS
    assert list(messages.TRACE_LIST_ATTR_TYPES) == uapi.TRACE_LIST_ATTRS


def test_event_api_names():
    """The events the daemon publishes for enum vgpu_event are named after its
    members, and docs/api.md lists each."""
    assert sorted(uapi.EVENT_API_NAMES) == list(range(1, uapi.__VGPU_EVENT_MAX))
    assert uapi.EVENT_API_NAMES[uapi.VGPU_EVENT_SLICE_EMPTIED] == "slice-emptied"
    api = (ROOT / "docs" / "api.md").read_text()
    missing = [n for n in uapi.EVENT_API_NAMES.values() if f'"{n}"' not in api]
    assert not missing, f"docs/api.md's Event types lack {missing}"


# ------------------------------------------------ attribute types
# Every member of an attribute enum (enum vgpu_*attr) but *_UNSPEC carries its
# type at the start of its comment (the grammar is in the header, above enum
# vgpu_attr).  The types are checked against the kernel's request policies
# (struct nla_policy tables), its nla_put_* / nla_get_* calls, and
# vgpu/vgpuko/messages.py's pyroute2 nla_maps, so an attribute's type is written once,
# in the header, and every other place that states it is held to it.

KMOD_SRC = ROOT / "kmod" / "vgpu"

_TYPE_RE = re.compile(r"(u8|u32|u64|s32 \(sent as u32\)|binary|NUL-terminated string|pad"
                      r"|nested: (\w+\*?))(?=$|[,:; ])")
_CANON = {"s32 (sent as u32)": "s32", "NUL-terminated string": "string"}


@dataclass
class Attr:
    name: str
    enum: str
    type: str                   # unspec u8 u32 u64 s32 binary string pad nested
    comment: str
    ref: str | None = None      # nested: the enum of its entries


def _comment_text(c: str) -> str:
    lines = [re.sub(r"^\s*\*(?!/)\s?", "", ln) for ln in c[2:-2].splitlines()]
    return " ".join(ln.strip() for ln in lines).strip()


def _enum_members(body: str) -> list[tuple[str, str | None]]:
    """(member, the comment that follows it on its line) in order."""
    toks = list(re.finditer(r"/\*.*?\*/|(\w+)\s*(?:=[^,]*?)?\s*,", body, re.S))
    out = []
    for i, m in enumerate(toks):
        if m.group(1) is None:
            continue
        comment = None
        if i + 1 < len(toks) and toks[i + 1].group(1) is None \
                and "\n" not in body[m.end():toks[i + 1].start()]:
            comment = _comment_text(toks[i + 1].group(0))
        out.append((m.group(1), comment))
    return out


def header_enums() -> dict[str, list[tuple[str, str | None]]]:
    """enum name -> its members (with their comments), __*_MAX included."""
    text = re.sub(r"//[^\n]*", "", HEADER.read_text())
    return {m.group(1): _enum_members(m.group(2))
            for m in re.finditer(r"\benum\s+(\w+)\s*\{(.*?)\}\s*;", text, re.S)}


def _is_attr_enum(name: str) -> bool:
    return re.fullmatch(r"vgpu_\w*attr", name) is not None


def _resolve_nested(ref: str, enums: dict) -> list[str]:
    """The attribute enums a "nested: REF" names (one, unless REF is bad)."""
    attr_enums = {e: [n for n, _c in ms if not n.startswith("__")]
                  for e, ms in enums.items() if _is_attr_enum(e)}
    if ref.endswith("*"):
        return [e for e, ms in attr_enums.items() if all(n.startswith(ref[:-1]) for n in ms)]
    return [e for e, ms in attr_enums.items() if ref in ms]


def header_attr_types() -> tuple[dict[str, dict[str, Attr]], list[str]]:
    """(attribute enum -> member -> Attr in enum order, problems found)."""
    enums = header_enums()
    out, bad = {}, []
    for ename, members in enums.items():
        if not _is_attr_enum(ename):
            continue
        attrs = {}
        for i, (name, comment) in enumerate(members):
            if name.startswith("__"):
                continue
            if i == 0 and name.endswith("_UNSPEC"):
                attrs[name] = Attr(name, ename, "unspec", comment or "")
                continue
            m = _TYPE_RE.match(comment or "")
            if m is None:
                bad.append(f"{name} (enum {ename}): its comment does not start with its type "
                           f"(u8, u32, u64, s32 (sent as u32), binary, NUL-terminated string, "
                           f"nested: ..., pad): {comment!r}")
                continue
            a = Attr(name, ename, _CANON.get(m.group(1), m.group(1).split(":")[0]), comment)
            if m.group(2):
                found = _resolve_nested(m.group(2), enums)
                if len(found) != 1:
                    bad.append(f"{name}: 'nested: {m.group(2)}' names {len(found)} attribute "
                               f"enums ({found}), not one")
                    continue
                a.ref = found[0]
            attrs[name] = a
        out[ename] = attrs
    return out, bad


def _all_attrs() -> dict[str, Attr]:
    types, _bad = header_attr_types()
    return {n: a for attrs in types.values() for n, a in attrs.items()}


def test_header_attribute_comments_carry_types():
    types, bad = header_attr_types()
    assert not bad, "\n".join(bad)
    assert set(types) == {"vgpu_attr", "vgpu_list_attr", "vgpu_gpu_attr", "vgpu_audit_attr",
                          "vgpu_trace_attr", "vgpu_trace_list_attr"} <= set(types)
    # the parser sees every member, in order
    assert list(types["vgpu_attr"]) == uapi.SLICE_ATTRS
    assert list(types["vgpu_list_attr"]) == uapi.LIST_ATTRS
    assert list(types["vgpu_gpu_attr"]) == uapi.GPU_ATTRS
    assert list(types["vgpu_audit_attr"]) == uapi.AUDIT_ATTRS
    assert list(types["vgpu_trace_attr"]) == uapi.TRACE_ATTRS
    assert list(types["vgpu_trace_list_attr"]) == uapi.TRACE_LIST_ATTRS
    t = types["vgpu_attr"]
    assert t["VGPU_A_SLICE_ID"].type == "u32" and t["VGPU_A_SLICE_NAME"].type == "string"
    assert (t["VGPU_A_SLICE_GPUS"].type, t["VGPU_A_SLICE_GPUS"].ref) == ("nested", "vgpu_list_attr")
    assert t["VGPU_A_TRACE"].ref == "vgpu_trace_attr" and t["VGPU_A_PAD"].type == "pad"
    assert types["vgpu_trace_attr"]["VGPU_TRACE_A_RET"].type == "s32"
    assert types["vgpu_gpu_attr"]["VGPU_GPU_A_GPU_ID"].comment.endswith("enumerated at that minor")


def test_header_type_parser_refuses_untyped_comments(monkeypatch, tmp_path):
    h = tmp_path / "vgpu.h"
    h.write_text("enum vgpu_x_attr {\n\tVGPU_X_A_UNSPEC,\n\tVGPU_X_A_A,  /* u32, fine */\n"
                 "\tVGPU_X_A_B,  /* the count, u64 */\n\tVGPU_X_A_C,\n"
                 "\tVGPU_X_A_D,  /* nested: VGPU_Y_A_* */\n\t__VGPU_X_A_MAX,\n};\n")
    monkeypatch.setattr(sys.modules[__name__], "HEADER", h)
    types, bad = header_attr_types()
    assert list(types["vgpu_x_attr"]) == ["VGPU_X_A_UNSPEC", "VGPU_X_A_A"]
    assert [b.split(" ")[0] for b in bad] == ["VGPU_X_A_B", "VGPU_X_A_C", "VGPU_X_A_D:"]


#: header type -> vgpu/vgpuko/messages.py's pyroute2 type (nested: the nla class)
PYROUTE2_TYPE = {"unspec": "none", "pad": "none", "u8": "uint8", "u32": "uint32",
                 "u64": "uint64", "s32": "int32", "binary": "cdata", "string": "asciiz"}


def test_kernel_client_types_follow_header():
    """Each nla_map of vgpu/vgpuko/messages.py, from vgpumsg (enum vgpu_attr) down
    through its nested classes, gives every attribute the header's type, and
    every attribute enum is reached."""
    from pyroute2.netlink import nla
    from vgpu.vgpuko import messages
    types, bad = header_attr_types()
    assert not bad, "\n".join(bad)
    todo, seen, errors = [(messages.vgpumsg, "vgpu_attr")], set(), []
    while todo:
        cls, ename = todo.pop()
        if (cls, ename) in seen:
            continue
        seen.add((cls, ename))
        want = types[ename]
        names = [n for n, _t in cls.nla_map]
        if names != list(want):
            errors.append(f"{cls.__qualname__}.nla_map names {names}, enum {ename} has "
                          f"{list(want)}")
            continue
        for name, got in cls.nla_map:
            a = want[name]
            if a.type == "nested":
                sub = getattr(cls, got, None) if isinstance(got, str) else None
                if not (isinstance(sub, type) and issubclass(sub, nla)):
                    errors.append(f"{name}: nested (enum {a.ref}) in the header, but "
                                  f"vgpu/vgpuko/messages.py's {cls.__qualname__} types it {got!r}, "
                                  f"not an nla class")
                    continue
                if not sub.nla_flags:
                    errors.append(f"{name}: its class {sub.__qualname__} lacks NLA_F_NESTED")
                if [n for n, _t in sub.nla_map] != list(types[a.ref]):
                    errors.append(f"{name}: the header nests enum {a.ref}, but vgpu/vgpuko/messages.py "
                                  f"decodes it with {sub.__qualname__}, whose nla_map names "
                                  f"other attributes")
                    continue
                todo.append((sub, a.ref))
            elif got != PYROUTE2_TYPE[a.type]:
                hint = " (missing from its *_ATTR_TYPES table?)" if got == "hex" else ""
                errors.append(f"{name}: {a.type} in the header, vgpu/vgpuko/messages.py says "
                              f"{got!r}{hint}, not {PYROUTE2_TYPE[a.type]!r}")
    reached = {e for _c, e in seen}
    errors += [f"enum {e}: no nla class of vgpu/vgpuko/messages.py decodes it (not reached from "
               f"vgpumsg)" for e in types if e not in reached]
    assert not errors, "\n".join(errors)


# --------------------------------------------------- the kernel's side
def _kmod_sources() -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(KMOD_SRC.glob("*.c"))
            if not p.name.endswith(".mod.c")}


def _blank_comments(src: str) -> str:
    """C comments blanked out, line numbers kept."""
    return re.sub(r"/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m.group(0)), src, flags=re.S)


def _enum_of_max(max_name: str, enums: dict) -> str | None:
    """VGPU_GPU_A_MAX -> vgpu_gpu_attr (the enum holding __VGPU_GPU_A_MAX)."""
    for e, ms in enums.items():
        if any(n == "__" + max_name for n, _c in ms):
            return e
    return None


_POLICY_RE = re.compile(r"\bstruct\s+nla_policy\s+(\w+)\s*\[\s*(\w+)\s*\+\s*1\s*\]\s*=\s*"
                        r"\{(.*?)\n\}\s*;", re.S)
_ENTRY_RE = re.compile(r"\[\s*(\w+)\s*\]\s*=\s*(\{[^{}]*\}|NLA_POLICY_\w+\s*\("
                       r"(?:[^()]|\([^()]*\))*\))")


def kernel_policies() -> dict[str, tuple[str, dict[str, tuple[str, str | None]]]]:
    """policy name -> (its size's MAX name, attribute -> (NLA type, nested policy))."""
    out = {}
    for fname, src in _kmod_sources().items():
        src = _blank_comments(src)
        for m in _POLICY_RE.finditer(src):
            body = m.group(3)
            entries = {}
            for e in _ENTRY_RE.finditer(body):
                val = e.group(2)
                if val.startswith("{"):
                    t = re.search(r"\.type\s*=\s*(NLA_\w+)", val)
                    entries[e.group(1)] = (t.group(1) if t else "NLA_UNSPEC", None)
                elif re.match(r"NLA_POLICY_NESTED(_ARRAY)?\b", val):
                    target = re.search(r"\(\s*(\w+)", val).group(1)
                    entries[e.group(1)] = ("NLA_NESTED", target)
                else:
                    entries[e.group(1)] = (re.search(r"\(\s*(NLA_\w+)", val).group(1), None)
            n = len(re.findall(r"\[\s*\w+\s*\]\s*=", body))
            assert n == len(entries), f"{fname}: {m.group(1)}: parsed {len(entries)} of {n} entries"
            out[m.group(1)] = (m.group(2), entries)
    return out


#: header type -> the NLA types a request policy may give it (NLA_REJECT: any)
POLICY_TYPES = {"u8": {"NLA_U8"}, "u32": {"NLA_U32"}, "u64": {"NLA_U64"},
                "s32": {"NLA_S32", "NLA_U32"}, "binary": {"NLA_BINARY", "NLA_UNSPEC"},
                "string": {"NLA_NUL_STRING"}, "nested": {"NLA_NESTED"}, "pad": set(),
                "unspec": set()}
_REPLY_ONLY = re.compile(r"\b(reply|replies|events) only\b")


def test_kernel_policies_follow_header():
    """netlink.c's struct nla_policy tables: each is indexed by one attribute
    enum, types every attribute as the header does (or rejects it), rejects
    what the header calls reply-only, and a nest's policy is for the enum the
    header names."""
    types, bad = header_attr_types()
    assert not bad, "\n".join(bad)
    enums = header_enums()
    policies = kernel_policies()
    assert {"vgpu_policy", "vgpu_gpu_policy", "vgpu_list_policy"} <= set(policies)
    errors = []
    penum = {p: _enum_of_max(size, enums) for p, (size, _e) in policies.items()}
    for pname, (size, entries) in policies.items():
        ename = penum[pname]
        if ename not in types:
            errors.append(f"{pname}: sized by {size}, not an attribute enum's MAX")
            continue
        for attr, (nla_type, target) in entries.items():
            a = types[ename].get(attr)
            if a is None:
                errors.append(f"{pname}[{attr}]: not a member of enum {ename}")
                continue
            if nla_type == "NLA_REJECT":
                continue
            if nla_type not in POLICY_TYPES[a.type]:
                errors.append(f"{pname}[{attr}]: {nla_type}, but the header types it {a.type}")
            if _REPLY_ONLY.search(a.comment):
                errors.append(f"{pname}[{attr}]: {nla_type}, but the header says it is "
                              f"reply-only ({a.comment!r}): NLA_REJECT it")
            if target is not None and penum.get(target) != a.ref:
                errors.append(f"{pname}[{attr}]: nested policy {target} is for enum "
                              f"{penum.get(target)}, the header's nest is enum {a.ref}")
    for fname, src in _kmod_sources().items():
        for m in re.finditer(r"\.maxattr\s*=\s*(\w+)\s*,\s*\.policy\s*=\s*(\w+)", src):
            if m.group(2) in policies and policies[m.group(2)][0] != m.group(1):
                errors.append(f"{fname}: .maxattr {m.group(1)} but .policy {m.group(2)} is "
                              f"sized by {policies[m.group(2)][0]}")
    assert not errors, "\n".join(errors)


#: the kernel's put/get helpers -> the header types they may write/read
PUT_TYPES = {"nla_put_u8": {"u8"}, "nla_put_u32": {"u32", "s32"}, "nla_put_s32": {"s32"},
             "nla_put_u64_64bit": {"u64"}, "nla_put_string": {"string"},
             "nla_put": {"binary"}, "vgpu_trace_put_blob": {"binary"},
             "nla_nest_start": {"nested"}, "nla_nest_start_noflag": {"nested"},
             "nla_put_u16": set(), "nla_put_s64": set(), "nla_put_flag": set(),
             "nla_get_u8": {"u8"}, "nla_get_u32": {"u32", "s32"}, "nla_get_s32": {"s32"},
             "nla_get_u64": {"u64"}, "nla_get_u16": set(), "nla_get_s64": set()}


def _call_args(src: str, start: int) -> list[str]:
    """The top-level arguments of the call whose '(' is at src[start]."""
    depth, args, cur = 0, [], start + 1
    for i in range(start, len(src)):
        c = src[i]
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                args.append(src[cur:i].strip())
                return args
        elif c == "," and depth == 1:
            args.append(src[cur:i].strip())
            cur = i + 1
    raise AssertionError("unbalanced call")


def test_kernel_puts_and_gets_follow_header():
    """Every nla_put_*(skb, VGPU_..) / nla_get_*(..[VGPU_..]) of kmod/vgpu
    uses the header's type for the attribute, and a u64's pad attribute is
    its own enum's pad."""
    attrs = _all_attrs()
    errors, seen = [], 0
    helpers = "|".join(sorted(PUT_TYPES, key=len, reverse=True))
    for fname, src in _kmod_sources().items():
        src = _blank_comments(src)
        for m in re.finditer(rf"\b({helpers})\s*\(", src):
            fn, args = m.group(1), _call_args(src, m.end() - 1)
            if fn.startswith("nla_get_"):
                am = re.fullmatch(r"[\w.>-]*\[\s*(VGPU_\w+)\s*\]", args[0]) if args else None
                name = am.group(1) if am else None
            else:
                name = args[1] if len(args) > 1 and args[1].startswith("VGPU_") else None
            if name is None:
                continue
            seen += 1
            line = src.count("\n", 0, m.start()) + 1
            a = attrs.get(name)
            if a is None:
                errors.append(f"{fname}:{line}: {fn}({name}): not an attribute of the header")
                continue
            if a.type not in PUT_TYPES[fn]:
                errors.append(f"{fname}:{line}: {fn} on {name}, which the header types {a.type}")
            if fn == "nla_put_u64_64bit":
                pad = attrs.get(args[-1])
                if pad is None or pad.type != "pad" or pad.enum != a.enum:
                    errors.append(f"{fname}:{line}: {name} padded with {args[-1]}, not the pad "
                                  f"of enum {a.enum}")
    assert seen >= 80, f"found only {seen} attribute puts/gets in kmod/vgpu"
    assert not errors, "\n".join(errors)
