"""nvgen's command line: unpack the vendor archives, build every release's
tables in parallel, write them under --out.

    python3 -m tools.nvgen [--vendor DIR] [--out DIR] [--jobs N]
    python3 tools/nvgen/gen.py --out /tmp/nvgen-out

The output directory is replaced release by release, so a run leaves no
stale table behind.  Scratch files (the unpacked archives, the probe
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

from . import classes, controls, escapes, tables, tsv, uvm, vendor  # noqa: E402
from .release import UNKNOWN, TreeFacts  # noqa: E402

#: The project's vendor directory sits beside the checkout (../shared/vendor).
DEFAULT_VENDOR = Path(os.environ.get(
    "NVGEN_VENDOR", Path(__file__).resolve().parents[3] / "shared" / "vendor"))
DEFAULT_OUT = Path(__file__).resolve().parent / "out"

SUMMARY_COLUMNS = ("release", "escapes", "escapes_without_params", "classes",
                   "classes_without_params", "controls", "controls_without_params",
                   "uvm", "uvm_without_params", "unknown_sizes", "failures")


def _build_one(args) -> tuple[str, tables.Tables]:
    release, root, tree, workdir = args
    return release, tables.build(release, root, tree, workdir)


def _summary(release: str, t: tables.Tables) -> dict:
    """Counts per table: entries (an escape with two params structs counts
    once; a control without a name is counted by its number) and entries
    without any params struct."""
    row = dict(release=release)
    for kind, rows in (("escapes", t.escapes), ("classes", t.classes),
                       ("controls", t.controls), ("uvm", t.uvm)):
        key = {r["name"] or r.get("cmd") for r in rows}
        have = {r["name"] or r.get("cmd") for r in rows if r["params"]}
        row[kind], row[f"{kind}_without_params"] = len(key), len(key - have)
    every = t.escapes + t.classes + t.controls + t.uvm
    row["unknown_sizes"] = sum(1 for r in every if r["sizeof"] == UNKNOWN)
    row["failures"] = len(t.failures)
    return row


def write_release(out: Path, t: tables.Tables) -> None:
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    tsv.write(out / "escapes.tsv", escapes.COLUMNS, t.escapes)
    tsv.write(out / "classes.tsv", classes.COLUMNS, t.classes)
    tsv.write(out / "controls.tsv", controls.COLUMNS, t.controls)
    tsv.write(out / "uvm.tsv", uvm.COLUMNS, t.uvm)
    tsv.write(out / "failures.tsv", tables.FAILURE_COLUMNS,
              sorted(t.failures, key=lambda r: (r["table"], r["name"], r["probe"])))


def generate(vendor_dir: Path, out: Path, jobs: int) -> list[dict]:
    """Write every release's tables and out/summary.tsv; return the summary."""
    with tempfile.TemporaryDirectory(prefix="nvgen-") as scratch_name:
        scratch = Path(scratch_name)
        v = vendor.unpack(vendor_dir, scratch)
        tree = TreeFacts.read(vendor.TREE_RELEASE, v.tree, scratch)
        work = [(r, root, tree, scratch / "probe" / r) for r, root in v.releases.items()]
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            built = dict(pool.map(_build_one, work))
    out.mkdir(parents=True, exist_ok=True)
    summary = []
    for release in v.releases:
        write_release(out / release, built[release])
        summary.append(_summary(release, built[release]))
    tsv.write(out / "summary.tsv", SUMMARY_COLUMNS, summary)
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="nvgen", description=__doc__.split("\n\n")[0])
    ap.add_argument("--vendor", type=Path, default=DEFAULT_VENDOR,
                    help=f"directory holding {vendor.HEADERS_ARCHIVE} and "
                         f"{vendor.TREE_ARCHIVE} (default: $NVGEN_VENDOR or %(default)s)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory (default: %(default)s)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parallel releases")
    args = ap.parse_args(argv)
    start = time.monotonic()
    try:
        summary = generate(args.vendor, args.out, max(1, args.jobs))
    except FileNotFoundError as e:
        print(f"nvgen: {e}", file=sys.stderr)
        return 2
    for row in summary:
        print("  ".join(f"{k}={v}" for k, v in row.items()))
    print(f"nvgen: wrote {args.out} in {time.monotonic() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
