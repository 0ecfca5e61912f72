"""Where the lists an item's params point to lie: tools/nvgen/out/<release>/lists.tsv.

The `embedded` column of kmod/vgpu/policy/<release>.tsv names, per escape, class
and control, the params members the driver reads through later.  Where every
one of them is a `ptr:MEMBER[EXTENT]` (a user buffer the driver copies, of
EXTENT bytes), a mediator can forward the item soundly by copying each list
into its own memory and handing the driver that copy, so that what the
driver reads is what the mediator saw.  For that it needs, per list and
release: the byte offset of the NvP64 member, the offset and size of the
count member the extent multiplies, and the bytes per count unit (or, for an
extent without a count member, such as `sizeof(RS_ACCESS_MASK)`, the
constant total).  This module measures them with gcc (probe.py) against the
release's own headers, in the header set the tables are measured with.

Which items: every escape, class and control whose verdict is not refuse and
whose embedded column holds only `ptr:MEMBER[EXTENT]` entries (notes in
parentheses allowed).  An entry that is `fd:`, `va:` or a `ptr:` without an
extent, or a column `- (unknown ...)`, leaves the item out: the lists alone
would not make it safe to forward.  The params struct is the one the column
describes (policy.params_structs: the driver's type where 595.45.04 names
one, else the header's); aliases of a number get a row each.

EXTENT is a product of factors: at most one count member (a path in the
params struct, `a.b` allowed), integer literals and `sizeof(T)`.  elem_size
is the product of the constant factors (1 for `[count]`); with no count
member it is the whole extent.  A member nested in a member struct takes its
count from beside it where that exists (`a.ptr` with `count` -> `a.count`),
else from the top.

Checked, so that the kernel can rely on them: the pointer member is 8 bytes
(NvP64), the count member is an integer of 1, 2, 4 or 8 bytes.  An item with
an entry that cannot be measured (a member the release does not have, an
extent that is not such a product, a pointer inside an array, an item with
two params structs such as RM_ALLOC's NVOS21/NVOS64) has no row in lists.tsv;
each such entry is a row of lists-failures.tsv with the reason.

    python3 -m tools.nvgen.lists [--vendor DIR] [--out DIR]   # rewrites out/<release>/lists*.tsv

The main generator (python3 -m tools.nvgen) runs this step too, after the
tables, from the committed kmod/vgpu/policy; after regenerating kmod/vgpu/policy, run
this module (or the generator again) and then python3 -m tools.nvgen.kernel.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):   # run as a script: make "tools.nvgen" importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    __package__ = "tools.nvgen"

from . import cstructs, tsv, vendor  # noqa: E402
from .policy import KINDS as POLICY_KINDS, params_structs  # noqa: E402
from .probe import HeaderSet, Result, measure  # noqa: E402
from .release import DEFINES, Release  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
OUT_TABLES = HERE / "out"
POLICY = ROOT / "kmod" / "vgpu" / "policy"
FILE = "lists.tsv"
FAILURES_FILE = "lists-failures.tsv"
COLUMNS = ("kind", "value", "name", "params", "member", "ptr_off", "count_member", "count_off",
           "count_size", "elem_size")
FAILURE_COLUMNS = ("kind", "value", "name", "params", "member", "reason")
KINDS = ("escape", "class", "control")     # UVM passes no NvP64 lists
TABLE_OF = {k: POLICY_KINDS[k] for k in KINDS}   # kind -> (table file stem, number column)

# gcc's __builtin_classify_type: what the pointer and count members may be.
_INTEGER, _POINTER = 1, 5
_ENTRY = re.compile(r"^(?P<kind>\w+):(?P<body>.*?)(?:\s+\((?P<note>.*)\))?$", re.S)
_PATH = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*$")
_SIZEOF = re.compile(r"^sizeof\(\s*([A-Za-z_]\w*)\s*\)$")
_LABEL = re.compile(r"^([A-Za-z_]\w*): (.*)$", re.S)


@dataclass(frozen=True)
class Entry:
    """One member of an embedded cell: kind (ptr, va, fd), the member's path,
    the extent in brackets ("" if none)."""
    kind: str
    member: str
    extent: str


def parse_entry(text: str) -> Entry:
    m = _ENTRY.match(text.strip())
    if not m:
        raise ValueError(f"not an embedded entry: {text!r}")
    body, extent = m.group("body"), ""
    if body.endswith("]"):
        depth = 0
        for i in range(len(body) - 1, -1, -1):
            depth += {"]": 1, "[": -1}.get(body[i], 0)
            if depth == 0:
                body, extent = body[:i], body[i + 1:-1]
                break
    return Entry(m.group("kind"), body, extent.strip())


def parse_cell(cell: str) -> list[tuple[str, list[Entry]]] | None:
    """An embedded cell as [(struct label or "", entries)]; None for `-` and
    `- (unknown ...)` (nothing named, or not known)."""
    if cell.startswith("-"):
        return None
    out = []
    for part in cstructs.split_top(cell, ";"):
        m = _LABEL.match(part)
        label, body = (m.group(1), m.group(2)) if m else ("", part)
        out.append((label, [parse_entry(e) for e in cstructs.split_top(body, ",")]))
    return out


def only_lists(cell: str) -> bool:
    """Whether the cell names something and all of it is ptr:MEMBER[EXTENT]."""
    parts = parse_cell(cell)
    return bool(parts) and all(e.kind == "ptr" and e.extent for _, es in parts for e in es)


# ------------------------------------------------------------------ extents
@dataclass(frozen=True)
class Extent:
    count: str | None          # the count member's path, None for a constant
    literal: int               # the product of the integer factors
    sizeofs: tuple[str, ...]   # types whose sizeof multiplies it


def parse_extent(extent: str) -> Extent:
    count, literal, sizeofs = None, 1, []
    for factor in cstructs.split_top(extent, "*"):
        factor = factor.strip()
        if re.fullmatch(r"\d+", factor):
            literal *= int(factor)
        elif m := _SIZEOF.match(factor):
            sizeofs.append(m.group(1))
        elif _PATH.match(factor):
            if count is not None:
                raise ValueError(f"two count members in {extent!r}")
            count = factor
        else:
            raise ValueError(f"extent {extent!r}: factor {factor!r} is not a member, an integer or sizeof(T)")
    return Extent(count, literal, tuple(sizeofs))


def _count_paths(member: str, count: str) -> list[str]:
    """Where a nested pointer's count may be: beside it, then at the top."""
    parent = member.rpartition(".")[0]
    return ([f"{parent}.{count}"] if parent else []) + [count]


