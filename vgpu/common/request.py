"""What a container asks vgpu for, and which slice answers it.

vgpu-oci-hook and vgpu-runtime must agree on it, so both take it from here:
the request (annotations, or the image's environment where vgpud allows it),
its scope (the container's own slice, its Kubernetes pod's slice, or none)
and the slice's name, labels and the hook stages a bundle needs.  This
module decides; it never acts (the one exception, image_env_allowed, asks
vgpud a question and changes nothing).  Standard library only, and cheap
(vgpu-runtime loads it on the start of every container whose config.json
might carry a request): no ctypes, no re, json only through
vgpu.common.fastjson; of vgpu's own, the API client, the values' parsers
(vgpu.common.values, for validate) and the RDMA names' checks
(vgpu.common.rdma, for parse_plan).

The rule (container-hook/README.md, "Pods"):

- Kubernetes containers are recognised by their CRI annotations
  (containerd's ``io.kubernetes.cri.*``, CRI-O's ``io.kubernetes.cri-o.*``
  and ``io.kubernetes.pod.*``).  Without them (ctr, runc, podman),
  ``vgpu.io/<key>`` and ``vgpu.io/container-<key>`` are both the
  container's own request.
- A pod's sandbox (pause) container never gets a slice.  Its poststop
  deletes the pod's slice when the pod asked for one.
- A Kubernetes container with any ``vgpu.io/container-<key>`` (the device
  plugin's) gets a slice of its own, named by its id; of the pod-level
  request only ``vgpu.io/profile`` applies to it (in place of the plugin's
  ``vgpu.io/container-profile``; vgpud checks the namespace may name it).
- Otherwise, the pod's ``vgpu.io/<key>`` (passed to every container of the
  pod) asks for ONE slice for the whole pod, named ``pod-<sandbox id>``,
  made by the first container that starts and shared by all of them.

``vgpu.io/rdma: "true"`` asks for the slice's RDMA adapter (docs/rdma.md,
"Through vgpu-runtime"): vgpu-runtime asks vgpud's ``plan`` where the slice
will go, writes the adapter's nodes and one device rule per node into
config.json and pins the plan (PLAN_ANNOTATION); the hook creates the slice
on that plan and checks the rules (rdma_device_problem) before it sets the
rdma cgroup's limits.
"""
from __future__ import annotations

import os
import sys

from vgpu.common import apiclient as ac
from vgpu.common import fastjson
from vgpu.common.rdma import hca_ok, node_ok
from vgpu.common.values import (BadValue, parse_compute, parse_flag, parse_gpus, parse_policy,
                                parse_priority, parse_profile, parse_size, quote)

KEYS = ("memory", "compute", "priority", "policy", "gpus", "profile", "rdma")
ANNOTATION_PREFIX = "vgpu.io/"
#: the per-container request (set by the device plugin): vgpu.io/container-memory, ...
CONTAINER_PREFIX = "vgpu.io/container-"
#: the annotation contract, written once: what a pod asks for the whole pod
#: (vgpu.io/<key>) and what the device plugin sets per container
#: (vgpu.io/container-<key>); vgpuctl runtime-config and the device plugin
#: take their names from here
POD_ANNOTATIONS = tuple(ANNOTATION_PREFIX + k for k in KEYS)
CONTAINER_ANNOTATIONS = {k: CONTAINER_PREFIX + k for k in KEYS}
ENV_PREFIX = "VGPU_"
#: the bind mount the device plugin's Allocate gives every container it
#: gives vgpu devices, and vgpu-runtime takes out again.  runc refuses a
#: mount inside /proc (checkProcMount, libcontainer/rootfs_linux.go: "...
#: cannot be mounted because it is inside /proc"), so a container started
#: without vgpu-runtime (a pod without ``runtimeClassName: vgpu``) fails to
#: start with an error that names what it lacks, instead of running without
#: its slice while its devices count as used (docs/kubernetes.md, "Without
#: the RuntimeClass").  "vgpu.io" in the destination sends the config to
#: vgpu-runtime's slow path (container-hook/vgpu-runtime.c).
RUNTIME_GUARD_DEST = "/proc/vgpu.io-requires-runtimeClassName-vgpu"
#: its source: a file the device plugin writes at start, saying the same
RUNTIME_GUARD_SOURCE = "/run/vgpu/requires-runtimeClassName-vgpu"
#: vgpufs's mount point when the config names none (vgpud keeps its parent
#: 0700: docs/vgpufs.md); the hook, vgpuctl cdi and the DRA plugin default to it
FUSE_MOUNT = "/run/vgpu/private/fs"
#: the whole environment of every hook entry vgpu writes or ships: runc runs
#: an entry without "env" with an environment it does not choose (the
#: container's own at createContainer), and LD_PRELOAD, PYTHON* and the like
#: from there would act before any line of the hook runs
HOOK_ENV = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",)

