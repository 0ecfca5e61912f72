"""tools/nvgen: the committed per-release tables of NVIDIA's user ABI.

- Regenerating from the vendor archives reproduces tools/nvgen/out byte for
  byte when NVGEN_NVIDIA_GIT names the clone of open-gpu-kernel-modules the
  committed tables were made with.  Without it (CI) the regeneration
  reproduces everything but the UVM rows that need each release's own
  uvm_types.h: those must be unknown ("?") in the regeneration, and every
  UVM row it can measure must be the committed one.  Both are skipped
  where the vendor archives are not on the machine.
- Facts the project relies on hold in the committed tables.
- vgpu/abi/nvabi.py's pinned sizes and numbers agree with the 595.45.04 table.
"""

from __future__ import annotations

import ctypes
import difflib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

from tools.nvgen import gen, tables, tsv, uvm, vendor
from tools.nvgen.release import UVM_TYPES, Release, TreeFacts
from vgpu.abi import nvabi

OUT = ROOT / "tools" / "nvgen" / "out"
RELEASES = ("535.261.03", "535.288.01", "550.163.01", "570.211.01", "575.64.05",
            "580.142", "590.48.01", "595.45.04")
TABLES = ("escapes", "classes", "controls", "uvm", "failures")
NUMBER = {"escapes": "nr", "classes": "id", "controls": "cmd", "uvm": "cmd"}


def table(release: str, kind: str) -> list[dict[str, str]]:
    return tsv.read(OUT / release / f"{kind}.tsv")


def struct_sizes(release: str) -> dict[str, set[int]]:
    """Every params struct of the release's tables -> its measured size(s).
    A control's rm_params type counts too: the generator reports any whose
    size differs from the header-paired struct in failures.tsv."""
    sizes: dict[str, set[int]] = {}
    for kind in NUMBER:
        for r in table(release, kind):
            if r["sizeof"] in ("", "?"):
                continue
            names = [r["params"]] + [t for t in r.get("rm_params", "").split("|") if t not in ("", "-")]
            for name in names:
                sizes.setdefault(name, set()).add(int(r["sizeof"]))
    return sizes


def numbers(release: str) -> dict[str, int]:
    """Every named escape, class, control and UVM command -> its number."""
    return {r["name"]: int(r[NUMBER[kind]], 16)
            for kind in NUMBER for r in table(release, kind) if r["name"]}


def rows_named(release: str, kind: str, name: str) -> list[dict[str, str]]:
    return [r for r in table(release, kind) if r["name"] == name]


# ------------------------------------------------------------ regeneration
def _vendor_dir() -> Path:
    d = gen.DEFAULT_VENDOR
    missing = [a for a in (vendor.HEADERS_ARCHIVE, vendor.TREE_ARCHIVE,
                           *map(vendor.tree_archive, vendor.RELEASE_TREES)) if not (d / a).is_file()]
    if missing:
        pytest.skip(f"vendor archives not found in {d} (set NVGEN_VENDOR): {', '.join(missing)}")
    return d


def _nvidia_git() -> Path | None:
    """$NVGEN_NVIDIA_GIT if it names a directory (the clone of
    NVIDIA/open-gpu-kernel-modules the committed tables were made with)."""
    d = os.environ.get("NVGEN_NVIDIA_GIT")
    return Path(d) if d and Path(d).is_dir() else None


def _text_diff(committed: Path, fresh: Path, rel: Path) -> str | None:
    old, new = (committed / rel).read_text(), (fresh / rel).read_text()
    if old == new:
        return None
    diff = difflib.unified_diff(old.splitlines(), new.splitlines(),
                                f"committed/{rel}", f"regenerated/{rel}", lineterm="", n=0)
    return "\n".join(list(diff)[:40])