# ------------------------------------------------------------- measurement
def _offset(t: str, path: str) -> str:
    return f"__builtin_offsetof({t},{path})"


def _msize(t: str, path: str) -> str:
    return f"(({t}*)0)->{path}"


def _mclass(t: str, path: str) -> str:
    return f"__builtin_classify_type((({t}*)0)->{path})"


@dataclass
class Candidate:
    """An item whose cell is all lists, with the structs to measure."""
    kind: str
    value: str
    name: str
    structs: list[str]
    labels: list[str]          # the cell's struct labels ("" when unlabelled)
    entries: list[Entry]


def candidates(policy_rows: list[dict], tables: dict[str, list[dict]]) -> list[Candidate]:
    """The items of a release to measure: not refused, every entry a list."""
    by_item: dict[tuple[str, int, str], list[dict]] = {}
    for kind in KINDS:
        stem, numcol = TABLE_OF[kind]
        for r in tables[stem]:
            if r[numcol] not in ("", "?"):
                by_item.setdefault((kind, int(r[numcol], 16), r["name"]), []).append(r)
    out = []
    for p in policy_rows:
        if p["kind"] not in KINDS or p["verdict"] == "refuse" or p["value"] == "?":
            continue
        if not only_lists(p["embedded"]):
            continue
        parts = parse_cell(p["embedded"])
        rows = by_item.get((p["kind"], int(p["value"], 16), p["name"]), [])
        out.append(Candidate(p["kind"], p["value"], p["name"], params_structs(rows),
                             [label for label, _ in parts], [e for _, es in parts for e in es]))
    return out


def _probes(c: Candidate, t: str) -> tuple[set[str], set[str]]:
    sizes, values = set(), set()
    for e in c.entries:
        if "[" in e.member or " " in t:
            continue
        values |= {_offset(t, e.member), _mclass(t, e.member)}
        sizes.add(_msize(t, e.member))
        try:
            ext = parse_extent(e.extent)
        except ValueError:
            continue
        sizes |= set(ext.sizeofs)
        if ext.count:
            for path in _count_paths(e.member, ext.count):
                values |= {_offset(t, path), _mclass(t, path)}
                sizes.add(_msize(t, path))
    return sizes, values


def _why(res: Result, kind: str, name: str) -> str:
    return res.failed.get((kind, name), "gcc gave no number")


def _measure_entry(res: Result, t: str, e: Entry) -> dict:
    """One list's numbers in struct t; ValueError(reason) if it has none."""
    if "[" in e.member:
        raise ValueError("a pointer inside an array member: one list per element")
    ext = parse_extent(e.extent)
    off = res.values.get(_offset(t, e.member))
    if off is None:
        raise ValueError(_why(res, "value", _offset(t, e.member)))
    psize, pclass = res.sizes.get(_msize(t, e.member)), res.values.get(_mclass(t, e.member))
    if psize != 8 or pclass not in (_POINTER, _INTEGER):
        raise ValueError(f"{t}.{e.member} is not an 8-byte NvP64 (size {psize}, type class {pclass})")
    elem = ext.literal
    for typ in ext.sizeofs:
        if typ not in res.sizes:
            raise ValueError(_why(res, "sizeof", typ))
        elem *= res.sizes[typ]
    row = dict(member=e.member, ptr_off=off, count_member="", count_off="", count_size="", elem_size=elem)
    if ext.count is None:
        return row
    reasons = []
    for path in _count_paths(e.member, ext.count):
        coff = res.values.get(_offset(t, path))
        if coff is None:
            reasons.append(_why(res, "value", _offset(t, path)))
            continue
        csize, cclass = res.sizes.get(_msize(t, path)), res.values.get(_mclass(t, path))
        if cclass != _INTEGER or csize not in (1, 2, 4, 8):
            raise ValueError(f"count {t}.{path} is not an integer of 1, 2, 4 or 8 bytes "
                             f"(size {csize}, type class {cclass})")
        row.update(count_member=path, count_off=coff, count_size=csize)
        return row
    raise ValueError("; ".join(dict.fromkeys(reasons)))


