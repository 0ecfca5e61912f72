"""kmod/include/nvrel_tables.h (and vgpu/abi/nvrel.py): the policy of kmod/vgpu/policy/<release>.tsv as C
data, for vgpu.ko (verdicts, parameter sizes and the lists the params point
to) and nvsim (the sizes a release's driver checks).

One table per release and kind (escape, class, control, UVM command), of
every item whose verdict is not "refuse", sorted by number so that the
kernel can search it.  An item that is not in a table is refused; so is an
item whose size is unknown for that release ('?' in the TSV), since the
mediator must never copy more or less than the driver reads.  Aliases of
one number are one entry; they must agree on verdict and size.

An item whose embedded entries are all lists measured in
tools/nvgen/out/<release>/lists.tsv (lists.py) carries NVREL_F_LISTS and,
in the release's nvrel_ptr array from index ptr0, one nvrel_ptr per list
(in the order of the embedded column): the NvP64's offset, the count
member's offset and size (NVREL_NO_COUNT: a constant extent) and the bytes
per count unit (or the constant total).  Aliases must agree on them too.

For a release whose controls table carries its own export tables
(535.261.03, 595.45.04), nvrel_<release>_answered lists every control its
RM answers at all (answered()); vgpu.ko answers one outside it
NV_ERR_NOT_SUPPORTED, as that driver does (nvrel.h, nvrel_ctl_unexported).

    python3 -m tools.nvgen.kernel            # rewrites kmod/include/nvrel_tables.h
    python3 -m tools.nvgen.kernel --check    # exit 1 if it would change

Made from the committed TSVs only (kmod/vgpu/policy, tools/nvgen/out/*/lists.tsv and controls.tsv),
so `--check` (tests/host/test_kmod_abi.py) holds everywhere, without the
vendor archives.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import lists, tsv

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "kmod/vgpu/policy"
TABLES = ROOT / "tools/nvgen/out"          # <release>/lists.tsv
OUT = ROOT / "kmod/include/nvrel_tables.h"
PY_OUT = ROOT / "vgpu/abi/nvrel.py"
BASE = "595.45.04"      # the release whose layouts nvabi.h and vgpu/abi/nvabi.py pin

KINDS = ("escape", "class", "control", "uvm")
VERDICTS = {"forward": "NVREL_FORWARD", "rewrite": "NVREL_REWRITE",
            "virtualise": "NVREL_VIRTUALISE"}
# Sizes: a number, "a|b" (two accepted structs: RM_ALLOC's NVOS21/NVOS64),
# "-" or "" (no params), "?" (unknown for this release).
NO_COUNT = 0xffff       # NVREL_NO_COUNT: an extent without a count member


class PolicyError(ValueError):
    pass


def _release_key(name: str) -> tuple[int, ...]:
    return tuple(int(x) for x in name.split("."))


def releases(policy_dir: Path = POLICY) -> list[str]:
    return sorted((p.stem for p in policy_dir.glob("*.tsv")), key=_release_key)


def _embedded(rows: list[dict]) -> bool:
    """Whether the params carry a pointer, descriptor or address the driver
    follows ('-' and '- (unknown: ...)' say none is known)."""
    return any(not r["embedded"].startswith("-") for r in rows)


Ptr = tuple[int, int, int, int, str]  # ptr_off, count_off, count_size, elem_size, what (a comment)


def read_lists(release: str, tables_dir: Path = TABLES) -> dict[tuple[str, str, str], list[dict]]:
    """(kind, value, name) -> its rows of lists.tsv, in file order; none
    where the release has no lists.tsv."""
    path = tables_dir / release / lists.FILE
    out: dict[tuple[str, str, str], list[dict]] = {}
    for r in tsv.read(path) if path.is_file() else []:
        out.setdefault((r["kind"], r["value"], r["name"]), []).append(r)
    return out


def _ptr(r: dict) -> Ptr:
    where = f"{r['kind']} {r['value']} {r['name']} {r['member']}"
    off, elem = int(r["ptr_off"]), int(r["elem_size"])
    if r["count_member"]:
        count_off, count_size = int(r["count_off"]), int(r["count_size"])
        if count_size not in (1, 2, 4, 8) or not 0 <= count_off < NO_COUNT:
            raise PolicyError(f"{where}: count {r['count_member']} at {count_off}, {count_size} bytes")
    else:
        count_off, count_size = NO_COUNT, 0
    if not 0 <= off < NO_COUNT or not 0 < elem < 1 << 32:
        raise PolicyError(f"{where}: pointer at {off}, element {elem} bytes: out of range")
    what = r["member"] + (f", count {r['count_member']}" if r["count_member"] else ", constant")
    return off, count_off, count_size, elem, what


def _lists(rows: list[dict], measured: dict) -> tuple[Ptr, ...] | None:
    """The lists of one number's rows if every alias's embedded entries are
    all measured lists (the same ones), else None."""
    got = []
    for r in rows:
        have = measured.get((r["kind"], r["value"], r["name"]), [])
        parts = lists.parse_cell(r["embedded"])
        want = [e.member for _, es in parts or [] for e in es]
        if have and (not lists.only_lists(r["embedded"]) or [h["member"] for h in have] != want):
            raise PolicyError(f"{r['kind']} {r['value']} {r['name']}: lists.tsv names "
                              f"{[h['member'] for h in have]}, the policy {r['embedded']!r}: "
                              "rerun python3 -m tools.nvgen.lists")
        got.append(tuple(_ptr(h) for h in have) if have else None)
    if any(g is None for g in got):
        return None
    if len(set(got)) > 1:
        raise PolicyError(f"{rows[0]['kind']} {rows[0]['value']}: aliases disagree on lists: "
                          + ", ".join(r["name"] for r in rows))
    return got[0]


def _entry(rows: list[dict], measured: dict | None = None) -> tuple[int, int, int, str, str, tuple] | None:
    """(value, size, size2, verdict, flags, lists) of one number's rows, or
    None if refused; lists: the nvrel_ptr tuples (empty unless
    NVREL_F_LISTS)."""
    verdicts = {r["verdict"] for r in rows}
    sizes = {r["size"] for r in rows}
    if len(verdicts) > 1 or (len(sizes) > 1 and verdicts != {"refuse"}):
        raise PolicyError(f"{rows[0]['kind']} {rows[0]['value']}: aliases disagree: "
                          + ", ".join(f"{r['name']}={r['verdict']}/{r['size']}" for r in rows))
    verdict = verdicts.pop()
    size = sizes.pop() if len(sizes) == 1 else "?"
    if verdict == "refuse" or size == "?" or "?" in size.split("|"):
        return None
    if size in ("-", ""):
        a = b = 0
    else:
        parts = [int(x) for x in size.split("|")]
        if len(parts) > 2:
            raise PolicyError(f"{rows[0]['value']}: more than two sizes: {size}")
        a, b = parts[0], parts[-1]
    ptrs = _lists(rows, measured or {}) if _embedded(rows) else None
    flags = " | ".join((["NVREL_F_EMBEDDED"] if _embedded(rows) else [])
                       + (["NVREL_F_LISTS"] if ptrs else [])) or "0"
    return int(rows[0]["value"], 16), a, b, VERDICTS[verdict], flags, ptrs or ()


def answered(release: str, tables_dir: Path = TABLES) -> list[int] | None:
    """The controls the release's RM answers at all: exported by a class of
    its own export tables (a non-empty rm_privilege in its controls.tsv),
    or a deprecated V1 command its deprecated-control layer answers through
    the V2 one (policy.DEPRECATED_V1, 595.45.04's list; 535.261.03's is a
    subset, the rest exported outright there).  None for a release with
    headers only ('-' in the rm_* columns)."""
    from .policy import DEPRECATED_V1
    rows = tsv.read(tables_dir / release / "controls.tsv")
    if not any(r["rm_privilege"] != "-" for r in rows):
        return None
    return sorted({int(r["cmd"], 16) for r in rows if r["cmd"] not in ("", "?")
                   and (r["rm_privilege"] not in ("", "-") or r["name"] in DEPRECATED_V1)})


def _ident(release: str) -> str:
    return "nvrel_" + release.replace(".", "_")


def tables(policy_dir: Path = POLICY, tables_dir: Path = TABLES) -> dict[str, dict[str, list[tuple]]]:
    out = {}
    for rel in releases(policy_dir):
        rows = tsv.read(policy_dir / f"{rel}.tsv")
        measured = read_lists(rel, tables_dir)
        per_kind = {}
        for kind in KINDS:
            by_value: dict[str, list[dict]] = {}
            for r in rows:
                if r["kind"] == kind and r["value"] != "?":
                    by_value.setdefault(r["value"], []).append(r)
            entries = [e for e in (_entry(v, measured) for v in by_value.values()) if e]
            per_kind[kind] = sorted(entries)
        out[rel] = per_kind
    return out


def render(policy_dir: Path = POLICY, tables_dir: Path = TABLES) -> str:
    t = tables(policy_dir, tables_dir)
    lines = [
        "/* SPDX-License-Identifier: GPL-2.0 */",
        "/*",
        " * nvrel_tables.h - per-release mediation tables, generated by",
        " * `python3 -m tools.nvgen.kernel` from kmod/vgpu/policy/<release>.tsv and",
        " * tools/nvgen/out/<release>/lists.tsv; do not edit",
        " * (tests/host/test_kmod_abi.py fails if this file and the TSVs",
        " * disagree).  Included by one file of each module (vgpu.ko's",
        " * policy.c, nvsim's release.c); the types are in nvrel.h.",
        " *",
        " * Every escape, class, control and UVM command whose verdict is not",
        " * refuse, with its parameter size for that release (size2: the second",
        " * accepted struct, RM_ALLOC's NVOS64 beside NVOS21), sorted by number;",
        " * NVREL_F_EMBEDDED: its params name a pointer, descriptor or address",
        " * the driver follows (the TSV's embedded column); NVREL_F_LISTS: all",
        " * of them are lists the driver copies, described by the nptrs",
        " * entries of the release's ptrs array from ptr0 (pointer offset,",
        " * count offset and size, bytes per count unit).",
        " *",
        " * For a release whose own RM export tables nvgen read (535.261.03,",
        " * 595.45.04): the sorted numbers of every control its RM answers at",
        " * all (exported by a class, or a deprecated V1 command); a control",
        " * not among them is answered NV_ERR_NOT_SUPPORTED by that driver.",
        " */",
        "",
    ]
    kind_c = {"escape": "esc", "class": "cls", "control": "ctl", "uvm": "uvm"}
    has_ptrs, has_answered = {}, {}
    for rel, per_kind in t.items():
        ptrs: list[str] = []
        for kind in KINDS:
            lines.append(f"static const struct nvrel_item {_ident(rel)}_{kind_c[kind]}[] = {{")
            for value, a, b, verdict, flags, lst in per_kind[kind]:
                first = len(ptrs) if lst else 0
                lines.append(f"\t{{ {value:#010x}, {a}, {b}, {verdict}, {flags}, {len(lst)}, {first} }},")
                for off, count_off, count_size, elem, what in lst:
                    count = "NVREL_NO_COUNT" if count_off == NO_COUNT else count_off
                    ptrs.append(f"\t{{ {off}, {count}, {count_size}, 0, 0, {elem} }},"
                                f"\t/* {len(ptrs)}: {kind} {value:#x} {what} */")
            lines.append("};")
            lines.append("")
        if len(ptrs) >= 1 << 16:
            raise PolicyError(f"{rel}: {len(ptrs)} lists do not fit a u16 index")
        has_ptrs[rel] = bool(ptrs)
        ans = answered(rel, tables_dir)
        has_answered[rel] = ans is not None
        if ans is not None:
            lines.append(f"static const u32 {_ident(rel)}_answered[] = {{")
            lines += ["\t" + " ".join(f"{v:#010x}," for v in ans[i:i + 6]) for i in range(0, len(ans), 6)]
            lines.append("};")
            lines.append("")
        if ptrs:
            lines.append(f"static const struct nvrel_ptr {_ident(rel)}_ptrs[] = {{")
            lines += ptrs
            lines.append("};")
            lines.append("")
    lines.append("static const struct nvrel_release nvrel_releases[] = {")
    for rel in t:
        i = _ident(rel)
        lines.append(f'\t{{ "{rel}", {{')
        lines += [f"\t\t{{ {i}_{kind_c[k]}, ARRAY_SIZE({i}_{kind_c[k]}) }}," for k in KINDS]
        ans = f"{i}_answered, ARRAY_SIZE({i}_answered)" if has_answered[rel] else "NULL, 0"
        lines.append(f"\t}}, {i + '_ptrs' if has_ptrs[rel] else 'NULL'}, {ans} }},")
    lines.append("};")
    return "\n".join(lines) + "\n"


def render_py(policy_dir: Path = POLICY) -> str:
    """vgpu/abi/nvrel.py: for the Python ABI client, the escape, control and UVM
    sizes of each release that differ from BASE's (the sizes of its ctypes
    structs).  Class sizes are the driver's to copy, whatever the caller
    passes, so not needed."""
    t = tables(policy_dir)
    kinds = (("escape", "ESCAPES"), ("control", "CONTROLS"), ("uvm", "UVM"))
    base = {k: {e[0]: e[1] for e in t[BASE][k]} for k, _ in kinds}
    lines = [
        '"""Per-release parameter sizes for the ABI client (vgpu/abi/nvclient.py).',
        "",
        "Generated by `python3 -m tools.nvgen.kernel` from kmod/vgpu/policy/<release>.tsv;",
        "do not edit (tests/host/test_kmod_abi.py fails if it and the TSVs",
        f"disagree).  vgpu/abi/nvabi.py's structs are {BASE}'s; for each other release,",
        "the escapes, controls and UVM commands (that the policy does not refuse)",
        "whose parameter size differs.  For the structs nvabi.h pins, every pinned",
        "member lies at the same offset in every release that has it, or at the",
        "same distance from the end where the middle grew (tests/host/test_kmod_abi.py;",
        "the UVM structs of releases other than 595.45.04 with NVGEN_NVIDIA_GIT);",
        'for any other struct this table gives the size only."""',
        "",
        f'BASE = "{BASE}"',
        "RELEASES = (" + ", ".join(f'"{r}"' for r in t) + ",)",
        "",
    ]
    for kind, name in kinds:
        lines.append(f"# release -> {{{kind} number: size}}")
        lines.append(f"{name}: dict[str, dict[int, int]] = {{")
        for rel, per_kind in t.items():
            diff = [(v, a) for v, a, *_ in per_kind[kind]
                    if v in base[kind] and base[kind][v] != a]
            lines.append(f'    "{rel}": {{' + ", ".join(f"{v:#x}: {a}" for v, a in diff) + "},")
        lines.append("}")
    lines += ["_TABLES = {" + ", ".join(f'"{k}": {n}' for k, n in kinds) + "}",
              "", "",
              "def size(release: str, kind: str, value: int, default: int) -> int:",
              '    """The release\'s params size of an escape, control or UVM command',
              '    (kind "escape", "control", "uvm"), default (the ctypes struct\'s)',
              '    where it is BASE\'s or the release is unknown."""',
              "    return _TABLES[kind].get(release, {}).get(value, default)", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m tools.nvgen.kernel",
                                 description="Write kmod/include/nvrel_tables.h from kmod/vgpu/policy.")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 (and say why) if the committed file differs")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--py-out", type=Path, default=PY_OUT)
    args = ap.parse_args(argv)
    outputs = ((args.out, render()), (args.py_out, render_py()))
    if args.check:
        stale = [str(p) for p, text in outputs if not p.is_file() or p.read_text() != text]
        for p in stale:
            print(f"{p} is stale: run python3 -m tools.nvgen.kernel", file=sys.stderr)
        return 1 if stale else 0
    for p, text in outputs:
        p.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
