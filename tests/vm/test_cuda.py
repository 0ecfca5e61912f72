"""NVIDIA's CUDA driver library (libcuda.so.1 of 535.261.03, Debian's
libcuda1) on nvsim directly: cuInit and the device queries.

nvsim is reloaded as one GH100 presenting 535.261.03 (a temporary alias of
535.288.01's tables until nvgen has 535.261.03's own) with fb_backing=1,
and back afterwards, so this runs in the VM group without vgpu.ko:

    tools/vm/vm.py run --load-nvsim -- .venv/bin/python -m pytest -q tests/vm/test_cuda.py

libcuda runs in a child process (ctypes, no CUDA toolkit); what it asked
of the driver and how nvsim answered is in docs/cuda.md and
kmod/nvsim/cuda.c.
"""

from __future__ import annotations

import json

import pytest

import nvsim_reload
from cuda_lib import libcuda_missing, run_cuda

GiB = 1 << 30
GH100 = {"num_gpus": "1", "fb_size": str(16 * GiB), "driver_version": "535.261.03",
         "gpu_name": "NVIDIA nvsim H100", "fb_backing": "1"}


def _reason() -> str | None:
    return nvsim_reload.skip_reason() or libcuda_missing()


pytestmark = pytest.mark.skipif(_reason() is not None, reason=_reason() or "")


@pytest.fixture(scope="module", autouse=True)
def gh100_535():
    with nvsim_reload.reloaded(GH100):
        yield


DEVICE_QUERIES = """
    check('cuInit', 0)
    n = ctypes.c_int()
    check('cuDeviceGetCount', ctypes.byref(n)); out['count'] = n.value
    dev = ctypes.c_int()
    check('cuDeviceGet', ctypes.byref(dev), 0)
    name = ctypes.create_string_buffer(256)
    check('cuDeviceGetName', name, 256, dev); out['name'] = name.value.decode()
    tm = ctypes.c_size_t()
    check('cuDeviceTotalMem_v2', ctypes.byref(tm), dev); out['total'] = tm.value
    # CUdevice_attribute: 1 MAX_THREADS_PER_BLOCK, 75/76 COMPUTE_CAPABILITY
    # MAJOR/MINOR, 41 UNIFIED_ADDRESSING, 33 PCI_BUS_ID, 50 PCI_DEVICE_ID
    for k, a in (('maxThreadsPerBlock', 1), ('ccMajor', 75), ('ccMinor', 76),
                 ('unifiedAddressing', 41), ('pciBus', 33), ('pciDevice', 50)):
        v = ctypes.c_int()
        check('cuDeviceGetAttribute', ctypes.byref(v), a, dev); out[k] = v.value
    uuid = ctypes.create_string_buffer(16)
    check('cuDeviceGetUuid', uuid, dev); out['uuid'] = uuid.raw.hex()
    print(json.dumps(out))
"""


def card0():
    """The GPU as the driver's CARD_INFO gives it (closed before libcuda runs)."""
    from vgpu.abi.nvclient import RmClient
    c = RmClient("/dev")
    try:
        return c.card_info()[0]
    finally:
        c.close()


def test_cuinit_and_device_queries():
    card = card0()
    r = run_cuda(DEVICE_QUERIES)
    assert r.returncode == 0, (r.stdout, r.stderr)
    out = json.loads(r.stdout.splitlines()[-1])
    assert out["count"] == 1
    assert out["name"] == "NVIDIA nvsim H100"
    assert out["total"] == 16 * GiB
    # GH100: compute capability 9.0 (GR_GET_INFO's SM version), 1024
    # threads per block, unified addressing (UVM).
    assert (out["ccMajor"], out["ccMinor"]) == (9, 0)
    assert out["maxThreadsPerBlock"] == 1024
    assert out["unifiedAddressing"] == 1
    # The GPU's PCI address as CARD_INFO gives it, and a UUID.
    assert (out["pciBus"], out["pciDevice"]) == (card.bus, card.slot)
    assert len(out["uuid"]) == 32 and int(out["uuid"], 16) != 0
