"""tools/nvgen/lists.py: where the lists an item's params point to lie, per
release (tools/nvgen/out/<release>/lists.tsv), and their way into
kmod/include/nvrel_tables.h.

- Regenerating from the vendor archives reproduces the committed lists.tsv
  and lists-failures.tsv of every release (skipped without the archives).
- The committed files cover exactly the items the policy forwards whose
  embedded column is all lists, and facts the kernel will rely on hold.
- The measurement itself (offsets, nested counts, constant extents, the
  checks on member types), on a small header of our own.
- kernel.py carries the lists into nvrel_tables.h, which compiles against
  nvrel.h, and `python3 -m tools.nvgen.kernel --check` passes.
"""

from __future__ import annotations

import difflib
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

from tools.nvgen import gen, kernel, lists, tsv, vendor
from tools.nvgen.probe import HeaderSet, measure

OUT = ROOT / "tools" / "nvgen" / "out"
DOCS = ROOT / "kmod" / "vgpu" / "policy"
RELEASES = ("535.261.03", "535.288.01", "550.163.01", "570.211.01", "575.64.05",
            "580.142", "590.48.01", "595.45.04")
BASE = "595.45.04"


def committed(release: str) -> list[dict[str, str]]:
    return tsv.read(OUT / release / lists.FILE)


def failures(release: str) -> list[dict[str, str]]:
    return tsv.read(OUT / release / lists.FAILURES_FILE)


def lists_of(release: str, name: str) -> list[dict[str, str]]:
    return [r for r in committed(release) if r["name"] == name]


def _needs_gcc():
    if shutil.which("gcc") is None or platform.machine() != "x86_64":
        pytest.skip("needs gcc on an x86_64 host")


# ------------------------------------------------------------ regeneration
def test_regenerating_reproduces_the_committed_lists(tmp_path):
    d = gen.DEFAULT_VENDOR
    missing = [a for a in (vendor.HEADERS_ARCHIVE, vendor.TREE_ARCHIVE,
                           *map(vendor.tree_archive, vendor.RELEASE_TREES)) if not (d / a).is_file()]
    if missing:
        pytest.skip(f"vendor archives not found in {d} (set NVGEN_VENDOR): {', '.join(missing)}")
    out = tmp_path / "out"
    for release in RELEASES:
        (out / release).mkdir(parents=True)
        for stem in ("escapes", "classes", "controls"):
            shutil.copy(OUT / release / f"{stem}.tsv", out / release)
    assert lists.generate(d, out) == list(RELEASES)
    for release in RELEASES:
        for name in (lists.FILE, lists.FAILURES_FILE):
            old, new = (OUT / release / name).read_text(), (out / release / name).read_text()
            if old != new:
                diff = difflib.unified_diff(old.splitlines(), new.splitlines(), f"committed/{release}/{name}",
                                            f"regenerated/{release}/{name}", lineterm="", n=0)
                pytest.fail("rerun python3 -m tools.nvgen.lists:\n" + "\n".join(list(diff)[:40]))


# ------------------------------------------------------- committed files
def test_every_release_has_its_lists():
    for release in RELEASES:
        assert (OUT / release / lists.FILE).is_file(), release
        assert (OUT / release / lists.FAILURES_FILE).is_file(), release


def test_lists_cover_exactly_the_items_whose_embedded_entries_are_all_lists():
    """Each such item's entries are all in lists.tsv (in the column's
    order) or all have a reason in lists-failures.tsv; nothing else is in
    either file."""
    for release in RELEASES:
        want = {}
        for r in tsv.read(DOCS / f"{release}.tsv"):
            if r["kind"] in lists.KINDS and r["verdict"] != "refuse" and lists.only_lists(r["embedded"]):
                members = [e.member for _, es in lists.parse_cell(r["embedded"]) for e in es]
                want[(r["kind"], r["value"], r["name"])] = list(dict.fromkeys(members))
        got, bad = {}, {}
        for r in committed(release):
            got.setdefault((r["kind"], r["value"], r["name"]), []).append(r["member"])
        for r in failures(release):
            assert r["reason"], r
            bad.setdefault((r["kind"], r["value"], r["name"]), []).append(r["member"])
        assert not set(got) & set(bad), f"{release}: both measured and failed: {set(got) & set(bad)}"
        assert set(got) | set(bad) == set(want), release
        for key, members in got.items():
            assert members == want[key], (release, key)


