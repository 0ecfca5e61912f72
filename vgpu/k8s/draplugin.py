"""vgpu-dra-plugin: the kubelet side of Dynamic Resource Allocation for vgpu
(docs/kubernetes.md, "Dynamic Resource Allocation").

The kubelet finds the plugin's registration socket in its plugin registry
(``<registry>/gpu.vgpu.io-reg.sock``: pluginregistration.Registration,
GetInfo answering type "DRAPlugin", the driver's name, the service socket
and "v1.DRAPlugin", "v1beta1.DRAPlugin") and then calls the DRAPlugin
service, in whichever version it speaks, on ``<plugins>/gpu.vgpu.io/dra.sock``:

- NodePrepareResources: for each claim, its allocation as the API server
  has it (``ClaimSource``: the ResourceClaim by namespace and name, its UID
  checked against the kubelet's), and for each device result of this
  driver a slice on that GPU with the consumed memory and compute (a
  ``burst`` floor where above 0), made through vgpud as the claim's
  (owner ``{"runtime": "vgpu-dra-plugin", "pod": <claim uid>}``: the same
  call again gets the same slice back), and a CDI spec naming the slice's
  nodes (vgpu.common.cdi, the node issue's generator), written to the CDI
  directory; the answer is the CDI device ``vgpu.io/slice=<slice>``.  A
  failure leaves nothing this call made.
- NodeUnprepareResources: the claim's slices deleted (as their owner) and
  their CDI specs removed; a claim with none is done already.

Nothing is kept in the plugin: what a claim was prepared into is vgpud's
slices, labelled with the claim, so a restarted plugin (or kubelet) finds
them where they were.

The node's ResourceSlice (vgpu.k8s.dra) is kept on the API server by
SlicePublisher: created, replaced with the pool's generation one higher
when vgpud's GPUs change (a fault included), owned by the Node.

The spec's hook attaches the slice to the pod's cgroup (``--attach-pod``),
so the containers of a pod share their claim's slice; a claim shared by
another pod too is refused at that pod's start while the first one runs
(vgpud's attach: one cgroup at a time).  vgpud runs the plugin with
``[kubernetes] dra_plugin = true``.

Admin access (a result with ``adminAccess``: a monitoring claim, which
Kubernetes admits only in namespaces labelled
``resource.kubernetes.io/admin-access: "true"``) is refused unless vgpud
runs the plugin with ``--admin-access`` (``[kubernetes]
dra_admin_access = true``); then it gets the GPU itself, unmediated: the
driver's own /dev/nvidiactl and /dev/nvidia<minor>, no nvidia-uvm (NVML
works, CUDA does not initialise), in a CDI spec of kind ``vgpu.io/gpu``.
That is root-equivalent over the GPU's memory (raw RM calls allocate
outside every slice's quota): docs/kubernetes.md says so.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import signal
import ssl
import tempfile
import threading
import urllib.parse
import urllib.request
from concurrent import futures
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Protocol

import grpc

from vgpu import __version__
from vgpu.common import apiclient as ac
from vgpu.common import driverfiles
from vgpu.common.cdi import ADMIN_CDI_KIND, CDI_HOOK, CDI_KIND, admin_cdi_spec, cdi_spec
from vgpu.common.driverfiles import DriverFiles
from vgpu.common.rdma import HANDLES_MAX, OBJECTS_MAX
from vgpu.common.topology import numa_node, pcie_root
from vgpu.common.files import atomic_write
from vgpu.common.request import FUSE_MOUNT
from vgpu.k8s import dra
from vgpu.k8s.server import Api

log = logging.getLogger("vgpu-dra-plugin")

HERE = Path(__file__).parent
#: the DRAPlugin versions served (the registration's names of them); the
#: API is the same in both, only its package differs: dra_v1.proto is its
#: one text, and v1beta1's is made from it (dra_proto)
VERSIONS = ("v1", "v1beta1")
DRA_PROTO = HERE / "dra_v1.proto"
REGISTRATION_PROTO = HERE / "pluginregistration_v1.proto"
PLUGIN_TYPE = "DRAPlugin"
REGISTRY_DIR = "/var/lib/kubelet/plugins_registry"
PLUGINS_DIR = "/var/lib/kubelet/plugins"
CDI_DIR = "/var/run/cdi"
OWNER_RUNTIME = "vgpu-dra-plugin"
#: the slice's labels that name its claim
LABEL_CLAIM_UID = "resource.kubernetes.io/claim-uid"
LABEL_CLAIM_NS = "resource.kubernetes.io/claim-namespace"
LABEL_CLAIM_NAME = "resource.kubernetes.io/claim-name"
_UID_RE = re.compile(r"[0-9a-fA-F-]{1,64}\Z")
_DEVICE_RE = re.compile(r"gpu-(\d{1,3})\Z")


class PrepareError(Exception):
    """A claim that cannot be prepared; the message goes to the kubelet
    (the pod's events)."""


# ------------------------------------------------------------ the claim
_SUFFIX = {"": 1, "k": 10 ** 3, "M": 10 ** 6, "G": 10 ** 9, "T": 10 ** 12, "P": 10 ** 15,
           "E": 10 ** 18, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40,
           "Pi": 1 << 50, "Ei": 1 << 60, "m": Decimal("0.001")}
_QUANTITY = re.compile(r"([+]?[0-9]+(?:\.[0-9]*)?|[+]?\.[0-9]+)([kMGTPE]i?|m)?\Z")


def quantity(q: Any) -> Decimal:
    """A Kubernetes Quantity's value ("4Gi", "30", "1500m", "1e9" is not
    taken: the API server writes the canonical forms); ValueError quoting
    anything else."""
    m = _QUANTITY.match(q) if isinstance(q, str) else None
    if not m:
        raise ValueError(f"{q!r} is not a quantity")
    try:
        return Decimal(m.group(1)) * _SUFFIX[m.group(2) or ""]
    except InvalidOperation:
        raise ValueError(f"{q!r} is not a quantity") from None


@dataclass(frozen=True)
class Allocation:
    """One device result of a claim, for this driver on this node."""
    request: str
    pool: str
    device: str
    gpu: int
    memory: int            # bytes
    compute: int           # percent
    admin: bool = False    # admin access: the GPU itself, no slice
    rdma: Any = None       # the slice's RDMA (SliceParameters' rdma): True or a dict


#: the opaque parameters a claim (or its class) may give vgpu's devices:
#: {"apiVersion": PARAMS_API, "kind": PARAMS_KIND, "rdma": true | {"handles"?,
#: "objects"?}} (docs/kubernetes.md, "Parameters")
PARAMS_API = "gpu.vgpu.io/v1alpha1"
PARAMS_KIND = "SliceParameters"
_RDMA_LIMITS = {"handles": HANDLES_MAX, "objects": OBJECTS_MAX}


def slice_parameters(claim: dict, request: str, driver: str = dra.DRIVER) -> dict:
    """The merged opaque configuration of ``driver`` that applies to the
    result of ``request`` (the allocation's config: the class's first,
    then the claim's, later keys over earlier); PrepareError for anything
    but SliceParameters."""
    configs = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}) \
        .get("config") or []
    main = request.split("/", 1)[0]
    out: dict[str, Any] = {}
    for c in configs if isinstance(configs, list) else []:
        if not isinstance(c, dict):
            continue
        op = c.get("opaque")
        if not isinstance(op, dict) or op.get("driver") != driver:
            continue
        reqs = c.get("requests") or []
        if reqs and request not in reqs and main not in reqs:
            continue
        p = op.get("parameters")
        if not isinstance(p, dict) or (p.get("apiVersion"), p.get("kind")) != (PARAMS_API,
                                                                              PARAMS_KIND):
            raise PrepareError(f"request {request!r}: the {driver} parameters are not "
                               f"apiVersion {PARAMS_API}, kind {PARAMS_KIND}")
        extra = set(p) - {"apiVersion", "kind", "rdma"}
        if extra:
            raise PrepareError(f"request {request!r}: {PARAMS_KIND} has no "
                               f"{', '.join(sorted(extra))} (known: rdma)")
        if "rdma" in p:
            out["rdma"] = _rdma_param(request, p["rdma"])
    return out


