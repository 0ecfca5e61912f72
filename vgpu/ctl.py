"""vgpuctl: administer GPU slices through vgpud.

Placeholder entry point: the implementation lands with its own issue.  It
prints its usage and exits 2 so that nothing mistakes it for a working tool.
"""
from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="vgpuctl",
        description="administer GPU slices through vgpud (not implemented yet in this release).")
    parser.parse_args(argv)
    parser.print_usage(sys.stderr)
    print("vgpuctl: not implemented yet", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
