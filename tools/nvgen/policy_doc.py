"""kmod/vgpu/policy/README.md: the policy of policy.py in words, made from the
same rules and tables, so that the prose cannot drift from the TSVs.

It holds, in this order: what the verdicts mean, the rules as they are
applied, the `embedded` column's notation, per release the counts by
verdict, every item of the flags release that is not forwarded (grouped by
reason), the differences from gVisor's nvproxy, the items left undecided
and the judgment calls a real GPU has to confirm, and the known gaps.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Callable

from . import coverage, policy, tsv

# Decisions taken on reading rather than on a driver fact; each needs a
# real-GPU or real-workload check (docs/mediator.md, "Assumptions").
JUDGMENT_CALLS = (
    ("NV2080_CTRL_CMD_PERF_BOOST", "forward",
     "boost requests are per client and time-limited; one slice's boost raises clocks for all, "
     "which changes power, not correctness"),
    ("NV0080/NV2080/NV0090 *_SET_TPC_PARTITION_MODE", "forward",
     "read as per-TSG (CUDA calls it, nvproxy forwards it); if it turns out GPU-wide it must be virtualised"),
    ("NV2080_CTRL_CMD_TIMER_SET_GR_TICK_FREQ, RC_*_WATCHDOG", "virtualise",
     "answering NV_OK without applying assumes CUDA only asks and never relies on the effect"),
    ("NV0000_CTRL_CMD_CLIENT_SET_INHERITED_SHARE_POLICY", "virtualise",
     "which share types CUDA sets is not recorded here; the mediator's filter (revoke, NONE, or a PID "
     "share of one of the slice's processes) must be checked against a strace of CUDA's start-up"),
    ("Peer, NVLink and fabric queries (SYSTEM_GET_P2P_CAPS, _V2, _MATRIX, SYSTEM_GET_FABRIC_STATUS, "
     "GET_GPU_FABRIC_PROBE_INFO, NVLINK_GET_NVLINK_CAPS/_STATUS)", "virtualise",
     "answered as the driver answers for a GPU with no peer, no NVLink and no fabric; assumes CUDA then "
     "plans no P2P and no fabric memory, which the policy would refuse anyway (a two-GPU slice loses "
     "P2P between its own GPUs)"),
    ("NVA06F STOP_CHANNEL, NV2080 FIFO_DISABLE_CHANNELS", "virtualise",
     "answered NV_OK and not applied, so a container cannot re-enable a channel vgpu.ko's scheduler "
     "disabled; assumes CUDA does not rely on the channel being stopped (teardown frees it anyway)"),
    ("0x20800145 / 0x20800146 (compute-mode reservation)", "virtualise",
     "no header names them; the driver's function names "
     "(subdeviceCtrlCmdGpuAcquire/ReleaseComputeModeReservation) "
     "and nvproxy's names agree on what they are"),
    ("MPS (MPS_COMPUTE, SET_SUB_PROCESS_ID, DISABLE_SUB_PROCESS_USERD_ISOLATION, "
     "UVM_REGISTER_MPS_*)", "refuse",
     "an MPS server inside one slice would be isolated from other slices, but its accounting is per "
     "process and the USERD isolation switch is not per slice; not decided"),
    ("MIG (AMPERE_SMC_*, NVC637/NVC638 controls)", "refuse",
     "a GPU in MIG mode is not sliced by vgpu; a container given a MIG instance would need these"),
    ("NV_ESC_SYS_PARAMS", "virtualise",
     "the memblock size is the host's; answering without forwarding leaves it unset if no host tool sets it "
     "(coherent NUMA platforms only)"),
    ("PERF_GET_GPUMON_PERFMON_UTIL_SAMPLES_V2 (nvidia-smi's utilisation)", "refuse",
     "the slice's share needs per-slice GPU-time accounting vgpu.ko does not keep yet; nvidia-smi then "
     "shows no utilisation inside the container"),
    ("NV_ESC_EXPORT_TO_DMABUF_FD", "refuse",
     "GPUDirect RDMA's dma-buf path (nvproxy gates it behind its rdma capability).  Read in 535.261.03 "
     "and 595.45.04: nv_dma_buf_export (kernel-open/nvidia/nv-dmabuf.c) dups each named handle of the "
     "params' hClient into RM's internal client (rm_dma_buf_dup_mem_handle, osapi.c) at kernel "
     "privilege, which skips the access check (clientCopyResource_IMPL, rs_client.c), and nothing "
     "checks that the client is the caller's: forwarded, it would export another slice's memory.  The "
     "dup keeps the whole object's FB until the dma-buf's last close (nv_dma_buf_release), which "
     "crosses no nvidia ioctl, so a charge could not follow it; forwarding needs vgpu.ko's own "
     "ownership check, a charge held from before the call to that release, and a reaper of the "
     "dma-buf's file (docs/rdma.md, \"GPUDirect RDMA\")"),
    ("NV0080_CTRL_CMD_GPU_GET_CLASSLIST(_V2)", "forward",
     "the list names classes this policy refuses (debugger, profiler, P2P); CUDA copes with a refused "
     "allocation, so it is not filtered"),
)

KNOWN_GAPS = (
    "The `embedded` column comes from member types and names in the headers.  A pointer hidden in an "
    "integer member (UVM passes user addresses as NvU64, e.g. UVM_MIGRATE's base) is not a pointer for "
    "the driver's copy either, so it is not listed; an fd in a member not named *fd/*Fd/*FD/*Descriptor "
    "is missed unless EXPLICIT in embedded.py names it (NV0005 `data`, `pOsEvent`).",
    "Pointer extents (`[count*elem]`) come from 595.45.04's driver and are applied by member name to the "
    "other releases; a release that changed a list's element type is not detected.",
    "Privilege flags exist for 595.45.04 only.  Older releases take them by name; a control whose flags "
    "changed between releases is decided by 595.45.04's, and what 595.45.04 no longer has is refused as "
    "undecided (counts under \"Not decided\"), even where nvproxy forwards it for that release: "
    "NVC36F_CTRL_GET_CLASS_ENGINEID (0xc36f0101) of 535.288.01 and 550.163.01 is the only such item "
    "(nvproxy forwards it for compute; the headers of 570 and later no longer declare it).  Flags are "
    "taken by name, not number, so that a renumbered control is never given another's flags.",
    "Name patterns (DEBUG, NVLINK, DISPLAY, ...) are checked by the tests for false negatives on the "
    "isolation families, not for false positives: a harmless control whose name contains one is refused.",
    "GPU-wide counters that cannot be split per slice (PCIe throughput, ECC counts, NVENC/NVFBC session "
    "statistics) are forwarded unchanged.",
    "vgpu.ko follows these tables (kmod/include/nvrel_tables.h, made by tools/nvgen/kernel.py): every "
    "rewrite and virtualisation of the controls has a handler in kmod/vgpu/control.c "
    "(tests/host/test_kmod_policy.py checks), and tests/vm/test_vgpu_policy.py holds every forwarded "
    "control and class to reaching the driver, NV01_MEMORY_SYSTEM_OS_DESCRIPTOR through RM_ALLOC "
    "excepted (its reason says why).  An item vgpu.ko could not carry safely (CUDA IPC's export fds, "
    "three handle lists, kernel pointers) is refused by the policy itself, its reason naming what is "
    "missing.",
)


# Why this policy departs from nvproxy, by the first matching test on our
# row (verdict, reason, name).  nvproxy runs one sandbox per container on
# whole GPUs it is given; vgpu shares one GPU between containers, so what
# nvproxy can forward unchanged may reach another tenant here.
NVPROXY_WHY: tuple[tuple[Callable[[dict], bool], str], ...] = (
    (lambda r: r["verdict"] == "rewrite",
     "nvproxy passes the host's answer through (its sandbox owns the GPUs it sees); here the container "
     "must see its slice, not the host's GPUs, memory or processes"),
    (lambda r: r["verdict"] == "virtualise" and "scheduling" in r["reason"],
     "nvproxy lets the application schedule its own TSGs; here the slice scheduler owns them "
     "(docs/compute.md)"),
    (lambda r: r["verdict"] == "virtualise",
     "nvproxy forwards it because CUDA calls it; its effect reaches beyond the slice, so the mediator "
     "answers it"),
    (lambda r: r["reason"].startswith("debugger"),
     "nvproxy enables the SM debugger for compute; a debugger session names an application client and reads "
     "and writes its memory, refused here because it crosses from one client to another (cuda-gdb and "
     "sanitizers lose it)"),
    (lambda r: r["reason"].startswith("profiler"),
     "nvproxy gates it behind the profiling capability; hardware counters here would see every slice's work"),
    (lambda r: "P2P" in r["reason"] or "multicast" in r["reason"] or "fabric" in r["reason"]
     or "IMEX" in r["reason"] or "NVLink" in r["reason"],
     "nvproxy forwards it for compute or fabric/IMEX management (multi-GPU, multi-node jobs); it reaches "
     "other GPUs, which other slices share"),
    (lambda r: "display" in r["reason"],
     "nvproxy forwards it for graphics; a slice is a compute share of a GPU whose display engine is one"),
    (lambda r: "binary API" in r["reason"],
     "nvproxy allocates it and passes its controls unchecked; here it would bypass every control rule"),
    (lambda r: "MPS" in r["reason"],
     "nvproxy forwards MPS for compute; how MPS accounting maps onto a slice is not decided"),
    (lambda r: "uvmFd" in r["reason"],
     "nvproxy substitutes its own host UVM file; vgpu.ko cannot put the real UVM file in a container's "
     "table"),
    (lambda r: True,
     "nvproxy forwards it for the capability shown; this policy's reason (left) outweighs it on a shared "
     "GPU"),
)


def _why_nvproxy(row: dict) -> str:
    return next(text for test, text in NVPROXY_WHY if test(row))


def _uvm_sizes_gap(every: dict[str, list[dict]]) -> str:
    """The known gap about UVM struct sizes, as the committed tables have them."""
    unknown = {rel: sum(1 for r in rows if r["kind"] == "uvm" and "?" in r["size"].split("|"))
               for rel, rows in every.items()}
    unknown = {rel: n for rel, n in unknown.items() if n}
    tail = "the policy decides UVM commands by name, so its verdicts do not depend on them."
    if unknown:
        where = ", ".join(f"{n} in {rel}" for rel, n in unknown.items())
        return (f"UVM struct sizes are unknown (`?`) for some commands ({where}): the headers archive lacks "
                f"those releases' uvm_types.h and the tables were made without `--nvidia-git` "
                f"(tools/nvgen/README.md); {tail}")
    return ("UVM struct sizes of releases other than 595.45.04 are measured against uvm_types.h and "
            "nv_uvm_user_types.h from each release's tag of NVIDIA's open-gpu-kernel-modules "
            "(`--nvidia-git`, tools/nvgen/README.md), which the headers archive lacks; " + tail)


def _counts(rows: list[dict]) -> Counter:
    return Counter(r["verdict"] for r in rows)


def _label(r: dict) -> str:
    return f"`{r['name']}` ({r['value']})" if r["name"] else f"({r['value']}, unnamed)"


def _rule_lines() -> list[str]:
    out = []
    n = 0
    seen_tables = set()
    for rule in policy.RULES:
        kinds = "/".join(rule.kinds)
        if rule.listed:
            if rule.listed not in seen_tables:
                seen_tables.add(rule.listed)
                n += 1
                out.append(f"{n}. *{kinds}*: by name, the list `policy.{rule.listed}` (each entry's verdict "
                           f"and reason are in `<release>.tsv`; the non-forwarded ones below)")
            continue
        n += 1
        flag = f" [{policy.FLAGS_RELEASE}'s flags, by name, for other releases]" if rule.flags else ""
        out.append(f"{n}. *{kinds}* → **{rule.verdict}**: {rule.reason}{flag}")
    return out


def _group(rows: list[dict]) -> dict[tuple[str, str], list[dict]]:
    g: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in rows:
        if r["verdict"] != "forward":
            g[(r["verdict"], r["reason"])].append(r)
    return g


def _names_block(rows: list[dict], fold: int = 40) -> list[str]:
    by_kind: dict[str, list[str]] = defaultdict(list)
    for r in rows:
        by_kind[r["kind"]].append(_label(r))
    text = []
    for k, v in by_kind.items():
        text += [f"{k}: " + ", ".join(v), ""]
    if len(rows) > fold:
        return ["<details><summary>" + f"{len(rows)} items" + "</summary>", ""] + text + ["</details>", ""]
    return text


def _nvproxy_rows(nvproxy_dir: Path, release: str) -> tuple[str, list[dict]]:
    versions = {r["release"]: r for r in tsv.read(nvproxy_dir / "versions.tsv")}
    v = versions[release]["nvproxy"]
    return v, tsv.read(nvproxy_dir / f"{v}.tsv")


def differences(rows: list[dict], nv: list[dict]) -> tuple[list[tuple[dict, dict]], list[dict]]:
    """(nvproxy forwards, this policy does not) as (our row, nvproxy row);
    and our forwarded rows that nvproxy does not list."""
    ours = defaultdict(list)
    for r in rows:
        ours[(r["kind"], r["value"])].append(r)
    theirs = {(r["kind"], r["value"]): r for r in nv}
    stricter = [(o, theirs[k]) for k, group in ours.items() if k in theirs
                for o in group if o["verdict"] != "forward"]
    wider = [o for k, group in ours.items() if k not in theirs for o in group if o["verdict"] == "forward"]
    return stricter, wider


def render(every: dict[str, list[dict]], nvproxy_dir: Path) -> str:
    fr = policy.FLAGS_RELEASE
    L: list[str] = []
    a = L.append
    a("# Mediation policy per driver release")
    a("")
    a("Generated by `python3 -m tools.nvgen.policy` from the committed tables of `tools/nvgen/out`, "
      "`tools/nvgen/embedded` and `tools/nvgen/nvproxy`; do not edit by hand "
      "(tests/host/test_nvgen_policy.py "
      "fails when this file and the code disagree).  The rules are `RULES` in `tools/nvgen/policy.py`.")
    a("")
    a("`<release>.tsv` has one line per escape, class, control and UVM command (aliases of one number get a "
      "line each): `kind value name size verdict reason embedded`, sorted by kind, then value.  `size` is "
      "the "
      "params struct's size in bytes (`-` none, `?` not measurable for that release, `a|b` two accepted "
      "structs).")
    a("")
    a("## Verdicts")
    a("")
    a("- **forward**: passed to the driver as the caller made it.  The mediator's generic checks still "
      "apply: "
      "every client handle must belong to the caller's file, and embedded descriptors and pointers are "
      "handled as the `embedded` column says (descriptors translated to the real file, lists copied).")
    a("- **rewrite**: forwarded, and the request or the reply is changed to the slice's view (memory, "
      "processes, GPU identity and counts).")
    a("- **virtualise**: the request does not reach the driver as given; the mediator answers it or carries "
      "it out its own way (TSG scheduling is the slice scheduler's; peer and fabric queries are answered "
      "for a GPU without peers).")
    a("- **refuse**: never reaches the driver; the caller gets NV_ERR_INSUFFICIENT_PERMISSIONS (-EPERM for "
      "an escape or UVM command).")
    a("")
    a("## The rules, in the order they are applied")
    a("")
    a("The first rule that matches an item decides.  The driver's own flags come first, so no later rule can "
      "open what the driver restricts; the explicit exceptions (rewrites, what CUDA's start-up asks) come "
      "before the name patterns; **forward** is last.  Releases other than "
      f"{fr} take {fr}'s privilege flags by name (the reason says so); what {fr} does not have is "
      "undecided and refused.  Controls that only the deprecated-control layer answers "
      "(`policy.DEPRECATED_V1`, e.g. NV2080_CTRL_CMD_FB_GET_INFO) carry the privilege of the V2 command it "
      "calls.")
    a("")
    L += _rule_lines()
    a("")
    a("## The `embedded` column")
    a("")
    a("Members of the params struct (the one the driver copies: for 595.45.04 the export table's or resource "
      "list's type) that the driver reads through later: `ptr:list[count*elem]` a user buffer the driver "
      "copies (count and element size from the 595.45.04 driver's own copy code); `ptr:name` a pointer "
      "whose extent is not known here; `va:name` a user address or mmap cookie that is mapped, pinned or "
      "returned, never copied; `fd:name` a descriptor resolved in the caller's table.  `-` means none: the "
      "struct was read and has no such member, or the item takes no params.  `- (unknown: ...)` means the "
      "params struct is not known, so none is not claimed.  Made by `python3 -m tools.nvgen.embedded` "
      "(tools/nvgen/embedded.py says where each fact comes from).")
    a("")
    a("## Counts per release")
    a("")
    a("| release | " + " | ".join(policy.VERDICTS) + " | total | of which undecided |")
    a("|---|" + "---|" * (len(policy.VERDICTS) + 2))
    for release, rows in every.items():
        c = _counts(rows)
        und = sum(1 for r in rows if r["reason"].startswith("undecided"))
        a(f"| {release} | " + " | ".join(str(c[v]) for v in policy.VERDICTS) + f" | {len(rows)} | {und} |")
    a("")
    a("By kind in " + fr + ":")
    a("")
    a("| kind | " + " | ".join(policy.VERDICTS) + " |")
    a("|---|" + "---|" * len(policy.VERDICTS))
    for kind in sorted(policy.KINDS):
        c = _counts([r for r in every[fr] if r["kind"] == kind])
        a(f"| {kind} | " + " | ".join(str(c[v]) for v in policy.VERDICTS) + " |")
    a("")
    a(f"## Every item of {fr} that is not forwarded")
    a("")
    order = {v: i for i, v in enumerate(policy.VERDICTS)}
    groups = _group(every[fr])
    ranked = sorted(groups.items(), key=lambda kv: (order[kv[0][0]], -len(kv[1]), kv[0][1]))
    for (verdict, reason), rows in ranked:
        a(f"### {verdict}: {reason} ({len(rows)})")
        a("")
        L.extend(_names_block(rows))
    a("## Differences from gVisor's nvproxy")
    a("")
    vmap = tsv.read(nvproxy_dir / "versions.tsv")
    commit = vmap[0]["gvisor_commit"] if vmap else "?"
    a("nvproxy (google/gvisor `pkg/sentry/devices/nvproxy`, commit " + f"`{commit[:12]}`) forwards only what "
                                                                       f"its "
      "per-version tables list, each entry enabled by container capabilities (compute, utility, graphics, "
      "video, ...).  Its tables are extracted by `python3 -m tools.nvgen.nvproxy` into "
      "`tools/nvgen/nvproxy/` "
      "and matched by number; each release is compared with the newest nvproxy version not newer than it.  "
      "Besides its tables nvproxy passes every control with bit 15 set (RM_GSS_LEGACY_MASK, handed to GSP "
      "unchecked) and every control of NV2081_BINAPI; this policy refuses both (the first is not listed, the "
      "second is the binary-API rule).  It lists far fewer items because it adds what workloads were seen "
      "to need; this policy forwards what the driver lets any user do unless it breaks isolation or reports "
      "host-wide state, so the reverse list is long and its reason is that one.")
    a("")
    a("| release | nvproxy version | nvproxy forwards, policy does not | policy forwards, nvproxy does not "
      "list |")
    a("|---|---|---|---|")
    for release, rows in every.items():
        v, nv = _nvproxy_rows(nvproxy_dir, release)
        stricter, wider = differences(rows, nv)
        a(f"| {release} | {v} | {len(stricter)} | {len(wider)} |")
    a("")
    a("Of what nvproxy forwards with its default capabilities (compute, utility: what CUDA and nvidia-smi "
      "need), this policy forwards or handles (forward, rewrite or virtualise), per release "
      "(`python3 -m tools.nvgen.coverage --release R --refused` lists the rest with their reasons):")
    a("")
    for release, rows in every.items():
        a("- " + coverage.coverage(release, nvproxy_dir=nvproxy_dir, rows=rows).line())
    a("")
    v, nv = _nvproxy_rows(nvproxy_dir, fr)
    stricter, wider = differences(every[fr], nv)
    a(f"### {fr}: nvproxy {v} forwards, this policy does not ({len(stricter)})")
    a("")
    a("Grouped by why this policy departs; each row has this policy's own reason beside nvproxy's handler "
      "and the capabilities that enable it there.")
    a("")
    by_why: dict[str, list[tuple[dict, dict]]] = defaultdict(list)
    for o, t in sorted(stricter, key=lambda p: (p[0]["kind"], p[0]["value"])):
        by_why[_why_nvproxy(o)].append((o, t))
    for why, pairs in by_why.items():
        a(f"**{why}** ({len(pairs)}):")
        a("")
        a("| kind | value | name | verdict | reason | nvproxy handler (capabilities) |")
        a("|---|---|---|---|---|---|")
        for o, t in pairs:
            a(f"| {o['kind']} | {o['value']} | {o['name'] or '(unnamed; nvproxy: ' + t['name'] + ')'} | "
              f"{o['verdict']} | {o['reason']} | {t['handler']} ({t['caps'] or '-'}) |")
        a("")
    a("")
    a(f"### {fr}: this policy forwards, nvproxy {v} does not list ({len(wider)})")
    a("")
    a("Reason for all: the driver lets any user make these calls on their own objects and no isolation or "
      "reporting rule applies; nvproxy has not needed them for the workloads it supports.")
    a("")
    L.extend(_names_block(wider, fold=0))
    a("## Not decided")
    a("")
    a("Refused because nothing decides them (reason `undecided: ...`):")
    a("")
    a("| release | undecided |")
    a("|---|---|")
    for release, rows in every.items():
        a(f"| {release} | {sum(1 for r in rows if r['reason'].startswith('undecided'))} |")
    a("")
    und = [r for r in every[fr] if r["reason"].startswith("undecided")]
    a(f"In {fr}:")
    a("")
    for r in und:
        a(f"- {r['kind']} {_label(r)}: {r['reason']}")
    a("")
    a("Judgment calls (decided on reading, to be confirmed on a real GPU or against a strace of CUDA):")
    a("")
    for what, verdict, why in JUDGMENT_CALLS:
        a(f"- {what} → **{verdict}**: {why}.")
    a("")
    a("## Known gaps")
    a("")
    gaps = list(KNOWN_GAPS)
    gaps.insert(2, _uvm_sizes_gap(every))
    for gap in gaps:
        a(f"- {gap}")
    a("")
    return "\n".join(L)
