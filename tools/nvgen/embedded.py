"""Which params structs carry embedded user pointers or file descriptors,
per release: the `embedded` column of kmod/vgpu/policy/<release>.tsv.

The driver copies the top-level params of an ioctl itself; anything a
struct only *points to* (a list, a string, the params of an RM_CONTROL) or
*names* (a file descriptor) is read later, by the driver, from the caller's
memory or descriptor table.  A mediator that checks or rewrites parameters
must therefore know, per struct, every such member: pointed-to data is
copied again (and can change between the mediator's look and the driver's),
and a descriptor of the mediator's own device files must be translated to
the real file it stands for.

Where the facts come from:

- the members: each release's own headers (cstructs.py).  A member typed
  `NvP64` is a pointer; an integer member named `fd`, `*_fd`, `*Fd`, `*FD`
  or `*Descriptor` (capDescriptor, devDescriptor) is a descriptor.  Members
  of member structs and unions are followed (`data.AllocOsDesc.descriptor`).
- how many bytes a pointer covers: the 595.45.04 driver, where RM copies
  the pointed-to data itself (`RMAPI_PARAM_COPY_INIT(copy, ptr, ptr, count,
  elemSize)` in rmapi/embedded_param_copy.c; the V1->V2 converters of
  interface/deprecated/rmapi_deprecated_control.c), and EXPLICIT below for
  the escapes' own structs (escape.c, alloc_free.c, kernel_idle_channels.c).
  The count is given by member name, so it is carried to other releases
  whose struct has the same member.

Cell format, members separated by ", ":
  `ptr:list[count*elem]`  a user buffer the driver copies (elem in bytes
                          for builtin types, else sizeof(T));
  `ptr:name`              a pointer whose extent this table does not know;
  `va:name`               a user address the driver maps, pins or hands
                          back as a cookie, never copied as a buffer;
  `fd:name`               a file descriptor resolved in the caller's table;
  each may end with a note in parentheses.
A struct with none of these is not listed (the policy shows `-`); a struct
named by the tables whose definition was not found is listed with
`- (unknown: ...)`, so that "none" is never a guess.

    python3 -m tools.nvgen.embedded [--vendor DIR]   # rewrites tools/nvgen/embedded/
"""

from __future__ import annotations

import argparse
import re
import sys
import tarfile
import tempfile
from pathlib import Path

if __package__ in (None, ""):   # run as a script: make "tools.nvgen" importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    __package__ = "tools.nvgen"

from . import cstructs, tsv, vendor  # noqa: E402

HERE = Path(__file__).resolve().parent
OUT_TABLES = HERE / "out"
DEFAULT_OUT = HERE / "embedded"
COLUMNS = ("struct", "embedded")

# Files of the 595.45.04 tree that say how much a pointer covers.
PARAM_COPY_C = "src/nvidia/src/kernel/rmapi/embedded_param_copy.c"
DEPRECATED_C = "src/nvidia/interface/deprecated/rmapi_deprecated_control.c"

_FD_NAME = re.compile(r"(^fd$|_fd$|Fd$|FD$|Descriptor$)")
_INT_TYPES = {"NvS32", "NvU32", "NvS64", "NvU64", "int", "unsigned int", "NvU16", "NvS16"}
_BUILTIN_SIZE = {"1": 1, "NvU8": 1, "NvS8": 1, "char": 1, "NvBool": 1, "NvU16": 2, "NvS16": 2,
                 "NvU32": 4, "NvS32": 4, "NvHandle": 4, "NvV32": 4, "NvU64": 8, "NvS64": 8, "NvP64": 8}

