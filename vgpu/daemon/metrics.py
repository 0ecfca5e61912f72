"""Prometheus metrics of vgpud (``GET /metrics`` over HTTP/1.0, trio).

Per slice and GPU (labels container, slice_id, pod, namespace,
container_name, gpu, uuid): FB limit, used, peak, live allocations,
refusals; GPU time granted (a counter), the compute target (the kernel's
basis points as a ratio) and the achieved share over the last window
(vgpu.daemon.compute.ShareMeter); per slice (container, slice_id, pod,
namespace, container_name) the configured compute percent and open files.
pod, namespace and container_name are the Kubernetes names the OCI hook
recorded as the slice's labels (vgpu.common.request.LABELS), "" where there are
none (a container outside Kubernetes, a slice made with vgpuctl); a pod's
shared slice has no container_name.  Per GPU (labels gpu, uuid, name):
memory total, allocated to slices (sum of limits), used (the driver's
figure), slices; the scheduler's slot switches and its own CPU time.  Plus
vgpud_build_info (the version, as a label), vgpud_slices,
vgpud_kernel_loaded.  There is no vgpud_up: a vgpud that answers a scrape
is up, which Prometheus' own ``up`` says already.

The families are made by prometheus_client (``Collector`` below, one
collect() per scrape over the manager's last views) and written by its
encoders, so names, escaping, HELP/TYPE and the OpenMetrics form (when the
scraper's Accept header asks for it) are the library's, not ours.  The HTTP
side stays a small trio server rather than prometheus_client's threaded
one: a scrape refreshes the kernel dump through the manager, which lives
in vgpud's trio loop.  The server refreshes the dump (at most once a
second) before rendering, so a scrape costs one netlink dump.  One request
per connection, 5 s to send it, at most 8 KiB of request head.

What it may call: the slice manager's read-only views.
"""

from __future__ import annotations

import logging

import trio
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import CollectorRegistry

from vgpu import __version__
from vgpu.common.request import LABELS as K8S_LABELS

log = logging.getLogger("vgpud.metrics")

MAX_HEAD = 8192
#: the labels of a slice's series, then those of a slice on one GPU
SLICE_LABELS = ("container", "slice_id", "pod", "namespace", "container_name")
SLICE_GPU_LABELS = (*SLICE_LABELS, "gpu", "uuid")
GPU_LABELS = ("gpu", "uuid", "name")

G, C = GaugeMetricFamily, CounterMetricFamily
#: (name, kind, help, labels); a counter's name is given without _total,
#: which prometheus_client adds
METRICS = [
    ("vgpu_slice_memory_limit_bytes", G, "FB quota of a slice on one GPU", SLICE_GPU_LABELS),
    ("vgpu_slice_memory_used_bytes", G, "FB held by a slice on one GPU (vgpu.ko)",
     SLICE_GPU_LABELS),
    ("vgpu_slice_memory_peak_bytes", G, "highest FB held by a slice on one GPU",
     SLICE_GPU_LABELS),
    ("vgpu_slice_allocations", G, "live FB allocations of a slice on one GPU", SLICE_GPU_LABELS),
    ("vgpu_slice_refusals", C, "FB allocations refused over quota", SLICE_GPU_LABELS),
    ("vgpu_slice_compute_target_percent", G, "compute quota of a slice", SLICE_LABELS),
    ("vgpu_slice_gpu_time_seconds", C,
     "GPU time vgpu.ko granted a slice on one GPU while it wanted the GPU", SLICE_GPU_LABELS),
    ("vgpu_slice_compute_target_ratio", G,
     "compute setting of a slice on one GPU as vgpu.ko holds it (cap, floor or weight; 0..1)",
     SLICE_GPU_LABELS),
    ("vgpu_slice_compute_achieved_ratio", G,
     "share of wall time a slice got on one GPU over the last window (0..1)", SLICE_GPU_LABELS),
    ("vgpu_slice_open_files", G, "open files on a slice's device nodes", SLICE_LABELS),
    ("vgpu_slice_rdma_handles_limit", G, "RDMA user contexts a slice may hold on its adapter "
     "(rdma.max hca_handle)", (*SLICE_LABELS, "hca")),
    ("vgpu_slice_rdma_objects_limit", G, "RDMA verbs objects a slice may hold on its adapter "
     "(rdma.max hca_object)", (*SLICE_LABELS, "hca")),
    ("vgpu_slice_rdma_handles", G, "RDMA user contexts a slice holds on its adapter "
     "(rdma.current)", (*SLICE_LABELS, "hca")),
    ("vgpu_slice_rdma_objects", G, "RDMA verbs objects a slice holds on its adapter "
     "(rdma.current)", (*SLICE_LABELS, "hca")),
    ("vgpu_slice_rdma_objects_by_type", G, "RDMA objects of one type (qp, cq, mr, pd) the "
     "processes of a slice's cgroup hold on its adapter (the RDMA netlink dump)",
     (*SLICE_LABELS, "hca", "type")),
    ("vgpu_gpu_memory_total_bytes", G, "FB of a GPU", GPU_LABELS),
    ("vgpu_gpu_memory_allocated_bytes", G, "sum of the FB quotas of a GPU's slices", GPU_LABELS),
    ("vgpu_gpu_memory_used_bytes", G, "FB in use on a GPU (driver)", GPU_LABELS),
    ("vgpu_gpu_slices", G, "slices on a GPU", GPU_LABELS),
    ("vgpu_gpu_xid_fault", G, "the critical XID that made a GPU unhealthy, 0 while healthy "
     "(vgpu.daemon.health)", GPU_LABELS),
    ("vgpu_scheduler_switches", C, "slot changes of a GPU's compute scheduler", GPU_LABELS),
    ("vgpu_scheduler_cpu_seconds", C, "CPU time of a GPU's compute scheduler", GPU_LABELS),
    ("vgpud_build_info", G, "the vgpu version this vgpud runs (the value is 1)", ("version",)),
    ("vgpud_slices", G, "slices vgpud holds (wanted, whether or not in vgpu.ko)", ()),
    ("vgpud_kernel_loaded", G, "1 while vgpud is connected to vgpu.ko", ()),
]


