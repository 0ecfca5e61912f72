"""tinygrad's NV backend on nvsim directly (no vgpu.ko, no slice).

tinygrad 0.14.0 drives NVIDIA GPUs through the driver's ioctls (its NVKIface:
RM clients, UVM, GPFIFO channels whose rings and USERD live in client
memory, host semaphores and the copy engine's LAUNCH_DMA).  This runs its
Device['NV'] initialisation and one buffer round trip (host -> NV -> host,
both ways through the copy engine) against nvsim loaded as a GA102
(gpu_name 'NVIDIA GeForce RTX 3090': tinygrad picks consumer compute/copy
classes, not Hopper's).

nvsim is reloaded as one GA102 with fb_backing=1 for the module and back
afterwards (as test_nvsim_startup.py's other models), so this needs vgpu.ko
not loaded:

    tools/vm/vm.py run --load-nvsim -- .venv/bin/python -m pytest -q tests/vm/test_tinygrad.py

Without CUDA installed nothing else is needed: tinygrad picks a renderer
(CUDA, PTX, NVCC, NAK) only when it compiles a kernel (Compiled.renderer is
a lazy property), and neither Device['NV'] nor a copy compiles one.  DEV=NV
(tinygrad's documented device selector) only makes NV the default device.

tinygrad runs in a child process: its import takes 10-30 s under TCG
(mostly stat()s over 9p looking for libraries), Device['NV'] 40-90 s
(tinygrad's own imports of its NV support modules; the ioctls take about
2 s), the copy a few seconds.  The child's output is the test's evidence,
and the leak check runs after it exited.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

import nvsim_reload

GA102 = nvsim_reload.GA102

pytestmark = pytest.mark.skipif(nvsim_reload.skip_reason() is not None,
                                reason=nvsim_reload.skip_reason() or "")


@pytest.fixture(scope="module", autouse=True)
def ga102():
    """nvsim reloaded as one GA102, and back afterwards."""
    with nvsim_reload.reloaded(GA102):
        yield


CHILD = textwrap.dedent("""
    import time
    t0 = time.monotonic()
    from tinygrad import Device, Tensor
    t1 = time.monotonic()
    dev = Device['NV']
    t2 = time.monotonic()
    print('arch', dev.arch, 'compute', hex(dev.iface.compute_class),
          'copy', hex(dev.iface.dma_class), flush=True)
    data = [(i * 2654435761) % 2**31 for i in range(5000)]      # 20000 bytes
    t = Tensor(data, device='NV').realize()
    back = t.tolist()
    t3 = time.monotonic()
    assert back == data, (back[:8], data[:8])
    # The copy engine did it: no channel stopped, entries completed.
    tsgs = [l.split() for l in open('/sys/kernel/debug/nvsim/state') if l.startswith('tsg ')]
    assert len(tsgs) == 1 and tsgs[0][tsgs[0].index('errors') + 1] == '0', tsgs
    print('roundtrip ok', flush=True)
    print(f'import {t1 - t0:.1f}s init {t2 - t1:.1f}s copy {t3 - t2:.1f}s', flush=True)
""")


def test_device_init_and_copy():
    env = dict(os.environ, DEV="NV", PYTHONUNBUFFERED="1")
    r = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                       text=True, timeout=540)
    sys.stdout.write(r.stdout)
    sys.stderr.write(r.stderr)
    assert r.returncode == 0, r.stderr[-4000:]
    assert "roundtrip ok" in r.stdout
