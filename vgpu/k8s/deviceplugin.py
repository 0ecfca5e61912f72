"""vgpu-device-plugin: the kubelet device plugin of vgpu (docs/kubernetes.md).

Owned here: the two extended resources a node advertises,
``vgpu.io/memory-gib`` (one device per GiB of a GPU's memory) and
``vgpu.io/compute-percent`` (100 devices per GPU), each served as its own
device plugin (API v1beta1, gRPC on a Unix socket in the kubelet's
device-plugins directory, one Register each); which devices of which GPU a
container gets (GetPreferredAllocation: all of one GPU, by vgpud's placement
policy); and the annotations Allocate hands the container runtime, which the
OCI hook turns into the container's slice.

What it must never do: talk to vgpu.ko, create or change slices (the hook
asks vgpud when the container is created), put env, mounts or device nodes
into a container (the hook makes the slice and mounts its nodes), or import
vgpu.daemon: it is a client of vgpud's admin API (vgpu.common.apiclient, `status`
and `gpus`), polled every --poll-interval; while vgpud does not answer, the
last known devices are advertised Unhealthy (not withdrawn: pods holding them
keep their accounting).

The kubelet's API is loaded at start from deviceplugin_v1beta1.proto beside
this file: protoc (grpcio-tools, in process) writes the file's descriptor set
to a temporary directory, and the message classes come from a private
descriptor pool, so nothing generated is kept and nothing clashes with other
users of the default pool.  Measured on the development machine (2 cores,
Python 3.11, grpcio 1.85, protobuf 7.36): importing grpc, grpc_tools and
protobuf about 200 ms, protoc on the file about 4 ms, the message classes
about 2 ms; the start is dominated by importing grpc, not by the .proto.

Kubelet restarts: the kubelet removes every socket in its directory and
makes a new kubelet.sock.  Every --watch-interval the plugin checks that its
sockets are the ones it bound and that kubelet.sock is the one it registered
with; if not, it serves again and registers again.  Every call to the
kubelet and to vgpud is bounded by --timeout; registration is retried with a
back-off (1 s doubling to 30 s).  Logs are plain lines on stderr.

    vgpu-device-plugin [--socket PATH] [--kubelet-dir DIR] [--profile NAME]
                       [--oversubscribe-factor N] [--poll-interval D]
                       [--watch-interval D] [--timeout D] [--log-level L]
    vgpu-device-plugin --list        # ask vgpud once, print the devices, exit
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import signal
import stat
import sys
import tempfile
import threading
import time
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from grpc_tools import protoc

from vgpu import __version__
from vgpu.common import apiclient as ac
from vgpu.common.request import CONTAINER_ANNOTATIONS
from vgpu.common.values import BadValue, parse_duration, parse_profile, quote

log = logging.getLogger("vgpu-device-plugin")

PROG = "vgpu-device-plugin"
PROTO = Path(__file__).with_name("deviceplugin_v1beta1.proto")

# k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1/constants.go
API_VERSION = "v1beta1"
DEVICE_PLUGIN_PATH = "/var/lib/kubelet/device-plugins"
KUBELET_SOCKET = "kubelet.sock"
HEALTHY, UNHEALTHY = "Healthy", "Unhealthy"

MEMORY = "vgpu.io/memory-gib"
COMPUTE = "vgpu.io/compute-percent"
#: resource -> (the kind part of its device IDs, its socket in the kubelet's directory)
RESOURCES = {MEMORY: ("mem", "vgpu-memory-gib.sock"),
             COMPUTE: ("pct", "vgpu-compute-percent.sock")}
COMPUTE_PER_GPU = 100
GiB = 1 << 30

# the annotations Allocate sets (the OCI hook reads them as the container's
# request; the contract is vgpu.common.request's)
ANN_MEMORY = CONTAINER_ANNOTATIONS["memory"]
ANN_GPUS = CONTAINER_ANNOTATIONS["gpus"]
ANN_COMPUTE = CONTAINER_ANNOTATIONS["compute"]
ANN_PROFILE = CONTAINER_ANNOTATIONS["profile"]

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_UNAVAILABLE, EXIT_PERMISSION = 0, 1, 2, 3, 4
REGISTER_RETRY_MIN, REGISTER_RETRY_MAX = 1.0, 30.0
#: the most device IDs one request may name (a node with 8 GPUs of 141 GiB
#: at a factor of 16 has 18048 memory devices)
MAX_IDS = 65536
FACTOR_MAX = 16.0

_ID_RE = re.compile(r"gpu(\d{1,4})-(mem|pct)-(\d{1,7})\Z")


class Refused(Exception):
    """A kubelet request the plugin answers with a gRPC error: ``code`` (a
    grpc.StatusCode) and the message, which the kubelet shows in the pod's
    admission error."""

    def __init__(self, code, message: str):
        super().__init__(message)
        self.code = code


# ---------------------------------------------------------------- the .proto
class Api:
    """The device-plugin API loaded from a .proto: ``msg[name]`` is the
    message class of v1beta1.<name>; ``services[name]`` the service's
    methods, each (name, input class, output class, server streaming)."""

    def __init__(self, path: Path = PROTO):
        fds = compile_proto(path)
        pool = descriptor_pool.DescriptorPool()
        for f in fds.file:
            pool.Add(f)
        classes = message_factory.GetMessages(list(fds.file), pool=pool)
        self.msg = {name.rpartition(".")[2]: cls for name, cls in classes.items()}
        self.package = fds.file[-1].package
        self.services = {
            s.name: [(m.name, classes[m.input_type.lstrip(".")],
                      classes[m.output_type.lstrip(".")], m.server_streaming)
                     for m in s.method]
            for s in fds.file[-1].service}


def compile_proto(path: Path) -> descriptor_pb2.FileDescriptorSet:
    """The FileDescriptorSet of one .proto (with its imports), by protoc
    from grpcio-tools, through a temporary directory; raises RuntimeError
    with protoc's exit status."""
    path = Path(path)
    with tempfile.TemporaryDirectory(prefix="vgpu-proto-") as d:
        out = os.path.join(d, "set.pb")
        rc = protoc.main(["protoc", f"--proto_path={path.parent}", "--include_imports",
                          f"--descriptor_set_out={out}", path.name])
        if rc != 0:
            raise RuntimeError(f"protoc could not compile {path} (exit status {rc})")
        with open(out, "rb") as f:
            return descriptor_pb2.FileDescriptorSet.FromString(f.read())