def slice_labels(container: str, rec) -> list[str]:
    """The values of SLICE_LABELS for one slice record."""
    lab = rec.labels
    return [container, str(rec.slice_id), lab.get(K8S_LABELS["pod_name"], ""),
            lab.get(K8S_LABELS["pod_namespace"], ""), lab.get(K8S_LABELS["container_name"], "")]


class Collector:
    """prometheus_client's collector over a slice manager: collect() reads
    the manager's last kernel dump, inventory and scheduler figures (the
    HTTP server refreshes them first) and makes every family afresh."""

    def __init__(self, mgr):
        self.mgr = mgr

    def collect(self):
        mgr = self.mgr
        fam = {name: kind(name, help_, labels=list(labels))
               for name, kind, help_, labels in METRICS}

        def add(name: str, labels: list, value) -> None:
            fam[name].add_metric([str(x) for x in labels], value)

        ks_all = mgr.kslices
        for c, rec in sorted(mgr.records.items(), key=lambda kv: kv[1].slice_id):
            ks = ks_all.get(rec.slice_id)
            e = rec.applied
            lim = rec.limits(e) if e else {}
            sl = slice_labels(c, rec)
            if e is not None and e.spec.compute is not None:
                add("vgpu_slice_compute_target_percent", sl, e.spec.compute)
            if ks is not None:
                add("vgpu_slice_open_files", sl, ks.open_files)
            rv = mgr.rdma_view(rec)
            if rv is not None:
                hl = [*sl, rv["hca"]]
                add("vgpu_slice_rdma_handles_limit", hl, rv["handles"])
                add("vgpu_slice_rdma_objects_limit", hl, rv["objects"])
                if rv["used"] is not None:
                    add("vgpu_slice_rdma_handles", hl, rv["used"]["handles"])
                    add("vgpu_slice_rdma_objects", hl, rv["used"]["objects"])
                for kind, n in sorted((rv["objects_by_type"] or {}).items()):
                    add("vgpu_slice_rdma_objects_by_type", [*hl, kind], n)
            for i, g in enumerate(rec.gpus):
                gl = [*sl, g.gpu, g.uuid or ""]
                ku = next((x for x in ks.gpus if x.index == i), None) if ks is not None else None
                add("vgpu_slice_memory_limit_bytes", gl, ku.mem_limit if ku else lim.get(i, 0))
                if ku is None:
                    continue
                add("vgpu_slice_memory_used_bytes", gl, ku.mem_used)
                add("vgpu_slice_memory_peak_bytes", gl, ku.mem_peak)
                add("vgpu_slice_allocations", gl, ku.allocs)
                add("vgpu_slice_refusals", gl, ku.refusals)
                add("vgpu_slice_gpu_time_seconds", gl, ku.gpu_time_ns / 1e9)
                if ku.compute_policy:           # NONE: no setting, no target
                    add("vgpu_slice_compute_target_ratio", gl, ku.compute_bp / 10000)
                a = mgr.meter.share((ks.id, i))
                if a is not None:
                    add("vgpu_slice_compute_achieved_ratio", gl, a)
        views = mgr.views()
        for g in mgr.gpus:
            gl = [g.index, g.uuid, g.name]
            v = views.get(g.index)
            add("vgpu_gpu_memory_total_bytes", gl, g.memory_total)
            add("vgpu_gpu_memory_allocated_bytes", gl, v.memory_allocated if v else 0)
            add("vgpu_gpu_memory_used_bytes", gl, g.memory_used)
            add("vgpu_gpu_slices", gl,
                sum(1 for r in mgr.records.values() if any(x.gpu == g.index for x in r.gpus)))
            fault = mgr.gpu_faults.get(g.uuid)
            add("vgpu_gpu_xid_fault", gl, fault.xid if fault else 0)
            si = mgr.scheds.get(g.minor)
            if si is not None:
                add("vgpu_scheduler_switches", gl, si.switches)
                add("vgpu_scheduler_cpu_seconds", gl, si.cpu_ns / 1e9)
        add("vgpud_build_info", [__version__], 1)
        add("vgpud_slices", [], len(mgr.records))
        add("vgpud_kernel_loaded", [], int(mgr.kport.kernel is not None))
        yield from fam.values()


