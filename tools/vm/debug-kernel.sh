#!/bin/bash
# The debug kernel of the VM test bed (README "The debug kernel").
#
#   tools/vm/debug-kernel.sh build   build it if the cache lacks it; print its directory
#   tools/vm/debug-kernel.sh dir     print the directory it is (or would be) cached in
#   tools/vm/debug-kernel.sh modules OUT
#                                    build it if needed, then nvsim.ko and vgpu.ko
#                                    against it from a copy of kmod/ in OUT
#
# Debian's own kernel source (linux-source-6.1, the kernel the VM normally
# boots) built with a small config for the VM: x86_64 defconfig plus
# kvm_guest.config, everything the VM needs built in (virtio-pci, 9p, tmpfs,
# devtmpfs, FUSE, overlayfs, cgroup v2 with the BPF device filter,
# namespaces, seccomp, debugfs), the rest of what defconfig brings that the
# VM never uses (DRM, sound, USB, wireless, netfilter, NFS) left out, and the
# checkers on: KASAN (generic, inline), lockdep (PROVE_LOCKING), atomic-sleep
# checks, kmemleak, UBSAN, DEBUG_LIST, fault injection (failslab,
# fail_page_alloc, their debugfs knobs, fail-nth), and kcov (not
# instrumenting the kernel itself: a module built with KCOV_INSTRUMENT=y
# gets coverage).  No panic_on_warn: the harness reads dmesg.
#
# Cached in $VGPU_CACHE/debug-kernel/<source package version>-<config key>/
# (VGPU_CACHE defaults to /var/cache/vgpu): built once per machine, rebuilt
# when the source package or the config below changes.  The directory holds
# bzImage, kernel.release and the built tree itself (linux/), which is the
# build directory out-of-tree modules are compiled against (Module.symvers,
# generated headers, scripts).  JOBS (default: the number of CPUs) sets make -j.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
CACHE=${VGPU_CACHE:-/var/cache/vgpu}/debug-kernel
SRC_PKG=linux-source-6.1
SRC_TAR=/usr/src/linux-source-6.1.tar.xz
JOBS=${JOBS:-$(nproc)}
LOCALVERSION=-vgpu-debug