def _rdma_param(request: str, v: Any) -> Any:
    """SliceParameters' rdma as create's: None (false: none), True (true, or
    {}: [rdma]'s limits) or the limits asked."""
    if v is True or v is False:
        return v or None
    if not isinstance(v, dict) or set(v) - set(_RDMA_LIMITS):
        raise PrepareError(f"request {request!r}: rdma {v!r} is not true, false or "
                           f"{{handles, objects}}")
    for k, top in _RDMA_LIMITS.items():
        x = v.get(k, 1)
        if isinstance(x, bool) or not isinstance(x, int) or not 1 <= x <= top:
            raise PrepareError(f"request {request!r}: rdma.{k} {x!r} is not a whole number "
                               f"from 1 to {top}")
    return dict(v) or True


def allocations(claim: dict, uid: str, node: str, driver: str = dra.DRIVER,
                admin_access: bool = False) -> list[Allocation]:
    """The claim's device results of ``driver``, checked: the claim is the
    one the kubelet named (its UID), each result is in this node's pool, on
    a device vgpu publishes, with the memory and compute it consumed
    (consumable capacity: without it the scheduler gave the whole device,
    which vgpu does not hand out unenforced), or with admin access where
    ``admin_access`` allows it (it consumes nothing).  PrepareError saying
    what is wrong."""
    meta = claim.get("metadata") or {}
    if meta.get("uid") != uid:
        raise PrepareError(f"the API server's claim {meta.get('namespace')}/{meta.get('name')} "
                           f"has uid {meta.get('uid')!r}, the kubelet asked for {uid!r} (a "
                           f"claim of that name made again?)")
    results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}) \
        .get("results") or []
    out = []
    for r in results:
        if not isinstance(r, dict) or r.get("driver") != driver:
            continue
        what = f"device {r.get('pool')}/{r.get('device')} (request {r.get('request')!r})"
        if r.get("pool") != node:
            raise PrepareError(f"{what}: not in this node's pool {node!r}")
        m = _DEVICE_RE.match(str(r.get("device")))
        if not m:
            raise PrepareError(f"{what}: not a device {driver} publishes (gpu-<index>)")
        if r.get("adminAccess") is True:
            if not admin_access:
                raise PrepareError(f"{what}: admin access is off on this node (vgpud's "
                                   f"[kubernetes] dra_admin_access = false): it would hand "
                                   f"out the GPU itself, outside every slice")
            if not _asked_admin(claim, r.get("request")):
                # the result is status, the request is spec: the API server
                # admits a request with admin access only in a namespace
                # labelled for it, at creation (spec is immutable after);
                # a result claiming it for a request that did not ask is
                # not the scheduler's
                raise PrepareError(f"{what}: admin access in the allocation, but the claim's "
                                   f"request {r.get('request')!r} does not ask for it")
            out.append(Allocation(str(r.get("request", "")), node, r["device"],
                                  int(m.group(1)), 0, 0, admin=True))
            continue
        if r.get("adminAccess") not in (None, False):
            raise PrepareError(f"{what}: adminAccess {r.get('adminAccess')!r} is not a boolean")
        cap = r.get("consumedCapacity")
        if not isinstance(cap, dict) or dra.MEMORY not in cap:
            raise PrepareError(f"{what}: the allocation consumed no memory capacity: the "
                               f"cluster needs the DRAConsumableCapacity feature gate "
                               f"(without it the whole GPU would be handed out unenforced)")
        try:
            mem = quantity(cap[dra.MEMORY])
            comp = quantity(cap.get(dra.COMPUTE, "0"))
        except ValueError as e:
            raise PrepareError(f"{what}: consumed capacity: {e}") from None
        if mem != int(mem) or mem <= 0 or comp != int(comp) or not 0 <= comp <= 100:
            raise PrepareError(f"{what}: consumed capacity memory {cap.get(dra.MEMORY)!r}, "
                               f"compute {cap.get(dra.COMPUTE)!r} is not a slice (whole bytes "
                               f"above 0, 0 to 100 percent)")
        rq = str(r.get("request", ""))
        out.append(Allocation(rq, node, r["device"], int(m.group(1)), int(mem), int(comp),
                              rdma=slice_parameters(claim, rq, driver).get("rdma")))
    if not out:
        raise PrepareError(f"the claim has no device of {driver} allocated")
    return out


