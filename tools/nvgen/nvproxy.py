"""What gVisor's nvproxy forwards, per driver version: the facts the policy
is compared with (kmod/vgpu/policy/README.md, "Differences from nvproxy").

nvproxy (google/gvisor, pkg/sentry/devices/nvproxy) mediates the same ABI in
user space and forwards only what it lists: per driver version, a table of
escapes, UVM commands, controls and classes, each with the handler that
treats it (a plain copy, or one that translates an embedded fd or pointer)
and the container capabilities (compute, utility, graphics, video, ...)
that enable it.  Those lists record what real workloads needed, so where
this project's policy differs, kmod/vgpu/policy/README.md says why.

Only facts are taken: numbers, names, handler kinds and capabilities, read
as text from version.go and pkg/abi/nvgpu/*.go.  version.go builds each
version's table from an older one (`abi := v535_113_01()` then
`abi.controlCmd[nvgpu.X] = ...` or `delete(...)`); this module replays
those steps.  The result is committed under tools/nvgen/nvproxy/ so that
the policy and its tests need no gVisor checkout:

    python3 -m tools.nvgen.nvproxy --gvisor /path/to/gvisor   # work tree or bare git dir

writes tools/nvgen/nvproxy/<nvproxy version>.tsv (columns `kind value name
handler params caps`) for the nvproxy version matched to each release of
tools/nvgen/out, and versions.tsv (release -> nvproxy version, gVisor commit).
"""

from __future__ import annotations

import argparse
import ast
import operator
import re
import subprocess
import sys
from pathlib import Path

if __package__ in (None, ""):   # run as a script: make "tools.nvgen" importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    __package__ = "tools.nvgen"

from . import tsv  # noqa: E402
from .cstructs import split_top  # noqa: E402

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "nvproxy"
COLUMNS = ("kind", "value", "name", "handler", "params", "caps")
VERSION_COLUMNS = ("release", "nvproxy", "gvisor_commit")

VERSION_GO = "pkg/sentry/devices/nvproxy/version.go"
NVGPU_DIR = "pkg/abi/nvgpu"
# nvproxy's table name -> this project's kind.
TABLES = {"frontendIoctl": "escape", "uvmIoctl": "uvm",
          "controlCmd": "control", "allocationClass": "class"}
WIDTH = {"escape": 2, "class": 8, "control": 8, "uvm": 8}


# ------------------------------------------------------------------ source
class Source:
    """A gVisor tree: a work tree (files) or a git directory (HEAD)."""

    def __init__(self, path: Path):
        self.path = path
        self.worktree = (path / VERSION_GO).is_file()

    def commit(self) -> str:
        git = ["git", "-C", str(self.path)] if self.worktree else ["git", "--git-dir", str(self.path)]
        return subprocess.run(git + ["rev-parse", "HEAD"], check=True, capture_output=True,
                              text=True).stdout.strip()

    def read(self, rel: str) -> str:
        if self.worktree:
            return (self.path / rel).read_text()
        return subprocess.run(["git", "--git-dir", str(self.path), "show", f"HEAD:{rel}"],
                              check=True, capture_output=True, text=True).stdout

    def listdir(self, rel: str) -> list[str]:
        if self.worktree:
            return sorted(p.name for p in (self.path / rel).iterdir())
        out = subprocess.run(["git", "--git-dir", str(self.path), "ls-tree", "--name-only",
                              f"HEAD:{rel}"], check=True, capture_output=True, text=True).stdout
        return sorted(out.split())


# --------------------------------------------------------------- constants
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
        ast.BitOr: operator.or_, ast.LShift: operator.lshift, ast.RShift: operator.rshift}
_CONST = re.compile(r"^\s*(?:const\s+)?([A-Za-z_]\w*)\s*=\s*([^/\n]+?)\s*(?://.*)?$", re.M)


def _eval(expr: str, env: dict[str, str], values: dict[str, int], depth: int = 0) -> int | None:
    """An integer constant expression of names, literals and + - * | << >>."""
    if depth > 20:
        return None
    try:
        node = ast.parse(expr, mode="eval").body
    except SyntaxError:
        return None

    def ev(n):
        if isinstance(n, ast.Constant) and isinstance(n.value, int):
            return n.value
        if isinstance(n, ast.Name):
            if n.id in values:
                return values[n.id]
            if n.id in env:
                v = _eval(env[n.id], env, values, depth + 1)
                if v is not None:
                    values[n.id] = v
                return v
            return None
        if isinstance(n, ast.BinOp) and type(n.op) in _OPS:
            a, b = ev(n.left), ev(n.right)
            return None if a is None or b is None else _OPS[type(n.op)](a, b)
        return None
    return ev(node)


def constants(src: Source) -> dict[str, int]:
    """Every integer constant of pkg/abi/nvgpu that evaluates."""
    env: dict[str, str] = {}
    for name in src.listdir(NVGPU_DIR):
        if name.endswith(".go") and not name.endswith("_test.go"):
            for m in _CONST.finditer(src.read(f"{NVGPU_DIR}/{name}")):
                env.setdefault(m.group(1), m.group(2))
    values: dict[str, int] = {}
    for name, expr in env.items():
        if name not in values:
            v = _eval(expr, env, values)
            if v is not None:
                values[name] = v
    return values


