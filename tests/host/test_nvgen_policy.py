"""tools/nvgen/policy.py: the mediation policy per driver release.

- The committed kmod/vgpu/policy files are exactly what the code makes from the
  committed tables (tools/nvgen/out, tools/nvgen/embedded,
  tools/nvgen/nvproxy); no vendor archive is needed for that.
- The committed embedded and nvproxy tables regenerate from their sources
  (skipped where the vendor archives or a gVisor checkout are absent).
- The rules hold what the policy promises: nothing the driver restricts is
  forwarded, nothing that crosses slices is forwarded, the reports of
  memory, processes and identity are rewritten, and what CUDA needs at
  start-up is not refused.
"""

from __future__ import annotations

import difflib
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

from tools.nvgen import embedded, gen, nvproxy, policy, tsv, vendor

DOCS = ROOT / "kmod" / "vgpu" / "policy"
OUT = ROOT / "tools" / "nvgen" / "out"
RELEASES = ("535.261.03", "535.288.01", "550.163.01", "570.211.01", "575.64.05",
            "580.142", "590.48.01", "595.45.04")
FLAGS = policy.FLAGS_RELEASE


def rows(release: str) -> list[dict[str, str]]:
    return tsv.read(DOCS / f"{release}.tsv")


def by_name(release: str) -> dict[tuple[str, str], dict[str, str]]:
    return {(r["kind"], r["name"]): r for r in rows(release) if r["name"]}


def _same_files(a: Path, b: Path, pattern: str, hint: str) -> None:
    old = sorted(p.relative_to(a) for p in a.glob(pattern))
    new = sorted(p.relative_to(b) for p in b.glob(pattern))
    assert new == old
    for rel in old:
        x, y = (a / rel).read_text(), (b / rel).read_text()
        if x != y:
            diff = difflib.unified_diff(x.splitlines(), y.splitlines(), f"committed/{rel}",
                                        f"regenerated/{rel}", lineterm="", n=0)
            pytest.fail(f"{rel} differs ({hint}):\n" + "\n".join(list(diff)[:40]))


# ------------------------------------------------------------ regeneration
def test_committed_policy_is_what_the_code_makes(tmp_path):
    policy.write(tmp_path)
    _same_files(DOCS, tmp_path, "*", "rerun python3 -m tools.nvgen.policy")


def test_embedded_tables_regenerate_from_the_vendor_archives(tmp_path):
    d = gen.DEFAULT_VENDOR
    if not all((d / a).is_file() for a in (vendor.HEADERS_ARCHIVE, vendor.TREE_ARCHIVE,
                                           *map(vendor.tree_archive, vendor.RELEASE_TREES))):
        pytest.skip(f"vendor archives not found in {d} (set NVGEN_VENDOR)")
    embedded.generate(d, tmp_path)
    _same_files(embedded.DEFAULT_OUT, tmp_path, "*.tsv", "rerun python3 -m tools.nvgen.embedded")


def test_nvproxy_tables_regenerate_from_gvisor(tmp_path):
    src = os.environ.get("NVGEN_GVISOR")
    if not src:
        pytest.skip("set NVGEN_GVISOR to a gVisor work tree or git directory")
    nvproxy.main(["--gvisor", src, "--out", str(tmp_path)])
    committed = {r["release"]: r["gvisor_commit"] for r in tsv.read(nvproxy.DEFAULT_OUT / "versions.tsv")}
    fresh = {r["release"]: r["gvisor_commit"] for r in tsv.read(tmp_path / "versions.tsv")}
    if committed != fresh:
        pytest.skip("NVGEN_GVISOR is at another commit than the committed extraction")
    _same_files(nvproxy.DEFAULT_OUT, tmp_path, "*.tsv", "rerun python3 -m tools.nvgen.nvproxy")