#: the CRI annotations of a Kubernetes container: field -> (containerd's key, CRI-O's key)
CRI_KEYS = {
    "type": ("io.kubernetes.cri.container-type", "io.kubernetes.cri-o.ContainerType"),
    "sandbox": ("io.kubernetes.cri.sandbox-id", "io.kubernetes.cri-o.SandboxID"),
    "pod_name": ("io.kubernetes.cri.sandbox-name", "io.kubernetes.pod.name"),
    "pod_namespace": ("io.kubernetes.cri.sandbox-namespace", "io.kubernetes.pod.namespace"),
    "pod_uid": ("io.kubernetes.cri.sandbox-uid", "io.kubernetes.pod.uid"),
    "container_name": ("io.kubernetes.cri.container-name", "io.kubernetes.container.name"),
}
#: where CRI runtimes put the pod's uid (containerd's CRI, CRI-O)
POD_UID_KEYS = CRI_KEYS["pod_uid"]
#: the labels a slice gets, from the CRI fields (a pod's shared slice has no
#: container name); `vgpuctl list` and the metrics show them
LABELS = {"pod_name": "io.kubernetes.pod.name", "pod_namespace": "io.kubernetes.pod.namespace",
          "container_name": "io.kubernetes.container.name"}
LABEL_MAX = 253                 # vgpu.common.values' bound on a label value
#: the label of a slice made from the device plugin's per-container request
#: (a Kubernetes container with vgpu.io/container-*): the kubelet counts its
#: capacity already; vgpud's ``gpus`` sums every other slice's per GPU
#: (memory_outside, compute_outside) and the plugin withdraws that much
#: (docs/kubernetes.md, "One count").  Under containerd a pod cannot set
#: those annotations (pod_annotations lists only vgpu.io/<key>); under CRI-O,
#: which copies every pod annotation into its containers, it can, and its
#: slice is then counted as the kubelet's.
ALLOCATED_LABEL = "vgpu.io/allocated-by"
ALLOCATED_BY = "device-plugin"
POD_SLICE_PREFIX = "pod-"
SANDBOX_ID_MAX = 120            # "pod-" + id within a slice name's 127 bytes
_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
_UID_CHARS = frozenset("abcdefABCDEF0123456789-")


#: the pod's vgpu.io/<key> that apply to a container with a slice of its own
#: (vgpu.io/container-<key>, the device plugin's) too
POD_KEYS_FOR_OWN = ("profile", "rdma")
#: the annotation vgpu-runtime pins a container's RDMA plan in (vgpud's
#: ``plan``: the GPUs and the adapter's nodes config.json's device rules
#: were written for); always overwritten or removed by vgpu-runtime, since
#: a pod (CRI-O copies every pod annotation) or a ctr user may have written
#: one too.  The hook creates the slice on it and then checks that the
#: slice's nodes are exactly what config.json allows (rdma_device_problem):
#: a plan not written by vgpu-runtime gains no device.
PLAN_ANNOTATION = "vgpu.io/runtime-plan"
#: where RDMA nodes live, in the host and in the container
IB_DIR = "/dev/infiniband/"


class ScopeError(ValueError):
    """The annotations contradict themselves; the start fails with this."""


class Scope:
    """Which slice a container's request asks for.

    kind: "container" (its own slice), "pod" (its pod's, shared),
    "sandbox" (a pod's pause container: no slice; ``raw`` is the pod's
    request, which its poststop cleans up after) or "" (nothing asked).
    name: the slice's name; raw: the request's strings by key; names: the
    annotation or variable each came from; source: "annotation", "env" or
    ""; labels: for vgpud's ``create``; pod_uid: the pod's uid (pod scope)."""

    __slots__ = ("kind", "name", "raw", "names", "source", "labels", "pod_uid")

    def __init__(self, kind: str = "", name: str = "", raw: dict | None = None,
                 names: dict | None = None, source: str = "", labels: dict | None = None,
                 pod_uid: str | None = None):
        self.kind, self.name, self.raw, self.names = kind, name, raw or {}, names or {}
        self.source, self.labels, self.pod_uid = source, labels or {}, pod_uid

    def __repr__(self) -> str:
        return (f"Scope({self.kind!r}, {self.name!r}, {self.raw!r}, source={self.source!r}, "
                f"labels={self.labels!r}, pod_uid={self.pod_uid!r})")