# Options forced on (=y) after defconfig + kvm_guest.config.
ENABLE=(
	# the VM's boot path and what the guest mounts (tools/vm/init.sh)
	PCI VIRTIO_MENU VIRTIO VIRTIO_PCI NET_9P NET_9P_VIRTIO 9P_FS 9P_FS_POSIX_ACL
	DEVTMPFS TMPFS TMPFS_POSIX_ACL TMPFS_XATTR PROC_FS SYSFS DEBUG_FS
	SERIAL_8250 SERIAL_8250_CONSOLE ACPI BLK_DEV_INITRD RD_GZIP
	# vgpud's vgpufs, containers (runc, containerd's overlay snapshotter)
	FUSE_FS OVERLAY_FS
	CGROUPS CGROUP_BPF BPF_SYSCALL CGROUP_DEVICE CGROUP_PIDS CGROUP_FREEZER CPUSETS
	MEMCG CGROUP_SCHED FAIR_GROUP_SCHED CFS_BANDWIDTH BLK_CGROUP CGROUP_CPUACCT
	NAMESPACES USER_NS PID_NS NET_NS IPC_NS UTS_NS SYSVIPC POSIX_MQUEUE
	SECCOMP SECCOMP_FILTER UNIX INET IPV6 PACKET NETLINK_DIAG
	INOTIFY_USER FANOTIFY EPOLL SIGNALFD TIMERFD EVENTFD AIO FUTEX FHANDLE
	# nvsim.ko and vgpu.ko; KVM for MMU_NOTIFIER (not user-selectable), which
	# vgpu.ko's charge of UVM managed ranges needs (kmod/vgpu/managed.c)
	MODULES MODULE_UNLOAD KALLSYMS KALLSYMS_ALL KVM
	# the checkers
	DEBUG_KERNEL KASAN KASAN_GENERIC KASAN_INLINE KASAN_VMALLOC
	PROVE_LOCKING DEBUG_ATOMIC_SLEEP DEBUG_LIST
	DEBUG_KMEMLEAK
	UBSAN UBSAN_BOUNDS UBSAN_SHIFT UBSAN_DIV_ZERO UBSAN_BOOL UBSAN_ENUM UBSAN_SANITIZE_ALL
	FAULT_INJECTION FAILSLAB FAIL_PAGE_ALLOC FAULT_INJECTION_DEBUG_FS
	# (6.1 offers the stack-trace filter on x86 but not x86_64: target a
	# failure with /proc/self/task/<tid>/fail-nth or failslab's task-filter)
	FAULT_INJECTION_STACKTRACE_FILTER
	KCOV
	DEBUG_INFO_NONE
)
# Options forced off.
DISABLE=(
	MODULE_SIG MODVERSIONS LOCALVERSION_AUTO
	KASAN_OUTLINE UBSAN_ALIGNMENT DEBUG_KMEMLEAK_DEFAULT_OFF DEBUG_KMEMLEAK_AUTO_SCAN
	KCOV_INSTRUMENT_ALL PANIC_ON_OOPS BOOTPARAM_SOFTLOCKUP_PANIC BOOTPARAM_HUNG_TASK_PANIC
	DEBUG_INFO_DWARF_TOOLCHAIN_DEFAULT DEBUG_INFO_DWARF4 DEBUG_INFO_DWARF5 DEBUG_INFO_BTF
	DRM FB SOUND USB_SUPPORT WLAN WIRELESS CFG80211 MAC80211 BT RFKILL
	NETFILTER NFS_FS NFSD ROOT_NFS NETWORK_FILESYSTEMS_UNUSED MD HAMRADIO
	AGP HID INPUT_JOYSTICK INPUT_TABLET INPUT_TOUCHSCREEN PCCARD HIBERNATION
	ETHERNET NET_VENDOR_INTEL E1000 E1000E
)
# Options with values.
VALUES=(
	LOCALVERSION=\"$LOCALVERSION\"
	DEBUG_KMEMLEAK_MEM_POOL_SIZE=64000
	LOCKDEP_BITS=16 LOCKDEP_CHAINS_BITS=17 LOCKDEP_STACK_TRACE_BITS=20
	LOCKDEP_STACK_TRACE_HASH_BITS=16 LOCKDEP_CIRCULAR_QUEUE_BITS=13
	FRAME_WARN=0
)
# What a built kernel must have, checked against the final .config.
REQUIRE=(
	VIRTIO_PCI NET_9P NET_9P_VIRTIO 9P_FS DEVTMPFS TMPFS FUSE_FS OVERLAY_FS
	CGROUP_BPF BPF_SYSCALL USER_NS PID_NS NET_NS SECCOMP_FILTER DEBUG_FS
	SERIAL_8250_CONSOLE MODULES MODULE_UNLOAD MMU_NOTIFIER
	KASAN KASAN_GENERIC KASAN_INLINE PROVE_LOCKING DEBUG_ATOMIC_SLEEP DEBUG_LIST
	DEBUG_KMEMLEAK UBSAN UBSAN_BOUNDS FAULT_INJECTION FAILSLAB FAULT_INJECTION_DEBUG_FS KCOV
)

die() { echo "debug-kernel: $*" >&2; exit 1; }

src_version() {
	dpkg-query -W -f='${Version}' "$SRC_PKG" 2>/dev/null || true
}

kernel_dir() {
	local ver key
	ver=$(src_version)
	[ -n "$ver" ] || die "$SRC_PKG is not installed (apt-get install $SRC_PKG; make deps-debug)"
	# the config lists are part of the key: changing them builds a new kernel
	key=$(printf '%s\n' "${ENABLE[*]}" "${DISABLE[*]}" "${VALUES[*]}" | sha256sum | cut -c1-10)
	echo "$CACHE/$ver-$key"
}

