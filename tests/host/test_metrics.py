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