def _asked_admin(claim: dict, request: Any) -> bool:
    """Whether the claim's spec has a request named ``request`` asking
    for admin access (``exactly.adminAccess``; a sub-request of
    ``firstAvailable`` cannot)."""
    reqs = (((claim.get("spec") or {}).get("devices") or {}).get("requests")) or []
    for q in reqs if isinstance(reqs, list) else []:
        if isinstance(q, dict) and q.get("name") == request:
            return ((q.get("exactly") or {}).get("adminAccess") is True)
    return False


class ClaimSource(Protocol):
    def get(self, namespace: str, name: str) -> dict: ...


class ApiServerError(Exception):
    """The API server's answer to one request: ``status`` (the HTTP code;
    0 when it could not be reached) and what it said."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class ApiServer:
    """A Kubernetes API server, JSON in and out: in-cluster by default (the
    pod's service account's token and CA), or at ``url`` (plain http: tests
    only; no token is sent then)."""

    SA = Path("/var/run/secrets/kubernetes.io/serviceaccount")

    def __init__(self, url: str | None = None, timeout: float = 10.0):
        self.timeout = timeout
        self.ctx = None
        self.token = None
        if url is None:
            host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), \
                os.environ.get("KUBERNETES_SERVICE_PORT", "443")
            if not host:
                raise ApiServerError(0, "not in a cluster (no KUBERNETES_SERVICE_HOST) and no "
                                        "--api-server given")
            url = f"https://{host}:{port}"
        self.url = url.rstrip("/")
        if self.url.startswith("https:"):
            self.ctx = ssl.create_default_context(cafile=str(self.SA / "ca.crt"))
            self.token = (self.SA / "token").read_text().strip()

    def request(self, method: str, path: str, body: dict | None = None) -> dict:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Accept": "application/json"})
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout, context=self.ctx) as r:
                return json.loads(r.read(4 << 20) or b"{}")
        except urllib.error.HTTPError as e:
            try:
                msg = json.loads(e.read(1 << 16)).get("message") or e.reason
            except (ValueError, AttributeError, OSError):
                msg = e.reason
            raise ApiServerError(e.code, f"{method} {path}: {e.code} {msg}") from None
        except (OSError, ValueError) as e:
            raise ApiServerError(0, f"{method} {path}: {e}") from None


def _q(s: str) -> str:
    return urllib.parse.quote(s, safe="")


class ApiServerClaims:
    """ResourceClaims from the API server (resource.k8s.io/v1)."""

    def __init__(self, api: ApiServer | str | None = None):
        self.api = api if isinstance(api, ApiServer) else ApiServer(api)

    def get(self, namespace: str, name: str) -> dict:
        try:
            return self.api.request("GET", f"/apis/resource.k8s.io/v1/namespaces/{_q(namespace)}"
                                           f"/resourceclaims/{_q(name)}")
        except ApiServerError as e:
            if e.status:
                raise PrepareError(f"the API server answered {e.status} for claim "
                                   f"{namespace}/{name}") from None
            raise PrepareError(f"cannot read claim {namespace}/{name} from the API "
                               f"server: {e}") from None


class SlicePublisher:
    """The node's ResourceSlice (vgpu.k8s.dra.resource_slice, from vgpud's
    answers) kept on the API server: created when missing, replaced when
    what vgpud says changed (the pool's generation one higher: the
    scheduler then drops what it knew of the older one), left alone
    otherwise; owned by the Node object, so that it goes with the node.
    ``publish_once`` is one round; ``run`` repeats it every ``interval``
    seconds until ``stop``."""

    RESOURCE = "/apis/resource.k8s.io/v1/resourceslices"

    def __init__(self, api: ApiServer, node: str, socket: str | None = None,
                 interval: float = 10.0, timeout: float = 10.0, sysfs: str = "/sys"):
        self.api, self.node, self.socket = api, node, socket
        self.interval, self.timeout, self.sysfs = interval, timeout, sysfs
        self.published: dict | None = None      # the spec (less the generation) last written
        self.stopping = threading.Event()

    def wanted(self) -> dict:
        with ac.ApiClient(self.socket, self.timeout) as c:
            status, gpus = c.request("status"), c.request("gpus")
        return dra.resource_slice(self.node, status, gpus,
                                  numa_of=lambda pci: numa_node(pci, self.sysfs),
                                  pcie_root_of=lambda pci: pcie_root(pci, self.sysfs))

    def publish_once(self) -> str:
        """One round: "created", "updated" or "unchanged"; raises
        ApiServerError or vgpu.common.apiclient.ClientError."""
        obj = self.wanted()
        name = obj["metadata"]["name"]
        spec = {k: v for k, v in obj["spec"].items() if k != "pool"}
        try:
            cur = self.api.request("GET", f"{self.RESOURCE}/{_q(name)}")
        except ApiServerError as e:
            if e.status != 404:
                raise
            cur = None
        if cur is not None:
            cur_spec = {k: v for k, v in (cur.get("spec") or {}).items() if k != "pool"}
            if cur_spec == spec:
                self.published = spec
                return "unchanged"
            gen = int(((cur.get("spec") or {}).get("pool") or {}).get("generation") or 0) + 1
            obj["spec"]["pool"]["generation"] = gen
            obj["metadata"] = {**obj["metadata"],
                               "resourceVersion": (cur.get("metadata") or {}).get(
                                   "resourceVersion", "")}
            obj["metadata"]["ownerReferences"] = (cur.get("metadata") or {}).get(
                "ownerReferences") or self.owner()
            self.api.request("PUT", f"{self.RESOURCE}/{_q(name)}", obj)
            what = "updated"
        else:
            obj["metadata"]["ownerReferences"] = self.owner()
            self.api.request("POST", self.RESOURCE, obj)
            what = "created"
        self.published = spec
        log.info("ResourceSlice %s %s: %d GPU(s), pool generation %d", name, what,
                 len(obj["spec"]["devices"]), obj["spec"]["pool"]["generation"])
        return what

    def owner(self) -> list[dict]:
        node = self.api.request("GET", f"/api/v1/nodes/{_q(self.node)}")
        uid = (node.get("metadata") or {}).get("uid")
        if not uid:
            raise ApiServerError(0, f"node {self.node} has no uid")
        return [{"apiVersion": "v1", "kind": "Node", "name": self.node, "uid": uid,
                 "controller": True}]

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                self.publish_once()
            except (ApiServerError, ac.ClientError, ValueError) as e:
                log.warning("ResourceSlice of %s not published: %s (again in %g s)",
                            self.node, e, self.interval)
            self.stopping.wait(self.interval)

    def stop(self) -> None:
        self.stopping.set()


# ------------------------------------------------------------ prepare
def check_uid(uid: str) -> None:
    """The kubelet's claim UID, before it names a slice or a file."""
    if not _UID_RE.match(uid or ""):
        raise PrepareError(f"claim uid {uid!r} is not a UID")