# ------------------------------------------------------------ version.go
def _matching(text: str, start: int, open_: str = "(", close: str = ")") -> int:
    """Index just past the bracket that closes the one at text[start]."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == open_:
            depth += 1
        elif text[i] == close:
            depth -= 1
            if depth == 0:
                return i + 1
    raise ValueError("unbalanced brackets in version.go")


_ENTRY = re.compile(r"nvgpu\.(\w+)\s*:\s*(feHandler|uvmHandler|ctrlHandler|allocHandler)\(")
_SET = re.compile(r"abi\.(\w+)\[nvgpu\.(\w+)\]\s*=\s*(feHandler|uvmHandler|ctrlHandler|allocHandler)\(")
_DELETE = re.compile(r"delete\(abi\.(\w+),\s*nvgpu\.(\w+)\)")
_REGISTER = re.compile(r"(\w+)\s*:?=\s*add(Unsupported)?DriverABI\(")
_MAP = re.compile(r"(\w+):\s*map\[[^\]]+\]\w+\{")


def _handler(text: str, open_paren: int) -> tuple[str, str, str]:
    """`xxHandler(handler[params], caps)` -> (handler, params, caps)."""
    args = split_top(text[open_paren + 1:_matching(text, open_paren) - 1], ",")
    fn, caps = args[0], args[1] if len(args) > 1 else ""
    m = re.match(r"(\w+)(?:\[nvgpu\.(\w+)\])?", fn)
    caps = caps.replace("compUtil", "nvconf.CapCompute|nvconf.CapUtility")
    caps = "|".join(sorted(c.strip().replace("nvconf.Cap", "").lower() for c in caps.split("|") if c.strip()))
    return m.group(1), m.group(2) or "", caps


def _base_tables(body: str) -> dict[str, dict[str, tuple]]:
    tables: dict[str, dict[str, tuple]] = {t: {} for t in TABLES}
    for m in _MAP.finditer(body):
        if m.group(1) not in TABLES:
            continue
        end = _matching(body, m.end() - 1, "{", "}")
        block = body[m.end():end - 1]
        for e in _ENTRY.finditer(block):
            tables[m.group(1)][e.group(1)] = _handler(block, e.end() - 1)
    return tables


def versions(src: Source) -> dict[tuple[int, int, int], dict[str, dict[str, tuple]]]:
    """nvproxy driver version -> its four tables, {table: {Go name: (handler, params, caps)}}."""
    text = src.read(VERSION_GO)
    built: dict[str, dict] = {}          # constructor variable -> tables
    out = {}
    for m in _REGISTER.finditer(text):
        end = _matching(text, m.end() - 1)
        args = split_top(text[m.end():end - 1], ",")
        ver = tuple(int(a, 10) for a in args[:3])
        cons = args[-1]
        if re.fullmatch(r"\w+", cons):
            tables = built[cons]
        else:
            parent = re.search(r"abi\s*:=\s*(\w+)\(\)", cons)
            if parent:
                tables = {t: dict(v) for t, v in built[parent.group(1)].items()}
                for op in re.finditer(rf"{_SET.pattern}|{_DELETE.pattern}", cons):
                    if op.group(1):
                        tables[op.group(1)][op.group(2)] = _handler(cons, op.end() - 1)
                    else:
                        tables[op.group(4)].pop(op.group(5), None)
            else:
                tables = _base_tables(cons)
        if m.group(1) != "_":
            built[m.group(1)] = tables
        out[ver] = tables
    return out


def table_rows(tables: dict, values: dict[str, int]) -> list[dict]:
    rows = []
    for table, kind in TABLES.items():
        for name, (handler, params, caps) in tables[table].items():
            if name not in values:
                raise ValueError(f"nvproxy: no value for nvgpu.{name}")
            rows.append(dict(kind=kind, value=f"0x{values[name]:0{WIDTH[kind]}x}", name=name,
                             handler=handler, params=params, caps=caps))
    return sorted(rows, key=lambda r: (r["kind"], int(r["value"], 16), r["name"]))


def match(release: str, known: list[tuple[int, int, int]]) -> tuple[int, int, int]:
    """The newest nvproxy version not newer than the release: the table a
    user of that release would get from nvproxy's own version matching
    (595.45.04 -> 590.48.01, whose table nvproxy also uses for 595.71.05)."""
    want = tuple(int(p) for p in release.split("."))
    want = want + (0,) * (3 - len(want))
    older = [v for v in known if v <= want]
    return max(older)


def vstr(v: tuple[int, int, int]) -> str:
    return f"{v[0]}.{v[1]}.{v[2]:02d}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="nvgen.nvproxy", description=__doc__.split("\n\n")[0])
    ap.add_argument("--gvisor", type=Path, required=True, help="gVisor work tree or git directory")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--releases", type=Path, default=HERE / "out",
                    help="nvgen output whose releases are matched (default: %(default)s)")
    args = ap.parse_args(argv)
    src = Source(args.gvisor)
    values, vers = constants(src), versions(src)
    releases = sorted((p.name for p in args.releases.iterdir() if p.is_dir()),
                      key=lambda r: tuple(int(x) for x in r.split(".")))
    args.out.mkdir(parents=True, exist_ok=True)
    commit, mapping, wanted = src.commit(), [], {}
    for release in releases:
        v = match(release, list(vers))
        mapping.append(dict(release=release, nvproxy=vstr(v), gvisor_commit=commit))
        wanted[v] = None
    for v in wanted:
        tsv.write(args.out / f"{vstr(v)}.tsv", COLUMNS, table_rows(vers[v], values))
    tsv.write(args.out / "versions.tsv", VERSION_COLUMNS, mapping)
    for row in mapping:
        print(f"{row['release']} -> nvproxy {row['nvproxy']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
