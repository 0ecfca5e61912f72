"""What the 595.45.04 driver source says about its own ABI.

Headers name structures; only the driver says which structure it copies for an
escape, a class or a control, and who may call it.  Three places in the tree
say so in a form regular enough to read without a C parser:

- the ioctl size tables (nv.c nv_validate_ioctls, osapi.c rm_validate_ioctls,
  escape.c RmValidateIoctl): escape -> the struct whose size is checked;
- resource_list.h: class -> allocation params type, required or optional,
  and the allocation privilege flags;
- the NVOC-generated export tables (src/nvidia/generated/g_*_nvoc.c): control
  command -> flags, access rights and sizeof(params type).

Only the types are taken from here: sizes are measured against each
release's own headers.  Control flag bits are named from control.h of the
same tree, so a renumbering there is followed; allocation flags are read by
name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

# --------------------------------------------------------------- escapes
_IOCTL_ENTRY = re.compile(
    r"_(?:NV|RM|RM_ESC)_IOCTL_ENTRY\(\s*(NV_ESC_\w+)\s*,\s*(\w+)\s*(?:,\s*(NV_TRUE|NV_FALSE)\s*)?\)")
# RmValidateIoctl accepts two sizes for RM_ALLOC: "if (arg_cmd == NV_ESC_RM_ALLOC) { if (size == sizeof(A) || ...)"
_SPECIAL_SIZES = re.compile(r"arg_cmd\s*==\s*(NV_ESC_\w+)\s*\)\s*\{\s*if\s*\(([^{]*)\)")
_SIZEOF = re.compile(r"sizeof\(\s*(\w+)\s*\)")

IOCTL_TABLES = (
    "kernel-open/nvidia/nv.c",
    "src/nvidia/arch/nvalloc/unix/src/osapi.c",
    "src/nvidia/arch/nvalloc/unix/src/escape.c",
)


@dataclass(frozen=True)
class EscapeParams:
    params: str
    check: str      # "exact": size must equal sizeof; "multiple": a non-zero multiple
    source: str     # file name of the table


def escape_params(tree: Path) -> dict[str, list[EscapeParams]]:
    """Escape macro name -> the params types the driver accepts for it."""
    out: dict[str, dict[EscapeParams, None]] = {}    # dicts as ordered sets
    for rel in IOCTL_TABLES:
        text = (tree / rel).read_text(errors="replace")
        source = Path(rel).name
        for esc, typ, array in _IOCTL_ENTRY.findall(text):
            check = "multiple" if array == "NV_TRUE" else "exact"
            out.setdefault(esc, {})[EscapeParams(typ, check, source)] = None
        for esc, cond in _SPECIAL_SIZES.findall(text):
            for typ in _SIZEOF.findall(cond):
                out.setdefault(esc, {})[EscapeParams(typ, "exact", source)] = None
    return {esc: list(entries) for esc, entries in out.items()}


# --------------------------------------------------------------- classes
_RS_ENTRY = re.compile(r"^RS_ENTRY\((.*?)^\)", re.S | re.M)
_RS_FIELD = re.compile(r"/\*\s*([A-Za-z ]+?)\s*\*/\s*(.*?)\s*(?=,\s*/\*|$)", re.S)
_PARAM_INFO = re.compile(r"RS_(REQUIRED|OPTIONAL)\(\s*(\w+)\s*\)|RS_NONE")


@dataclass(frozen=True)
class ClassAlloc:
    rule: str        # "required", "optional" or "none"
    params: str      # the params type ("" for none)
    privilege: str   # who may allocate it (see _alloc_privilege)


def _alloc_privilege(parents: str, flags: str) -> str:
    """Mirror _serverAllocValidatePrivilege (alloc_free.c): kernel-privileged
    and privileged are checked, non-privileged passes, no flag is refused;
    INTERNAL_ONLY classes cannot be allocated from outside RM at all.  Client
    classes (parent RS_ROOT_OBJECT) never reach that check: serverAllocClient
    (rs_server.c) creates them for any caller."""
    tokens = set(re.findall(r"RS_FLAGS_\w+", flags))
    if parents == "RS_ROOT_OBJECT":
        return "non-privileged"
    if "RS_FLAGS_INTERNAL_ONLY" in tokens:
        return "internal"
    if "RS_FLAGS_ALLOC_KERNEL_PRIVILEGED" in tokens:
        return "kernel"
    if "RS_FLAGS_ALLOC_PRIVILEGED" in tokens:
        return "privileged"
    if "RS_FLAGS_ALLOC_NON_PRIVILEGED" in tokens:
        return "non-privileged"
    return "refused"


def _outside_debug_blocks(text: str) -> str:
    """Drop #if blocks that need a DEBUG or DEVELOP build: release drivers
    do not have those entries (resource_list.h wraps NV_CE_UTILS so)."""
    out, skip = [], []
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("#if"):
            skip.append("DEBUG" in s or "DEVELOP" in s)
            continue
        if s.startswith("#endif"):
            skip.pop()
            continue
        if s.startswith("#el"):
            skip[-1] = s.startswith("#elif") and ("DEBUG" in s or "DEVELOP" in s)
            continue
        if not any(skip):
            out.append(line)
    return "\n".join(out)


def class_allocs(tree: Path) -> dict[str, ClassAlloc]:
    """External class name -> allocation params and privilege (resource_list.h)."""
    text = _outside_debug_blocks(
        (tree / "src/nvidia/src/kernel/rmapi/resource_list.h").read_text(errors="replace"))
    out = {}
    for body in _RS_ENTRY.findall(text):
        fields = {k.strip(): v.strip() for k, v in _RS_FIELD.findall(body)}
        name, info = fields["External Class"], fields["Alloc Param Info"]
        m = _PARAM_INFO.match(info)
        if not m:
            raise ValueError(f"resource_list.h: {name}: unreadable Alloc Param Info {info!r}")
        rule = (m.group(1) or "none").lower()
        privilege = _alloc_privilege(fields["Parents"], fields["Flags"])
        out[name] = ClassAlloc(rule, m.group(2) or "", privilege)
    return out


# --------------------------------------------------------------- controls
_EXPORT = re.compile(
    r"/\*flags=\*/\s*(0x[0-9a-fA-F]+)u,\s*"
    r"/\*accessRight=\*/\s*(0x[0-9a-fA-F]+)u,\s*"
    r"/\*methodId=\*/\s*(0x[0-9a-fA-F]+)u,\s*"
    r"/\*paramSize=\*/\s*(?:sizeof\((\w+)\)|0\b[^,]*),\s*"
    r"/\*pClassInfo=\*/\s*&\(__nvoc_class_def_(\w+)\.classInfo\)")
_BIT_DEFINE = re.compile(r"^#define\s+(RMCTRL_FLAGS_\w+)\s+(0x[0-9a-fA-F]+)\s*(?://.*)?$", re.M)
_ACCESS_DEFINE = re.compile(r"^#define\s+RS_ACCESS_(\w+)\s+(\d+)U?\s*$", re.M)


@dataclass(frozen=True)
class Export:
    """One entry of an NVOC class's exported method table."""
    flags: int
    access: int
    params: str      # "" when the table says paramSize 0 (no params)
    cls: str = ""    # the NVOC class that exports it (Subdevice, RmClientResource, ...)