# ------------------------------------------------------------ format
@pytest.mark.parametrize("release", RELEASES)
def test_every_item_of_the_tables_has_one_line(release):
    assert sorted(p.stem for p in DOCS.glob("*.tsv")) == sorted(RELEASES)
    got = rows(release)
    assert list(got[0]) == list(policy.COLUMNS)
    want = set()
    for kind, (f, num) in policy.KINDS.items():
        want |= {(kind, r["name"], r[num]) for r in tsv.read(OUT / release / f"{f}.tsv")}
    assert {(r["kind"], r["name"], r["value"]) for r in got} == want
    assert len(got) == len(want)


@pytest.mark.parametrize("release", RELEASES)
def test_lines_are_sorted_and_complete(release):
    got = rows(release)
    key = [(r["kind"], int(r["value"], 16) if r["value"] != "?" else 1 << 40, r["name"]) for r in got]
    assert key == sorted(key)
    for r in got:
        assert r["verdict"] in policy.VERDICTS, r
        assert r["reason"].strip(), r
        assert r["embedded"] and (r["embedded"] == "-" or r["embedded"].startswith("- (unknown")
                                  or re.match(r"(\w+: )?(ptr|va|fd):", r["embedded"])), r


@pytest.mark.parametrize("release", RELEASES)
def test_one_number_gets_one_verdict(release):
    """Aliases (NV01_ROOT and NV01_NULL_OBJECT are both 0x0) are one item to
    the driver: a mediator deciding by number must find one verdict."""
    seen: dict[tuple[str, str], set[str]] = {}
    for r in rows(release):
        if r["value"] != "?":
            seen.setdefault((r["kind"], r["value"]), set()).add(r["verdict"])
    assert {k: v for k, v in seen.items() if len(v) > 1} == {}


# ------------------------------------------------------------ the driver first
def _flagged(kind: str, levels=("privileged", "kernel", "internal")) -> set[str]:
    f = "controls" if kind == "control" else "classes"
    return {r["name"] for r in tsv.read(OUT / FLAGS / f"{f}.tsv")
            if r["name"] and set(r["rm_privilege"].split("|")) & set(levels)}


@pytest.mark.parametrize("release", RELEASES)
def test_what_the_driver_restricts_is_refused(release):
    got = by_name(release)
    for kind in ("control", "class"):
        flagged = _flagged(kind, ("privileged", "kernel", "internal", "refused"))
        assert len(flagged) > (500 if kind == "control" else 50)
        for name in flagged:
            row = got.get((kind, name))
            if row:
                assert row["verdict"] == "refuse", row


def test_595_privileged_controls_refused_with_the_flag_as_reason():
    got = by_name(FLAGS)
    for level, word in (("privileged", "RMCTRL_FLAGS_PRIVILEGED"), ("internal", "RMCTRL_FLAGS_INTERNAL"),
                        ("kernel", "kernel-privileged")):
        for name in _flagged("control", (level,)):
            row = got[("control", name)]
            assert row["verdict"] == "refuse" and word in row["reason"], row


# Reviewed exceptions to "undecided" for names 595.45.04 lacks, each with
# the driver function that decides it in its reason (policy.py RULES).
ABSENT_FROM_FLAGS_DECIDED = {
    # GET_CLASS_ENGINEID's A06F/C36F aliases: a child of the caller's own channel
    0xa06f0101: "kchannelCtrlCmdGetClassEngineid_IMPL",
    0xc36f0101: "kchannelCtrlCmdGetClassEngineid_IMPL",
}


@pytest.mark.parametrize("release", [r for r in RELEASES if r != FLAGS])
def test_older_releases_say_where_the_flags_come_from(release):
    in_flags = {(k, n) for k, n in by_name(FLAGS)}
    for r in rows(release):
        if r["kind"] not in ("control", "class") or not r["name"]:
            continue
        if r["kind"] == "control" and int(r["value"], 16) in ABSENT_FROM_FLAGS_DECIDED:
            assert ABSENT_FROM_FLAGS_DECIDED[int(r["value"], 16)] in r["reason"], r
            continue
        if (r["kind"], r["name"]) not in in_flags:
            assert r["verdict"] == "refuse" and r["reason"].startswith("undecided: absent from 595.45.04"), r
        elif r["reason"].startswith("driver: privileged") or r["reason"].startswith("driver: non-privileged"):
            assert "595.45.04's flags, taken by name" in r["reason"], r