# (struct, member) -> (kind, count or "", note): members the driver handles
# outside embedded_param_copy.c, read in the 595.45.04 source at the place
# named in the note.  kind "ptr" with a count, or "va" (an address that is
# mapped, pinned or returned, never copied as a buffer), or "fd".
EXPLICIT: dict[tuple[str, str], tuple[str, str, str]] = {
    ("NVOS54_PARAMETERS", "params"): ("ptr", "paramsSize", ""),
    ("NVOS21_PARAMETERS", "pAllocParms"): ("ptr", "sizeof(class params)", "paramsSize is ignored: "
                                                                          "alloc_free.c"),
    ("NVOS64_PARAMETERS", "pAllocParms"): ("ptr", "sizeof(class params)", "paramsSize is ignored: "
                                                                          "alloc_free.c"),
    ("NVOS64_PARAMETERS", "pRightsRequested"): ("ptr", "sizeof(RS_ACCESS_MASK)", ""),
    ("NVOS30_PARAMETERS", "phClients"): ("ptr", "numChannels*4", ""),
    ("NVOS30_PARAMETERS", "phDevices"): ("ptr", "numChannels*4", ""),
    ("NVOS30_PARAMETERS", "phChannels"): ("ptr", "numChannels*4", ""),
    ("NVOS38_PARAMETERS", "pDevNode"): ("ptr", "DevNodeLength", ""),
    ("NVOS38_PARAMETERS", "pParmStr"): ("ptr", "ParmStrLength", ""),
    ("NVOS38_PARAMETERS", "pBinaryData"): ("ptr", "BinaryDataLength", ""),
    ("NVOS_I2C_ACCESS_PARAMS", "paramStructPtr"): ("ptr", "sizeof(NV2080_CTRL_I2C_ACCESS_PARAMS)", ""),
    ("nv_ioctl_xfer_t", "ptr"): ("ptr", "size", "at most 16384; the inner escape's params"),
    ("NVOS02_PARAMETERS", "pMemory"): ("va", "", "OS descriptor: the user range pinned; else the mapping "
                                                 "cookie"),
    ("NVOS33_PARAMETERS", "pLinearAddress"): ("va", "", "out: the mmap cookie"),
    ("NVOS34_PARAMETERS", "pLinearAddress"): ("va", "", "the mmap cookie"),
    ("NVOS56_PARAMETERS", "pOldCpuAddress"): ("va", "", "mmap cookie"),
    ("NVOS56_PARAMETERS", "pNewCpuAddress"): ("va", "", "mmap cookie"),
    ("NV_OS_DESC_MEMORY_ALLOCATION_PARAMS", "descriptor"): ("va", "", "the user range pinned"),
    ("NV0005_ALLOC_PARAMETERS", "data"): (
        "fd", "", "NV01_EVENT_OS_EVENT: the ALLOC_OS_EVENT fd, a key on the calling file; "
                  "kernel-callback event classes: a kernel pointer"),
    ("NV00F1_ALLOCATION_PARAMETERS", "pOsEvent"): ("fd", "", "an ALLOC_OS_EVENT fd, as nvproxy's "
                                                             "rmAllocIMEXSession treats it"),
    ("NV00FD_ALLOCATION_PARAMETERS", "pOsEvent"): ("fd", "", "optional ALLOC_OS_EVENT fd, as nvproxy's "
                                                             "rmAllocMulticastFabric treats it"),
    ("NV_MEMORY_ALLOCATION_PARAMS", "address"): ("va", "", "out: a CPU mapping address"),
    ("NV2080_CTRL_FB_GET_BAR1_OFFSET_PARAMS", "cpuVirtAddress"): ("va", "", "a mapping cookie"),
    ("NV0041_CTRL_GET_FBMEM_BUS_ADDR_PARAMS", "pLinearAddress"): ("va", "", "a mapping cookie"),
    ("NV2080_CTRL_FIFO_DISABLE_CHANNELS_PARAMS", "pRunlistPreemptEvent"): (
        "ptr", "", "must be NULL from user space: subdeviceCtrlCmdFifoDisableChannels_IMPL, as nvproxy "
                   "checks"),
    ("NV0000_CTRL_GPU_GET_ID_INFO_PARAMS", "szName"): ("ptr", "", "unused by the driver "
                                                                  "(gpumgrGetGpuIdInfo); nvproxy zeroes it"),
    ("NV0000_ALLOC_PARAMETERS", "pOsPidInfo"): ("ptr", "", "kernel clients; for a user root RM copies only "
                                                           "an NvHandle"),
}
# NVOS32's union members that are user addresses (INFO/ALLOC never copy them).
for _m in ("data.AllocSize.address", "data.AllocTiledPitchHeight.address",
           "data.AllocSizeRange.address", "data.AllocOsDesc.descriptor"):
    EXPLICIT[("NVOS32_PARAMETERS", _m)] = ("va", "", "")


def _strip_owner(expr: str) -> str:
    """`((T*)pParams)->a.b` or `userParams->a.b` -> `a.b`."""
    expr = re.sub(r"\s+", "", expr)
    return re.sub(r"^.*?->", "", expr)


