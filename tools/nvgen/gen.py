"""nvgen's command line: unpack the vendor archives, build every release's
tables in parallel, write them under --out.

    python3 -m tools.nvgen [--vendor DIR] [--out DIR] [--jobs N] [--nvidia-git DIR]
    python3 tools/nvgen/gen.py --out /tmp/nvgen-out

--nvidia-git (default $NVGEN_NVIDIA_GIT) names a clone of
NVIDIA/open-gpu-kernel-modules with the release tags: each release whose
archive lacks UVM's type headers takes them from its own tag instead of
595.45.04's stand-ins (uvm.py).

The output directory is replaced release by release, so a run leaves no
stale table behind.  Each release's lists.tsv (lists.py: where the lists
its items' params point to lie) is made in the same run from the committed
kmod/vgpu/policy/<release>.tsv; after regenerating kmod/vgpu/policy, rerun lists.py.  Scratch files (the unpacked archives, the probe
programs) live in a temporary directory that is removed at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

if __package__ in (None, ""):   # run as a script: make "tools.nvgen" importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    __package__ = "tools.nvgen"

from . import classes, controls, escapes, lists, rmsrc, tables, tsv, uvm, vendor  # noqa: E402
from .release import UNKNOWN, TreeFacts  # noqa: E402

#: The project's vendor directory sits beside the checkout (../shared/vendor).
DEFAULT_VENDOR = Path(os.environ.get(
    "NVGEN_VENDOR", Path(__file__).resolve().parents[3] / "shared" / "vendor"))
DEFAULT_OUT = Path(__file__).resolve().parent / "out"
#: A clone of NVIDIA/open-gpu-kernel-modules with its release tags, if any.
DEFAULT_NVIDIA_GIT = Path(os.environ["NVGEN_NVIDIA_GIT"]) if os.environ.get("NVGEN_NVIDIA_GIT") else None

SUMMARY_COLUMNS = ("release", "escapes", "escapes_without_params", "classes",
                   "classes_without_params", "controls", "controls_without_params",
                   "uvm", "uvm_without_params", "unknown_sizes", "failures")


def _build_one(args) -> tuple[str, tables.Tables, tuple[list[dict], list[dict]]]:
    release, root, tree, workdir, own, rm_own = args
    t = tables.build(release, root, tree, workdir, own, rm_own)
    made = {"escapes": t.escapes, "classes": t.classes, "controls": t.controls}
    return release, t, lists.build(release, root, lists.policy_rows(release), made, workdir / "lists")


def _summary(release: str, t: tables.Tables, uvm_types: str = "") -> dict:
    """Counts per table: entries (an escape with two params structs counts
    once; a control without a name is counted by its number) and entries
    without any params struct; uvm_types (where UVM's type headers came
    from, uvm.source) is printed, not written to summary.tsv."""
    row = dict(release=release)
    for kind, rows in (("escapes", t.escapes), ("classes", t.classes),
                       ("controls", t.controls), ("uvm", t.uvm)):
        key = {r["name"] or r.get("cmd") for r in rows}
        have = {r["name"] or r.get("cmd") for r in rows if r["params"]}
        row[kind], row[f"{kind}_without_params"] = len(key), len(key - have)
    every = t.escapes + t.classes + t.controls + t.uvm
    row["unknown_sizes"] = sum(1 for r in every if r["sizeof"] == UNKNOWN)
    row["failures"] = len(t.failures)
    if uvm_types:
        row["uvm_types"] = uvm_types
    return row


def write_release(out: Path, t: tables.Tables, lists_rows: tuple[list[dict], list[dict]]) -> None:
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    tsv.write(out / "escapes.tsv", escapes.COLUMNS, t.escapes)
    tsv.write(out / "classes.tsv", classes.COLUMNS, t.classes)
    tsv.write(out / "controls.tsv", controls.COLUMNS, t.controls)
    tsv.write(out / "uvm.tsv", uvm.COLUMNS, t.uvm)
    tsv.write(out / "failures.tsv", tables.FAILURE_COLUMNS,
              sorted(t.failures, key=lambda r: (r["table"], r["name"], r["probe"])))
    lists.write(out, *lists_rows)


def _own_uvm_types(nvidia_git: Path, releases: dict[str, Path], tree: TreeFacts,
                   scratch: Path) -> dict[str, vendor.GitFiles]:
    """For each release (but the tree's) whose archive lacks UVM type
    headers: those files from its tag, if the clone has the tag."""
    own = {}
    for release, root in releases.items():
        want = uvm.lacking(root)
        if release == tree.release or release in vendor.RELEASE_TREES or not want:
            continue
        got = vendor.from_git(nvidia_git, release, want, scratch / "uvm-git" / release)
        if got is None:
            print(f"nvgen: no tag {release} in {nvidia_git}; {tree.release}'s UVM type headers "
                  f"stand in", file=sys.stderr)
        else:
            own[release] = got
    return own


def generate(vendor_dir: Path, out: Path, jobs: int, nvidia_git: Path | None = None) -> list[dict]:
    """Write every release's tables and out/summary.tsv; return the summary.
    nvidia_git: a clone of NVIDIA/open-gpu-kernel-modules whose release
    tags give the UVM type headers the archive lacks (None: 595.45.04's
    stand in)."""
    if nvidia_git is not None:
        vendor.check_git(nvidia_git)
    with tempfile.TemporaryDirectory(prefix="nvgen-") as scratch_name:
        scratch = Path(scratch_name)
        v = vendor.unpack(vendor_dir, scratch)
        tree = TreeFacts.read(vendor.TREE_RELEASE, v.tree, scratch)
        own = _own_uvm_types(nvidia_git, v.releases, tree, scratch) if nvidia_git else {}
        own.update(v.own or {})      # a release read from its own tree: its own UVM headers
        sources = {r: uvm.source(r, root, tree, own.get(r)) for r, root in v.releases.items()}
        # The control export tables of each release whose own tree is
        # vendored, besides the 595.45.04 tree's (TreeFacts).
        rm_own = {r: rmsrc.ExportTables.read(r, src) for r, src in (v.rm or {}).items()
                  if r != tree.release}
        work = [(r, root, tree, scratch / "probe" / r, own.get(r), rm_own.get(r))
                for r, root in v.releases.items()]
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            built = {r: (t, ls) for r, t, ls in pool.map(_build_one, work)}
    out.mkdir(parents=True, exist_ok=True)
    summary = []
    for release in v.releases:
        t, lists_rows = built[release]
        write_release(out / release, t, lists_rows)
        summary.append(_summary(release, t, sources[release]))
    tsv.write(out / "summary.tsv", SUMMARY_COLUMNS, summary)
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="nvgen", description=__doc__.split("\n\n")[0])
    ap.add_argument("--vendor", type=Path, default=DEFAULT_VENDOR,
                    help=f"directory holding {vendor.HEADERS_ARCHIVE} and "
                         f"{vendor.TREE_ARCHIVE} (default: $NVGEN_VENDOR or %(default)s)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory (default: %(default)s)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parallel releases")
    ap.add_argument("--nvidia-git", type=Path, default=DEFAULT_NVIDIA_GIT,
                    help="clone of NVIDIA/open-gpu-kernel-modules with the release tags: UVM's "
                         "uvm_types.h and nv_uvm_user_types.h come from each release's tag where the "
                         "headers archive lacks them (default: $NVGEN_NVIDIA_GIT, else none)")
    args = ap.parse_args(argv)
    start = time.monotonic()
    try:
        summary = generate(args.vendor, args.out, max(1, args.jobs), args.nvidia_git)
    except FileNotFoundError as e:
        print(f"nvgen: {e}", file=sys.stderr)
        return 2
    for row in summary:
        print("  ".join(f"{k}={v}" for k, v in row.items()))
    print(f"nvgen: wrote {args.out} in {time.monotonic() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