# ------------------------------------------------------------ isolation
ISOLATING = re.compile(r"P2P|FABRIC|IMEX|MULTICAST|NVLINK|DEBUG|PROFILER|HWPM|_FLA_")
ISOLATING_CLASSES = {
    0x503b: "NV50_P2P", 0x503c: "NV50_THIRD_PARTY_P2P", 0x83de: "GT200_DEBUGGER",
    0x00f8: "NV_MEMORY_FABRIC", 0x00f1: "NV_IMEX_SESSION", 0x00fd: "NV_MEMORY_MULTICAST_FABRIC",
    0x00e0: "NV_MEMORY_EXPORT", 0x90cc: "GF100_PROFILER", 0xb0cc: "MAXWELL_PROFILER",
    0xb2cc: "MAXWELL_PROFILER_DEVICE", 0xb1cc: "MAXWELL_PROFILER_CONTEXT",
}


def _family(r: dict[str, str]) -> int | None:
    """A class's id, or the class a control belongs to (bits 31:16)."""
    if r["value"] == "?" or r["kind"] not in ("class", "control"):
        return None
    value = int(r["value"], 16)
    return value if r["kind"] == "class" else value >> 16


# What of those families stays within the slice, and why (what a multi-GPU
# job asks of its own GPUs is not refused):
# P2P between two subdevices of the caller's own client (vgpu.ko checks
# both), and the controls of a debugger session bound to the caller's own
# compute object that touch only that context's debug state.
WITHIN_SLICE = {("class", "NV50_P2P"): "subdevices it tracks there",
                **{("control", n): "caller's own compute object" for n in policy.DEBUGGER_OWN}}


@pytest.mark.parametrize("release", RELEASES)
def test_nothing_that_crosses_slices_is_forwarded(release):
    crossing = []
    for r in rows(release):
        if ISOLATING.search(r["name"]) or _family(r) in ISOLATING_CLASSES:
            crossing.append(r)
            if (r["kind"], r["name"]) in WITHIN_SLICE and r["verdict"] == "forward":
                assert WITHIN_SLICE[(r["kind"], r["name"])] in r["reason"], r
                continue
            assert r["verdict"] != "forward", r
    assert len(crossing) > 150
    # TSG and channel scheduling belongs to the slice's scheduler.
    got = by_name(release)
    for name in ("NVA06C_CTRL_CMD_GPFIFO_SCHEDULE", "NVA06C_CTRL_CMD_SET_TIMESLICE",
                 "NVA06C_CTRL_CMD_PREEMPT", "NVA06C_CTRL_CMD_SET_INTERLEAVE_LEVEL",
                 "NVA06F_CTRL_CMD_GPFIFO_SCHEDULE"):
        assert got[("control", name)]["verdict"] in ("virtualise", "refuse"), name


# ------------------------------------------------------------ rewrites
REWRITTEN = [("control", n) for n in (
    "NV0000_CTRL_CMD_GPU_GET_PROBED_IDS", "NV0000_CTRL_CMD_GPU_GET_ATTACHED_IDS",
    "NV0000_CTRL_CMD_GPU_GET_ID_INFO_V2", "NV2080_CTRL_CMD_FB_GET_INFO_V2",
    "NV2080_CTRL_CMD_FB_GET_INFO", "NV0000_CTRL_CMD_GPU_GET_ID_INFO",
    "NV2080_CTRL_CMD_FB_GET_FB_REGION_INFO", "NV0000_CTRL_CMD_GPU_GET_DEVICE_IDS",
    "NV2080_CTRL_CMD_GPU_GET_PIDS", "NV2080_CTRL_CMD_GPU_GET_PID_INFO")] + \
    [("escape", "NV_ESC_CARD_INFO"), ("escape", "NV_ESC_RM_VID_HEAP_CONTROL")]


