"""vgpud as vgpu-device-plugin sees it: NodeWatch polls vgpud's admin API
(``status`` and ``gpus``, vgpu.common.apiclient) in a thread of its own;
once vgpud has not answered for ``unhealthy_after`` seconds, the last known
devices are Unhealthy.  Until then they stay as they were: a vgpud restart
leaves every slice and vgpu.ko's enforcement in place (docs/vgpufs.md), so
it is no reason for the kubelet to count the node's devices out."""

from __future__ import annotations

import logging
import threading
import time

from vgpu.common import apiclient as ac
from vgpu.common.topology import numa_node
from vgpu.k8s.devices import GiB, Node, node_from_api

log = logging.getLogger("vgpu-device-plugin")


class NodeWatch:
    """The node as vgpud says it is, polled every ``interval`` in a thread
    of its own; ``version`` changes with every change of what it says, and
    ``wait(version, timeout)`` waits for the next."""

    def __init__(self, socket: str | None, interval: float, timeout: float,
                 unhealthy_after: float = 0.0, sysfs: str = "/sys"):
        self.socket = socket
        self.sysfs = sysfs
        self.interval = interval
        self.timeout = timeout
        self.unhealthy_after = unhealthy_after
        self.last_ok: float | None = None       # monotonic: vgpud's last answer
        self.silent = False                     # "does not answer" logged
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
                new = node_from_api(c.request("status"), c.request("gpus"),
                                    lambda pci: numa_node(pci, self.sysfs))
            self.last_ok = time.monotonic()
            if self.silent and self.node.up:
                log.info("vgpud answers again on %s", ac.socket_path(self.socket))
            self.silent = False
            if not self.node.up:
                log.info("vgpud answers on %s: %d GPU(s) (%s), placement %s%s",
                         ac.socket_path(self.socket), len(new.gpus),
                         ", ".join(f"GPU {g.index} {g.memory_total // GiB} GiB" for g in new.gpus)
                         or "none", new.placement,
                         ", memory oversubscribed" if new.oversubscribe else "")
        except (ac.ClientError, ValueError, OSError) as e:
            quiet = time.monotonic() - self.last_ok if self.last_ok is not None else None
            if self.node.up and quiet is not None and quiet < self.unhealthy_after:
                if not self.silent:
                    self.silent = True
                    log.warning("vgpud on %s does not answer (%s): devices stay as they were "
                                "for %g s (a restart keeps its slices)",
                                ac.socket_path(self.socket), e, self.unhealthy_after)
                return self.node
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
                was = {g.uuid: g.xid for g in self.node.gpus}
                for g in node.gpus:
                    if g.xid is not None and was.get(g.uuid) is None:
                        log.warning("GPU %d (%s): XID %d: its devices are Unhealthy until "
                                    "vgpud restarts", g.index, g.uuid, g.xid)
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

