#!/bin/sh
# Runs bench/setquota.py inside the VM against a real vgpud on vgpu.ko:
#   python3 tools/vm/vm.py run --load-nvsim --load-vgpu -- sh bench/setquota_vm.sh [RUNS]
# The example config is used with its state directory moved to /tmp (the
# guest's root filesystem is read-only).
set -eu
RUNS="${1:-200}"
CONF=/tmp/vgpud-bench.toml
sed 's|^state_dir = .*|state_dir = "/tmp/vgpu-state"|' config/vgpud.example.toml > "$CONF"
.venv/bin/vgpud --config "$CONF" 2>/tmp/vgpud-bench.log &
DAEMON=$!
for _ in $(seq 1 150); do [ -S /run/vgpu/vgpud.sock ] && break; sleep 0.2; done
.venv/bin/python bench/setquota.py --runs "$RUNS"
kill -TERM "$DAEMON"
wait "$DAEMON" || true