def annotations_of(state: dict, config: dict) -> dict:
    """The container's annotations: the state's (runc passes config.json's
    on), else config.json's."""
    ann = state.get("annotations")
    if not isinstance(ann, dict) or not ann:
        ann = config.get("annotations")
    return ann if isinstance(ann, dict) else {}


def cri_fields(ann: dict) -> dict | None:
    """The CRI fields of a Kubernetes container (see CRI_KEYS), or None when
    it has no container type: not Kubernetes.

    One runtime's keys only, never a mix: CRI-O's when its container type
    is there, else containerd's.  CRI-O copies a pod's annotations into its
    containers' specs, the infra (pause) container's too, and sets its own
    ``io.kubernetes.cri-o.*`` over them, so under CRI-O a pod can write
    containerd's keys but not CRI-O's; containerd passes a pod only the
    ``vgpu.io`` keys its handler lists (pod_annotations), none of either
    runtime's.  Reading containerd's key first let a CRI-O pod make its
    pause container look like an app container."""
    crio = isinstance(ann.get(CRI_KEYS["type"][1]), str) and bool(ann[CRI_KEYS["type"][1]])
    out = {}
    for field, keys in CRI_KEYS.items():
        v = ann.get(keys[1] if crio else keys[0])
        if isinstance(v, str) and v:
            out[field] = v
    return out if "type" in out else None


def _pick(ann: dict, prefix: str) -> tuple[dict, dict]:
    raw, names = {}, {}
    for k in KEYS:
        v = ann.get(prefix + k)
        if v is not None:
            raw[k], names[k] = v, prefix + k
    return raw, names


def _env_request(config: dict) -> tuple[dict, dict]:
    proc = config.get("process")
    env = proc.get("env") if isinstance(proc, dict) else None
    raw, names = {}, {}
    if isinstance(env, list):
        by_name = {ENV_PREFIX + k.upper(): k for k in KEYS}
        for item in env:
            if isinstance(item, str) and item.startswith(ENV_PREFIX):
                name, _, v = item.partition("=")
                if name in by_name:
                    raw[by_name[name]] = v       # the last one wins, as in execve
                    names[by_name[name]] = name
    return raw, names


def _labels(cri: dict, *fields: str) -> dict:
    return {LABELS[f]: cri[f] for f in fields
            if isinstance(cri.get(f), str) and len(cri[f]) <= LABEL_MAX}


def pod_slice_name(sandbox: str) -> str:
    """The pod's slice: "pod-<sandbox id>" (a one-component name of vgpufs)."""
    if not sandbox or len(sandbox) > SANDBOX_ID_MAX or not set(sandbox) <= _ID_CHARS:
        raise ScopeError(f"the pod's sandbox id {sandbox!r} cannot name a slice (1 to "
                         f"{SANDBOX_ID_MAX} letters, digits, '.', '_' or '-')")
    return POD_SLICE_PREFIX + sandbox