@pytest.mark.parametrize("release", RELEASES)
def test_reports_of_memory_processes_and_identity_are_rewritten(release):
    got = by_name(release)
    for key in REWRITTEN:
        assert got[key]["verdict"] == "rewrite", got[key]


# ------------------------------------------------------------ CUDA's start-up
NEEDED = [
    ("control", "NV0000_CTRL_CMD_SYSTEM_GET_BUILD_VERSION_V2"),
    ("control", "NV0080_CTRL_CMD_GPU_GET_CLASSLIST"), ("control", "NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V2"),
    ("class", "FERMI_VASPACE_A"), ("class", "FERMI_CONTEXT_SHARE_A"), ("class", "NV01_MEMORY_VIRTUAL"),
    ("class", "NV01_ROOT_CLIENT"), ("class", "NV01_DEVICE_0"), ("class", "NV20_SUBDEVICE_0"),
    ("class", "NV01_MEMORY_LOCAL_USER"), ("class", "KEPLER_CHANNEL_GROUP_A"),
    ("uvm", "UVM_INITIALIZE"), ("uvm", "UVM_REGISTER_GPU"), ("uvm", "UVM_REGISTER_GPU_VASPACE"),
    ("uvm", "UVM_REGISTER_CHANNEL"), ("uvm", "UVM_CREATE_EXTERNAL_RANGE"),
    ("uvm", "UVM_MAP_EXTERNAL_ALLOCATION"),
    ("escape", "NV_ESC_RM_MAP_MEMORY_DMA"), ("escape", "NV_ESC_RM_ALLOC"), ("escape", "NV_ESC_RM_CONTROL"),
    ("escape", "NV_ESC_RM_MAP_MEMORY"), ("escape", "NV_ESC_REGISTER_FD"),
]


@pytest.mark.parametrize("release", RELEASES)
def test_what_cuda_needs_at_start_up_is_not_refused(release):
    got = by_name(release)
    for key in NEEDED:
        assert got[key]["verdict"] != "refuse", got[key]
    assert got[("class", "NV01_MEMORY_VIRTUAL")]["value"] == "0x00000070"


@pytest.mark.parametrize("release", RELEASES)
def test_compute_and_copy_classes_of_every_generation_are_forwarded(release):
    engines = [r for r in rows(release) if r["kind"] == "class"
               and re.search(r"_COMPUTE_[A-Z]$|_DMA_COPY_[A-Z]$", r["name"])]
    generations = {r["name"].split("_")[0] for r in engines}
    assert {"TURING", "AMPERE", "HOPPER"} <= generations
    if release >= "570":
        assert "BLACKWELL" in generations
    for r in engines:
        assert r["verdict"] == "forward", r


# ------------------------------------------------------------ embedded
@pytest.mark.parametrize("release", RELEASES)
def test_embedded_descriptors_and_pointers_are_marked(release):
    got = by_name(release)
    expect = {
        ("escape", "NV_ESC_RM_ALLOC_MEMORY"): "fd:fd",
        ("escape", "NV_ESC_RM_MAP_MEMORY"): "fd:fd",
        ("escape", "NV_ESC_REGISTER_FD"): "fd:ctl_fd",
        ("escape", "NV_ESC_RM_CONTROL"): "ptr:params[paramsSize]",
        ("escape", "NV_ESC_IOCTL_XFER_CMD"): "ptr:ptr[size]",
        ("escape", "NV_ESC_RM_IDLE_CHANNELS"): "ptr:phClients[numChannels*4]",
        ("control", "NV0000_CTRL_CMD_OS_UNIX_EXPORT_OBJECT_TO_FD"): "fd:fd",
        ("control", "NV2080_CTRL_CMD_FB_GET_INFO"):
            "ptr:fbInfoList[fbInfoListSize*sizeof(NV2080_CTRL_FB_INFO)]",
        ("control", "NV0080_CTRL_CMD_GPU_GET_CLASSLIST"): "ptr:classList[numClasses*4]",
        ("control", "NV0041_CTRL_CMD_GET_SURFACE_INFO"): "ptr:surfaceInfoList[",
    }
    if release in ("570.211.01", "575.64.05", "580.142", "590.48.01", FLAGS):
        expect[("uvm", "UVM_REGISTER_GPU")] = "fd:rmCtrlFd"
        expect[("uvm", "UVM_MAP_EXTERNAL_ALLOCATION")] = "fd:rmCtrlFd"
    for key, part in expect.items():
        assert part in got[key]["embedded"], got[key]
    assert got[("control", "NV2080_CTRL_CMD_FB_GET_INFO_V2")]["embedded"] == "-"