def slice_name(uid: str, i: int) -> str:
    return f"claim-{uid}-{i}"


def admin_name(uid: str, i: int) -> str:
    """The CDI device of a claim's ``i``-th result with admin access."""
    return f"admin-{uid}-{i}"


class Preparer:
    """Claims into slices and back, through vgpud (``socket``), writing the
    CDI specs to ``cdi_dir``."""

    def __init__(self, node: str, claims: ClaimSource, socket: str | None = None,
                 cdi_dir: str | os.PathLike = CDI_DIR, fuse_mount: str = FUSE_MOUNT,
                 timeout: float = 10.0, admin_access: bool = False, dev_dir: str = "/dev",
                 driver: DriverFiles | None = None, hook: str = CDI_HOOK):
        self.node, self.claims, self.socket = node, claims, socket
        self.driver, self.hook = driver, hook      # the driver files the specs bring
        self.admin_access = admin_access
        self.dev_dir = dev_dir             # where the driver's own nodes are (admin access)
        self.cdi_dir = Path(cdi_dir)
        self.fuse_mount = fuse_mount
        self.timeout = timeout
        self.lock = threading.Lock()        # one claim at a time: vgpud serialises anyway

    def owner(self, uid: str) -> dict:
        return {"runtime": OWNER_RUNTIME, "pod": uid}

    def spec_path(self, name: str) -> Path:
        return self.cdi_dir / f"vgpu-{name}.json"

    def _write_spec(self, name: str, spec: dict) -> None:
        self.cdi_dir.mkdir(parents=True, exist_ok=True)
        atomic_write(self.spec_path(name), json.dumps(spec, indent=1) + "\n", mode=0o644)

    def _admin(self, client, a: Allocation, name: str) -> str:
        """An admin-access result: the CDI spec of the GPU's own nodes
        (its minor as vgpud knows it); no slice, nothing consumed."""
        try:
            gpus = client.request("gpus").get("gpus") or []
        except ac.ClientError as e:
            raise PrepareError(f"{a.device}: vgpud: {e}") from None
        g = next((g for g in gpus if g.get("index") == a.gpu), None)
        minor = g.get("minor") if g else None
        if isinstance(minor, bool) or not isinstance(minor, int) or not 0 <= minor < 255:
            raise PrepareError(f"{a.device}: vgpud has no GPU {a.gpu} with a device minor")
        self._write_spec(name, admin_cdi_spec(name, minor, self.dev_dir, self.driver,
                                              self.hook))
        return f"{ADMIN_CDI_KIND}={name}"

    def prepare(self, namespace: str, name: str, uid: str) -> list[tuple[Allocation, str]]:
        """(allocation, CDI device) of each device result; PrepareError."""
        check_uid(uid)
        allocs = allocations(self.claims.get(namespace, name), uid, self.node,
                             admin_access=self.admin_access)
        made: list[str] = []
        out = []
        with self.lock, ac.ApiClient(self.socket, self.timeout) as client:
            try:
                for i, a in enumerate(allocs):
                    if a.admin:
                        aname = admin_name(uid, i)
                        made.append(aname)          # a spec only: _delete removes it
                        out.append((a, self._admin(client, a, aname)))
                        continue
                    sname = slice_name(uid, i)
                    args: dict[str, Any] = {
                        "container": sname, "owner": self.owner(uid), "gpus": [a.gpu],
                        "memory": a.memory,
                        "labels": {LABEL_CLAIM_UID: uid, LABEL_CLAIM_NS: namespace,
                                   # a label value has at most 63 bytes; a
                                   # claim's name may have 253
                                   **({LABEL_CLAIM_NAME: name} if len(name) <= 63 else {})}}
                    if a.compute > 0:
                        args.update(compute=a.compute, policy="burst")
                    if a.rdma is not None:
                        args["rdma"] = a.rdma       # the closest adapter, its limits
                    try:
                        res = client.request("create", **args)
                    except ac.ApiError as e:
                        raise PrepareError(f"{a.device}: vgpud: {e.message}") from None
                    if not res.get("reused"):
                        made.append(sname)
                    self._write_spec(sname, cdi_spec([res["slice"]], self.fuse_mount,
                                                     self.hook, self.socket, self.driver,
                                                     attach_pod=True))
                    out.append((a, f"{CDI_KIND}={sname}"))
            except BaseException:
                for sname in made:
                    self._delete(client, sname, uid)
                raise
        return out

    def unprepare(self, uid: str) -> None:
        """Delete the claim's slices and their CDI specs; PrepareError."""
        check_uid(uid)          # it names files: a glob of the CDI directory
        with self.lock, ac.ApiClient(self.socket, self.timeout) as client:
            try:
                slices = client.request("list").get("slices") or []
            except ac.ClientError as e:
                raise PrepareError(f"vgpud: {e}") from None
            for s in slices:
                if (s.get("labels") or {}).get(LABEL_CLAIM_UID) == uid:
                    self._delete(client, s["container"], uid, strict=True)
            for prefix in ("claim", "admin"):
                for p in self.cdi_dir.glob(f"vgpu-{prefix}-{uid}-*.json"):
                    p.unlink(missing_ok=True)

    def _delete(self, client, sname: str, uid: str, strict: bool = False) -> None:
        if sname.startswith("admin-"):        # admin access made no slice
            self.spec_path(sname).unlink(missing_ok=True)
            return
        try:
            client.request("delete", container=sname, force=True, owner=self.owner(uid))
        except ac.ApiError as e:
            if e.code != "not-found" and strict:
                raise PrepareError(f"slice {sname}: vgpud: {e.message}") from None
        except ac.ClientError as e:
            if strict:
                raise PrepareError(f"slice {sname}: vgpud: {e}") from None
        self.spec_path(sname).unlink(missing_ok=True)


