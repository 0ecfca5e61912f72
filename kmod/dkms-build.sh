#!/bin/sh
# Build vgpu.ko for DKMS (kmod/dkms.conf's MAKE) against the real NVIDIA
# driver: vgpu.ko links nvidia_get_rm_ops, so modpost needs the
# Module.symvers of the nvidia.ko build for this kernel.
#
#   dkms-build.sh KERNELVER [KERNEL_SOURCE_DIR]
#
# Where that Module.symvers is, first match wins:
#   1. $NVIDIA_SYMVERS;
#   2. the path written in /etc/vgpu/nvidia-symvers;
#   3. NVIDIA's DKMS build tree for the nvidia.ko version installed for
#      KERNELVER (/var/lib/dkms/nvidia*/<version>/build), then any
#      /var/lib/dkms/nvidia*/*/build, then /usr/src/nvidia-*;
# a candidate counts only if it exports nvidia_get_rm_ops.
set -eu
kver=${1:?usage: dkms-build.sh KERNELVER [KERNEL_SOURCE_DIR]}
ksrc=${2:-/lib/modules/$kver/build}
here=$(cd "$(dirname "$0")" && pwd)

exports_rm_ops() { [ -r "$1" ] && grep -q '[[:space:]]nvidia_get_rm_ops[[:space:]]' "$1"; }

symvers=${NVIDIA_SYMVERS:-}
if [ -z "$symvers" ] && [ -r /etc/vgpu/nvidia-symvers ]; then
    symvers=$(sed -n '1{s/[[:space:]]*$//;p}' /etc/vgpu/nvidia-symvers)
fi
if [ -n "$symvers" ]; then
    exports_rm_ops "$symvers" || {
        echo "vgpu: $symvers does not export nvidia_get_rm_ops (not NVIDIA's Module.symvers?)" >&2
        exit 1; }
else
    nvver=$(modinfo -k "$kver" -F version nvidia 2>/dev/null || true)
    for f in ${nvver:+/var/lib/dkms/nvidia*/"$nvver"/build/Module.symvers} \
             /var/lib/dkms/nvidia*/*/build/Module.symvers \
             /usr/src/nvidia-*/Module.symvers /usr/src/nvidia-*/kernel*/Module.symvers; do
        if exports_rm_ops "$f"; then symvers=$f; break; fi
    done
fi
if [ -z "$symvers" ]; then
    cat >&2 <<MSG
vgpu: cannot find NVIDIA's Module.symvers for kernel $kver (the build of
nvidia.ko that exports nvidia_get_rm_ops).  Build the NVIDIA driver for this
kernel first, then either rerun, or write the path of its Module.symvers into
/etc/vgpu/nvidia-symvers (or set NVIDIA_SYMVERS) and rerun
'dkms install vgpu/<version> -k $kver'.
MSG
    exit 1
fi
echo "vgpu: building against $symvers"
exec make -C "$ksrc" M="$here/vgpu" NVIDIA_SYMVERS="$symvers" modules