def test_facts_the_kernel_relies_on():
    """Measured by gcc against each release's headers (checked by hand with
    offsetof against 595.45.04's ctrl2080gpu.h, ctrl0080gpu.h,
    ctrl0000system.h and nvos.h)."""
    for release in RELEASES:
        [info] = lists_of(release, "NV2080_CTRL_CMD_GPU_GET_INFO")
        assert (info["params"], info["member"], info["ptr_off"], info["count_member"], info["count_off"],
                info["count_size"], info["elem_size"]) == (
            "NV2080_CTRL_GPU_GET_INFO_PARAMS", "gpuInfoList", "8", "gpuInfoListSize", "0", "4", "8")
        [classes] = lists_of(release, "NV0080_CTRL_CMD_GPU_GET_CLASSLIST")
        assert [classes[c] for c in lists.COLUMNS[4:]] == ["classList", "8", "numClasses", "0", "4", "4"]
        build = lists_of(release, "NV0000_CTRL_CMD_SYSTEM_GET_BUILD_VERSION")
        got = [(r["member"], r["ptr_off"], r["count_member"], r["count_off"], r["elem_size"]) for r in build]
        assert got == [
            ("pDriverVersionBuffer", "8", "sizeOfStrings", "0", "1"),
            ("pVersionBuffer", "16", "sizeOfStrings", "0", "1"),
            ("pTitleBuffer", "24", "sizeOfStrings", "0", "1")]
        # the count is not always first: engineType precedes numClasses
        [eng] = lists_of(release, "NV2080_CTRL_CMD_GPU_GET_ENGINE_CLASSLIST")
        assert (eng["ptr_off"], eng["count_off"], eng["elem_size"]) == ("8", "4", "4")
        idle = lists_of(release, "NV_ESC_RM_IDLE_CHANNELS")
        assert [(r["member"], r["ptr_off"], r["count_off"]) for r in idle] == [
            ("phClients", "16", "12"), ("phDevices", "24", "12"), ("phChannels", "32", "12")]
        # RM_ALLOC takes two structs and a class-sized list: never a list item
        assert not lists_of(release, "NV_ESC_RM_ALLOC")
        assert {r["member"] for r in failures(release) if r["name"] == "NV_ESC_RM_ALLOC"} == {
            "pAllocParms", "pRightsRequested"}


# ------------------------------------------------------------ measurement
HEADER = """
typedef void *NvP64;
typedef unsigned int NvU32;
typedef unsigned short NvU16;
typedef struct { NvU32 a; NvU32 b; } ELEM;
typedef struct {
    NvU16 n;
    NvP64 p __attribute__((aligned(8)));
    struct { NvU32 cnt; NvP64 q __attribute__((aligned(8))); } inner;
    NvP64 fixed __attribute__((aligned(8)));
    ELEM notcount;
    NvU32 notptr;
} T;
"""


def _measured(tmp_path, cell: str) -> tuple[list[dict], list[str]]:
    (tmp_path / "t.h").write_text(HEADER)
    c = lists.Candidate("control", "0x1", "X", ["T"], [""],
                        [e for _, es in lists.parse_cell(cell) for e in es])
    sizes, values = lists._probes(c, "T")
    res = measure(HeaderSet(["t.h"], [tmp_path]), sizes, values, tmp_path / "w", [tmp_path])
    rows, why = [], []
    for e in c.entries:
        try:
            rows.append(lists._measure_entry(res, "T", e))
        except ValueError as err:
            why.append(str(err))
    return rows, why


def test_measurement_on_a_header_of_our_own(tmp_path):
    _needs_gcc()
    rows, why = _measured(tmp_path, "ptr:p[n*sizeof(ELEM)], ptr:inner.q[cnt*4] (a note, with a comma), "
                                    "ptr:fixed[sizeof(ELEM)], ptr:p[2*n*3]")
    assert not why
    assert rows == [
        dict(member="p", ptr_off=8, count_member="n", count_off=0, count_size=2, elem_size=8),
        dict(member="inner.q", ptr_off=24, count_member="inner.cnt", count_off=16, count_size=4, elem_size=4),
        dict(member="fixed", ptr_off=32, count_member="", count_off="", count_size="", elem_size=8),
        dict(member="p", ptr_off=8, count_member="n", count_off=0, count_size=2, elem_size=6),
    ]


