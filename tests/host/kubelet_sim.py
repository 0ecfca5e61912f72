"""A test kubelet for vgpu-device-plugin's host tests (test_device_plugin.py).

Built from the kubelet's own api.proto (tests/data/kubelet/api.proto, its
provenance at its top), compiled with grpcio-tools when this module is
imported (grpc.protos_and_services), never from vgpu's copy of the API: what
the plugin sends is parsed as the kubelet parses it.

What it does, as the kubelet's device manager does: serves Registration on
``<dir>/kubelet.sock``, checks the version, records each RegisterRequest,
then dials the plugin's endpoint in the same directory, asks its options and
follows its ListAndWatch stream (the newest list per resource in
``devices``).  ``restart()`` is a kubelet restart: every socket in the
directory removed, a new kubelet.sock.  ``stub(resource)`` gives the
DevicePlugin client of a registered resource for the tests'
GetPreferredAllocation, Allocate and PreStartContainer calls.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from concurrent import futures
from pathlib import Path

import grpc

# grpc finds the .proto on sys.path, where pytest's pythonpath (pyproject.toml)
# puts the repository root: the modules it makes are tests.data.kubelet.api_pb2
# and api_pb2_grpc, the proto's package (v1beta1) the kubelet's
pb, pb_grpc = grpc.protos_and_services("tests/data/kubelet/api.proto")
PROTO_DIR = Path(__file__).resolve().parents[1] / "data" / "kubelet"

VERSION = "v1beta1"


class KubeletSim:
    def __init__(self, directory: str | Path):
        self.dir = Path(directory)
        self.registrations: list = []           # RegisterRequest, in order
        self.options: dict[str, object] = {}    # resource -> DevicePluginOptions
        self.devices: dict[str, list[tuple[str, str]]] = {}   # resource -> [(ID, health)]
        self.updates: dict[str, int] = {}       # resource -> ListAndWatch messages seen
        self.healths: dict[str, set[str]] = {}  # resource -> every health ever listed
        self.cond = threading.Condition()
        self.server: grpc.Server | None = None
        self.channels: list[grpc.Channel] = []
        self.generation = 0
        self.old_servers: list[grpc.Server] = []

    # -- the Registration service
    def Register(self, req, ctx):
        if req.version != VERSION:
            ctx.abort(grpc.StatusCode.INVALID_ARGUMENT,
                      f"unsupported version {req.version!r}")
        with self.cond:
            self.registrations.append(req)
            self.cond.notify_all()
        threading.Thread(target=self._watch, args=(req, self.generation), daemon=True).start()
        return pb.Empty()

    def _watch(self, req, generation: int) -> None:
        ch = grpc.insecure_channel(f"unix:{self.dir / req.endpoint}")
        self.channels.append(ch)
        stub = pb_grpc.DevicePluginStub(ch)
        try:
            opts = stub.GetDevicePluginOptions(pb.Empty(), timeout=5)
            with self.cond:
                self.options[req.resource_name] = opts
            for resp in stub.ListAndWatch(pb.Empty()):
                if generation != self.generation:
                    return
                with self.cond:
                    self.devices[req.resource_name] = [(d.ID, d.health) for d in resp.devices]
                    self.updates[req.resource_name] = self.updates.get(req.resource_name, 0) + 1
                    self.healths.setdefault(req.resource_name, set()).update(
                        d.health for d in resp.devices)
                    self.cond.notify_all()
        except (grpc.RpcError, ValueError):
            # the plugin went, or we closed the channel (ValueError: closed
            # before this thread's first call on it)
            return

    # -- life
    def _serve(self, name: str = "kubelet.sock") -> grpc.Server:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb_grpc.add_RegistrationServicer_to_server(self, server)
        server.add_insecure_port(f"unix:{self.dir / name}")
        server.start()
        return server

    def start(self) -> "KubeletSim":
        self.generation += 1
        self.server = self._serve()
        return self

    def new_socket(self) -> None:
        """A new kubelet.sock with no moment without one, the plugins'
        sockets left in place: a new server bound beside it and renamed over
        it.  (The old server keeps running until stop(): gRPC unlinks its
        socket by name when it stops, which would take the new one.)"""
        self.old_servers.append(self.server)
        self.generation += 1
        self.server = self._serve("kubelet.sock.new")
        os.rename(self.dir / "kubelet.sock.new", self.dir / "kubelet.sock")

    def stop(self) -> None:
        self.generation += 1
        for server in [self.server, *self.old_servers]:
            if server is not None:
                server.stop(0).wait(5)
        self.server = None
        self.old_servers.clear()
        for ch in self.channels:
            ch.close()
        self.channels.clear()
        with self.cond:
            self.devices.clear()

    def restart(self) -> None:
        """A kubelet restart: stop, remove every socket in the directory
        (as the device manager does when it starts), serve a new kubelet.sock."""
        self.stop()
        for p in self.dir.iterdir():
            if stat.S_ISSOCK(p.lstat().st_mode):
                p.unlink()
        self.start()

    # -- the tests' side
    def wait(self, pred, timeout: float = 15.0, what: str = "condition"):
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                v = pred()
                if v:
                    return v
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"kubelet_sim: timed out waiting for {what}; "
                                         f"registrations {[r.resource_name for r in self.registrations]}, "
                                         f"devices { {k: len(v) for k, v in self.devices.items()} }")
                self.cond.wait(min(left, 0.1))

    def wait_devices(self, resource: str, pred=lambda d: True, timeout: float = 15.0):
        return self.wait(lambda: resource in self.devices and pred(self.devices[resource])
                         and self.devices[resource] or None, timeout,
                         f"the devices of {resource}")

    def endpoint(self, resource: str) -> str:
        for r in reversed(self.registrations):
            if r.resource_name == resource:
                return str(self.dir / r.endpoint)
        raise AssertionError(f"{resource} never registered")

    def stub(self, resource: str):
        ch = grpc.insecure_channel(f"unix:{self.endpoint(resource)}")
        self.channels.append(ch)
        return pb_grpc.DevicePluginStub(ch)

    # the calls the device manager makes, one container each
    def preferred(self, resource: str, available, must=(), size: int = 1) -> list[str]:
        req = pb.PreferredAllocationRequest(container_requests=[
            pb.ContainerPreferredAllocationRequest(available_deviceIDs=list(available),
                                                   must_include_deviceIDs=list(must),
                                                   allocation_size=size)])
        resp = self.stub(resource).GetPreferredAllocation(req, timeout=10)
        return list(resp.container_responses[0].deviceIDs)

    def allocate(self, resource: str, *containers):
        req = pb.AllocateRequest(container_requests=[
            pb.ContainerAllocateRequest(devices_ids=list(ids)) for ids in containers])
        return self.stub(resource).Allocate(req, timeout=10)

    def prestart(self, resource: str, ids):
        return self.stub(resource).PreStartContainer(
            pb.PreStartContainerRequest(devices_ids=list(ids)), timeout=10)


def socket_inode(path) -> int | None:
    try:
        return os.lstat(path).st_ino
    except FileNotFoundError:
        return None