def registry_for(mgr) -> CollectorRegistry:
    """A registry holding only vgpud's collector (not the library's default
    process and platform collectors, whose figures are the node exporter's)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(Collector(mgr))
    return reg


def render(mgr, accept: str = "") -> str:
    """The exposition for a scrape with this Accept header (the Prometheus
    text format unless it asks for OpenMetrics)."""
    encoder, _ = choose_encoder(accept)
    return encoder(registry_for(mgr)).decode()


def parse_listen(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    return host, int(port)


def _header(lines: list[str], name: str) -> str:
    """The value of one request header (the first of that name), or ""."""
    for ln in lines:
        k, sep, v = ln.partition(":")
        if sep and k.strip().lower() == name:
            return v.strip()
    return ""


class MetricsServer:
    def __init__(self, mgr, listen: str):
        self.mgr = mgr
        self.host, self.port = parse_listen(listen)
        self.bound_port = None
        self.registry = registry_for(mgr)

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED):
        listeners = await trio.open_tcp_listeners(self.port, host=self.host)
        self.bound_port = listeners[0].socket.getsockname()[1]
        log.info("metrics on http://%s:%d/metrics", self.host, self.bound_port)
        task_status.started(self.bound_port)
        await trio.serve_listeners(self._conn, listeners)

    async def _conn(self, stream):
        try:
            with trio.move_on_after(5):
                head = b""
                while b"\r\n\r\n" not in head and b"\n\n" not in head and len(head) < MAX_HEAD:
                    data = await stream.receive_some(4096)
                    if not data:
                        break
                    head += data
                lines = head.decode("latin-1").splitlines()
                line = lines[0].split() if lines else []
                if len(line) >= 2 and line[0] == "GET" and line[1].split("?")[0] == "/metrics":
                    await self.mgr.kdump(max_age=1.0)
                    await self.mgr.refresh_scheds(max_age=1.0)
                    await self.mgr.refresh_rdma(max_age=1.0)
                    encoder, ctype = choose_encoder(_header(lines[1:], "accept"))
                    body = encoder(self.registry)
                    status = "200 OK"
                elif len(line) >= 2 and line[0] == "GET":
                    body, status, ctype = b"not found: try /metrics\n", "404 Not Found", "text/plain"
                else:
                    body, status, ctype = b"bad request\n", "400 Bad Request", "text/plain"
                await stream.send_all(
                    f"HTTP/1.0 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                    f"Connection: close\r\n\r\n".encode() + body)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            with trio.move_on_after(1) as cs:
                cs.shield = True
                await stream.aclose()