def test_regenerating_reproduces_the_committed_tables(tmp_path):
    """Byte for byte, with the clone the committed tables were made with."""
    vendor_dir, git = _vendor_dir(), _nvidia_git()
    if git is None:
        pytest.skip("NVGEN_NVIDIA_GIT unset or missing: the committed UVM rows need each release's "
                    "uvm_types.h from NVIDIA's git tags; test_regenerating_without_the_nvidia_git_"
                    "headers_reproduces_the_rest compares everything else")
    out = tmp_path / "out"
    gen.generate(vendor_dir, out, jobs=os.cpu_count() or 1, nvidia_git=git)
    committed = sorted(p.relative_to(OUT) for p in OUT.rglob("*.tsv"))
    fresh = sorted(p.relative_to(out) for p in out.rglob("*.tsv"))
    assert fresh == committed
    for rel in committed:
        diff = _text_diff(OUT, out, rel)
        if diff:
            pytest.fail("regenerated table differs (rerun python3 -m tools.nvgen with "
                        "NVGEN_NVIDIA_GIT, tools/nvgen/README.md):\n" + diff)


#: summary.tsv columns that count UVM rows or failures, which the git headers change.
GIT_DEPENDENT_SUMMARY = ("uvm", "uvm_without_params", "unknown_sizes", "failures")


def differences_but_git_uvm(committed: Path, fresh: Path, borrowed: set[str]) -> list[str]:
    """Where a regeneration without --nvidia-git (fresh) disagrees with the
    committed tables, leaving out only what the git headers decide.  For a
    release in borrowed (595.45.04's UVM type headers stood in) its uvm.tsv
    and the uvm rows of its failures.tsv are compared row by row: a row the
    regeneration measured (no "?") must be the committed row; a row it
    could not must still be committed with the same params struct (or be
    left out there, as a Windows-only command); no committed row may be
    missing from the regeneration.  summary.tsv is compared but for the
    GIT_DEPENDENT_SUMMARY columns of those releases (whose agreement with
    the committed tables test_summary_and_failures_agree_with_the_tables
    checks); every other file byte for byte."""
    out = []
    names = sorted(p.relative_to(committed) for p in committed.rglob("*.tsv"))
    if names != sorted(p.relative_to(fresh) for p in fresh.rglob("*.tsv")):
        return ["the regeneration writes other files than are committed"]
    for rel in names:
        if rel.name == "summary.tsv" or (rel.parent.name in borrowed
                                         and rel.name in ("uvm.tsv", "failures.tsv")):
            continue
        diff = _text_diff(committed, fresh, rel)
        if diff:
            out.append(diff)

    old, new = tsv.read(committed / "summary.tsv"), tsv.read(fresh / "summary.tsv")
    if [r["release"] for r in old] != [r["release"] for r in new]:
        out.append("summary.tsv: other releases")
    for a, b in zip(old, new):
        keys = [k for k in a if not (a["release"] in borrowed and k in GIT_DEPENDENT_SUMMARY)]
        if [a[k] for k in keys] != [b.get(k) for k in keys]:
            out.append(f"summary.tsv: committed {a}, regenerated {b}")

    for release in sorted(borrowed):
        c_fail, f_fail = (tsv.read(d / release / "failures.tsv") for d in (committed, fresh))
        c_other, f_other = ([r for r in rows if r["table"] != "uvm"] for rows in (c_fail, f_fail))
        if c_other != f_other:
            out.append(f"{release}/failures.tsv: the rows of other tables than uvm differ")
        c_left = {r["name"] for r in c_fail if r["table"] == "uvm" and r["probe"] == "left out"}
        f_left = {r["name"] for r in f_fail if r["table"] == "uvm" and r["probe"] == "left out"}
        if not f_left <= c_left:
            out.append(f"{release}: left out without the git headers, not in the committed "
                       f"tables: {sorted(f_left - c_left)}")
        c_uvm = {r["name"]: r for r in tsv.read(committed / release / "uvm.tsv")}
        f_uvm = {r["name"]: r for r in tsv.read(fresh / release / "uvm.tsv")}
        for name, row in sorted(f_uvm.items()):
            was = c_uvm.get(name)
            if tables.UNKNOWN not in (row["cmd"], row["sizeof"]):
                if was != row:
                    out.append(f"{release}/uvm.tsv: {name} measured without the git headers as "
                               f"{row}, committed {was}")
            elif was is None and name not in c_left:
                out.append(f"{release}/uvm.tsv: {name} is neither committed nor left out")
            elif was is not None and was["params"] != row["params"]:
                out.append(f"{release}/uvm.tsv: {name} pairs with {row['params']}, committed "
                           f"{was['params']}")
        if set(c_uvm) - set(f_uvm):
            out.append(f"{release}/uvm.tsv: committed rows the regeneration does not make: "
                       f"{sorted(set(c_uvm) - set(f_uvm))}")
    return out


