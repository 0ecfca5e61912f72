"""vgpud as vgpu-device-plugin sees it: NodeWatch polls vgpud's admin API
(``status`` and ``gpus``, vgpu.common.apiclient) in a thread of its own;
while vgpud does not answer, the last known devices are Unhealthy."""

from __future__ import annotations

import logging
import threading

from vgpu.common import apiclient as ac
from vgpu.k8s.devices import GiB, Node, node_from_api

log = logging.getLogger("vgpu-device-plugin")


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

