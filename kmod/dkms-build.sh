#!/bin/sh
# Build vgpu.ko for DKMS (kmod/dkms.conf's MAKE) against the real NVIDIA
# driver: vgpu.ko links nvidia_get_rm_ops, so modpost needs that export's
# Module.symvers line (its CRC, with CONFIG_MODVERSIONS) from the nvidia.ko
# this kernel runs.
#
#   dkms-build.sh KERNELVER [KERNEL_SOURCE_DIR]
#
# Where the line comes from, first match wins:
#   1. $NVIDIA_SYMVERS: a Module.symvers file;
#   2. $NVIDIA_KO: an nvidia.ko (.ko, .ko.xz, .ko.zst, .ko.gz) to read it from;
#   3. the path written in /etc/vgpu/nvidia-symvers (a Module.symvers file);
#   4. NVIDIA's DKMS build tree for the nvidia.ko version installed for
#      KERNELVER (/var/lib/dkms/nvidia*/<version>/build/Module.symvers), where
#      DKMS has not cleaned it yet;
#   5. the nvidia.ko installed for KERNELVER (modinfo -k KERNELVER -n nvidia,
#      else a search of /lib/modules/KERNELVER): nvidia-symvers.sh reads the
#      export and its CRC from the module itself and the line is written to
#      nvidia.symvers here.  This is the usual case: DKMS cleans NVIDIA's
#      build tree after every build, and driver containers and
#      distribution-built modules leave none on the host;
#   6. any other NVIDIA DKMS tree or /usr/src/nvidia-* (an older layout).
# A Module.symvers counts only if it exports nvidia_get_rm_ops.  A kernel
# without CONFIG_MODVERSIONS checks no CRCs: the line is still needed (modpost
# refuses an undefined symbol) but its CRC is not, and nvidia.ko has none.
set -eu
kver=${1:?usage: dkms-build.sh KERNELVER [KERNEL_SOURCE_DIR]}
ksrc=${2:-/lib/modules/$kver/build}
here=$(cd "$(dirname "$0")" && pwd)
generated=$here/nvidia.symvers

exports_rm_ops() { [ -r "$1" ] && grep -q '[[:space:]]nvidia_get_rm_ops[[:space:]]' "$1"; }

modversions() {     # whether KERNELVER's kernel checks symbol CRCs
    for c in "$ksrc/include/config/auto.conf" "$ksrc/.config" "/boot/config-$kver"; do
        if [ -r "$c" ]; then grep -q '^CONFIG_MODVERSIONS=y' "$c"; return; fi
    done
    return 0        # unknown: a CRC is needed if the module has one anyway
}

from_ko() {         # from_ko NVIDIA_KO: write $generated from the module
    if modversions; then n=; else n=-n; fi
    sh "$here/nvidia-symvers.sh" $n "$1" nvidia_get_rm_ops >"$generated.tmp" || {
        rm -f "$generated.tmp"; exit 1; }
    mv "$generated.tmp" "$generated"
    symvers=$generated
    echo "vgpu: nvidia_get_rm_ops of $1: $(cut -f1,4 "$generated" | tr '\t' ' ')"
}

installed_ko() {    # the nvidia.ko installed for KERNELVER, if any
    f=$(modinfo -k "$kver" -n nvidia 2>/dev/null || true)
    case $f in /*) [ -f "$f" ] && { echo "$f"; return; } ;; esac
    find "/lib/modules/$kver" \( -name nvidia.ko -o -name 'nvidia.ko.*' \) 2>/dev/null | sort | head -n 1
}

symvers=${NVIDIA_SYMVERS:-}
if [ -n "$symvers" ]; then
    :
elif [ -n "${NVIDIA_KO:-}" ]; then
    from_ko "$NVIDIA_KO"
elif [ -r /etc/vgpu/nvidia-symvers ]; then
    symvers=$(sed -n '1{s/[[:space:]]*$//;p}' /etc/vgpu/nvidia-symvers)
else
    nvver=$(modinfo -k "$kver" -F version nvidia 2>/dev/null || true)
    for f in ${nvver:+/var/lib/dkms/nvidia*/"$nvver"/build/Module.symvers}; do
        if exports_rm_ops "$f"; then symvers=$f; break; fi
    done
    if [ -z "$symvers" ]; then
        ko=$(installed_ko)
        if [ -n "$ko" ]; then from_ko "$ko"; fi
    fi
    if [ -z "$symvers" ]; then
        for f in /var/lib/dkms/nvidia*/*/build/Module.symvers \
                 /usr/src/nvidia-*/Module.symvers /usr/src/nvidia-*/kernel*/Module.symvers; do
            if exports_rm_ops "$f"; then symvers=$f; break; fi
        done
    fi
fi
if [ -z "$symvers" ]; then
    cat >&2 <<MSG
vgpu: no nvidia.ko installed for kernel $kver, and no Module.symvers of
NVIDIA's build for it: vgpu.ko links nvidia_get_rm_ops from nvidia.ko.
Install NVIDIA's driver for this kernel first and rerun
'dkms install vgpu/<version> -k $kver'; or name its module with NVIDIA_KO=,
or its Module.symvers with NVIDIA_SYMVERS= or in /etc/vgpu/nvidia-symvers.
MSG
    exit 1
fi
exports_rm_ops "$symvers" || {
    echo "vgpu: $symvers does not export nvidia_get_rm_ops (not NVIDIA's Module.symvers?)" >&2
    exit 1; }
echo "vgpu: building against $symvers"
exec make -C "$ksrc" M="$here/vgpu" NVIDIA_SYMVERS="$symvers" modules