def test_regenerating_without_the_nvidia_git_headers_reproduces_the_rest(tmp_path):
    """What CI can check (no clone of open-gpu-kernel-modules there):
    every file but the UVM rows that need the releases' own uvm_types.h;
    see differences_but_git_uvm.  Runs with the clone set too, as CI would."""
    out = tmp_path / "out"
    summary = gen.generate(_vendor_dir(), out, jobs=os.cpu_count() or 1, nvidia_git=None)
    borrowed = {r["release"] for r in summary if r["uvm_types"].startswith("stand-in:")}
    assert borrowed, "no release lacks uvm_types.h in the archive any more: compare byte for byte"
    problems = differences_but_git_uvm(OUT, out, borrowed)
    assert problems == [], "rerun python3 -m tools.nvgen with NVGEN_NVIDIA_GIT:\n" + "\n".join(problems[:20])


# ------------------------------------------------------------ --nvidia-git
def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=nvgen", "-c", "user.email=nvgen@invalid", *args],
                   cwd=repo, check=True, capture_output=True)


def test_from_git_takes_the_files_of_the_release_tag(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git not installed")
    repo, uvm_types = tmp_path / "repo", "kernel-open/nvidia-uvm/uvm_types.h"
    (repo / uvm_types).parent.mkdir(parents=True)
    _git(repo, "init", "-q")
    (repo / uvm_types).write_text("#define UVM_MAX_GPUS 32\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "535")
    _git(repo, "tag", "535.288.01")
    (repo / uvm_types).write_text("#define UVM_MAX_GPUS 256\n")
    _git(repo, "commit", "-qam", "later")
    vendor.check_git(repo)

    got = vendor.from_git(repo, "535.288.01", list(UVM_TYPES), tmp_path / "dest")
    assert (got.tag, got.taken, got.absent) == \
        ("535.288.01", (uvm_types,), ("kernel-open/common/inc/nv_uvm_user_types.h",))
    assert (got.root / uvm_types).read_text() == "#define UVM_MAX_GPUS 32\n"   # the tag's, not HEAD's
    assert not (got.root / "kernel-open/common/inc").exists()
    assert vendor.from_git(repo, "550.163.01", list(UVM_TYPES), tmp_path / "none") is None
    with pytest.raises(FileNotFoundError):
        vendor.check_git(tmp_path / "missing")


def test_the_tag_files_replace_the_stand_ins(tmp_path):
    """With a release's own files from its tag, no 595.45.04 file stands in
    and none is on the include path; without them both stand in."""
    tree = TreeFacts("595.45.04", {}, {}, {}, {}, tmp_path / "uvm-types")
    root = tmp_path / "535.288.01"
    (root / "kernel-open/nvidia-uvm").mkdir(parents=True)
    rel = Release("535.288.01", root)
    assert uvm.lacking(root) == list(UVM_TYPES)
    assert uvm.stand_ins(rel, tree) == [tree.uvm_dir / "uvm_types.h", tree.uvm_dir / "nv_uvm_user_types.h"]
    assert uvm.source(rel.name, root, tree) == "stand-in:595.45.04"
    assert uvm.headerset(rel, tree).include_after == [tree.uvm_dir]

    own = vendor.GitFiles("535.288.01", tmp_path / "git", (UVM_TYPES[0],), (UVM_TYPES[1],))
    assert uvm.stand_ins(rel, tree, own) == []
    assert uvm.source(rel.name, root, tree, own) == "git:535.288.01"
    hset = uvm.headerset(rel, tree, own)
    assert hset.include_after == [] and own.root / "kernel-open/nvidia-uvm" in hset.include

    for f in UVM_TYPES:
        (root / f).parent.mkdir(parents=True, exist_ok=True)
        (root / f).write_text("")
    assert uvm.lacking(root) == [] and uvm.source(rel.name, root, tree) == "archive"


# ------------------------------------------------------------ committed facts
def test_every_release_has_every_table():
    assert sorted(p.name for p in OUT.iterdir() if p.is_dir()) == sorted(RELEASES)
    for release in RELEASES:
        for kind in TABLES:
            assert (OUT / release / f"{kind}.tsv").is_file(), (release, kind)
    assert [r["release"] for r in tsv.read(OUT / "summary.tsv")] == list(RELEASES)


def test_get_name_string_params_shrank_in_595():
    assert struct_sizes("595.45.04")["NV2080_CTRL_GPU_GET_NAME_STRING_PARAMS"] == {68}
    assert struct_sizes("590.48.01")["NV2080_CTRL_GPU_GET_NAME_STRING_PARAMS"] == {132}
    [row] = rows_named("595.45.04", "controls", "NV2080_CTRL_CMD_GPU_GET_NAME_STRING")
    assert (row["cmd"], row["params"], row["rm_privilege"]) == \
        ("0x20800110", "NV2080_CTRL_GPU_GET_NAME_STRING_PARAMS", "non-privileged")


def test_memory_allocation_params_grew_after_535():
    assert struct_sizes("535.288.01")["NV_MEMORY_ALLOCATION_PARAMS"] == {120}
    assert struct_sizes("595.45.04")["NV_MEMORY_ALLOCATION_PARAMS"] == {128}


@pytest.mark.parametrize("release", RELEASES)
def test_virtual_memory_class_numbers(release):
    by_id = {}
    for r in table(release, "classes"):
        by_id.setdefault(r["id"], set()).add(r["name"])
    assert "NV01_MEMORY_VIRTUAL" in by_id["0x00000070"]
    assert by_id["0x000050a0"] == {"NV50_MEMORY_VIRTUAL"}


def test_595_has_no_unknown_size():
    """The release whose source tree nvgen has must be fully measured."""
    unknown = [(kind, r["name"]) for kind in NUMBER for r in table("595.45.04", kind)
               if r["sizeof"] == "?"]
    assert unknown == []


@pytest.mark.parametrize("release", RELEASES)
def test_uvm_is_measured_in_every_release(release):
    """The committed tables are made with NVGEN_NVIDIA_GIT: each release's
    own uvm_types.h gives every UVM number and size.  Made without it, they
    would hold "?" (tools/nvgen/README.md)."""
    unknown = [r["name"] for r in table(release, "uvm") if "?" in (r["cmd"], r["sizeof"])]
    assert unknown == [], "regenerate with NVGEN_NVIDIA_GIT set (tools/nvgen/README.md)"


def test_uvm_sizes_that_changed_between_releases():
    """UVM_MAX_GPUS went from 32 to 256 after 535 (550 calls it
    UVM_MAX_GPUS_V2 in these structs); UVM_FREE lost its length in 590."""
    want = {"UVM_MAP_EXTERNAL_ALLOCATION": (1200, 9264), "UVM_ALLOC_SEMAPHORE_POOL": (1184, 9248)}
    for name, (old, new) in want.items():
        for release in RELEASES:
            [row] = rows_named(release, "uvm", name)
            assert row["sizeof"] == str(old if release.startswith("535.") else new), (release, name)
    for release in RELEASES:
        [row] = rows_named(release, "uvm", "UVM_FREE")
        assert row["sizeof"] == ("16" if release in ("590.48.01", "595.45.04") else "24"), release


@pytest.mark.parametrize("release", RELEASES)
def test_summary_and_failures_agree_with_the_tables(release):
    """summary.tsv counts what the release's tables hold, and failures.tsv
    has a row for every "?" of the UVM table (and none for a known cell)."""
    t = tables.Tables(*(table(release, k) for k in TABLES))
    [committed] = [r for r in tsv.read(OUT / "summary.tsv") if r["release"] == release]
    assert committed == {k: str(v) for k, v in gen._summary(release, t).items()}
    unknown = {(r["name"], f"sizeof({r['params']})") for r in t.uvm if r["sizeof"] == "?"}
    unknown |= {(r["name"], "cmd") for r in t.uvm if r["cmd"] == "?"}
    failed = {(r["name"], r["probe"]) for r in t.failures if r["table"] == "uvm" and r["probe"] != "left out"}
    assert failed == unknown


def test_rm_alloc_escape_takes_nvos21_or_nvos64():
    rows = rows_named("595.45.04", "escapes", "NV_ESC_RM_ALLOC")
    assert {(r["params"], r["sizeof"]) for r in rows} == \
        {("NVOS21_PARAMETERS", "32"), ("NVOS64_PARAMETERS", "48")}


# ------------------------------------------------------------ vgpu/abi/nvabi.py
def nvabi_mismatches() -> list[str]:
    """Where vgpu/abi/nvabi.py disagrees with the 595.45.04 table: struct sizes,
    escape/class/control/UVM numbers, and the params its ESCAPES and
    UVM_PARAMS pair with each number."""
    release = "595.45.04"
    sizes, nums, out = struct_sizes(release), numbers(release), []
    for name, cls in sorted(nvabi.abi_structs().items()):
        if name in sizes and ctypes.sizeof(cls) not in sizes[name]:
            out.append(f"sizeof({name}): nvabi {ctypes.sizeof(cls)}, {release} "
                       + "/".join(map(str, sorted(sizes[name]))))
    for name, value in sorted(nvabi.abi_constants().items()):
        if name in nums and nums[name] != value:
            out.append(f"{name}: nvabi {value:#x}, {release} {nums[name]:#x}")
    for nr, (name, params, _device) in sorted(nvabi.ESCAPES.items()):
        allowed = {r["sizeof"] for r in table(release, "escapes") if r["nr"] == f"0x{nr:02x}"}
        if str(ctypes.sizeof(params)) not in allowed:
            out.append(f"ESCAPES[{name}]: nvabi {ctypes.sizeof(params)} bytes, "
                       f"{release} {'/'.join(sorted(allowed)) or 'none'}")
    for cmd, params in sorted(nvabi.UVM_PARAMS.items()):
        rows = [r for r in table(release, "uvm") if r["cmd"] == f"0x{cmd:08x}"]
        pairs = {(r["params"], r["sizeof"]) for r in rows}
        if (params.__name__, str(ctypes.sizeof(params))) not in pairs:
            out.append(f"UVM_PARAMS[{cmd:#x}]: nvabi {params.__name__} {ctypes.sizeof(params)}, "
                       f"{release} {sorted(pairs)}")
    return out


def test_nvabi_checks_reach_the_mirror():
    """The comparison below is only as good as its overlap with nvabi.py."""
    sizes, nums = struct_sizes("595.45.04"), numbers("595.45.04")
    assert len([n for n in nvabi.abi_structs() if n in sizes]) >= 50
    assert len([n for n in nvabi.abi_constants() if n in nums]) >= 80


def test_nvabi_matches_595():
    """The two found when the table was first generated are fixed:
    GET_NAME_STRING's size (595 dropped the unicode member: 68 bytes, 132
    in 590.48.01) and NV01_MEMORY_VIRTUAL's number (0x70; 0x50a0 is
    NV50_MEMORY_VIRTUAL)."""
    assert nvabi_mismatches() == []
