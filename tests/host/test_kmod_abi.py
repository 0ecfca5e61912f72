"""nvabi.h's layouts against every release vgpu.ko has tables for.

nvabi.h pins (NVABI_SIZE / NVABI_OFF) the 595.45.04 layout of each struct
and member vgpu.ko and nvsim read.  vgpu.ko mediates every release of
kmod/include/nvrel_tables.h with those structs, copying each release's own
size into a zeroed buffer at least as large as 595.45.04's (nvrel.h).  That
is right only if, in every release, each pinned member the code reads lies
at the 595.45.04 offset, or (for the few structs whose middle grew, named in
TAIL_ANCHORED) at the same distance from the struct's end, which is how
vgpu.ko and nvsim address them.  This test measures every pin with gcc
against each release's own headers from the vendor archive (skipped when
the archive is absent) and says which member breaks the rule.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

from tools.nvgen import kernel, vendor
from tools.nvgen.probe import HeaderSet
from tools.nvgen.release import DEFINES, UVM_TYPES, Release

NVABI = ROOT / "kmod/include/nvabi.h"
VENDOR = Path(os.environ.get("NVGEN_VENDOR", ROOT.parent / "shared" / "vendor"))
BASE = kernel.BASE

# Members addressed from the struct's end (kmod/vgpu/uvm.c VGPU_UVM_END,
# kmod/nvsim/rm.c's NVOS46/47 status): a member inserted before them moved
# them in some releases.
TAIL_ANCHORED = {
    "NVOS46_PARAMETERS": {"dmaOffset", "status"},
    "NVOS47_PARAMETERS": {"status"},
    # kmod/nvsim/control.c (BUILD_VERSION_V2): 535/550 lack driverBranch.
    "NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_PARAMS": {"titleBuffer", "changelistNumber",
                                                       "officialChangelistNumber"},
}
# Structs and members whose layout differs between releases and that no
# code of vgpu.ko or nvsim reads at a fixed offset, with why.
NOT_READ = {
    "nv_ioctl_export_to_dma_buf_fd_t":
        "NV_ESC_EXPORT_TO_DMABUF_FD is not mediated (refused by vgpu.ko); nvsim reads each "
        "release's own layout (kmod/nvsim/dmabuf.c: test_dmabuf_layouts_are_the_releases)",
}
# Members a release does not have: fine when they lie at or after that
# release's end of struct (the zeroed rest of the buffer), or when nothing
# reads them.
ABSENT_OK = {
    ("NVOS32_PARAMETERS", "data.AllocSize.numaNode"): "not read by vgpu.ko (nvsim: 595.45.04 only)",
    ("nv_ioctl_wait_open_complete_t", None): "a 550 escape; 535 has no such escape",
    ("NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_PARAMS", "driverBranch"):
        "535/550 lack it; nvsim writes it only into a struct of 595.45.04's size",
}


# UVM members vgpu.ko (uvm.c VGPU_UVM_END), nvsim (uvm.c head/tail) and the
# Python client (nvclient.UvmFile._ioctl_tail) address from the struct's end:
# perGpuAttributes grew with UVM_MAX_GPUS, UVM_FREE lost its length.
UVM_TAIL_ANCHORED = {
    "UVM_MAP_EXTERNAL_ALLOCATION_PARAMS": {"gpuAttributesCount", "rmCtrlFd", "hClient",
                                           "hMemory", "rmStatus"},
    "UVM_FREE_PARAMS": {"rmStatus"},
    "UVM_REGISTER_GPU_PARAMS": {"rmCtrlFd", "hClient"},
    "UVM_REGISTER_GPU_VASPACE_PARAMS": {"rmCtrlFd", "hClient"},
}


def pins(uvm: bool = False) -> list[tuple[str, str | None, int]]:
    """nvabi.h's pins of the RM structs, or (uvm) of the UVM ones."""
    out = []
    for kind, args in re.findall(r"^NVABI_(SIZE|OFF)\(([^)]*)\);", NVABI.read_text(), re.M):
        a = [x.strip() for x in args.split(",")]
        if a[0].startswith("nvidia_") or a[0].startswith("UVM_") != uvm:
            continue
        out.append((a[0], None, int(a[1])) if kind == "SIZE" else (a[0], a[1], int(a[2])))
    return out


