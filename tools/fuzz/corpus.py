"""Turn recorded call traces (docs/trace.md) into nvfuzz's corpus file.

    python3 tools/fuzz/corpus.py [TRACE.jsonl ...] -o build/nvfuzz.corpus

Without traces, every tests/data/traces/*.jsonl is read.  The output is
plain text, one call per line, grouped into sequences (one per trace file),
which nvfuzz replays in order (with the handles the recording's driver
picked replaced by its own) and mutates call by call:

    # nvfuzz corpus 1
    seq NAME
    call NODE GPU NR ITEM SIZE IN_HEX PIN_HEX FDOFF NEWH

NODE is ctl, gpu or uvm and GPU the slice's GPU number (gpuN); NR the
escape (an XFER's inner one) or the UVM command, hex; ITEM the class
(RM_ALLOC) or control (RM_CONTROL), hex, else 0; SIZE the parameters'
size; IN_HEX the parameters before the call; PIN_HEX what RM_CONTROL's
params or RM_ALLOC's pAllocParms named before the call ("-": none);
FDOFF the offset of a descriptor in the parameters (-1: none); NEWH the
handle the driver picked in the recording (RM_ALLOC with hRoot 0 for a
root client, or hObjectNew 0), hex, else 0.

Opens, closes and mmaps are left out (nvfuzz makes its own), so are calls
whose parameters were not recorded whole (truncated, unreadable).
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / "tests" / "data" / "traces"
NV_ESC_RM_ALLOC = 0x2B
ROOT_CLASSES = (0x0, 0x1, 0x41)


def _u32(data: bytes, off: int) -> int:
    return struct.unpack_from("<I", data, off)[0] if off + 4 <= len(data) else 0


def records(path: Path):
    """The ioctl records of one trace, in seq order."""
    out = []
    with path.open() as f:
        for n, line in enumerate(f):
            line = line.strip()
            if not line:
                continue
            r = json.loads(line)
            if n == 0 and "trace" in r:
                continue
            if r.get("op") == "ioctl":
                out.append(r)
    out.sort(key=lambda r: r.get("seq", 0))
    return out


def call_line(r: dict) -> str | None:
    if r.get("truncated") or r.get("unreadable") or "in" not in r:
        return None
    node = r.get("node", "ctl")
    gpu = 0
    if node.startswith("gpu"):
        gpu = int(node[3:] or 0)
        node = "gpu"
    elif node not in ("ctl", "uvm"):
        return None
    nr = int(r["nr"])
    item = r.get("item") or {}
    kind = item.get("kind")
    number = int(item.get("number", 0)) if kind in ("class", "control") else 0
    data = bytes.fromhex(r["in"])
    pin = r.get("params_in")
    fd = r.get("fd")
    fdoff = int(fd["offset"]) if isinstance(fd, dict) and "offset" in fd else -1
    newh = 0
    if nr == NV_ESC_RM_ALLOC and node != "uvm" and r.get("ret") == 0 and r.get("out"):
        out = bytes.fromhex(r["out"])
        if number in ROOT_CLASSES and _u32(data, 0) == 0:
            newh = _u32(out, 8)
        elif number not in ROOT_CLASSES and _u32(data, 8) == 0:
            newh = _u32(out, 8)
    return (f"call {node} {gpu} {nr:x} {number:x} {len(data)} {data.hex() or '-'} "
            f"{pin or '-'} {fdoff} {newh:x}")


def build(paths: list[Path]) -> tuple[str, int]:
    lines = ["# nvfuzz corpus 1 (tools/fuzz/corpus.py)"]
    calls = 0
    for p in paths:
        lines.append(f"seq {p.stem}")
        for r in records(p):
            line = call_line(r)
            if line:
                lines.append(line)
                calls += 1
    return "\n".join(lines) + "\n", calls


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="*", type=Path)
    ap.add_argument("-o", "--output", type=Path, required=True)
    a = ap.parse_args(argv)
    paths = a.traces or sorted(TRACES.glob("*.jsonl"))
    if not paths:
        print("corpus: no traces", file=sys.stderr)
        return 2
    text, calls = build(paths)
    a.output.parent.mkdir(parents=True, exist_ok=True)
    a.output.write_text(text)
    print(f"corpus: {calls} calls from {len(paths)} traces -> {a.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