# ------------------------------------------------------------ the release's own exports
# Releases whose whole tree is vendored: their controls table carries their
# own export tables (tools/nvgen/controls.py), the others have "-".
OWN_TREE = ("535.261.03", "595.45.04")
# What each one's RM exports that no SDK header of it names (g_*_nvoc.c).
UNNAMED_EXPORTS = {
    "535.261.03": {0x20800145, 0x20800146, 0x20800194, 0x2080a083},
    "595.45.04": {0x00800290, 0x20800145, 0x20800146, 0x20800194, 0x20800a3e},
}


@pytest.mark.parametrize("release", RELEASES)
def test_the_release_tree_gives_its_own_export_tables(release):
    ctl = tsv.read(OUT / release / "controls.tsv")
    own = {r["rm_privilege"] != "-" for r in ctl}
    assert own == {release in OWN_TREE}
    assert policy.own_control_flags(release) == (release in OWN_TREE)
    unnamed = {int(r["cmd"], 16) for r in ctl if not r["name"] and r["params_from"] != "userspace"}
    assert unnamed == UNNAMED_EXPORTS.get(release, set())


@pytest.mark.parametrize("release", ["535.261.03", "535.288.01"])
def test_the_cuda_limit_of_535s_libcuda_is_virtualised(release):
    """libcuda 535.261.03's cuCtxCreate sets the CUDA performance limit as
    0x809909, which no 535 header names and 535.261.03's RM does not export
    (controls.USERSPACE_ONLY): a row of its own, answered NV_OK by vgpu.ko."""
    ctl = {int(r["cmd"], 16): r for r in tsv.read(OUT / release / "controls.tsv") if not r["name"]}
    row = ctl[0x809909]
    assert (row["params"], row["sizeof"], row["params_from"]) == \
        ("NV0080_CTRL_PERF_CUDA_LIMIT_CONTROL_PARAMS", "1", "userspace")
    assert row["rm_privilege"] in ("", "-")       # not exported
    pol = {int(r["value"], 16): r for r in rows(release) if r["kind"] == "control" and not r["name"]}
    assert (pol[0x809909]["verdict"], pol[0x809909]["size"]) == ("virtualise", "1")
    header = (ROOT / "kmod/include/nvrel_tables.h").read_text()
    table = header.split(f"nvrel_{release.replace('.', '_')}_ctl[] = {{")[1].split("};")[0]
    assert "{ 0x00809909, 1, 1, NVREL_VIRTUALISE," in table


@pytest.mark.parametrize("release", OWN_TREE)
def test_compute_mode_reservation_is_virtualised_where_the_rm_exports_it(release):
    """libcuda's cuCtxCreate acquires it (535.261.03): no header names it,
    the subdevice exports it without params (subdeviceCtrlCmdGpu{Acquire,
    Release}ComputeModeReservation), and the policy answers it NV_OK."""
    ctl = {int(r["cmd"], 16): r for r in tsv.read(OUT / release / "controls.tsv") if not r["name"]}
    pol = {int(r["value"], 16): r for r in rows(release) if r["kind"] == "control" and not r["name"]}
    for cmd in (0x20800145, 0x20800146):
        assert (ctl[cmd]["rm_class"], ctl[cmd]["rm_params"], ctl[cmd]["rm_privilege"]) == \
            ("Subdevice", "", "non-privileged")
        assert (pol[cmd]["verdict"], pol[cmd]["size"]) == ("virtualise", "-"), pol[cmd]
    header = (ROOT / "kmod/include/nvrel_tables.h").read_text()
    table = header.split(f"nvrel_{release.replace('.', '_')}_ctl[] = {{")[1].split("};")[0]
    assert "{ 0x20800145, 0, 0, NVREL_VIRTUALISE," in table
    assert "{ 0x20800146, 0, 0, NVREL_VIRTUALISE," in table


