#!/bin/sh
# The main job, run inside the VM by `make demo` with nvsim and vgpu.ko
# loaded: see tools/demo.py.
set -eu
exec "$VGPU_REPO/.venv/bin/python" "$VGPU_REPO/tools/demo.py"