# ---------------------------------------------------------------- the node
@dataclass(frozen=True)
class Gpu:
    index: int
    memory_total: int              # bytes
    memory_allocated: int = 0      # bytes, the sum of its slices' quotas (vgpud's)


@dataclass(frozen=True)
class Node:
    """What vgpud said last: the GPUs it slices, its placement policy and
    whether it oversubscribes memory; ``up``: it answered the last poll."""
    gpus: tuple[Gpu, ...] = ()
    placement: str = "spread"
    oversubscribe: bool = False
    up: bool = False
    known: bool = False            # vgpud has answered at least once

    def gib(self, g: Gpu, factor: float) -> int:
        """Memory devices of GPU g: its whole GiB, times the factor when
        vgpud oversubscribes memory."""
        whole = g.memory_total // GiB
        return int(whole * factor) if self.oversubscribe else whole

    def count(self, kind: str, g: Gpu, factor: float) -> int:
        return self.gib(g, factor) if kind == "mem" else COMPUTE_PER_GPU

    def free_gib(self, g: Gpu, factor: float) -> int:
        """What vgpud has not allocated to slices on GPU g, in whole GiB (of
        the advertised, possibly oversubscribed, amount)."""
        return max(self.gib(g, factor) - -(-g.memory_allocated // GiB), 0)


def node_from_api(status: dict, gpus: dict) -> Node:
    """A Node from vgpud's ``status`` and ``gpus`` results (docs/api.md);
    GPUs vgpud does not slice (``sliced`` false) are left out.  Raises
    ValueError for a reply without the fields it needs."""
    out = []
    for g in gpus.get("gpus") or []:
        if g.get("sliced", True) is False:
            continue
        idx, total = g.get("index"), g.get("memory_total")
        if not isinstance(idx, int) or not isinstance(total, int):
            raise ValueError(f"vgpud's gpus result has a GPU without index or memory_total: "
                             f"{quote(g)}")
        out.append(Gpu(idx, total, int(g.get("memory_allocated") or 0)))
    node = status.get("node") or {}
    return Node(gpus=tuple(sorted(out, key=lambda g: g.index)),
                placement=node.get("placement", "spread"),
                oversubscribe=bool(node.get("oversubscribe_memory", False)),
                up=True, known=True)


def device_id(index: int, kind: str, n: int) -> str:
    return f"gpu{index}-{kind}-{n}"


def devices(node: Node, kind: str, factor: float) -> list[tuple[str, str]]:
    """(ID, health) of every device of the resource with this ID kind."""
    health = HEALTHY if node.up else UNHEALTHY
    return [(device_id(g.index, kind, n), health)
            for g in node.gpus for n in range(node.count(kind, g, factor))]


def parse_ids(ids, kind: str, node: Node, factor: float, what: str) -> dict[int, list[int]]:
    """Device IDs the kubelet sent -> {gpu index: [n, ...]}; Refused
    (INVALID_ARGUMENT) naming the first bad one: not an ID of this
    resource, a GPU the node does not have, past the GPU's devices, named
    twice, or too many."""
    inv = grpc.StatusCode.INVALID_ARGUMENT
    if len(ids) > MAX_IDS:
        raise Refused(inv, f"{what}: {len(ids)} device IDs is more than {MAX_IDS}")
    gpus = {g.index: g for g in node.gpus}
    out: dict[int, list[int]] = {}
    seen = set()
    for i in ids:
        m = _ID_RE.match(i)
        if m is None or m.group(2) != kind:
            raise Refused(inv, f"{what}: {quote(i)} is not a device ID of this resource "
                          f"(gpu<index>-{kind}-<n>)")
        idx, n = int(m.group(1)), int(m.group(3))
        if idx not in gpus:
            known = ", ".join(str(x) for x in gpus) or "none"
            raise Refused(inv, f"{what}: {quote(i)} names GPU {idx}, which vgpud does not "
                          f"slice (GPUs: {known})")
        if n >= node.count(kind, gpus[idx], factor):
            raise Refused(inv, f"{what}: {quote(i)} is past GPU {idx}'s "
                          f"{node.count(kind, gpus[idx], factor)} devices")
        if i in seen:
            raise Refused(inv, f"{what}: {quote(i)} is named twice")
        seen.add(i)
        out.setdefault(idx, []).append(n)
    return out


def describe_gpus(node: Node, factor: float, avail: dict[int, list[int]] | None = None) -> str:
    """'GPU 0: 16 GiB, 8 GiB allocated to slices[, 8 devices available]; GPU 1: ...'"""
    parts = []
    for g in node.gpus:
        s = (f"GPU {g.index}: {node.gib(g, factor)} GiB, "
             f"{-(-g.memory_allocated // GiB)} GiB allocated to slices")
        if avail is not None:
            s += f", {len(avail.get(g.index, ()))} GiB available to pods"
        parts.append(s)
    return "; ".join(parts) or "vgpud slices no GPU"


def preferred(kind: str, available, must_include, size: int, node: Node,
              factor: float) -> list[str]:
    """GetPreferredAllocation for one container: ``size`` IDs from
    ``available`` (and every ID of ``must_include``), all of one GPU.

    Candidates are the GPUs with enough of the offered IDs; among them those
    vgpud also has the memory for come first, then vgpud's placement:
    spread (most devices available first) or binpack (fewest).  Ties go to
    the lower index.  Memory on no single GPU: Refused (RESOURCE_EXHAUSTED)
    naming the request and what each GPU has.  Compute that fits on no
    single GPU (but is at most 100%) is taken from several, in the same
    order: the scheduler counts compute per node, vgpud checks it per GPU.
    """
    what = f"{resource_of(kind)}: preferred allocation of {size}"
    if not node.known:
        raise Refused(grpc.StatusCode.UNAVAILABLE,
                      f"{what}: vgpud has not answered yet, so its GPUs are unknown")
    if size <= 0:
        raise Refused(grpc.StatusCode.INVALID_ARGUMENT,
                      f"{what}: the allocation size must be at least 1")
    avail = parse_ids(list(dict.fromkeys([*available, *must_include])), kind, node, factor,
                      what)
    must = parse_ids(list(must_include), kind, node, factor, what + " (must include)")
    if sum(len(v) for v in must.values()) > size:
        raise Refused(grpc.StatusCode.INVALID_ARGUMENT,
                      f"{what}: {sum(len(v) for v in must.values())} devices must be included, "
                      f"more than the {size} asked for")
    if kind == "pct" and size > COMPUTE_PER_GPU:
        raise Refused(grpc.StatusCode.INVALID_ARGUMENT,
                      f"{what}: compute {size}% is more than one GPU's {COMPUTE_PER_GPU}%")
    gpus = {g.index: g for g in node.gpus}
    cands = [i for i in avail if len(avail[i]) >= size and (not must or set(must) == {i})]

    def order(i: int):
        vgpud_fits = kind != "mem" or node.free_gib(gpus[i], factor) >= size
        n = len(avail[i])
        return (not vgpud_fits, n if node.placement == "binpack" else -n, i)

    if cands:
        best = min(cands, key=order)
        chosen = sorted(must.get(best, []))
        chosen += [n for n in sorted(avail[best]) if n not in chosen][:size - len(chosen)]
        return [device_id(best, kind, n) for n in chosen]
    if kind == "mem":
        if len(must) > 1:
            why = f"the devices it must include are on GPUs {', '.join(map(str, sorted(must)))}"
        elif must:
            why = f"the devices it must include are on GPU {next(iter(must))}, which lacks the rest"
        else:
            why = "no single GPU has that many available"
        raise Refused(grpc.StatusCode.RESOURCE_EXHAUSTED,
                      f"{what} GiB: a container's memory must come from one GPU and {why} "
                      f"({describe_gpus(node, factor, avail)})")
    out = [device_id(i, kind, n) for i in sorted(must) for n in sorted(must[i])]
    for i in sorted(avail, key=order):
        out += [device_id(i, kind, n) for n in sorted(avail[i])
                if device_id(i, kind, n) not in out]
    return out[:size]


def allocate(kind: str, ids, node: Node, factor: float, profile: str | None,
             index: int = 0) -> dict[str, str]:
    """Allocate for one container: the annotations of its request.  Memory
    devices must all be of one GPU (else Refused, FAILED_PRECONDITION, with
    the request, the GPUs and what each has); compute past one GPU's 100%
    is refused."""
    what = f"{resource_of(kind)}: container request {index}"
    if not node.known:
        raise Refused(grpc.StatusCode.UNAVAILABLE,
                      f"{what}: vgpud has not answered yet, so its GPUs are unknown")
    if not ids:
        raise Refused(grpc.StatusCode.INVALID_ARGUMENT, f"{what} names no device")
    by_gpu = parse_ids(list(ids), kind, node, factor, what)
    n = sum(len(v) for v in by_gpu.values())
    ann: dict[str, str] = {}
    if kind == "mem":
        if len(by_gpu) > 1:
            spread = ", ".join(f"{len(by_gpu[i])} GiB of GPU {i}" for i in sorted(by_gpu))
            raise Refused(grpc.StatusCode.FAILED_PRECONDITION,
                          f"{what}: {n} GiB spans GPUs ({spread}); a container's memory "
                          f"must come from one GPU and no single GPU had {n} GiB of devices "
                          f"free ({describe_gpus(node, factor)})")
        ann[ANN_MEMORY] = f"{n}Gi"
        ann[ANN_GPUS] = str(next(iter(by_gpu)))
    else:
        if n > COMPUTE_PER_GPU:
            raise Refused(grpc.StatusCode.FAILED_PRECONDITION,
                          f"{what}: compute {n}% is more than one GPU's {COMPUTE_PER_GPU}%")
        ann[ANN_COMPUTE] = f"{n}%"
    if profile:
        ann[ANN_PROFILE] = profile
    return ann


def resource_of(kind: str) -> str:
    return next(r for r, (k, _) in RESOURCES.items() if k == kind)


# ---------------------------------------------------------------- vgpud
class NodeWatch:
    """The node as vgpud says it is, polled every ``interval`` in a thread
    of its own; ``version`` changes with every change of what it says, and
    ``wait(version, timeout)`` waits for the next."""

    def __init__(self, socket: str | None, interval: float, timeout: float):
        self.socket = socket
        self.interval = interval
        self.timeout = timeout
        self.node = Node()
        self.version = 0
        self.cond = threading.Condition()
        self.stopping = threading.Event()
        self.thread: threading.Thread | None = None

    def poll_once(self) -> Node:
        """Ask vgpud once; a Node with up=False (and the last GPUs) when it
        does not answer."""
        try:
            with ac.ApiClient(self.socket, self.timeout) as c:
                new = node_from_api(c.request("status"), c.request("gpus"))
            if not self.node.up:
                log.info("vgpud answers on %s: %d GPU(s) (%s), placement %s%s",
                         ac.socket_path(self.socket), len(new.gpus),
                         ", ".join(f"GPU {g.index} {g.memory_total // GiB} GiB" for g in new.gpus)
                         or "none", new.placement,
                         ", memory oversubscribed" if new.oversubscribe else "")
        except (ac.ClientError, ValueError, OSError) as e:
            if self.node.up or not self.node.known and self.version == 0:
                log.warning("vgpud on %s does not answer (%s): devices Unhealthy until it "
                            "does", ac.socket_path(self.socket), e)
            new = Node(self.node.gpus, self.node.placement, self.node.oversubscribe,
                       up=False, known=self.node.known)
        self.set(new)
        return new

    def set(self, node: Node) -> None:
        with self.cond:
            if node != self.node or self.version == 0:
                if node.known and self.node.known and node.gpus != self.node.gpus:
                    log.info("vgpud's GPUs changed: %s", ", ".join(
                        f"GPU {g.index} {g.memory_total // GiB} GiB" for g in node.gpus) or "none")
                self.node = node
                self.version += 1
                self.cond.notify_all()

    def wait(self, version: int, timeout: float) -> tuple[Node, int]:
        with self.cond:
            if self.version == version:
                self.cond.wait(timeout)
            return self.node, self.version

    def start(self) -> None:
        def loop():
            while not self.stopping.is_set():
                self.poll_once()
                self.stopping.wait(self.interval)
        self.thread = threading.Thread(target=loop, name="vgpud-poll", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()
        with self.cond:
            self.cond.notify_all()


# ---------------------------------------------------------------- gRPC
class Endpoint:
    """One resource's device plugin: its gRPC server on its socket, and its
    registration with the kubelet."""

    def __init__(self, plugin: "Plugin", resource: str):
        self.plugin = plugin
        self.resource = resource
        self.kind, self.sock_name = RESOURCES[resource]
        self.path = plugin.kubelet_dir / self.sock_name
        self.server: grpc.Server | None = None
        self.sock_ino: int | None = None
        self.registered_with: int | None = None     # kubelet.sock's inode
        self.next_try = 0.0
        self.backoff = REGISTER_RETRY_MIN
        self.stopping = threading.Event()

    # -- the DevicePlugin service
    def GetDevicePluginOptions(self, req, ctx):
        return self.plugin.api.msg["DevicePluginOptions"](
            pre_start_required=False, get_preferred_allocation_available=True)

    def ListAndWatch(self, req, ctx):
        p = self.plugin
        Device, Resp = p.api.msg["Device"], p.api.msg["ListAndWatchResponse"]
        last, version = None, -1
        stopping = self.stopping        # this server's: serve() makes a new one
        log.info("%s: the kubelet watches the devices", self.resource)
        while ctx.is_active() and not stopping.is_set():
            node, version = p.watch.wait(version, 1.0)
            devs = devices(node, self.kind, p.factor)
            if devs != last:
                last = devs
                healthy = sum(1 for _, h in devs if h == HEALTHY)
                log.info("%s: %d device(s), %d healthy", self.resource, len(devs), healthy)
                yield Resp(devices=[Device(ID=i, health=h) for i, h in devs])

    def GetPreferredAllocation(self, req, ctx):
        p = self.plugin
        out = p.api.msg["PreferredAllocationResponse"]()
        node = p.watch.node
        for c in req.container_requests:
            ids = self._call(ctx, preferred, self.kind, list(c.available_deviceIDs),
                             list(c.must_include_deviceIDs), c.allocation_size, node, p.factor)
            out.container_responses.add(deviceIDs=ids)
        return out

    def Allocate(self, req, ctx):
        p = self.plugin
        out = p.api.msg["AllocateResponse"]()
        node = p.watch.node
        if not req.container_requests:
            ctx.abort(grpc.StatusCode.INVALID_ARGUMENT,
                      f"{self.resource}: Allocate names no container")
        for i, c in enumerate(req.container_requests):
            ann = self._call(ctx, allocate, self.kind, list(c.devices_ids), node, p.factor,
                             p.profile, i)
            log.info("%s: allocated %s", self.resource,
                     ", ".join(f"{k}={v}" for k, v in sorted(ann.items())))
            out.container_responses.add(annotations=ann)
        return out

    def PreStartContainer(self, req, ctx):
        return self.plugin.api.msg["PreStartContainerResponse"]()

    def _call(self, ctx, fn, *args):
        try:
            return fn(*args)
        except Refused as e:
            log.warning("refused: %s", e)
            ctx.abort(e.code, str(e))

    # -- serving and registering
    def serve(self) -> None:
        self.stop()
        self.stopping = threading.Event()
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=16,
                                                        thread_name_prefix=self.kind))
        server.add_generic_rpc_handlers((self.plugin.handler(self, "DevicePlugin"),))
        if server.add_insecure_port(f"unix:{self.path}") == 0:
            raise OSError(f"cannot listen on {self.path}")
        server.start()
        self.server = server
        self.sock_ino = self.path.stat().st_ino
        self.registered_with = None
        self.backoff = REGISTER_RETRY_MIN
        self.next_try = 0.0
        log.info("%s: serving on %s", self.resource, self.path)

    def stop(self) -> None:
        if self.server is not None:
            self.stopping.set()
            self.server.stop(0).wait(5.0)
            self.server = None

    def socket_ok(self) -> bool:
        try:
            st = self.path.lstat()
        except FileNotFoundError:
            return False
        return stat.S_ISSOCK(st.st_mode) and st.st_ino == self.sock_ino

    def register(self, kubelet_ino: int) -> bool:
        p = self.plugin
        sock = p.kubelet_dir / KUBELET_SOCKET
        req = p.api.msg["RegisterRequest"](
            version=API_VERSION, endpoint=self.sock_name, resource_name=self.resource,
            options=p.api.msg["DevicePluginOptions"](pre_start_required=False,
                                                     get_preferred_allocation_available=True))
        try:
            with grpc.insecure_channel(f"unix:{sock}") as ch:
                call = ch.unary_unary(f"/{p.api.package}.Registration/Register",
                                      request_serializer=req.SerializeToString,
                                      response_deserializer=p.api.msg["Empty"].FromString)
                call(req, timeout=p.timeout, wait_for_ready=True)
        except grpc.RpcError as e:
            log.warning("%s: registering with the kubelet at %s failed: %s: %s; again in %g s",
                        self.resource, sock, e.code().name, e.details(), self.backoff)
            self.next_try = time.monotonic() + self.backoff
            self.backoff = min(self.backoff * 2, REGISTER_RETRY_MAX)
            return False
        self.registered_with = kubelet_ino
        self.backoff = REGISTER_RETRY_MIN
        log.info("%s: registered with the kubelet (%s, endpoint %s)", self.resource, sock,
                 self.sock_name)
        return True


class Plugin:
    """Both endpoints, the vgpud watch and the loop that keeps them served
    and registered through kubelet restarts."""

    def __init__(self, kubelet_dir: str | Path, socket: str | None = None, *,
                 profile: str | None = None, factor: float = 2.0, poll_interval: float = 5.0,
                 watch_interval: float = 1.0, timeout: float = 5.0, api: Api | None = None):
        self.kubelet_dir = Path(kubelet_dir)
        self.profile = profile or None
        self.factor = factor
        self.watch_interval = watch_interval
        self.timeout = timeout
        self.api = api or Api()
        self.watch = NodeWatch(socket, poll_interval, timeout)
        self.endpoints = [Endpoint(self, r) for r in RESOURCES]
        self.stopping = threading.Event()
        self.waiting = False            # "waiting for the kubelet" logged

    def handler(self, obj, service: str):
        handlers = {}
        for name, cin, cout, streaming in self.api.services[service]:
            make = grpc.unary_stream_rpc_method_handler if streaming else \
                grpc.unary_unary_rpc_method_handler
            handlers[name] = make(getattr(obj, name), request_deserializer=cin.FromString,
                                  response_serializer=cout.SerializeToString)
        return grpc.method_handlers_generic_handler(f"{self.api.package}.{service}", handlers)

    def step(self) -> None:
        """One look at the directory: serve again what lost its socket,
        register what the present kubelet has not seen."""
        try:
            kubelet_ino = (self.kubelet_dir / KUBELET_SOCKET).stat().st_ino
        except FileNotFoundError:
            kubelet_ino = None
        for ep in self.endpoints:
            if ep.server is not None and not ep.socket_ok():
                log.warning("%s: %s was removed (a kubelet restart): serving again",
                            ep.resource, ep.path)
            if ep.server is None or not ep.socket_ok():
                ep.serve()
            if kubelet_ino is None:
                if not self.waiting:
                    self.waiting = True
                    if ep.registered_with is None:
                        log.info("waiting for the kubelet (no kubelet.sock in %s)",
                                 self.kubelet_dir)
                if ep.registered_with is not None:
                    log.warning("%s: %s is gone: waiting for the kubelet", ep.resource,
                                self.kubelet_dir / KUBELET_SOCKET)
                    ep.registered_with = None
                continue
            self.waiting = False
            if ep.registered_with is not None and ep.registered_with != kubelet_ino:
                log.warning("%s: kubelet.sock is new (a kubelet restart): registering again",
                            ep.resource)
                ep.registered_with = None
                ep.next_try = 0.0
            if ep.registered_with is None and time.monotonic() >= ep.next_try:
                ep.register(kubelet_ino)

    def run(self) -> None:
        """Until stop(): vgpud's watch, both endpoints, the directory watch."""
        self.watch.start()
        try:
            while not self.stopping.is_set():
                self.step()
                self.stopping.wait(self.watch_interval)
        finally:
            self.watch.stop()
            for ep in self.endpoints:
                ep.stop()
                if ep.socket_ok():
                    ep.path.unlink(missing_ok=True)
            log.info("stopped")

    def stop(self) -> None:
        self.stopping.set()


# ---------------------------------------------------------------- CLI
def _duration(opt: str, lo: float, hi: float):
    def conv(v: str) -> float:
        try:
            x = parse_duration(v)
        except BadValue as e:
            raise argparse.ArgumentTypeError(f"{opt}: {e}") from None
        if not lo <= x <= hi:
            raise argparse.ArgumentTypeError(f"{opt}: {quote(v)} is out of range "
                                             f"({lo:g} s to {hi:g} s)")
        return x
    return conv


def _profile(v: str) -> str:
    if v == "":
        return ""
    try:
        return parse_profile(v)
    except BadValue as e:
        raise argparse.ArgumentTypeError(f"--profile: {e}") from None


def _factor(v: str) -> float:
    try:
        x = float(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--oversubscribe-factor: {quote(v)} is not a "
                                         f"number (1 to {FACTOR_MAX:g})") from None
    if not 1.0 <= x <= FACTOR_MAX:
        raise argparse.ArgumentTypeError(f"--oversubscribe-factor: {quote(v)} is out of "
                                         f"range (1 to {FACTOR_MAX:g})")
    return x


def _dir(v: str) -> Path:
    if not v.startswith("/"):
        raise argparse.ArgumentTypeError(f"--kubelet-dir: {quote(v)} is not an absolute path")
    return Path(v)


class _Parser(argparse.ArgumentParser):
    def error(self, message):       # vgpuctl's exit status for a usage error
        self.print_usage(sys.stderr)
        sys.stderr.write(f"{PROG}: {message}\n")
        sys.exit(EXIT_USAGE)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog=PROG, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="The kubelet device plugin of vgpu: advertises vgpu.io/memory-gib (one "
                    "device per GiB of each GPU vgpud slices) and vgpu.io/compute-percent "
                    "(100 per GPU) to the kubelet, keeps a container's memory on one GPU, "
                    "and hands each container's request to the OCI hook as annotations.  "
                    "vgpud starts it when its config says [kubernetes] device_plugin = true; "
                    "it runs by hand too.",
        epilog=f"""exit status:
  {EXIT_OK}  stopped by SIGTERM or SIGINT (or --list printed the devices)
  {EXIT_ERROR}  a fatal error: the plugin's sockets cannot be made in --kubelet-dir
  {EXIT_USAGE}  usage error: unknown option or a bad value (quoted)
  {EXIT_UNAVAILABLE}  --list: vgpud is not running
  {EXIT_PERMISSION}  --list: permission denied on vgpud's socket
Without --list, a vgpud that does not answer is waited for (its devices are
advertised Unhealthy) and a kubelet that is absent is waited for; see
docs/kubernetes.md.""")
    p.add_argument("--socket", metavar="PATH", default=None,
                   help="vgpud's admin API socket (default $VGPU_SOCKET or "
                        f"{ac.DEFAULT_SOCKET})")
    p.add_argument("--kubelet-dir", metavar="DIR", type=_dir, default=Path(DEVICE_PLUGIN_PATH),
                   help="the kubelet's device-plugins directory, where kubelet.sock is and "
                        f"the plugin's sockets go (default {DEVICE_PLUGIN_PATH})")
    p.add_argument("--profile", metavar="NAME", type=_profile, default="",
                   help="a vgpud profile every container's request names "
                        "(vgpu.io/container-profile); default none")
    p.add_argument("--oversubscribe-factor", metavar="N", type=_factor, default=2.0,
                   help="memory devices per GiB of a GPU while vgpud oversubscribes memory "
                        "(node.oversubscribe_memory), 1 to 16 (default 2)")
    p.add_argument("--poll-interval", metavar="D", default=5.0,
                   type=_duration("--poll-interval", 0.05, 3600),
                   help="how often vgpud is asked for its GPUs (default 5s)")
    p.add_argument("--watch-interval", metavar="D", default=1.0,
                   type=_duration("--watch-interval", 0.01, 60),
                   help="how often the kubelet's directory is checked for a restart "
                        "(default 1s)")
    p.add_argument("--timeout", metavar="D", default=5.0, type=_duration("--timeout", 0.1, 300),
                   help="the bound on every call to the kubelet and to vgpud (default 5s)")
    p.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default="info")
    p.add_argument("--list", action="store_true",
                   help="ask vgpud once, print each resource's devices per GPU, and exit")
    p.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    return p