def scope_of(state: dict, config: dict) -> Scope:
    """What the container asks for (see the module doc for the rule).
    ScopeError for annotations that contradict themselves."""
    cid = str(state.get("id", ""))
    ann = annotations_of(state, config)
    cri = cri_fields(ann)
    pod, pod_names = _pick(ann, ANNOTATION_PREFIX)
    own, own_names = _pick(ann, CONTAINER_PREFIX)
    if cri is None:
        # not Kubernetes: both spellings are the container's own request
        for k in own.keys() & pod.keys():
            if own[k] != pod[k]:
                raise ScopeError(f"{pod_names[k]} {pod[k]!r} and {own_names[k]} {own[k]!r} "
                                 f"disagree (outside Kubernetes both are this container's)")
        raw, names = {**pod, **own}, {**pod_names, **own_names}
        if raw:
            return Scope("container", cid, raw, names, "annotation")
        raw, names = _env_request(config)
        return Scope("container", cid, raw, names, "env") if raw else Scope()
    kind = cri["type"]
    if kind == "sandbox":
        return Scope("sandbox", pod_slice_name(cri.get("sandbox") or cid) if pod else "",
                     pod, pod_names, "annotation" if pod else "",
                     _labels(cri, "pod_name", "pod_namespace"), cri.get("pod_uid"))
    if kind != "container":
        raise ScopeError(f"unknown Kubernetes container type {kind!r} (sandbox or container)")
    if own:
        # The pod's vgpu.io/profile names the profile of what the kubelet
        # allocated (vgpud holds it to the namespace's allowed profiles,
        # Config.admit_pod), and its vgpu.io/rdma asks for the adapter
        # beside it (vgpud holds it to the profile's allow_rdma); its other
        # vgpu.io/<key> do not apply here.
        for k in POD_KEYS_FOR_OWN:
            if k in pod:                # in place of vgpu.io/container-<key>
                own, own_names = {**own, k: pod[k]}, {**own_names, k: pod_names[k]}
        return Scope("container", cid, own, own_names, "annotation",
                     {**_labels(cri, "pod_name", "pod_namespace", "container_name"),
                      ALLOCATED_LABEL: ALLOCATED_BY})
    if pod:
        if "sandbox" not in cri:
            raise ScopeError("the pod asks for a slice (vgpu.io/*) but the container names "
                             "no sandbox (io.kubernetes.cri.sandbox-id or "
                             "io.kubernetes.cri-o.SandboxID)")
        if "pod_uid" not in cri:
            raise ScopeError("the pod asks for a slice (vgpu.io/*) but the container names "
                             "no pod uid (io.kubernetes.cri.sandbox-uid or "
                             "io.kubernetes.pod.uid)")
        return Scope("pod", pod_slice_name(cri["sandbox"]), pod, pod_names, "annotation",
                     _labels(cri, "pod_name", "pod_namespace"), cri["pod_uid"])
    raw, names = _env_request(config)
    if raw:
        return Scope("container", cid, raw, names, "env",
                     _labels(cri, "pod_name", "pod_namespace", "container_name"))
    return Scope()


def hook_stages(sc: Scope) -> tuple[tuple[str, ...], bool]:
    """(the hook stages a bundle needs, whether it needs the vgpu device
    rule): a container with its own slice createRuntime + poststop; a
    container of a pod slice createRuntime only (its poststop would do
    nothing: the slice outlives it); a sandbox whose pod asked poststop
    only (it deletes the pod's slice; no device, no slice of its own)."""
    if not sc.raw:
        return (), False
    if sc.kind == "sandbox":
        return ("poststop",), False
    if sc.kind == "pod":
        return ("createRuntime",), True
    return ("createRuntime", "poststop"), True


def validate(raw: dict, source: str, names: dict | None = None) -> dict:
    """The request as create's args, each value checked by
    vgpu.common.values' parser (the API checks them again); raises
    ValueError("<name> <quoted>: <reason>"), values taken with blanks
    around them stripped.  ``names``: the annotation each key came from
    (Scope.names), else vgpu.io/<key> or VGPU_<KEY> by ``source``.  The
    hook validates every request; vgpu-runtime an RDMA request, on which
    it acts."""
    def memory(s: str) -> int:
        n = parse_size(s)
        if n == 0:
            raise BadValue(s, "is zero (give a memory quota above 0)")
        return n

    parsers = {"memory": memory, "compute": parse_compute, "priority": parse_priority,
               "policy": parse_policy, "profile": parse_profile, "gpus": parse_gpus,
               "rdma": parse_flag}

    def name(k):
        if names and k in names:
            return names[k]
        return ANNOTATION_PREFIX + k if source == "annotation" else ENV_PREFIX + k.upper()

    out = {}
    for k, v in raw.items():
        if not isinstance(v, str):
            raise ValueError(f"{name(k)} {quote(v)}: not a string")
        try:
            out[k] = parsers[k](v.strip())
        except BadValue as e:
            raise ValueError(f"{name(k)} {quote(v)}: {e.reason}") from None
    return out