def measure(rel: Release, items: list[tuple[str, str | None]], work: Path,
            hset: HeaderSet | None = None) -> dict:
    """(struct, member|None) -> offset or size, for what the release declares;
    the RM's headers unless hset names others."""
    if hset is None:
        hset = HeaderSet([p.name for p in rel.ioctl_headers()] + rel.sdk_headers(),
                         [rel.sdk, rel.unix], [rel.kcommon], DEFINES)
    hdrs = hset.headers
    lines = ["#include <stdio.h>", "#include <stddef.h>"] + [f'#include "{h}"' for h in hdrs]
    lines.append("int main(void) {")
    where = {}
    for t, m in items:
        where[len(lines) + 1] = (t, m)
        expr = f"sizeof({t})" if m is None else f"offsetof({t}, {m})"
        lines.append(f'printf("%d %zu\\n", {len(lines) + 1}, {expr});')
    lines.append("return 0; }")
    src, exe = work / "p.c", work / "p"
    flags = hset.flags()
    for _ in range(20):
        src.write_text("\n".join(lines) + "\n")
        r = subprocess.run(["gcc", "-w", *flags, str(src), "-o", str(exe)], capture_output=True, text=True)
        if r.returncode == 0:
            break
        bad = {int(n) for n in re.findall(r"p\.c:(\d+):\d+: error", r.stderr)}
        if not bad:
            raise AssertionError(f"{rel.name}: gcc failed:\n{r.stderr[-2000:]}")
        lines = [ln if i not in bad else "" for i, ln in enumerate(lines, 1)]
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    return {where[int(n)]: int(v) for n, v in (ln.split() for ln in out.splitlines())}


@pytest.fixture(scope="module")
def measured():
    if not (VENDOR / vendor.HEADERS_ARCHIVE).is_file():
        pytest.skip(f"vendor archive not here: {VENDOR / vendor.HEADERS_ARCHIVE}")
    with tempfile.TemporaryDirectory() as d:
        scratch = Path(d)
        # Every release's header root: the headers archive's, and for a
        # release read from its own tree (535.261.03) that tree's.
        v = vendor.unpack(VENDOR, scratch)
        items = [(t, m) for t, m, _ in pins()]
        res = {}
        for relname in kernel.releases():
            work = scratch / "w" / relname
            work.mkdir(parents=True)
            res[relname] = measure(Release(relname, v.releases[relname]), items, work)
        yield res


def test_every_release_has_tables_and_headers(measured):
    assert set(measured) == set(kernel.releases())
    assert kernel.BASE in measured


def test_base_release_is_what_nvabi_pins(measured):
    """The pins are 595.45.04's own numbers (the compile-time asserts check
    nvabi.h's structs; this checks the numbers against NVIDIA's headers)."""
    base = measured[BASE]
    wrong = [f"{t}.{m or 'sizeof'}: pinned {n}, {BASE} has {base.get((t, m))}"
             for t, m, n in pins() if base.get((t, m)) != n and t not in NOT_READ]
    assert not wrong, "\n".join(wrong)


def test_members_lie_where_the_mediator_reads_them(measured):
    wrong = []
    sizes = {t: n for t, m, n in pins() if m is None}
    for rel, got in measured.items():
        for t, m, n in pins():
            if m is None or t in NOT_READ:
                continue
            size = got.get((t, None))
            off = got.get((t, m))
            if off is None:
                if (t, m) in ABSENT_OK or (t, None) in ABSENT_OK or size is None:
                    continue
                # Absent: the code reads zero there if it lies past the release's end.
                if n >= size:
                    continue
                wrong.append(f"{rel}: {t}.{m} absent, but 595.45.04's offset {n} is inside "
                             f"the release's {size} bytes")
                continue
            if m in TAIL_ANCHORED.get(t, ()):
                if size - off != sizes[t] - n:
                    wrong.append(f"{rel}: {t}.{m} is {size - off} bytes from the end, "
                                 f"{BASE}'s {sizes[t] - n}")
            elif off != n:
                wrong.append(f"{rel}: {t}.{m} at {off}, {BASE} at {n}")
    assert not wrong, "\n".join(wrong)


def test_no_release_struct_is_larger_than_the_buffer_for_it(measured):
    """Buffers are max(release, 595.45.04) except where the code copies into
    a 595.45.04 struct with min(): NV0000_ALLOC_PARAMETERS (mediate.c)."""
    for rel, got in measured.items():
        size = got.get(("NV0000_ALLOC_PARAMETERS", None))
        assert size is not None and size <= 120, f"{rel}: NV0000_ALLOC_PARAMETERS {size}"