def header_set(rel: Release) -> HeaderSet:
    """The header set the tables measure escapes, classes and controls with."""
    return HeaderSet([p.name for p in rel.ioctl_headers()] + rel.sdk_headers(),
                     [rel.sdk, rel.unix], [rel.kcommon], DEFINES)


def build(release: str, root: Path, policy_rows: list[dict], tables: dict[str, list[dict]],
          workdir: Path) -> tuple[list[dict], list[dict]]:
    """lists.tsv's and lists-failures.tsv's rows of one release.  tables:
    its escapes, classes and controls rows, keyed by table file stem."""
    cands = candidates(policy_rows, tables)
    sizes, values = set(), set()
    for c in cands:
        for t in c.structs:
            s, v = _probes(c, t)
            sizes |= s
            values |= v
    res = Result({}, {}, {})
    if sizes or values:
        rel = Release(release, root)
        res = measure(header_set(rel), sizes, values, workdir, [root])
    rows, failures = [], []
    for c in cands:
        head = dict(kind=c.kind, value=c.value, name=c.name, params="|".join(c.structs))
        bad = []
        if not c.structs or len(c.structs) > 1 or any(c.labels):
            many = (f"{len(c.structs)} params structs ({', '.join(c.structs)}): one list layout per "
                    f"item only" if c.structs else "no params struct known")
            for e in c.entries:
                try:
                    parse_extent(e.extent)
                    bad.append((e.member, many))
                except ValueError as err:
                    bad.append((e.member, str(err)))
        measured = []
        if not bad:
            t = c.structs[0]
            for e in c.entries:
                try:
                    measured.append(_measure_entry(res, t, e))
                except ValueError as err:
                    bad.append((e.member, str(err)))
        if bad:
            failures += [dict(head, member=m, reason=why) for m, why in dict.fromkeys(bad)]
        else:
            rows += [dict(head, **m) for m in measured]
    return rows, failures


def write(out: Path, rows: list[dict], failures: list[dict]) -> None:
    tsv.write(out / FILE, COLUMNS, rows)
    tsv.write(out / FAILURES_FILE, FAILURE_COLUMNS, failures)


def read_tables(release_dir: Path) -> dict[str, list[dict]]:
    return {stem: tsv.read(release_dir / f"{stem}.tsv") for stem, _ in TABLE_OF.values()}


def policy_rows(release: str, policy_dir: Path = POLICY) -> list[dict]:
    """kmod/vgpu/policy/<release>.tsv, or none if the policy has no such release yet."""
    path = policy_dir / f"{release}.tsv"
    return tsv.read(path) if path.is_file() else []


def generate(vendor_dir: Path, out: Path = OUT_TABLES, policy_dir: Path = POLICY) -> list[str]:
    """Rewrite lists.tsv and lists-failures.tsv of every release whose
    tables are under out (the committed tables: this step comes after
    kmod/vgpu/policy)."""
    with tempfile.TemporaryDirectory(prefix="nvgen-lists-") as scratch:
        v = vendor.unpack(vendor_dir, Path(scratch))
        done = []
        for release, root in v.releases.items():
            if not (out / release).is_dir():
                continue
            rows, failures = build(release, root, policy_rows(release, policy_dir),
                                   read_tables(out / release), Path(scratch) / "probe" / release)
            write(out / release, rows, failures)
            done.append(release)
        return done


def main(argv: list[str] | None = None) -> int:
    from .gen import DEFAULT_VENDOR
    ap = argparse.ArgumentParser(prog="nvgen.lists", description=__doc__.split("\n\n")[0])
    ap.add_argument("--vendor", type=Path, default=DEFAULT_VENDOR)
    ap.add_argument("--out", type=Path, default=OUT_TABLES,
                    help="the tables directory whose <release>/lists*.tsv are rewritten (default: %(default)s)")
    ap.add_argument("--policy", type=Path, default=POLICY, help="kmod/vgpu/policy (default: %(default)s)")
    args = ap.parse_args(argv)
    try:
        releases = generate(args.vendor, args.out, args.policy)
    except FileNotFoundError as e:
        print(f"nvgen.lists: {e}", file=sys.stderr)
        return 2
    for release in releases:
        n = len(tsv.read(args.out / release / FILE))
        f = len(tsv.read(args.out / release / FAILURES_FILE))
        print(f"{release}: lists={n} failures={f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