# ------------------------------------------------------------ RDMA
def plan_annotation(gpus: list, hca: str, nodes) -> str:
    """PLAN_ANNOTATION's value: the GPUs (UUIDs) and the adapter's nodes
    ([name, major, minor]) vgpu-runtime wrote config.json's devices for."""
    return fastjson.dumps({"gpus": list(gpus),
                           "rdma": {"hca": hca, "nodes": [list(n) for n in nodes]}})


def parse_plan(text: object) -> dict:
    """PLAN_ANNOTATION's value checked: {"gpus": [UUID or index],
    "hca": name, "nodes": ((name, major, minor), ...)}; ValueError quoting
    what is wrong.  Only vgpu-runtime's value counts (it overwrites the
    key), and even a forged one gains nothing: the hook compares the slice
    vgpud made with config.json's rules, not with this."""
    try:
        d = fastjson.loads(text) if isinstance(text, str) and len(text) <= 4096 else None
    except ValueError:
        d = None
    rd = d.get("rdma") if isinstance(d, dict) else None
    gpus = d.get("gpus") if isinstance(d, dict) else None
    if not isinstance(rd, dict) or not isinstance(gpus, list) or not 1 <= len(gpus) <= 8 \
            or not all(isinstance(g, str) and 0 < len(g) <= 128 or
                       isinstance(g, int) and not isinstance(g, bool) and 0 <= g < 1024
                       for g in gpus) \
            or not hca_ok(rd.get("hca")) or not isinstance(rd.get("nodes"), list) \
            or not rd["nodes"] or not all(node_ok(n) for n in rd["nodes"]):
        shown = text if isinstance(text, str) and len(text) <= 200 else \
            (text[:200] + "..." if isinstance(text, str) else text)
        raise ValueError(f"{PLAN_ANNOTATION} {shown!r} is not vgpu-runtime's plan "
                         f"({{\"gpus\": [...], \"rdma\": {{\"hca\", \"nodes\"}}}})")
    return {"gpus": gpus, "hca": rd["hca"], "nodes": tuple((n[0], n[1], n[2]) for n in rd["nodes"])}


def _any(x) -> bool:
    """A device rule's major or minor that matches every number."""
    return x is None or x == -1


def rdma_device_problem(config: dict, nodes) -> str | None:
    """What in config.json would give the container an RDMA device other
    than ``nodes`` ((name, major, minor), its slice's adapter's nodes under
    /dev/infiniband), or keep one of them from it; None when the devices
    and device rules are exactly those.  vgpu-runtime checks it after its
    edits, the hook against the slice vgpud made:

    - each node is a linux.devices entry at /dev/infiniband/<name> with its
      numbers, and a rule allows exactly ``c major:minor`` read and write;
    - no other linux.devices entry lies under /dev/infiniband;
    - no rule allows reading or writing any other minor of a uverbs major
      (another adapter's uverbs shares it): no major-wide rule, no rule of
      type "a" or any major.  Every allow rule counts wherever it stands
      (runc's program takes the last match; a deny after it is not
      credited).  rdma_cm's major is the misc devices', shared with /dev/fuse
      and /dev/net/tun: only its own rule is looked for."""
    linux = config.get("linux") if isinstance(config.get("linux"), dict) else {}
    devs = linux.get("devices") if isinstance(linux.get("devices"), list) else []
    res = linux.get("resources") if isinstance(linux.get("resources"), dict) else {}
    rules = res.get("devices") if isinstance(res.get("devices"), list) else []
    want = {(IB_DIR + n, ma, mi) for n, ma, mi in nodes}
    numbers = {(ma, mi) for _, ma, mi in nodes}
    have = set()
    for d in devs:
        path = d.get("path") if isinstance(d, dict) else None
        if not isinstance(path, str) or not path.startswith(IB_DIR):
            continue
        got = (path, d.get("major"), d.get("minor"))
        if got not in want or d.get("type") != "c":
            return (f"linux.devices has {path} ({d.get('type')} {d.get('major')}:"
                    f"{d.get('minor')}), not one of its adapter's nodes")
        have.add(got)
    for p, ma, mi in sorted(want - have):
        return f"linux.devices lacks {p} (c {ma}:{mi})"
    uverbs_majors = {ma for n, ma, _ in nodes if n != "rdma_cm"}
    allowed = set()
    for r in rules:
        if not isinstance(r, dict) or r.get("allow") is not True:
            continue
        access = r.get("access", "rwm")
        if not isinstance(access, str) or not ("r" in access or "w" in access):
            continue
        t, ma, mi = r.get("type", "a"), r.get("major"), r.get("minor")
        if t not in ("a", "c"):
            continue
        if t == "c" and (ma, mi) in numbers:
            if "r" in access and "w" in access:
                allowed.add((ma, mi))
            continue
        if _any(ma) or ma in uverbs_majors:
            return (f"linux.resources.devices allows {t} {'*' if _any(ma) else ma}:"
                    f"{'*' if _any(mi) else mi} {access}: another adapter's uverbs node "
                    f"would open")
    for n, ma, mi in nodes:
        if (ma, mi) not in allowed:
            return f"linux.resources.devices has no rule allowing c {ma}:{mi} rw ({n})"
    return None