# ------------------------------------------------------------ gRPC
def dra_proto(version: str, directory: Path) -> Path:
    """The DRA API's .proto for ``version`` ("v1", "v1beta1") in
    ``directory``: dra_v1.proto with its package's last part replaced."""
    text = DRA_PROTO.read_text()
    old = "package k8s.io.kubelet.pkg.apis.dra.v1;"
    if old not in text:
        raise RuntimeError(f"{DRA_PROTO} names no package {old!r}")
    out = Path(directory) / f"dra_{version}.proto"
    out.write_text(text.replace(old, f"package k8s.io.kubelet.pkg.apis.dra.{version};"))
    return out


class DraServices:
    """The DRAPlugin service in every version of VERSIONS, and the
    registration, over one Preparer."""

    def __init__(self, preparer: Preparer, driver: str = dra.DRIVER):
        self.preparer = preparer
        self.driver = driver
        self.apis = {}
        for v in VERSIONS:
            with tempfile.TemporaryDirectory(prefix="vgpu-dra-") as d:
                self.apis[f"{v}.DRAPlugin"] = Api(dra_proto(v, Path(d)))
        self.reg = Api(REGISTRATION_PROTO)
        self.registered = threading.Event()

    def _prepare(self, api: Api, req):
        out = {}
        for c in req.claims:
            try:
                devs = [api.msg["Device"](request_names=[a.request] if a.request else [],
                                          pool_name=a.pool, device_name=a.device,
                                          cdi_device_ids=[cdi])
                        for a, cdi in self.preparer.prepare(c.namespace, c.name, c.uid)]
                out[c.uid] = api.msg["NodePrepareResourceResponse"](devices=devs)
                log.info("claim %s/%s (%s) prepared: %s", c.namespace, c.name, c.uid,
                         ", ".join(d.cdi_device_ids[0] for d in devs))
            except PrepareError as e:
                log.warning("claim %s/%s (%s): %s", c.namespace, c.name, c.uid, e)
                out[c.uid] = api.msg["NodePrepareResourceResponse"](error=str(e))
        return api.msg["NodePrepareResourcesResponse"](claims=out)

    def _unprepare(self, api: Api, req):
        out = {}
        for c in req.claims:
            try:
                self.preparer.unprepare(c.uid)
                out[c.uid] = api.msg["NodeUnprepareResourceResponse"]()
                log.info("claim %s/%s (%s) unprepared", c.namespace, c.name, c.uid)
            except PrepareError as e:
                log.warning("claim %s/%s (%s): %s", c.namespace, c.name, c.uid, e)
                out[c.uid] = api.msg["NodeUnprepareResourceResponse"](error=str(e))
        return api.msg["NodeUnprepareResourcesResponse"](claims=out)

    def handlers(self) -> list:
        hs = []
        for svc, api in self.apis.items():
            methods = {
                "NodePrepareResources": lambda req, ctx, api=api: self._prepare(api, req),
                "NodeUnprepareResources": lambda req, ctx, api=api: self._unprepare(api, req),
            }
            hs.append(grpc.method_handlers_generic_handler(
                f"{api.package}.DRAPlugin",
                {name: grpc.unary_unary_rpc_method_handler(
                    methods[name], request_deserializer=inp.FromString,
                    response_serializer=outp.SerializeToString)
                 for name, inp, outp, _ in api.services["DRAPlugin"]}))
        return hs

    def registration_handler(self, endpoint: str):
        r = self.reg

        def get_info(req, ctx):
            return r.msg["PluginInfo"](type=PLUGIN_TYPE, name=self.driver, endpoint=endpoint,
                                       supported_versions=[f"{v}.DRAPlugin" for v in VERSIONS])

        def notify(req, ctx):
            if req.plugin_registered:
                log.info("registered with the kubelet as %s", self.driver)
                self.registered.set()
            else:
                log.error("the kubelet refused the registration: %s", req.error)
            return r.msg["RegistrationStatusResponse"]()
        methods = {"GetInfo": get_info, "NotifyRegistrationStatus": notify}
        return grpc.method_handlers_generic_handler(
            f"{r.package}.Registration",
            {name: grpc.unary_unary_rpc_method_handler(
                methods[name], request_deserializer=inp.FromString,
                response_serializer=outp.SerializeToString)
             for name, inp, outp, _ in r.services["Registration"]})


