#!/bin/sh
# Runs inside the VM, chrooted into the host's (read-only) root, from the
# entry script tools/vm/vm.py wrote.  Loads the requested modules, runs the
# command, then checks that nothing leaked and that the modules unload, and
# leaves result.json and dmesg.txt in the result share for the host.
set -u
OUT=/tmp/vmout
export HOME=/tmp/home
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PYTHONDONTWRITEBYTECODE=1
mkdir -p "$HOME"
cd "$VGPU_REPO" || exit 1

checks=""
check() { # name ok(0/1) detail
	detail=$(printf '%s' "$3" | tr '"\\\n' "'/ ")
	ok=false
	[ "$2" = 1 ] && ok=true
	checks="$checks${checks:+,}{\"name\":\"$1\",\"ok\":$ok,\"detail\":\"$detail\"}"
}

NVSIM_KO=${VGPU_NVSIM_KO:-kmod/nvsim/nvsim.ko}
VGPU_KO=${VGPU_VGPU_KO:-kmod/vgpu/vgpu.ko}
KMEMLEAK=/sys/kernel/debug/kmemleak

# kmemleak (the debug kernel): forget what boot left unreferenced, so that
# the scan after the run reports what the run leaked
if [ "${VGPU_KMEMLEAK:-0}" = 1 ]; then
	if [ -w "$KMEMLEAK" ]; then
		t0=$(date +%s)
		echo scan > "$KMEMLEAK" 2>/dev/null
		echo clear > "$KMEMLEAK"
		echo "vm-guest: kmemleak: boot's suspects cleared ($(($(date +%s) - t0)) s)"
	else
		check kmemleak 0 "$KMEMLEAK missing: this kernel has no kmemleak (or it is disabled)"
	fi
fi

loaded=""
if [ "$VGPU_LOAD_NVSIM" = 1 ]; then
	# shellcheck disable=SC2086
	if insmod "$NVSIM_KO" $VGPU_NVSIM_PARAMS; then
		loaded="nvsim"
		check load-nvsim 1 ""
	else
		check load-nvsim 0 "insmod $NVSIM_KO $VGPU_NVSIM_PARAMS failed"
	fi
fi
# NVIDIA's own driver (tools/realdrv), with no GPU: it needs drm's symbols,
# loads its RM core with the test-only switch, and makes no device nodes.
if [ -n "${VGPU_LOAD_NVIDIA:-}" ]; then
	modprobe drm 2>/dev/null
	if insmod "$VGPU_LOAD_NVIDIA/nvidia.ko" vgpu_test_no_gpu=1; then
		loaded="nvidia"
		if insmod "$VGPU_LOAD_NVIDIA/nvidia-uvm.ko"; then
			loaded="nvidia-uvm $loaded"
			check load-nvidia 1 ""
		else
			check load-nvidia 0 "insmod nvidia-uvm.ko failed"
		fi
		mknod -m 666 /dev/nvidiactl c 195 255
		maj=$(awk '$2=="nvidia-uvm" {print $1}' /proc/devices)
		if [ -n "$maj" ]; then
			mknod -m 666 /dev/nvidia-uvm c "$maj" 0
			mknod -m 666 /dev/nvidia-uvm-tools c "$maj" 1
		fi
	else
		check load-nvidia 0 "insmod $VGPU_LOAD_NVIDIA/nvidia.ko failed"
	fi
fi
if [ "$VGPU_LOAD_VGPU" = 1 ] && [ -n "$loaded" ]; then
	if insmod "$VGPU_KO"; then
		loaded="vgpu $loaded"
		check load-vgpu 1 ""
	else
		check load-vgpu 0 "insmod $VGPU_KO failed"
	fi
fi

# The loopback interface, as any machine has it (the guest has no other
# network): tests that serve HTTP to themselves (tests/vm/test_dra.py's
# test API server) listen on 127.0.0.1.
ip link set lo up 2>/dev/null || echo "vm-guest: cannot bring up lo"

echo "vm-guest: running: $VGPU_CMD"
sh -c "$VGPU_CMD"
rc=$?
echo "vm-guest: command exited with status $rc"

# leak_check NAME FILE AWK: fail check NAME if the awk program prints any
# line of FILE (a debugfs state file) once the run is over.  Releases of
# files closed by exiting processes may still be in flight: retry for 5 s.
leak_check() {
	[ "$VGPU_CHECK_LEAKS" = 1 ] && [ -r "$2" ] || return 0
	leaked=""
	for _ in 1 2 3 4 5 6 7 8 9 10; do
		leaked=$(awk "$3" "$2")
		[ -z "$leaked" ] && break
		sleep 0.5
	done
	if [ -z "$leaked" ]; then check "$1" 1 ""; else check "$1" 0 "live after the run: $leaked"; fi
}

leak_check nvsim-leaks /sys/kernel/debug/nvsim/state \
	'($1=="objects"||$1=="clients"||$1=="mappings") && $2!=0 {print} $1=="gpu" && $6!=0 {print}'
leak_check vgpu-leaks /sys/kernel/debug/vgpu/state \
	'($1=="files"||$1=="objects"||$1=="charges"||$1=="tsgs"||$1=="userd_maps"||$1=="proxies"||$1=="ranges"||$1=="reapers") && $2!=0 {print}'

# kmemleak: scan while the modules are loaded (backtraces name their
# functions), again once they are gone (what only their globals still
# pointed to); kmemleak reports objects older than 5 s only
kmemleak_scan() {
	[ "${VGPU_KMEMLEAK:-0}" = 1 ] && [ -w "$KMEMLEAK" ] || return 0
	sleep 6
	t0=$(date +%s)
	echo scan > "$KMEMLEAK"
	echo "vm-guest: kmemleak scan: $(($(date +%s) - t0)) s"
}
kmemleak_scan

for m in $loaded; do
	if rmmod "$m"; then check "unload-$m" 1 ""; else check "unload-$m" 0 "rmmod $m failed"; fi
done

if [ "${VGPU_KMEMLEAK:-0}" = 1 ] && [ -w "$KMEMLEAK" ]; then
	kmemleak_scan
	cat "$KMEMLEAK" > "$OUT/kmemleak.txt"
	n=$(grep -c "unreferenced object" "$OUT/kmemleak.txt")
	if [ "$n" = 0 ]; then check kmemleak 1 ""
	else check kmemleak 0 "$n unreferenced objects (the report follows the summary)"; fi
fi

dmesg > "$OUT/dmesg.txt"
printf '{"rc":%d,"checks":[%s]}\n' "$rc" "$checks" > "$OUT/result.json.tmp"
mv "$OUT/result.json.tmp" "$OUT/result.json"