#: NVIDIA's character major (kernel-open/nvidia/nv.c, NV_MAJOR_DEVICE_NUMBER)
NVIDIA_MAJOR = 195
#: NVIDIA's container toolkit hooks that add the GPUs NVIDIA_VISIBLE_DEVICES
#: names when they run (the legacy prestart hook, under either name)
TOOLKIT_DEVICE_HOOKS = ("nvidia-container-runtime-hook", "nvidia-container-toolkit")
_VISIBLE_NONE = ("", "void", "none")


def real_gpu_access(config: dict, vgpu: int | None = None) -> str | None:
    """What in config.json would hand the container NVIDIA's own device
    nodes beside its slice, or None: a device node of NVIDIA's in
    linux.devices (a CDI device of NVIDIA's toolkit, another device
    plugin's DeviceSpec), a bind mount of one, or the toolkit's legacy hook
    with NVIDIA_VISIBLE_DEVICES naming GPUs (unset counts where the image
    sets CUDA_VERSION, as the toolkit reads a legacy CUDA image).  Through
    any of them the container reaches the real GPU past every quota, so a
    container that asks for a slice and has one is refused (vgpu-runtime,
    vgpu-oci-hook).  ``vgpu``: vgpu.ko's major (vgpu_major()): a slice's own
    nodes at /dev/nvidia* (the CDI flow's device nodes) are not NVIDIA's.
    Not seen here: what a runtime other than runc adds after config.json
    (nvidia-container-runtime as vgpu-runtime's runc)."""
    linux = config.get("linux")
    for d in (linux.get("devices") if isinstance(linux, dict) else None) or ():
        if not isinstance(d, dict):
            continue
        path, major = str(d.get("path", "")), d.get("major")
        if vgpu is not None and major == vgpu:
            continue
        if path.startswith("/dev/nvidia") or major == NVIDIA_MAJOR:
            return f"linux.devices has {path or 'major ' + str(NVIDIA_MAJOR)}, NVIDIA's own node"
    for m in config.get("mounts") or ():
        if isinstance(m, dict) and str(m.get("source", "")).startswith("/dev/nvidia"):
            return f"mounts bind {m.get('source')}, NVIDIA's own node"
    proc = config.get("process")
    env = {}
    for item in (proc.get("env") if isinstance(proc, dict) else None) or ():
        if isinstance(item, str):
            k, _, v = item.partition("=")
            env[k] = v
    visible = env.get("NVIDIA_VISIBLE_DEVICES")
    asks = visible.strip().lower() not in _VISIBLE_NONE if visible is not None else \
        "CUDA_VERSION" in env
    hooks = config.get("hooks")
    for stage, lst in (hooks.items() if isinstance(hooks, dict) else ()):
        for h in lst if isinstance(lst, list) else ():
            name = os.path.basename(str(h.get("path", ""))) if isinstance(h, dict) else ""
            if name in TOOLKIT_DEVICE_HOOKS and asks:
                what = f"NVIDIA_VISIBLE_DEVICES={visible}" if visible is not None else \
                    "CUDA_VERSION set, NVIDIA_VISIBLE_DEVICES unset"
                return f"NVIDIA's {name} runs at {stage} with {what}"
    return None


def real_gpu_refusal(config: dict, vgpu: int | None = None) -> str | None:
    """The one-line refusal of a slice beside NVIDIA's own nodes
    (real_gpu_access), or None; vgpu-runtime and the hook both say it."""
    why = real_gpu_access(config, vgpu)
    return None if why is None else (
        f"asks for a vgpu slice but would reach the real GPU past its quotas: {why}; drop "
        f"one (NVIDIA_VISIBLE_DEVICES=void, or no NVIDIA device request)")