def _elem(size_expr: str) -> str:
    s = re.sub(r"\s+", "", size_expr)
    m = re.fullmatch(r"sizeof\((\w+)\)", s)
    if m and m.group(1) in _BUILTIN_SIZE:
        return str(_BUILTIN_SIZE[m.group(1)])
    return s if not m else f"sizeof({m.group(1)})"


def _extent(count: str, elem: str) -> str:
    """count*elem, without a factor of 1."""
    if elem == "1":
        return count
    return elem if count == "1" else f"{count}*{elem}"


def _args(text: str, start: int) -> tuple[list[str], int]:
    depth, cur, out = 0, [], []
    for i in range(start, len(text)):
        ch = text[i]
        if ch == "(":
            depth += 1
            if depth == 1:
                continue
        elif ch == ")":
            depth -= 1
            if depth == 0:
                out.append("".join(cur).strip())
                return out, i + 1
        if ch == "," and depth == 1:
            out.append("".join(cur).strip())
            cur = []
        elif depth >= 1:
            cur.append(ch)
    raise ValueError("unbalanced call")


def driver_counts(param_copy_c: str, deprecated_c: str) -> dict[tuple[str, str], str]:
    """(struct, member path) -> "count*elem" from the driver's own copies."""
    out: dict[tuple[str, str], str] = {}
    param_copy_c, deprecated_c = (re.sub(r"/\*.*?\*/|//[^\n]*", " ", t, flags=re.S)
                                  for t in (param_copy_c, deprecated_c))
    # embedded_param_copy.c: "case CMD: { CHECK_PARAMS_OR_RETURN(p, T); RMAPI_PARAM_COPY_INIT(...) ..."
    blocks = re.split(r"\n\s*case\s+\w+\s*:", param_copy_c)
    for block in blocks:
        m = re.search(r"CHECK_PARAMS_OR_RETURN\(\s*pRmCtrlParams\s*,\s*(\w+)\s*\)", block)
        if not m:
            continue
        struct = m.group(1)
        for call in re.finditer(r"RMAPI_PARAM_COPY_INIT\s*\(", block):
            a, _ = _args(block, call.end() - 1)
            if len(a) == 5:
                out.setdefault((struct, _strip_owner(a[1])), _extent(_strip_owner(a[3]), _elem(a[4])))
    # The I2C transaction helper names its struct in a local variable.
    helper = re.search(r"_i2cTransactionCopyIn.*?\n\}", param_copy_c, re.S)
    if helper:
        for call in re.finditer(r"RMAPI_PARAM_COPY_INIT\s*\(", helper.group(0)):
            a, _ = _args(helper.group(0), call.end() - 1)
            out.setdefault(("NV402C_CTRL_I2C_TRANSACTION_PARAMS", _strip_owner(a[1])), _strip_owner(a[3]))
    # rmapi_deprecated_control.c: CONVERT_TO_V2(newCmd, oldT, newT, oldList, newList, size, isCount, elemT, ...)
    for call in re.finditer(r"CONVERT_TO_V2(?:_EX)?\s*\(", deprecated_c):
        a, _ = _args(deprecated_c, call.end() - 1)
        if len(a) >= 8 and re.fullmatch(r"\w+", a[1]):
            elem = _elem(f"sizeof({a[7]})") if a[6] == "NV_TRUE" else "1"
            out.setdefault((a[1], a[3]), _extent(a[5], elem))
    # GET_BUILD_VERSION (V1): three strings of sizeOfStrings bytes (V2_CONVERTER of it).
    for member in ("pDriverVersionBuffer", "pVersionBuffer", "pTitleBuffer"):
        out.setdefault(("NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_PARAMS", member), "sizeOfStrings")
    return out


def walk(h: cstructs.Headers, owner: str, members, prefix: str = "", rel: str = "", depth: int = 0):
    """(kind, path, owner, path in owner) for every pointer and descriptor
    member, depth first.  The owner is the innermost named struct holding
    the member, so that EXPLICIT can name NVOS02_PARAMETERS.pMemory once
    for the escape struct that wraps it."""
    if depth > 6:
        return
    for m in members:
        path = f"{prefix}{m.name}" if m.name else prefix.rstrip(".")
        in_owner = f"{rel}{m.name}" if m.name else rel.rstrip(".")
        step = "[]." if m.array else "."
        if m.type == "NvP64" or m.pointer:
            yield "ptr", path, owner, in_owner
        elif m.type in _INT_TYPES and _FD_NAME.search(m.name):
            yield "fd", path, owner, in_owner
        elif m.inline is not None:
            yield from walk(h, owner, m.inline, path + step if path else "",
                            in_owner + step if in_owner else "", depth + 1)
        else:
            inner = h.members(m.type)
            if inner is not None:
                yield from walk(h, h.resolve(m.type), inner, path + step, "", depth + 1)


