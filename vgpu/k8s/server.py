"""vgpu-device-plugin's gRPC side: the kubelet's device-plugin API loaded
from deviceplugin_v1beta1.proto (Api), one Endpoint per resource (its
server on its socket in the kubelet's directory, the DevicePlugin service
over vgpu.k8s.devices, its registration) and the Plugin that keeps both
served and registered through kubelet restarts (docs/kubernetes.md)."""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import socket
import stat
import struct
import tempfile
import threading
import time
from concurrent import futures
from pathlib import Path

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from grpc_tools import protoc

from vgpu.common.request import RUNTIME_GUARD_SOURCE
from vgpu.k8s.devices import (GUARD_TEXT, HEALTHY, RESOURCES, Refused, allocate, devices,
                              guard_mount, preferred)
from vgpu.k8s.watch import NodeWatch

log = logging.getLogger("vgpu-device-plugin")

PROTO = Path(__file__).with_name("deviceplugin_v1beta1.proto")

# k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1/constants.go
API_VERSION = "v1beta1"
DEVICE_PLUGIN_PATH = "/var/lib/kubelet/device-plugins"
KUBELET_SOCKET = "kubelet.sock"
REGISTER_RETRY_MIN, REGISTER_RETRY_MAX = 1.0, 30.0


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



def device_messages(api: Api, devs) -> list:
    """v1beta1 Devices of (ID, health, NUMA node): the node, where known, as
    the device's TopologyInfo, which the kubelet's Topology Manager aligns
    with the CPUs it gives the container."""
    Device, Topo, Numa = api.msg["Device"], api.msg["TopologyInfo"], api.msg["NUMANode"]
    return [Device(ID=i, health=h, topology=Topo(nodes=[Numa(ID=n)]) if n is not None else None)
            for i, h, n in devs]


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
                healthy = sum(1 for _, h, _ in devs if h == HEALTHY)
                log.info("%s: %d device(s), %d healthy", self.resource, len(devs), healthy)
                yield Resp(devices=device_messages(p.api, devs))

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
            mounts = []
            if p.guard_file is not None:
                dest, src, ro = guard_mount(p.guard_file)
                mounts.append(p.api.msg["Mount"](container_path=dest, host_path=src,
                                                 read_only=ro))
            out.container_responses.add(annotations=ann, mounts=mounts)
        return out

    def PreStartContainer(self, req, ctx):
        return self.plugin.api.msg["PreStartContainerResponse"]()

    def _call(self, ctx, fn, *args):
        try:
            return fn(*args)
        except Refused as e:
            log.warning("refused: %s", e)
            ctx.abort(grpc.StatusCode[e.code], str(e))

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


class AlreadyServed(OSError):
    """Another vgpu-device-plugin serves this kubelet directory."""


def claim(kubelet_dir: Path) -> socket.socket:
    """One plugin per kubelet directory, held while the returned socket is
    open: an abstract Unix socket named by the directory (it goes with the
    process, so a crashed plugin leaves nothing to clean up, and nothing in
    the directory can remove it: the kubelet empties the directory when it
    restarts).  Two plugins on one directory would each find the other's
    sockets in place of its own and serve and register again, in turn, for
    ever; the second is refused instead, naming the first.  Assumed: every
    plugin of a node runs in the host's network namespace (vgpud's systemd
    unit and the DaemonSet, hostNetwork: abstract sockets are per network
    namespace)."""
    real = os.path.realpath(kubelet_dir)
    name = b"\0vgpu-device-plugin/" + hashlib.sha256(os.fsencode(real)).hexdigest()[:40].encode()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        s.bind(name)
        s.listen(8)
        return s
    except OSError as e:
        s.close()
        if e.errno != errno.EADDRINUSE:
            raise
    pid = "?"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC) as c:
        try:
            c.settimeout(1.0)
            c.connect(name)
            pid = struct.unpack("3i", c.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                   struct.calcsize("3i")))[0]
        except OSError:
            pass
    raise AlreadyServed(errno.EADDRINUSE, f"another vgpu-device-plugin (pid {pid}) already "
                        f"serves {real}: two would take each other's sockets and register in "
                        f"turn; stop it first")


def write_guard(path: Path) -> None:
    """The file Allocate's guard mount names (vgpu.k8s.devices.guard_mount),
    saying what the container lacks to anyone who finds it.  Where it
    cannot be written the mount still guards (containerd makes a missing
    source a directory; runc refuses the mount all the same): a warning."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.is_file() or path.read_text() != GUARD_TEXT:
            path.write_text(GUARD_TEXT)
    except OSError as e:
        log.warning("cannot write %s (%s): a container without runtimeClassName: vgpu "
                    "still fails to start, on a directory there", path, e.strerror or e)


class Plugin:
    """Both endpoints, the vgpud watch and the loop that keeps them served
    and registered through kubelet restarts."""

    def __init__(self, kubelet_dir: str | Path, socket: str | None = None, *,
                 profile: str | None = None, factor: float = 2.0, poll_interval: float = 5.0,
                 watch_interval: float = 1.0, timeout: float = 5.0, api: Api | None = None,
                 unhealthy_after: float = 0.0,
                 guard_file: str | Path | None = RUNTIME_GUARD_SOURCE):
        self.kubelet_dir = Path(kubelet_dir)
        self.guard_file = Path(guard_file) if guard_file is not None else None
        self.profile = profile or None
        self.factor = factor
        self.watch_interval = watch_interval
        self.timeout = timeout
        self.api = api or Api()
        self.watch = NodeWatch(socket, poll_interval, timeout, unhealthy_after)
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
        """Until stop(): vgpud's watch, both endpoints, the directory watch.
        AlreadyServed when another plugin serves the directory."""
        held = claim(self.kubelet_dir)
        if self.guard_file is not None:
            write_guard(self.guard_file)
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
            held.close()
            log.info("stopped")

    def stop(self) -> None:
        self.stopping.set()

