"""vgpu.ko's handler lists against the generated policy of the release
nvabi.h pins (kmod/vgpu/policy/595.45.04.tsv, tools/nvgen/policy.py).

Which items a release lets through is the generated table's
(kmod/include/nvrel_tables.h, kmod/vgpu/policy.c); what vgpu.ko does beyond
forwarding is in hand-written lists (the typed classes of memory.c, the
control handlers of control.c, the escapes of mediate.c, the UVM commands of
uvm.c).  Those lists are read out of the C source here: every item they
name must be one the policy does not refuse, and what a handler does
(forward, rewrite, virtualise) must be what the policy says.  Items a
handler forwards that the policy would virtualise or rewrite are listed in
KNOWN_GAPS, each with what is missing; a new one fails.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "kmod" / "vgpu" / "policy" / "595.45.04.tsv"
KMOD = ROOT / "kmod" / "vgpu"
NVABI = ROOT / "kmod" / "include" / "nvabi.h"

# Forwarded by vgpu.ko as the caller made them, where the policy asks more.
KNOWN_GAPS = {
    # Reads of the TSG's scheduling values, which vgpu.ko's scheduler sets.
    ("control", "NVA06C_CTRL_CMD_GET_TIMESLICE"): "virtualise",
    ("control", "NVA06C_CTRL_CMD_GET_INTERLEAVE_LEVEL"): "virtualise",
    ("control", "NVA06F_CTRL_CMD_GET_INTERLEAVE_LEVEL"): "virtualise",
}


def policy() -> dict[tuple[str, str], dict[str, str]]:
    """(kind, name) -> row; items no header names (the policy's name is
    empty) under the name nvabi.h gives their number."""
    with POLICY.open(newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    out = {(r["kind"], r["name"]): r for r in rows}
    defines = dict(re.findall(r"^#define (\w+)\s+(0x[0-9A-Fa-f]+)", NVABI.read_text(), re.M))
    by_value = {(r["kind"], int(r["value"], 16)): r for r in rows if r["value"] != "?"}
    # A number only an older release's user space uses (535's libcuda sets
    # the CUDA performance limit as 0x809909): that release's row.
    for other in sorted(POLICY.parent.glob("*.tsv")):
        with other.open(newline="") as f:
            for r in csv.DictReader(f, delimiter="\t"):
                if r["value"] != "?" and not r["name"]:
                    by_value.setdefault((r["kind"], int(r["value"], 16)), r)
    for name, value in defines.items():
        for kind in ("control", "class"):
            r = by_value.get((kind, int(value, 16)))
            if r is not None and not r["name"]:
                out.setdefault((kind, name), r)
    return out


def _body(src: str, start: str) -> str:
    """The C block that begins at the first line containing start."""
    i = src.index(start)
    return src[i:src.index("\n}", i)]


# vgpu.ko's control kinds (control.c) that change the driver's answer or
# answer it themselves; the others forward (SURFACE_INFO only copies its
# embedded list).
REWRITE_KINDS = {"FB_INFO", "FB_INFO_V2", "GET_PIDS", "GET_PID_INFO", "GPU_ID", "ID_INFO_V2",
                 "ATTACHED_IDS", "PROBED_IDS", "ID_INFO", "ID_LIST", "DEVICE_IDS",
                 "ACTIVE_DEVICES", "FB_REGIONS", "GPU_INFO", "GPU_INFO_V2"}
VIRTUALISE_KINDS = {"ANSWER_OK", "NO_PEERS", "SHARE_POLICY"}
# Escapes vgpu.ko answers its own way (mediate.c, vgpu_escape_kbuf): NVOS32
# INFO rewritten, STATUS_CODE for the slice's GPUs only, SYS_PARAMS answered
# without reaching the driver.
OWN_ESCAPES = {"NV_ESC_RM_VID_HEAP_CONTROL": "rewrite", "NV_ESC_STATUS_CODE": "rewrite",
               "NV_ESC_SYS_PARAMS": "virtualise", "NV_ESC_NUMA_INFO": "rewrite"}


# Classes whose parameters vgpu.ko holds to the caller's own objects
# (memory.c: vgpu_debugger_check).
CHECKED_CLASSES = {"GT200_DEBUGGER"}


def kmod_items() -> dict[tuple[str, str], str]:
    """(kind, NVIDIA's name) -> what vgpu.ko does: forward, rewrite or
    virtualise."""
    items: dict[tuple[str, str], str] = {}
    mem = (KMOD / "memory.c").read_text()
    for name in re.findall(r"\{ (\w+), VGPU_OBJ_(\w+) \}",
                           _body(mem, "vgpu_classes[] = {")):
        items[("class", name[0])] = ("rewrite" if name[1] == "DEVICE" or name[0] in CHECKED_CLASSES
                                     else "forward")
    rep = (KMOD / "control.c").read_text()
    for name, kind in re.findall(r"\{ (NV\w+_CTRL_CMD_\w+), VGPU_CTRL_(\w+) \}",
                                 _body(rep, "vgpu_ctrls[] = {")):
        items[("control", name)] = ("rewrite" if kind in REWRITE_KINDS else
                                    "virtualise" if kind in VIRTUALISE_KINDS else "forward")
    med = (KMOD / "mediate.c").read_text()
    for fn in ("static int vgpu_escape_kbuf", "static bool vgpu_escape_direct"):
        for name in re.findall(r"case (NV_ESC_\w+):", _body(med, fn)):
            items[("escape", name)] = OWN_ESCAPES.get(name, "forward")
    # CUDA IPC (ipc.c): the fd translated, the export's charge held.
    ipc = (KMOD / "ipc.c").read_text()
    for name in re.findall(r"cmd == (NV\w+_CTRL_CMD_\w+)", _body(ipc, "bool vgpu_ipc_cmd")):
        items[("control", name)] = "rewrite"
    uvm = (KMOD / "uvm.c").read_text()
    for name in re.findall(r"\{ (UVM_\w+), ", _body(uvm, "vgpu_uvm_cmds[] = {")):
        items[("uvm", name)] = "forward"
    return items


def test_the_kmod_lists_are_read():
    items = kmod_items()
    kinds = {k for k, _ in items}
    assert kinds == {"class", "control", "escape", "uvm"}
    assert len(items) >= 50, items


@pytest.mark.parametrize("key", sorted(kmod_items()), ids=lambda k: f"{k[0]}:{k[1]}")
def test_nothing_vgpu_lets_through_is_refused(key):
    row = policy().get(key)
    assert row is not None, f"{key} is not in {POLICY.name}"
    assert row["verdict"] != "refuse", f"{key}: the policy refuses it: {row['reason']}"


def test_what_vgpu_forwards_the_policy_forwards_or_a_gap_is_known():
    pol, gaps = policy(), {}
    for key, does in kmod_items().items():
        want = pol[key]["verdict"]
        if does == "forward" and want != "forward":
            gaps[key] = want
    assert gaps == KNOWN_GAPS


def test_what_vgpu_answers_its_own_way_the_policy_does_too():
    pol = policy()
    for key, does in kmod_items().items():
        if does != "forward" and key[0] in ("control", "escape"):
            assert pol[key]["verdict"] == does, (key, pol[key]["reason"])


# GPFIFO_SCHEDULE goes to compute.c (vgpu_compute_user_schedule), not the list.
COMPUTE_CONTROLS = {0xA06C0101, 0xA06F0103}


@pytest.mark.parametrize("release", sorted(p.stem for p in POLICY.parent.glob("*.tsv")))
def test_every_rewrite_and_virtualisation_has_a_handler(release):
    """A control the policy of any release rewrites or virtualises has code
    of vgpu.ko's behind it; without one, vgpu.ko would refuse it
    (NV_ERR_NOT_SUPPORTED) and the table's verdict would not be true."""
    defines = {n: int(v, 16) for n, v in
               re.findall(r"^#define (\w+)\s+(0x[0-9A-Fa-f]+)", NVABI.read_text(), re.M)}
    handled = {defines[n] for (k, n), _ in kmod_items().items() if k == "control"} | COMPUTE_CONTROLS
    with (POLICY.parent / f"{release}.tsv").open(newline="") as f:
        rows = [r for r in csv.DictReader(f, delimiter="\t")
                if r["kind"] == "control" and r["verdict"] in ("rewrite", "virtualise")]
    assert rows
    missing = [f"{r['value']} {r['name']} ({r['verdict']})" for r in rows
               if int(r["value"], 16) not in handled]
    assert not missing, "\n".join(missing)
