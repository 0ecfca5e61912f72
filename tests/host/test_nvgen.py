"""tools/nvgen: the committed per-release tables of NVIDIA's user ABI.

- Regenerating from the vendor archives reproduces tools/nvgen/out byte for
  byte (skipped where the archives are not on the machine).
- Facts the project relies on hold in the committed tables.
- vgpu/nvabi.py's pinned sizes and numbers agree with the 595.45.04 table.
"""

from __future__ import annotations

import ctypes
import difflib
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tools.nvgen import gen, tsv, vendor  # noqa: E402
from vgpu import nvabi  # noqa: E402

OUT = ROOT / "tools" / "nvgen" / "out"
RELEASES = ("535.288.01", "550.163.01", "570.211.01", "575.64.05",
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
    missing = [a for a in (vendor.HEADERS_ARCHIVE, vendor.TREE_ARCHIVE) if not (d / a).is_file()]
    if missing:
        pytest.skip(f"vendor archives not found in {d} (set NVGEN_VENDOR): {', '.join(missing)}")
    return d


def test_regenerating_reproduces_the_committed_tables(tmp_path):
    out = tmp_path / "out"
    gen.generate(_vendor_dir(), out, jobs=os.cpu_count() or 1)
    committed = sorted(p.relative_to(OUT) for p in OUT.rglob("*.tsv"))
    fresh = sorted(p.relative_to(out) for p in out.rglob("*.tsv"))
    assert fresh == committed
    for rel in committed:
        old, new = (OUT / rel).read_text(), (out / rel).read_text()
        if old != new:
            diff = difflib.unified_diff(old.splitlines(), new.splitlines(),
                                        f"committed/{rel}", f"regenerated/{rel}", lineterm="", n=0)
            pytest.fail("regenerated table differs (rerun python3 -m tools.nvgen):\n"
                        + "\n".join(list(diff)[:40]))


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
    """The release whose source tree nvgen has must be fully measured; other
    releases lack uvm_types.h in the headers archive (see failures.tsv)."""
    unknown = [(kind, r["name"]) for kind in NUMBER for r in table("595.45.04", kind)
               if r["sizeof"] == "?"]
    assert unknown == []


def test_rm_alloc_escape_takes_nvos21_or_nvos64():
    rows = rows_named("595.45.04", "escapes", "NV_ESC_RM_ALLOC")
    assert {(r["params"], r["sizeof"]) for r in rows} == \
        {("NVOS21_PARAMETERS", "32"), ("NVOS64_PARAMETERS", "48")}


# ------------------------------------------------------------ vgpu/nvabi.py
def nvabi_mismatches() -> list[str]:
    """Where vgpu/nvabi.py disagrees with the 595.45.04 table: struct sizes,
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