def test_tables_are_the_committed_ones():
    """kmod/include/nvrel_tables.h and vgpu/abi/nvrel.py regenerate from the TSVs."""
    r = subprocess.run([sys.executable, "-m", "tools.nvgen.kernel", "--check"], cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@pytest.fixture(scope="module")
def measured_uvm():
    """The UVM pins per release, against the release's own uvm_types.h: the
    595.45.04 source tree's for that release, else the release's tag's from
    NVGEN_NVIDIA_GIT; releases without either are left out (the test says
    which)."""
    if not (VENDOR / vendor.HEADERS_ARCHIVE).is_file():
        pytest.skip(f"vendor archive not here: {VENDOR / vendor.HEADERS_ARCHIVE}")
    git = os.environ.get("NVGEN_NVIDIA_GIT")
    with tempfile.TemporaryDirectory() as d:
        scratch = Path(d)
        v = vendor.unpack(VENDOR, scratch)
        items = [(t, m) for t, m, _ in pins(uvm=True)]
        res, missing = {}, []
        for relname in kernel.releases():
            rel = Release(relname, v.releases[relname])
            extra = []
            if relname == kernel.BASE:
                extra = [v.tree / Path(f).parent for f in UVM_TYPES]
            elif relname in (v.own or {}):          # its own tree's (vendor.RELEASE_TREES)
                extra = [v.own[relname].root / Path(f).parent for f in UVM_TYPES]
            elif not (rel.uvm / "uvm_types.h").is_file():
                if not git or not Path(git).is_dir():
                    missing.append(relname)
                    continue
                got = vendor.from_git(Path(git), relname, list(UVM_TYPES), scratch / "git" / relname)
                if got is None:
                    missing.append(relname)
                    continue
                extra = [got.root / Path(f).parent for f in UVM_TYPES]
            work = scratch / "w" / relname
            work.mkdir(parents=True)
            hset = HeaderSet(["uvm_linux_ioctl.h"], [rel.uvm, rel.kcommon, *extra], [], DEFINES)
            res[relname] = measure(rel, items, work, hset)
        yield res, missing


def test_uvm_members_lie_where_the_mediator_reads_them(measured_uvm):
    res, missing = measured_uvm
    assert kernel.BASE in res
    sizes = {t: n for t, m, n in pins(uvm=True) if m is None}
    wrong = []
    for rel, got in res.items():
        for t, m, n in pins(uvm=True):
            if m is None:
                continue
            size, off = got.get((t, None)), got.get((t, m))
            if size is None or off is None:
                wrong.append(f"{rel}: {t}.{m} not measured")
            elif m in UVM_TAIL_ANCHORED.get(t, ()):
                if size - off != sizes[t] - n:
                    wrong.append(f"{rel}: {t}.{m} is {size - off} bytes from the end, "
                                 f"{BASE}'s {sizes[t] - n}")
            elif off != n:
                wrong.append(f"{rel}: {t}.{m} at {off}, {BASE} at {n}")
    assert not wrong, "\n".join(wrong)
    if missing:
        pytest.skip("measured " + ", ".join(sorted(res)) + "; no uvm_types.h for "
                    + ", ".join(missing) + " (set NVGEN_NVIDIA_GIT to a clone of "
                    "NVIDIA/open-gpu-kernel-modules)")


DMABUF_C = ROOT / "kmod/nvsim/dmabuf.c"
DMABUF_MEMBERS = ("handles", "offsets", "sizes", "status")


def test_dmabuf_layouts_are_the_releases(measured):
    """nvsim's NV_ESC_EXPORT_TO_DMABUF_FD (dmabuf.c) takes 535.261.03's
    layout (its static_asserts) for releases before 570 and 595.45.04's
    (nvabi.h) after; each release's headers must have the one nvsim picks,
    and the Python client (nvclient._dmabuf_old_layout) picks the same."""
    from vgpu.abi import nvclient
    text = DMABUF_C.read_text()
    old = {m: int(n) for m, n in re.findall(
        r"offsetof\(NVSIM_EXPORT_TO_DMA_BUF_FD_535, (\w+)\) == (\d+)", text)}
    old[None] = int(re.search(r"sizeof\(NVSIM_EXPORT_TO_DMA_BUF_FD_535\) == (\d+)", text)[1])
    t = "nv_ioctl_export_to_dma_buf_fd_t"
    new = {m: n for tt, m, n in pins() if tt == t}
    assert set(DMABUF_MEMBERS) <= set(old) and set(DMABUF_MEMBERS) <= set(new)
    assert old[None] == nvclient._DMABUF_SIZE_535
    wrong = []
    for rel, got in measured.items():
        want = old if nvclient._dmabuf_old_layout(rel) else new
        for m in (None, *DMABUF_MEMBERS):
            if got.get((t, m)) != want[m]:
                wrong.append(f"{rel}: {t}.{m or 'sizeof'} is {got.get((t, m))}, nvsim reads {want[m]}")
    assert not wrong, "\n".join(wrong)
