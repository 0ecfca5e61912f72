#!/bin/sh
# The main job, run inside the VM by `make demo` with nvsim loaded: show the
# simulated GPUs as the RM ABI reports them, then probe how much FB a client
# can allocate before the driver says NV_ERR_NO_MEMORY.
set -eu
PY="$VGPU_REPO/.venv/bin/python"
echo "==== vgpu demo: simulated GPUs (nvsim $(cat /sys/module/nvsim/parameters/driver_version 2>/dev/null || echo '?')) ===="
"$PY" -m vgpu.nvclient info
echo
echo "==== allocation probe: GPU 0, 1 GiB chunks through RM_ALLOC (class 0x40) ===="
"$PY" -m vgpu.nvclient probe --gpu 0 --chunk 1GiB --path rm-alloc
echo
echo "==== allocation probe: GPU 1, 512 MiB chunks through RM_VID_HEAP_CONTROL ===="
"$PY" -m vgpu.nvclient probe --gpu 1 --chunk 512MiB --path vid-heap
