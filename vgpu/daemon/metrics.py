"""Prometheus text exposition of vgpud (``GET /metrics`` over HTTP/1.0, trio).

Per slice (labels container, slice_id, gpu, uuid): FB limit, used, peak,
live allocations, refusals; GPU time granted (a counter), the compute target
(the kernel's basis points as a ratio) and the achieved share over the last
window (vgpu.daemon.compute.ShareMeter); per slice (container, slice_id) the
configured compute percent.  Per GPU (labels gpu, uuid, name): memory total,
allocated to slices (sum of limits), used (the driver's figure), slices; the
scheduler's slot switches and its own CPU time.  Plus vgpud_build_info
(the version, as a label), vgpud_slices, vgpud_kernel_loaded.  There is no
vgpud_up: a vgpud that answers a scrape is up, which Prometheus' own ``up``
says already (a gauge that could only ever be 1 said nothing).  Every
family has HELP and TYPE.

``render(manager)`` is pure (reads the manager's last kernel dump and
inventory); the server refreshes the dump (at most once a second) before
rendering, so a scrape costs one netlink dump.  One request per connection,
5 s to send it, at most 8 KiB of request head.

What it may call: the slice manager's read-only views.
"""

from __future__ import annotations

import logging

import trio

from vgpu import __version__

log = logging.getLogger("vgpud.metrics")

MAX_HEAD = 8192


def _esc(v) -> str:
    return str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(d: dict) -> str:
    return "{" + ",".join(f'{k}="{_esc(v)}"' for k, v in d.items()) + "}"


METRICS = [
    ("vgpu_slice_memory_limit_bytes", "gauge", "FB quota of a slice on one GPU"),
    ("vgpu_slice_memory_used_bytes", "gauge", "FB held by a slice on one GPU (vgpu.ko)"),
    ("vgpu_slice_memory_peak_bytes", "gauge", "highest FB held by a slice on one GPU"),
    ("vgpu_slice_allocations", "gauge", "live FB allocations of a slice on one GPU"),
    ("vgpu_slice_refusals_total", "counter", "FB allocations refused over quota"),
    ("vgpu_slice_compute_target_percent", "gauge", "compute quota of a slice"),
    ("vgpu_slice_gpu_time_seconds_total", "counter",
     "GPU time vgpu.ko granted a slice on one GPU while it wanted the GPU"),
    ("vgpu_slice_compute_target_ratio", "gauge",
     "compute setting of a slice on one GPU as vgpu.ko holds it (cap, floor or weight; 0..1)"),
    ("vgpu_slice_compute_achieved_ratio", "gauge",
     "share of wall time a slice got on one GPU over the last window (0..1)"),
    ("vgpu_slice_open_files", "gauge", "open files on a slice's device nodes"),
    ("vgpu_gpu_memory_total_bytes", "gauge", "FB of a GPU"),
    ("vgpu_gpu_memory_allocated_bytes", "gauge", "sum of the FB quotas of a GPU's slices"),
    ("vgpu_gpu_memory_used_bytes", "gauge", "FB in use on a GPU (driver)"),
    ("vgpu_gpu_slices", "gauge", "slices on a GPU"),
    ("vgpu_scheduler_switches_total", "counter", "slot changes of a GPU's compute scheduler"),
    ("vgpu_scheduler_cpu_seconds_total", "counter", "CPU time of a GPU's compute scheduler"),
]


