"""vgpud's Prometheus metrics (vgpu.daemon.metrics) for a slice manager's
state (``env``: daemon_support's FakeKernel and FakeInventory): the
families as Prometheus' own parser reads them back, the Kubernetes names
as labels, and the HTTP endpoint with its content negotiation."""

from __future__ import annotations

import trio
from prometheus_client.openmetrics.parser import \
    text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_text

import vgpu
from vgpu.daemon import metrics
from vgpu.common.request import LABELS as K8S_LABELS

from daemon_support import call

GiB = 1 << 30


def samples(text: str, parse=parse_text) -> dict[str, list]:
    out: dict[str, list] = {}
    for fam in parse(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append(s)
    return out


async def test_metrics_render(env):
    mgr, _, _ = env
    await call(mgr, "create", container="m1", memory="1GiB")
    await mgr.kdump()
    got = samples(metrics.render(mgr))
    (lim,) = got["vgpu_slice_memory_limit_bytes"]
    assert lim.labels["container"] == "m1" and lim.value == GiB
    assert lim.labels["pod"] == lim.labels["namespace"] == lim.labels["container_name"] == ""
    assert got["vgpud_slices"][0].value == 1
    assert {s.labels["gpu"] for s in got["vgpu_gpu_memory_total_bytes"]} == {"0", "1"}
    alloc = {s.labels["gpu"]: s.value for s in got["vgpu_gpu_memory_allocated_bytes"]}
    assert alloc["0"] + alloc["1"] == GiB
    # counters carry _total, as Prometheus' conventions and its parser want
    assert "vgpu_slice_refusals_total" in got and "vgpu_slice_gpu_time_seconds_total" in got


async def test_kubernetes_names_are_labels(env):
    """A slice the hook made for a pod's container carries its pod,
    namespace and container names as labels; the metrics show them."""
    mgr, _, _ = env
    labels = {K8S_LABELS["pod_name"]: "trainer-0", K8S_LABELS["pod_namespace"]: "ml",
              K8S_LABELS["container_name"]: "main", "team": "x"}
    r = await call(mgr, "create", container="c" * 64, memory="2Gi", labels=labels)
    assert "error" not in r, r
    await mgr.kdump()
    (s,) = samples(metrics.render(mgr))["vgpu_slice_memory_limit_bytes"]
    assert (s.labels["pod"], s.labels["namespace"], s.labels["container_name"]) == \
        ("trainer-0", "ml", "main")
    assert "team" not in s.labels          # other labels are not series labels


async def test_every_family_has_help_and_type_and_build_info(env):
    mgr, _, _ = env
    text = metrics.render(mgr)
    helped = {ln.split()[2] for ln in text.splitlines() if ln.startswith("# HELP ")}
    typed = {ln.split()[2] for ln in text.splitlines() if ln.startswith("# TYPE ")}
    # the text format names a counter's family with its _total
    assert helped == typed == {name if kind is metrics.G else name + "_total"
                               for name, kind, _, _ in metrics.METRICS}
    for fam in parse_text(text):
        assert fam.documentation, fam.name
    assert f'vgpud_build_info{{version="{vgpu.__version__}"}} 1.0' in text
    assert "vgpud_up" not in text
    # only vgpud's own families: not the library's process/platform collectors
    assert "process_cpu_seconds" not in text and "python_info" not in text


async def test_openmetrics_when_asked(env):
    mgr, _, _ = env
    await call(mgr, "create", container="m1", memory="1GiB")
    await mgr.kdump()
    text = metrics.render(mgr, accept="application/openmetrics-text; version=1.0.0")
    assert text.endswith("# EOF\n")
    got = samples(text, parse_openmetrics)
    assert got["vgpu_slice_memory_limit_bytes"][0].value == GiB


async def http_get(port: int, head: str) -> bytes:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    await stream.send_all(head.encode())
    data = b""
    while chunk := await stream.receive_some(65536):
        data += chunk
    await stream.aclose()
    return data


async def test_http_endpoint(env, nursery):
    mgr, _, _ = env
    srv = metrics.MetricsServer(mgr, "127.0.0.1:0")
    port = await nursery.start(srv.run)
    with trio.fail_after(10):
        plain = await http_get(port, "GET /metrics HTTP/1.0\r\n\r\n")
        om = await http_get(port, "GET /metrics HTTP/1.0\r\n"
                                  "Accept: application/openmetrics-text\r\n\r\n")
        missing = await http_get(port, "GET /other HTTP/1.0\r\n\r\n")
        bad = await http_get(port, "POST /metrics HTTP/1.0\r\n\r\n")
    head, _, body = plain.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 200") and b"text/plain; version=0.0.4" in head
    assert b"vgpud_slices 0.0" in body
    head, _, body = om.partition(b"\r\n\r\n")
    assert b"application/openmetrics-text" in head and body.endswith(b"# EOF\n")
    assert missing.startswith(b"HTTP/1.0 404") and bad.startswith(b"HTTP/1.0 400")