def serve(services: DraServices, plugin_dir: str | os.PathLike,
          registry_dir: str | os.PathLike) -> tuple[grpc.Server, grpc.Server]:
    """Start the DRA service on ``<plugin_dir>/dra.sock`` and the
    registration on ``<registry_dir>/<driver>-reg.sock`` (the service
    first: the kubelet calls it once it sees the registration socket).
    Stale sockets of an earlier run are replaced."""
    plugin_dir, registry_dir = Path(plugin_dir), Path(registry_dir)
    plugin_dir.mkdir(parents=True, exist_ok=True)
    registry_dir.mkdir(parents=True, exist_ok=True)
    dra_sock = plugin_dir / "dra.sock"
    reg_sock = registry_dir / f"{services.driver}-reg.sock"
    servers = []
    for sock, handlers in ((dra_sock, services.handlers()),
                           (reg_sock, [services.registration_handler(str(dra_sock))])):
        sock.unlink(missing_ok=True)
        s = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        for h in handlers:
            s.add_generic_rpc_handlers((h,))
        if s.add_insecure_port(f"unix://{sock}") == 0:
            raise OSError(f"cannot listen on {sock}")
        s.start()
        servers.append(s)
    return servers[0], servers[1]


# ------------------------------------------------------------ main
def spec_driver_files(socket: str | None) -> DriverFiles | None:
    """The host driver's user space for the specs (as ``vgpuctl cdi
    generate`` finds it): the kernel module's version, else vgpud's; found
    once, at start (a driver upgrade restarts the node's services)."""
    version = driverfiles.driver_version()
    if version is None:
        try:
            with ac.ApiClient(socket, 10.0) as c:
                version = c.request("status").get("driver_version")
        except ac.ClientError as e:
            log.warning("vgpud: %s", e)
    files, warning = driverfiles.for_spec(version)
    if warning:
        log.warning("%s", warning)
    elif files is not None:
        log.info("driver %s: %d libraries, %d binaries for the CDI specs", files.version,
                 len(files.libraries), len(files.binaries))
    return files


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="vgpu-dra-plugin",
        description="vgpu's DRA kubelet plugin: prepares ResourceClaims of driver "
                    f"{dra.DRIVER} into vgpu slices and keeps the node's ResourceSlice on the "
                    "API server (docs/kubernetes.md, \"Dynamic Resource Allocation\"). vgpud "
                    "runs it with [kubernetes] dra_plugin = true.")
    p.add_argument("--version", action="version", version=f"vgpu-dra-plugin {__version__}")
    p.add_argument("--node-name", default=os.environ.get("NODE_NAME"),
                   help="this node's name, the pool its devices are in (default $NODE_NAME)")
    p.add_argument("--socket", help="vgpud's API socket (default: vgpuctl's)")
    p.add_argument("--plugin-dir", default=f"{PLUGINS_DIR}/{dra.DRIVER}",
                   help="where dra.sock is made (default: %(default)s)")
    p.add_argument("--registry-dir", default=REGISTRY_DIR,
                   help="the kubelet's plugin registry (default: %(default)s)")
    p.add_argument("--cdi-dir", default=CDI_DIR, help="where CDI specs go (default: %(default)s)")
    p.add_argument("--fuse-mount", default=FUSE_MOUNT,
                   help="vgpud's vgpufs mount (default: %(default)s)")
    p.add_argument("--api-server", help="the API server's URL (default: in-cluster)")
    p.add_argument("--hook", default=CDI_HOOK,
                   help="the vgpu-oci-hook the specs run (default: %(default)s)")
    p.add_argument("--no-driver-files", action="store_true",
                   help="specs without the driver's user space (the image brings its own)")
    p.add_argument("--admin-access", action="store_true",
                   help="prepare admin-access results (monitoring) into the GPU's own device "
                        "nodes, unmediated; without it they are refused")
    p.add_argument("--publish-interval", type=float, default=10.0, metavar="SECONDS",
                   help="how often the ResourceSlice is checked against vgpud "
                        "(default: %(default)s)")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(levelname)s: %(message)s")
    if not a.node_name:
        p.error("no node name: give --node-name or set NODE_NAME")
    if not 0.1 <= a.publish_interval <= 3600:
        p.error(f"--publish-interval {a.publish_interval:g} is out of range (0.1 to 3600)")
    try:
        api = ApiServer(a.api_server)
    except (ApiServerError, OSError) as e:
        p.error(str(e))
    driver = None if a.no_driver_files else spec_driver_files(a.socket)
    services = DraServices(Preparer(a.node_name, ApiServerClaims(api), a.socket, a.cdi_dir,
                                    a.fuse_mount, admin_access=a.admin_access, driver=driver,
                                    hook=a.hook))
    publisher = SlicePublisher(api, a.node_name, a.socket, a.publish_interval)
    threading.Thread(target=publisher.run, name="publisher", daemon=True).start()
    dra_srv, reg_srv = serve(services, a.plugin_dir, a.registry_dir)
    log.info("vgpu-dra-plugin %s serving %s for node %s: %s/dra.sock, registration in %s%s",
             __version__, dra.DRIVER, a.node_name, a.plugin_dir, a.registry_dir,
             ", admin access on" if a.admin_access else "")
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    done.wait()
    publisher.stop()
    reg_srv.stop(2).wait()
    dra_srv.stop(2).wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