def list_devices(args) -> int:
    try:
        with ac.ApiClient(args.socket, args.timeout) as c:
            node = node_from_api(c.request("status"), c.request("gpus"))
    except ac.DaemonUnavailable as e:
        sys.stderr.write(f"{PROG}: {e}\n")
        return EXIT_UNAVAILABLE
    except ac.PermissionDenied as e:
        sys.stderr.write(f"{PROG}: permission denied: {e.message}\n")
        return EXIT_PERMISSION
    except (ac.ClientError, ValueError) as e:
        sys.stderr.write(f"{PROG}: {e}\n")
        return EXIT_ERROR
    for res, (kind, _) in RESOURCES.items():
        per = ", ".join(f"GPU {g.index}: {node.count(kind, g, args.oversubscribe_factor)}"
                        for g in node.gpus) or "no GPU"
        total = sum(node.count(kind, g, args.oversubscribe_factor) for g in node.gpus)
        print(f"{res}: {total} ({per})")
    return EXIT_OK


def setup_logging(level: str) -> None:
    h = logging.StreamHandler(sys.stderr)
    fmt = f"%(levelname)s {PROG}: %(message)s" if os.environ.get("JOURNAL_STREAM") else \
        f"%(asctime)s %(levelname)s {PROG}: %(message)s"
    h.setFormatter(logging.Formatter(fmt))
    log.addHandler(h)
    log.setLevel(level.upper())
    log.propagate = False


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.list:
        return list_devices(args)
    setup_logging(args.log_level)
    if not args.kubelet_dir.is_dir():
        log.error("--kubelet-dir: %s is not a directory", quote(str(args.kubelet_dir)))
        return EXIT_ERROR
    t0 = time.monotonic()
    plugin = Plugin(args.kubelet_dir, args.socket, profile=args.profile,
                    factor=args.oversubscribe_factor, poll_interval=args.poll_interval,
                    watch_interval=args.watch_interval, timeout=args.timeout)
    log.info("%s %s: API %s loaded from %s in %.0f ms; kubelet directory %s, vgpud %s%s",
             PROG, __version__, API_VERSION, PROTO.name, (time.monotonic() - t0) * 1e3,
             args.kubelet_dir, ac.socket_path(args.socket),
             f", profile {args.profile}" if args.profile else "")

    def on_signal(signum, frame):
        log.info("%s: stopping", signal.Signals(signum).name)
        plugin.stop()
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        plugin.run()
    except OSError as e:
        log.error("%s", e)
        return EXIT_ERROR
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