configure() { # in the tree
	make -s defconfig >/dev/null
	make -s kvm_guest.config >/dev/null
	local o args=()
	for o in "${ENABLE[@]}"; do args+=(-e "$o"); done
	for o in "${DISABLE[@]}"; do args+=(-d "$o"); done
	for o in "${VALUES[@]}"; do args+=(--set-val "${o%%=*}" "${o#*=}"); done
	./scripts/config "${args[@]}"
	./scripts/config --set-str LOCALVERSION "$LOCALVERSION"
	make -s olddefconfig >/dev/null
	# the VM loads no module but nvsim.ko and vgpu.ko: what defconfig left
	# as a module is built in (or, where it cannot be, stays a module unused)
	sed -i 's/=m$/=y/' .config
	make -s olddefconfig >/dev/null
	local missing=""
	for o in "${REQUIRE[@]}"; do
		grep -qx "CONFIG_$o=y" .config || missing="$missing $o"
	done
	[ -z "$missing" ] || die "the config lacks:$missing"
}

build() {
	local dir tree
	dir=$(kernel_dir)
	[ -f "$dir/.done" ] && { echo "$dir"; return; }
	[ -r "$SRC_TAR" ] || die "$SRC_TAR missing (apt-get install $SRC_PKG)"
	mkdir -p "$CACHE"
	exec 9>"$CACHE/.lock"
	flock 9
	[ -f "$dir/.done" ] && { echo "$dir"; return; }
	rm -rf "$dir"
	mkdir -p "$dir"
	tree="$dir/linux"
	echo "debug-kernel: building $SRC_PKG $(src_version) in $dir (make -j$JOBS)" >&2
	local t0=$SECONDS
	tar -C "$dir" -xf "$SRC_TAR"
	mv "$dir/linux-source-6.1" "$tree"
	(
		cd "$tree"
		configure
		# bzImage, the few modules left, and Module.symvers for M= builds
		make -j"$JOBS" -s bzImage modules
		make -s modules_prepare
	) >&2
	cp "$tree/arch/x86/boot/bzImage" "$dir/bzImage"
	make -s -C "$tree" kernelrelease > "$dir/kernel.release"
	cp "$tree/.config" "$dir/config"
	echo "$((SECONDS - t0))" > "$dir/build-seconds"
	touch "$dir/.done"
	# older builds of this source/config are dead weight (a built tree is 2.3 GiB)
	for old in "$CACHE"/*/; do
		old=${old%/}
		[ "$old" = "$dir" ] || rm -rf "$old"
	done
	echo "debug-kernel: built $(cat "$dir/kernel.release") in $((SECONDS - t0)) s" >&2
	echo "$dir"
}

modules() { # OUT
	local out=$1 dir m
	[ -n "$out" ] || die "usage: $0 modules OUTDIR"
	dir=$(build)
	mkdir -p "$out"
	out=$(cd "$out" && pwd)
	# a copy of the sources: kmod/'s own objects (make modules, built for the
	# distribution kernel) are left alone; Kbuild's ../include and
	# ../nvsim/Module.symvers resolve inside the copy
	mkdir -p "$out/include" "$out/nvsim" "$out/vgpu"
	rm -rf "$out/include"
	cp -a "$REPO/kmod/include" "$out/include"
	for m in nvsim vgpu; do
		[ -f "$REPO/kmod/$m/Kbuild" ] || continue
		# sources only; stale objects of a removed source must not linger
		find "$out/$m" -maxdepth 1 -type f \( -name '*.c' -o -name '*.h' -o -name Kbuild \) -delete
		cp -p "$REPO/kmod/$m/Kbuild" "$REPO/kmod/$m"/*.h "$out/$m/"
		for f in "$REPO/kmod/$m"/*.c; do
			case "$f" in *.mod.c) continue ;; esac
			cp -p "$f" "$out/$m/"
		done
		make --no-print-directory -C "$dir/linux" M="$out/$m" -j"$JOBS" modules >&2
	done
	echo "$dir"
}

case "${1:-}" in
build) build ;;
dir) kernel_dir ;;
modules) modules "${2:-}" ;;
*) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