def exports(tree: Path) -> dict[int, list[Export]]:
    """Control command -> its export entries (one per NVOC class exporting it)."""
    out: dict[int, list[Export]] = {}
    for path in sorted((tree / "src/nvidia/generated").glob("g_*_nvoc.c")):
        for flags, access, method, params, cls in _EXPORT.findall(path.read_text(errors="replace")):
            out.setdefault(int(method, 16), []).append(
                Export(int(flags, 16), int(access, 16), params, cls))
    return out


@dataclass(frozen=True)
class ExportTables:
    """One release's control export tables, read from its own tree: every
    command some NVOC class exports, and the names of its flag bits."""
    release: str
    exports: dict[int, list[Export]]
    flag_names: dict[int, str]

    @classmethod
    def read(cls, release: str, tree: Path) -> "ExportTables":
        return cls(release, exports(tree), control_flag_names(tree))


def control_flag_names(tree: Path) -> dict[int, str]:
    """Single-bit RMCTRL_FLAGS_* values -> names without the prefix (control.h).
    KERNEL_PRIVILEGED is 0, the absence of the other privilege bits."""
    text = (tree / "src/nvidia/inc/kernel/rmapi/control.h").read_text(errors="replace")
    names = {}
    for name, value in _BIT_DEFINE.findall(text):
        bit = int(value, 16)
        if bit and bit & (bit - 1) == 0:
            names.setdefault(bit, name[len("RMCTRL_FLAGS_"):])
    return names


def access_right_names(rs_access_h: Path) -> dict[int, str]:
    """Access-right mask bits -> names: rs_access.h numbers the rights
    (RS_ACCESS_NICE 1U) and the export tables hold NVBIT() of those."""
    return {1 << int(v): n for n, v in _ACCESS_DEFINE.findall(rs_access_h.read_text(errors="replace"))
            if n != "COUNT"}


def control_privilege(flags: int, names: dict[int, str]) -> str:
    """Who may issue a control, as rmControlValidateClientPrivilegeAccess and
    serverControl_ValidateCookie (control.c) decide it for a non-hypervisor
    caller: INTERNAL is RM-only, PRIVILEGED needs root, NON_PRIVILEGED is
    anyone, and none of the three means kernel callers only."""
    bit = {v: k for k, v in names.items()}
    if flags & bit["INTERNAL"]:
        return "internal"
    if flags & bit["PRIVILEGED"]:
        return "privileged"
    if flags & bit["NON_PRIVILEGED"]:
        return "non-privileged"
    return "kernel"


def bit_names(value: int, names: dict[int, str]) -> str:
    """Comma-separated names of the set bits, lowest first; unknown bits in hex."""
    out = []
    bit = 1
    while bit <= value:
        if value & bit:
            out.append(names.get(bit, hex(bit)))
        bit <<= 1
    return ",".join(out)