def test_what_cannot_be_a_list_is_a_failure(tmp_path):
    _needs_gcc()
    rows, why = _measured(tmp_path, "ptr:p[missing*4], ptr:p[notcount], ptr:notptr[n], ptr:gone[n], "
                                    "ptr:p[sizeof(class params)], ptr:p[n*m]")
    assert not rows
    assert "no member named 'missing'" in why[0]
    assert why[1].startswith("count T.notcount is not an integer")
    assert why[2].startswith("T.notptr is not an 8-byte NvP64")
    assert "no member named 'gone'" in why[3]
    assert "not a member, an integer or sizeof(T)" in why[4]
    assert why[5].startswith("two count members")


def test_cells_parse():
    assert lists.parse_cell("-") is None
    assert lists.parse_cell("- (unknown: no params struct known)") is None
    assert lists.only_lists("ptr:ptr[size] (at most 16384; the inner escape's params)")
    assert not lists.only_lists("ptr:phClients, ptr:phDevices")
    assert not lists.only_lists("va:params.pMemory (OS descriptor: pinned; else a cookie), fd:fd")
    assert not lists.only_lists("ptr:a[n], fd:fd")
    parts = lists.parse_cell("A_PARAMS: ptr:x[sizeof(class params)] (note: y); B_PARAMS: ptr:x[n], "
                             "ptr:r[sizeof(RS_ACCESS_MASK)]")
    assert [(label, [(e.kind, e.member, e.extent) for e in es]) for label, es in parts] == [
        ("A_PARAMS", [("ptr", "x", "sizeof(class params)")]),
        ("B_PARAMS", [("ptr", "x", "n"), ("ptr", "r", "sizeof(RS_ACCESS_MASK)")])]
    assert lists.parse_extent("sizeof(RS_ACCESS_MASK)") == lists.Extent(None, 1, ("RS_ACCESS_MASK",))
    assert lists.parse_extent("a.b*4") == lists.Extent("a.b", 4, ())


# ------------------------------------------------------------------ kernel
def test_kernel_tables_are_the_committed_ones():
    r = subprocess.run([sys.executable, "-m", "tools.nvgen.kernel", "--check"], cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_kernel_items_carry_their_lists():
    t = kernel.tables()
    for release in RELEASES:
        by = {k: {e[0]: e for e in t[release][k]} for k in kernel.KINDS}
        ctl = by["control"][0x20800101]
        assert "NVREL_F_EMBEDDED" in ctl[4] and "NVREL_F_LISTS" in ctl[4]
        assert [p[:4] for p in ctl[5]] == [(8, 0, 4, 8)]
        assert "NVREL_F_LISTS" not in by["escape"][0x2b][4] and not by["escape"][0x2b][5]  # RM_ALLOC
        assert "NVREL_F_LISTS" not in by["escape"][0xce][4]             # ALLOC_OS_EVENT: fd
        # the items of lists.tsv that the tables have are those with lists
        measured = {(kind, int(value, 16)) for kind, value, _name in kernel.read_lists(release)}
        flagged = {(k, e[0]) for k in kernel.KINDS for e in t[release][k] if e[5]}
        assert flagged and flagged == {(k, v) for k, v in measured if v in by[k]}, release
        for kind in kernel.KINDS:
            for e in t[release][kind]:
                assert ("NVREL_F_LISTS" in e[4]) == bool(e[5])


def test_kernel_header_compiles(tmp_path):
    """nvrel_tables.h against nvrel.h, with the kernel's types from libc."""
    _needs_gcc()
    stub = tmp_path / "linux"
    stub.mkdir()
    (stub / "types.h").write_text("#include <stdint.h>\n#include <stddef.h>\n#include <stdbool.h>\n"
                                  "typedef uint8_t u8; typedef uint16_t u16; typedef uint32_t u32;\n")
    (stub / "bsearch.h").write_text("#include <stdlib.h>\n")
    (stub / "string.h").write_text("#include <string.h>\n")
    src = tmp_path / "t.c"
    src.write_text('#include "nvrel.h"\n'
                   "#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))\n"
                   '#include "nvrel_tables.h"\n'
                   "_Static_assert(sizeof(struct nvrel_ptr) == 12, \"nvrel_ptr\");\n"
                   "const struct nvrel_release *first(void) { return nvrel_releases; }\n")
    r = subprocess.run(["gcc", "-c", "-Wall", "-Werror", "-I", str(tmp_path), "-I",
                        str(ROOT / "kmod" / "include"), "-o", str(tmp_path / "t.o"), str(src)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