@pytest.mark.parametrize("release", OWN_TREE)
def test_what_the_release_rm_does_not_export_is_not_forwarded(release):
    """A control no class of the release's own RM exports is answered
    NV_ERR_NOT_SUPPORTED by its driver: the policy neither forwards nor
    rewrites it (the NULL commands, answered before any lookup, and the
    deprecated V1 commands, answered through their V2, aside).  The TSG's
    and channel's GET_INTERLEAVE_LEVEL are virtualised (the slice's
    scheduler's): vgpu.ko reads them on the driver, which says
    NV_ERR_NOT_SUPPORTED."""
    ctl = {r["name"]: r for r in tsv.read(OUT / release / "controls.tsv") if r["name"]}
    for r in rows(release):
        if r["kind"] != "control" or not r["name"] or r["name"] in policy.DEPRECATED_V1:
            continue
        if int(r["value"], 16) & 0xffff and not ctl[r["name"]]["rm_privilege"]:
            assert r["verdict"] in ("refuse", "virtualise"), r


@pytest.mark.parametrize("release", OWN_TREE)
def test_nothing_the_release_rm_restricts_is_forwarded(release):
    """Named controls take 595.45.04's privilege by name; where the
    release's own export tables are stricter, another rule refuses them."""
    ctl = {r["name"]: r for r in tsv.read(OUT / release / "controls.tsv") if r["name"]}
    for r in rows(release):
        if r["kind"] == "control" and r["name"] and r["verdict"] != "refuse":
            assert set(ctl[r["name"]]["rm_privilege"].split("|")) & {"privileged", "kernel", "internal"} \
                == set(), r


@pytest.mark.parametrize("release", RELEASES)
def test_the_kernel_tables_list_what_the_release_rm_answers(release):
    """nvrel_tables.h's answered list (vgpu.ko answers a control outside it
    NV_ERR_NOT_SUPPORTED): what the release's own export tables export, and
    the deprecated V1 commands; none for a release with headers only."""
    from tools.nvgen import kernel
    got = kernel.answered(release)
    header = (ROOT / "kmod/include/nvrel_tables.h").read_text()
    ident = f"nvrel_{release.replace('.', '_')}_answered"
    if release not in OWN_TREE:
        assert got is None and ident not in header
        return
    assert f"{ident}, ARRAY_SIZE({ident}) }}," in header
    assert got == sorted(got) and {0x20800145, 0x20800146} <= set(got)
    assert 0x20808161 not in got                # NVML's closed legacy GSS query
    names = {r["name"]: int(r["cmd"], 16) for r in tsv.read(OUT / release / "controls.tsv") if r["name"]}
    assert names["NV2080_CTRL_CMD_GPU_GET_INFO"] in got      # answered through GET_INFO_V2
    assert names["NV2080_CTRL_CMD_GPU_GET_PIDS"] in got
    exported = {int(r["cmd"], 16) for r in tsv.read(OUT / release / "controls.tsv")
                if r["rm_privilege"] not in ("", "-")}
    assert exported <= set(got) and len(set(got) - exported) <= len(policy.DEPRECATED_V1)