def describe(h: cstructs.Headers, struct: str, counts: dict[tuple[str, str], str]) -> str | None:
    """The embedded cell of one struct; None if it has no pointer or descriptor."""
    members = h.members(struct)
    if members is None:
        return "- (unknown: definition not found)"
    cells = []
    for kind, path, owner, in_owner in walk(h, h.resolve(struct), members):
        kind, count, note = EXPLICIT.get((owner, in_owner), EXPLICIT.get((struct, path), (kind, "", "")))
        count = count or counts.get((struct, path), "") or counts.get((owner, in_owner), "")
        cell = f"ptr:{path}[{count}]" if kind == "ptr" and count else f"{kind}:{path}"
        cells.append(cell + (f" ({note})" if note else ""))
    return ", ".join(dict.fromkeys(cells)) or None


def referenced_structs(release_dir: Path) -> set[str]:
    """Every params struct a release's tables name (595's rm_params and
    rm_alloc types too: those are what the driver copies)."""
    names: set[str] = set()
    for kind in ("escapes", "classes", "controls", "uvm"):
        for r in tsv.read(release_dir / f"{kind}.tsv"):
            names.add(r["params"])
            names.update(t for t in r.get("rm_params", "").split("|"))
            alloc = r.get("rm_alloc", "").split()
            if len(alloc) == 2:
                names.add(alloc[1])
    return {n for n in names if n and n not in ("-", "?", "NvU32", "NvHandle")}


def headers_of(root: Path) -> cstructs.Headers:
    h = cstructs.Headers()
    for path in sorted(root.rglob("*.h")):
        cstructs.parse(path.read_text(errors="replace"), h)
    return h


def build(release_root: Path, release_dir: Path, counts) -> list[dict]:
    h = headers_of(release_root)
    rows = []
    for struct in sorted(referenced_structs(release_dir)):
        cell = describe(h, struct, counts)
        if cell:
            rows.append(dict(struct=struct, embedded=cell))
    return rows


def _tree_texts(archive: Path, wanted: tuple[str, ...]) -> dict[str, str]:
    """Read a few files of the source tree archive in one pass."""
    out = {}
    with tarfile.open(archive) as tar:
        for member in tar:
            name = member.name.removeprefix("./")
            if name in wanted:
                out[name] = tar.extractfile(member).read().decode(errors="replace")
    missing = [w for w in wanted if w not in out]
    if missing:
        raise FileNotFoundError(f"{', '.join(missing)} not in {archive}")
    return out


def generate(vendor_dir: Path, out: Path, tables: Path = OUT_TABLES) -> list[str]:
    with tempfile.TemporaryDirectory(prefix="nvgen-embedded-") as scratch:
        v = vendor.unpack(vendor_dir, Path(scratch))
        tree_archive = vendor_dir / vendor.TREE_ARCHIVE
        text = _tree_texts(tree_archive, (PARAM_COPY_C, DEPRECATED_C))
        counts = driver_counts(text[PARAM_COPY_C], text[DEPRECATED_C])
        out.mkdir(parents=True, exist_ok=True)
        for release, root in v.releases.items():
            tsv.write(out / f"{release}.tsv", COLUMNS, build(root, tables / release, counts))
        return list(v.releases)


def main(argv: list[str] | None = None) -> int:
    from .gen import DEFAULT_VENDOR
    ap = argparse.ArgumentParser(prog="nvgen.embedded", description=__doc__.split("\n\n")[0])
    ap.add_argument("--vendor", type=Path, default=DEFAULT_VENDOR)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    try:
        releases = generate(args.vendor, args.out)
    except FileNotFoundError as e:
        print(f"nvgen.embedded: {e}", file=sys.stderr)
        return 2
    print(f"nvgen.embedded: wrote {args.out} for {', '.join(releases)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