def is_pod_cgroup(name: str, uid: str) -> bool:
    """Whether the cgroup directory ``name`` (one component) is the pod
    ``uid``'s as the kubelet names it: ``pod<uid>`` (cgroupfs driver) or
    ``kubepods[-<qos>]-pod<uid, '-' as '_'>.slice`` (systemd driver)."""
    if not uid or not set(uid) <= _UID_CHARS:
        return False
    if name == "pod" + uid:
        return True
    tail = "-pod" + uid.replace("-", "_") + ".slice"
    return name.startswith("kubepods") and name.endswith(tail) and \
        name[:-len(tail)] in ("kubepods", "kubepods-burstable", "kubepods-besteffort")


def raw_request(state: dict, config: dict) -> tuple[dict, str]:
    """The request's raw strings by key, and where they came from
    ("annotation" or "env"); ({}, "") when the container asked for nothing
    of its own (a sandbox never does).  Annotations win over the
    environment as a whole: a container with any vgpu.io/ request ignores
    VGPU_*."""
    sc = scope_of(state, config)
    return ({}, "") if sc.kind == "sandbox" else (sc.raw, sc.source)


def wants_slice(state: dict, config: dict) -> bool:
    """Whether the bundle carries a request at all (annotations or the
    image's VGPU_*); honoured_scope() says whether it counts."""
    return bool(raw_request(state, config)[0])


def image_env_allowed(raw: dict, cid: str, socket: str | None, timeout: float,
                      debug, prog: str) -> bool:
    """Whether vgpud's config lets the image's environment make this request.
    The image is not the operator: its VGPU_* counts only when it names, with
    VGPU_PROFILE, a profile whose config says ``allow_image_env = true``
    (vgpud's ``status`` lists them as ``image_env_profiles``; vgpud checks
    it again on ``create``).  Anything else is no, a vgpud that cannot be
    asked included (one warning line): the request is ignored."""
    profile = raw.get("profile")
    if not isinstance(profile, str) or not profile.strip():
        debug(f"container {cid}: the image's VGPU_* environment is ignored (it names no "
              f"VGPU_PROFILE that allows requests from the image)")
        return False
    profile = profile.strip()
    try:
        with ac.ApiClient(socket, timeout) as client:
            allowed = client.request("status").get("image_env_profiles")
    except ac.ClientError as e:
        sys.stderr.write(f"{prog}: container {cid}: warning: the image's VGPU_* environment "
                         f"is ignored: cannot ask vgpud whether profile {profile!r} allows "
                         f"it: {e}\n")
        return False
    if not isinstance(allowed, list) or profile not in allowed:
        debug(f"container {cid}: the image's VGPU_* environment is ignored (profile "
              f"{profile!r} does not allow requests from the image)")
        return False
    return True


def honoured_scope(state: dict, config: dict, socket: str | None, timeout: float,
                   debug, prog: str) -> Scope:
    """scope_of(), less an image environment vgpud's config does not allow
    (see image_env_allowed): Scope() for a container that asked for nothing
    that counts."""
    sc = scope_of(state, config)
    if sc.source == "env" and not image_env_allowed(sc.raw, str(state.get("id", "")), socket,
                                                    timeout, debug, prog):
        return Scope()
    return sc


def vgpu_major() -> int | None:
    """vgpu.ko's character major, from /proc/devices (None: not loaded)."""
    try:
        with open("/proc/devices") as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2 and parts[1] == "vgpu" and parts[0].isdigit():
                    return int(parts[0])
    except OSError:
        pass
    return None


#: the directory holding the vgpu package this module was loaded from
#: (vgpu/common/request.py -> its grandparent's parent): hook_argv() puts it on sys.path
PKG_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def hook_argv(*args: str) -> list[str]:
    """This Python running vgpu.cli.hook isolated: -I ignores every PYTHON*
    variable and keeps the user site and the working directory off sys.path
    (a hook may be started in the rootfs with the image's environment), -S
    skips the site import (~30 ms less per run in a venv).  Neither leaves a
    way to find the package, so the code names PKG_PARENT itself."""
    boot = (f"import sys; sys.path.insert(0, {PKG_PARENT!r}); "
            f"from vgpu.cli.hook import main; sys.exit(main())")
    return [sys.executable or "/usr/bin/python3", "-I", "-S", "-c", boot, *args]