def render(mgr) -> str:
    rows: dict[str, list[str]] = {m[0]: [] for m in METRICS}
    ks_all = mgr.kslices
    for c, rec in sorted(mgr.records.items(), key=lambda kv: kv[1].slice_id):
        ks = ks_all.get(rec.slice_id)
        e = rec.applied
        lim = rec.limits(e) if e else {}
        sl = {"container": c, "slice_id": rec.slice_id}
        if e is not None and e.spec.compute is not None:
            rows["vgpu_slice_compute_target_percent"].append(
                f"{_labels(sl)} {e.spec.compute:g}")
        if ks is not None:
            rows["vgpu_slice_open_files"].append(f"{_labels(sl)} {ks.open_files}")
        for i, g in enumerate(rec.gpus):
            gl = _labels({**sl, "gpu": g.gpu, "uuid": g.uuid or ""})
            ku = next((x for x in ks.gpus if x.index == i), None) if ks is not None else None
            rows["vgpu_slice_memory_limit_bytes"].append(
                f"{gl} {ku.mem_limit if ku else lim.get(i, 0)}")
            if ku is not None:
                rows["vgpu_slice_memory_used_bytes"].append(f"{gl} {ku.mem_used}")
                rows["vgpu_slice_memory_peak_bytes"].append(f"{gl} {ku.mem_peak}")
                rows["vgpu_slice_allocations"].append(f"{gl} {ku.allocs}")
                rows["vgpu_slice_refusals_total"].append(f"{gl} {ku.refusals}")
                rows["vgpu_slice_gpu_time_seconds_total"].append(f"{gl} {ku.gpu_time_ns / 1e9:.9g}")
                if ku.compute_policy:           # NONE: no setting, no target
                    rows["vgpu_slice_compute_target_ratio"].append(
                        f"{gl} {ku.compute_bp / 10000:g}")
                a = mgr.meter.share((ks.id, i))
                if a is not None:
                    rows["vgpu_slice_compute_achieved_ratio"].append(f"{gl} {a:.6g}")
    views = mgr.views()
    for g in mgr.gpus:
        gl = _labels({"gpu": g.index, "uuid": g.uuid, "name": g.name})
        v = views.get(g.index)
        rows["vgpu_gpu_memory_total_bytes"].append(f"{gl} {g.memory_total}")
        rows["vgpu_gpu_memory_allocated_bytes"].append(f"{gl} {v.memory_allocated if v else 0}")
        rows["vgpu_gpu_memory_used_bytes"].append(f"{gl} {g.memory_used}")
        rows["vgpu_gpu_slices"].append(
            f"{gl} {sum(1 for r in mgr.records.values() if any(x.gpu == g.index for x in r.gpus))}")
        si = mgr.scheds.get(g.minor)
        if si is not None:
            rows["vgpu_scheduler_switches_total"].append(f"{gl} {si.switches}")
            rows["vgpu_scheduler_cpu_seconds_total"].append(f"{gl} {si.cpu_ns / 1e9:.9g}")
    out = []
    for name, typ, help_ in METRICS:
        out.append(f"# HELP {name} {help_}")
        out.append(f"# TYPE {name} {typ}")
        out.extend(f"{name}{r}" for r in rows[name])
    for name, help_, value in (
            ("vgpud_build_info", "the vgpu version this vgpud runs (the value is 1)",
             f'{_labels({"version": __version__})} 1'),
            ("vgpud_slices", "slices vgpud holds (wanted, whether or not in vgpu.ko)",
             f" {len(mgr.records)}"),
            ("vgpud_kernel_loaded", "1 while vgpud is connected to vgpu.ko",
             f" {int(mgr.kport.kernel is not None)}")):
        out.append(f"# HELP {name} {help_}")
        out.append(f"# TYPE {name} gauge")
        out.append(f"{name}{value}")
    return "\n".join(out) + "\n"


def parse_listen(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    return host, int(port)


class MetricsServer:
    def __init__(self, mgr, listen: str):
        self.mgr = mgr
        self.host, self.port = parse_listen(listen)
        self.bound_port = None

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
                line = head.split(b"\n", 1)[0].decode("latin-1").split()
                if len(line) >= 2 and line[0] == "GET" and line[1].split("?")[0] == "/metrics":
                    await self.mgr.kdump(max_age=1.0)
                    await self.mgr.refresh_scheds(max_age=1.0)
                    body = render(self.mgr).encode()
                    status, ctype = "200 OK", "text/plain; version=0.0.4; charset=utf-8"
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
