#!/bin/sh
# /init of the VM test bed's initramfs (busybox).  Mounts the host's root
# read-only over 9p, makes the few writable places a test run needs, and runs
# the entry script the host left in the writable "vmout" share.  Power off
# at the end whatever happens, so qemu always exits.
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev

die() {
	echo "vm-init: $*"
	poweroff -f
}

while read -r m; do
	insmod "/mods/$m" || echo "vm-init: insmod $m failed"
done < /mods/order

R=/newroot
mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=262144 hostroot $R ||
	die "cannot mount the host root over 9p"
mount -t proc proc $R/proc
mount -t sysfs sys $R/sys
mount -t devtmpfs dev $R/dev
mkdir -p $R/dev/pts $R/dev/shm
mount -t devpts -o newinstance,ptmxmode=0666 devpts $R/dev/pts
mount -t tmpfs -o mode=1777 shm $R/dev/shm
mount -t debugfs debugfs $R/sys/kernel/debug
mount -t cgroup2 cgroup2 $R/sys/fs/cgroup 2>/dev/null
for d in tmp run var/tmp var/log; do
	mount -t tmpfs -o mode=1777 tmpfs "$R/$d" || die "cannot mount tmpfs on /$d"
done
# The repository gets a share of its own, mounted at its host path: a
# checkout under /tmp (or another tmpfs above) would be hidden otherwise.
REPO=""
for arg in $(cat /proc/cmdline); do
	case "$arg" in vgpu_repo=*) REPO="${arg#vgpu_repo=}" ;; esac
done
[ -n "$REPO" ] || die "no vgpu_repo= on the kernel command line"
mkdir -p "$R$REPO" 2>/dev/null
mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=262144 repo "$R$REPO" ||
	die "cannot mount the repository at $REPO"
mkdir -p $R/tmp/vmout
mount -t 9p -o trans=virtio,version=9p2000.L,rw vmout $R/tmp/vmout ||
	die "cannot mount the result share"

chroot $R /bin/sh /tmp/vmout/guest-entry.sh
sync
umount $R/tmp/vmout 2>/dev/null
poweroff -f
