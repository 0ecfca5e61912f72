"""vgpud's Prometheus text (vgpu.daemon.metrics.render) for a slice
manager's state (``env``: daemon_support's FakeKernel and FakeInventory).
"""

from __future__ import annotations

from daemon_support import call


async def test_metrics_render(env):
    from vgpu.daemon.metrics import render
    mgr, _, _ = env
    await call(mgr, "create", container="m1", memory="1GiB")
    await mgr.kdump()
    text = render(mgr)
    assert 'vgpu_slice_memory_limit_bytes{container="m1"' in text
    assert "vgpu_gpu_memory_total_bytes" in text and "vgpud_slices 1" in text
    assert 'vgpu_gpu_memory_allocated_bytes{gpu="0"' in text


async def test_every_family_has_help_and_type_and_build_info(env):
    import vgpu
    from vgpu.daemon import metrics as M
    mgr, _, _ = env
    text = M.render(mgr)
    helped = {ln.split()[2] for ln in text.splitlines() if ln.startswith("# HELP ")}
    typed = {ln.split()[2] for ln in text.splitlines() if ln.startswith("# TYPE ")}
    sampled = {ln.split("{")[0].split()[0] for ln in text.splitlines()
               if ln and not ln.startswith("#")}
    assert sampled <= helped == typed
    assert f'vgpud_build_info{{version="{vgpu.__version__}"}} 1' in text
    assert "vgpud_up" not in text
