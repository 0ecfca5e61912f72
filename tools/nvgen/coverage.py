"""How much of gVisor nvproxy's default list this policy forwards or handles.

nvproxy forwards an item only where a container's driver capabilities enable
it; its default set is compute and utility (runsc's
--nvproxy-allowed-driver-capabilities, nvproxy's "compUtil"), what CUDA and
nvidia-smi need.  For a release, every item of the nvproxy table matched to
it (tools/nvgen/nvproxy/versions.tsv) whose capabilities include compute or
utility is looked up by kind and number in kmod/vgpu/policy/<release>.tsv:
handled if this policy's verdict is forward, rewrite or virtualise (any
alias), refused otherwise.  An item the release's tables do not have is
counted apart (`absent`: the release cannot be asked it by that number).

    python3 -m tools.nvgen.coverage                  # 595.45.04, the flags release
    python3 -m tools.nvgen.coverage --release 535.261.03 --refused
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

if __package__ in (None, ""):   # run as a script: make "tools.nvgen" importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    __package__ = "tools.nvgen"

from . import tsv  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
POLICY = ROOT / "kmod" / "vgpu" / "policy"
NVPROXY = HERE / "nvproxy"
DEFAULT_CAPS = frozenset({"compute", "utility"})
DEFAULT_RELEASE = "595.45.04"


@dataclass
class Coverage:
    release: str
    nvproxy: str
    handled: list[dict] = field(default_factory=list)      # nvproxy rows
    refused: list[tuple[dict, dict]] = field(default_factory=list)     # (nvproxy row, our row)
    absent: list[dict] = field(default_factory=list)

    @property
    def total(self) -> int:
        return len(self.handled) + len(self.refused)

    @property
    def percent(self) -> float:
        return 100.0 * len(self.handled) / self.total if self.total else 0.0

    def line(self) -> str:
        return (f"{self.release} (nvproxy {self.nvproxy}, compute|utility): "
                f"{len(self.handled)}/{self.total} = {self.percent:.1f}% forwarded or handled, "
                f"{len(self.refused)} refused, {len(self.absent)} absent from the release's tables")


def _key(kind: str, value: str) -> tuple[str, int]:
    return kind, int(value, 16)


def coverage(release: str = DEFAULT_RELEASE, policy_dir: Path = POLICY,
             nvproxy_dir: Path = NVPROXY, rows: list[dict] | None = None) -> Coverage:
    """The coverage of release's policy (rows, or kmod/vgpu/policy/<release>.tsv)."""
    versions = {r["release"]: r["nvproxy"] for r in tsv.read(nvproxy_dir / "versions.tsv")}
    nv = versions[release]
    ours: dict[tuple[str, int], list[dict]] = {}
    for r in rows if rows is not None else tsv.read(policy_dir / f"{release}.tsv"):
        if r["value"] not in ("", "?"):
            ours.setdefault(_key(r["kind"], r["value"]), []).append(r)
    cov = Coverage(release, nv)
    for r in tsv.read(nvproxy_dir / f"{nv}.tsv"):
        if not DEFAULT_CAPS & set(r["caps"].split("|")):
            continue
        mine = ours.get(_key(r["kind"], r["value"]))
        if not mine:
            cov.absent.append(r)
        elif any(o["verdict"] != "refuse" for o in mine):
            cov.handled.append(r)
        else:
            cov.refused.append((r, mine[0]))
    return cov


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="nvgen.coverage", description=__doc__.split("\n\n")[0])
    ap.add_argument("--release", default=DEFAULT_RELEASE)
    ap.add_argument("--refused", action="store_true", help="list what is refused, with this policy's reason")
    args = ap.parse_args(argv)
    cov = coverage(args.release)
    print(cov.line())
    if args.refused:
        for nvr, o in cov.refused:
            print(f"  {nvr['kind']:8} {nvr['value']} {nvr['name']}: {o['reason']}")
        for nvr in cov.absent:
            print(f"  {nvr['kind']:8} {nvr['value']} {nvr['name']}: absent from {args.release}'s tables")
    return 0


if __name__ == "__main__":
    sys.exit(main())