# ------------------------------------------------------------ the rule set itself
def test_every_name_the_rules_list_exists_in_some_release():
    """A misspelt name in a list would silently match nothing."""
    known = set()
    for release in RELEASES:
        for f, _ in policy.KINDS.values():
            known |= {r["name"] for r in tsv.read(OUT / release / f"{f}.tsv")}
    listed = (policy.REWRITE_IDENTITY + policy.REWRITE_MEMORY + policy.REWRITE_PROCESSES
              + policy.REFUSE_NO_SLICE_ANSWER + policy.REFUSE_UTILISATION + tuple(policy.FORWARD_OWN)
              + policy.VIRTUAL_NO_PEERS + policy.VIRTUAL_SCHEDULING
              + policy.VIRTUAL_GPU_WIDE + policy.GPU_WIDE_SETTERS + policy.OTHERS_ACTIVITY
              + tuple(policy.ESCAPES) + tuple(policy.UVM) + tuple(policy.DEPRECATED_V1)
              + tuple(policy.DEPRECATED_V1.values()))
    assert sorted(n for n in listed if n not in known) == []


def test_first_matching_rule_decides():
    item = policy.Item(FLAGS, "control", 0x20801303, "NV2080_CTRL_CMD_FB_GET_INFO_V2", "1028",
                       "privileged", True, "-")
    assert policy.decide(item)[0] == "refuse"      # the driver's flag wins over the rewrite list
    item = policy.Item(FLAGS, "control", 0x20801303, "NV2080_CTRL_CMD_FB_GET_INFO_V2", "1028",
                       "non-privileged", True, "-")
    assert policy.decide(item)[0] == "rewrite"
    item = policy.Item("535.288.01", "control", 0x20800122, "NV2080_CTRL_CMD_GPU_NEW_THING", "4",
                       "", False, "-")
    verdict, reason = policy.decide(item)
    assert verdict == "refuse" and reason.startswith("undecided")


def test_readme_lists_every_non_forwarded_item_of_595():
    text = (DOCS / "README.md").read_text()
    for r in rows(FLAGS):
        if r["verdict"] != "forward":
            label = f"`{r['name']}` ({r['value']})" if r["name"] else f"({r['value']}, unnamed)"
            assert label in text, r
    for release in RELEASES:
        assert f"| {release} |" in text


# ------------------------------------------------ nvproxy's default list
def test_coverage_of_nvproxys_default_list():
    """Of what nvproxy forwards with its default
    capabilities (compute, utility), the policy forwards or handles the
    multi-GPU and IPC items a training job needs (P2P between the slice's
    GPUs, UVM peer access, single-object CUDA IPC), and refuses the rest
    with a reason of its own.  `python3 -m tools.nvgen.coverage` prints it."""
    from tools.nvgen import coverage
    cov = coverage.coverage(policy.FLAGS_RELEASE)
    handled = {r["name"] for r in cov.handled}
    for name in ("NV50_P2P", "UVM_ENABLE_PEER_ACCESS", "UVM_DISABLE_PEER_ACCESS",
                 "NV0000_CTRL_CMD_OS_UNIX_EXPORT_OBJECT_TO_FD",
                 "NV0000_CTRL_CMD_OS_UNIX_IMPORT_OBJECT_FROM_FD",
                 "NV0000_CTRL_CMD_OS_UNIX_GET_EXPORT_OBJECT_INFO",
                 "NV0000_CTRL_CMD_OS_UNIX_EXPORT_OBJECTS_TO_FD",
                 "NV0000_CTRL_CMD_OS_UNIX_IMPORT_OBJECTS_FROM_FD"):
        assert name in handled, name
    # No lower than when this was written (211/229 = 92.1%).
    assert len(cov.handled) >= 211 and cov.percent >= 92.0, cov.line()
    for _, ours in cov.refused:
        assert ours["reason"] and not ours["reason"].startswith("undecided"), ours
    # The module reads the committed TSV; the generator's rows agree.
    again = coverage.coverage(policy.FLAGS_RELEASE, rows=policy.policy_rows(policy.FLAGS_RELEASE))
    assert again.line() == cov.line()
