"""The inputs every table builder shares: one release's header tree, the
facts of the 595.45.04 source tree, and how a row is filled from them.

The headers archive lays out each release as the driver does: the SDK
headers (nvos.h, class/, ctrl/, alloc/), the unix RM's ioctl headers,
kernel-open's common headers and UVM's two ioctl headers.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from . import cdefs, rmsrc
from .probe import Result

UNKNOWN = "?"        # a number the compiler could not give
NOT_HERE = "-"       # a fact only the source tree's own release has
ABSENT = "not declared in this release's headers"

# Headers that define the NV_ESC_* numbers and the escapes' params structs,
# looked up in the RM's unix include directory first, then kernel-open's.
IOCTL_HEADERS = ("nv-ioctl-numbers.h", "nv_escape.h", "nv-ioctl-numa.h", "nv-ioctl.h",
                 "nv-unix-nvos-params-wrappers.h", "nv-ioctl-lockless-diag.h")
# NV_LINUX is what cpuopsys.h defines on Linux, but nv-ioctl-numa.h tests it
# without including cpuopsys.h (535-580 hide NV_ESC_NUMA_INFO otherwise).
# It is the only definition the headers need.
DEFINES = ["NV_LINUX"]
# Files of UVM's ioctl header set that the headers archive does not carry.
UVM_TYPES = ("kernel-open/nvidia-uvm/uvm_types.h", "kernel-open/common/inc/nv_uvm_user_types.h")


class Release:
    """A release's header tree, with the name lookups the builders share."""

    def __init__(self, name: str, root: Path):
        self.name = name
        self.root = root
        self.sdk = root / "src/common/sdk/nvidia/inc"
        self.unix = root / "src/nvidia/arch/nvalloc/unix/include"
        self.kcommon = root / "kernel-open/common/inc"
        self.uvm = root / "kernel-open/nvidia-uvm"
        self.names = cdefs.declared(root.rglob("*.h"))

    def exists(self, name: str | None) -> bool:
        """Whether the release declares name as a macro or typedef."""
        return bool(name) and name in self.names

    def ioctl_headers(self) -> list[Path]:
        found = []
        for name in IOCTL_HEADERS:
            for d in (self.unix, self.kcommon):
                if (d / name).is_file():
                    found.append(d / name)
                    break
        return found

    def sdk_headers(self) -> list[str]:
        rel = [p.relative_to(self.sdk).as_posix()
               for sub in ("class", "alloc", "ctrl") for p in (self.sdk / sub).rglob("*.h")]
        return sorted(rel) + ["nvos.h"]


@dataclass(frozen=True)
class TreeFacts:
    """What the 595.45.04 source tree contributes, parsed once."""
    release: str
    escapes: dict[str, list[rmsrc.EscapeParams]]
    classes: dict[str, rmsrc.ClassAlloc]
    exports: dict[int, list[rmsrc.Export]]
    flag_names: dict[int, str]
    uvm_dir: Path      # the tree's UVM_TYPES files, for releases that lack them

    @classmethod
    def read(cls, release: str, tree: Path, scratch: Path) -> "TreeFacts":
        uvm_dir = scratch / "uvm-types"
        uvm_dir.mkdir(parents=True, exist_ok=True)
        for rel in UVM_TYPES:
            (uvm_dir / Path(rel).name).write_bytes((tree / rel).read_bytes())
        return cls(release, rmsrc.escape_params(tree), rmsrc.class_allocs(tree),
                   rmsrc.exports(tree), rmsrc.control_flag_names(tree), uvm_dir)


def hex_(value: int | None, width: int) -> str:
    return UNKNOWN if value is None else f"0x{value:0{width}x}"


def size(result: Result, typ: str) -> str:
    """A params struct's sizeof cell: empty for none, "?" if unmeasured."""
    if not typ:
        return ""
    return str(result.sizes[typ]) if typ in result.sizes else UNKNOWN


def pick(rel: Release, result: Result, candidates: list[tuple[str | None, str]]):
    """The first candidate params struct the compiler measured, else the first
    the release declares (size unknown), else none: (params, sizeof, from)."""
    present = [(t, src) for t, src in dict.fromkeys(candidates) if rel.exists(t)]
    for typ, src in present:
        if typ in result.sizes:
            return typ, str(result.sizes[typ]), src
    if present:
        return present[0][0], UNKNOWN, present[0][1]
    return "", "", ""
