"""NVIDIA's own open kernel modules for the VM test bed, built from the vendor
archive and cached outside the checkout.

    python3 -m tools.realdrv.build [--release R] [--kernel KVER] [--cache DIR] [--jobs N]

prints the directory that holds nvidia.ko, nvidia-uvm.ko and their
Module.symvers.  R is 595.45.04 (the default) or 535.261.03, the release
whose user space (libcuda, NVML, nvidia-smi) Debian ships; each is built from
its whole vendored tree (open-gpu-kernel-modules-R.tar.xz).  The build
applies one test-only patch (zero-gpu.patch, zero-gpu-535.261.03.patch: a
module parameter that lets nvidia.ko load with no GPU, as it does when an
NVSwitch is present) and, for 535.261.03 only where the kernel needs it,
pci-resize-exclude-bars-535.261.03.patch (Debian's 6.1 has
pci_resize_resource's fourth argument by backport; 535's nv-pci.c predates
it and has no conftest for it, 595's has), and nothing else.  On Debian the driver's configuration
tests need SYSSRC to be the -common headers and SYSOUT the arch ones;
otherwise they misdetect the kernel without saying so.

The cache key is the release, the kernel version and a hash of the archive,
the patch and BUILD_RECIPE: a warm build costs nothing, a cold one about 11
minutes on 2 cores (most of it the kernel-independent RM core).  The cache
is $VGPU_CACHE/realdrv (default /var/cache/vgpu/realdrv); the VM reads the
modules from there, so it must not lie under /tmp, /run, /var/tmp or
/var/log, which the guest mounts over (tools/vm/vm.py refuses them).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tools.nvgen import vendor  # noqa: E402

RELEASE = vendor.TREE_RELEASE
PATCH = HERE / "zero-gpu.patch"
# The releases this builds, each its zero-GPU patch (the default's is PATCH).
ZERO_GPU = {RELEASE: None, "535.261.03": HERE / "zero-gpu-535.261.03.patch"}
# Patches applied only where the kernel's headers need them: (patch, the
# header, the text it holds when it does).
KERNEL_PATCHES = {
    "535.261.03": [(HERE / "pci-resize-exclude-bars-535.261.03.patch", "include/linux/pci.h",
                    "exclude_bars")],
}
MODULES = ("nvidia", "nvidia-uvm")
# Bump when the steps below change what they produce.
BUILD_RECIPE = "1"


def archive_name(release: str) -> str:
    return f"open-gpu-kernel-modules-{release}.tar.xz"


def patches(release: str, kver: str | None = None) -> list[Path]:
    """The patches the build of release for kver applies, in order."""
    if release not in ZERO_GPU:
        sys.exit(f"realdrv: no recipe for release {release} (have: {', '.join(ZERO_GPU)})")
    out = [ZERO_GPU[release] or PATCH]
    for patch, header, needs in KERNEL_PATCHES.get(release, ()):
        if kver is None:
            continue
        try:
            syssrc, _ = header_dirs(kver)
        except SystemExit:
            continue
        h = syssrc / header
        if h.is_file() and needs in h.read_text(errors="replace"):
            out.append(patch)
    return out


def cache_root() -> Path:
    """$VGPU_CACHE/realdrv, /var/cache/vgpu/realdrv by default (as the
    debug kernel's: tools/vm/debug-kernel.sh)."""
    return Path(os.environ.get("VGPU_CACHE") or "/var/cache/vgpu") / "realdrv"


def default_kernel() -> str:
    """The newest kernel with headers (what tools/vm/vm.py boots by default)."""
    have = sorted(p.name for p in Path("/lib/modules").iterdir() if (p / "build").exists())
    if not have:
        sys.exit("realdrv: no kernel headers under /lib/modules/*/build (run `make deps`)")
    return have[-1]


def header_dirs(kver: str) -> tuple[Path, Path]:
    """(SYSSRC, SYSOUT): Debian's -common headers and the arch ones."""
    out = Path(f"/usr/src/linux-headers-{kver}")
    flavour = kver.rsplit("-", 1)
    common = Path(f"/usr/src/linux-headers-{flavour[0]}-common") if len(flavour) == 2 else out
    if not out.is_dir():
        sys.exit(f"realdrv: {out} missing (run `make deps`)")
    return (common if common.is_dir() else out), out


def key(archive: Path, applied: list[Path] | None = None) -> str:
    h = hashlib.sha256()
    with archive.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    for p in applied or [PATCH]:
        h.update(p.read_bytes())
    h.update(BUILD_RECIPE.encode())
    return h.hexdigest()[:12]


def run(cmd: list[str], cwd: Path, log) -> None:
    log.write(f"$ {' '.join(cmd)}  (in {cwd})\n")
    log.flush()
    r = subprocess.run(cmd, cwd=cwd, stdout=log, stderr=subprocess.STDOUT)
    if r.returncode:
        # The work directory goes; the log stays beside the cache.
        log.flush()
        last = Path(log.name).parent.parent / "last-failed-build.log"
        shutil.copy2(log.name, last)
        raise RuntimeError(f"{' '.join(cmd[:3])} failed ({r.returncode}): see {last}")


def build(kver: str, cache: Path, jobs: int, quiet: bool = False,
          release: str = RELEASE) -> Path:
    # The same vendor directory the generator reads (NVGEN_VENDOR overrides).
    vdir = Path(os.environ.get("NVGEN_VENDOR", ROOT.parent / "shared" / "vendor"))
    archive = vdir / archive_name(release)
    if not archive.is_file():
        sys.exit(f"realdrv: vendor archive missing: {archive}")
    applied = patches(release, kver)
    out = cache / f"{release}-{kver}-{key(archive, applied)}"
    if all((out / f"{m}.ko").is_file() for m in MODULES) and (out / "Module.symvers").is_file():
        return out
    syssrc, sysout = header_dirs(kver)
    cache.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="realdrv-", dir=cache) as td:
        work = Path(td)
        logpath = work / "build.log"
        with logpath.open("w") as log:
            if not quiet:
                print(f"realdrv: building {release} for {kver} in {work} (log: build.log)",
                      file=sys.stderr)
            # The archive's members are the tree's top level (no directory).
            src = work / "src"
            with tarfile.open(archive, "r:xz") as tar:
                tar.extractall(src, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
            for p in applied:
                run(["patch", "-p1", "--forward", "-i", str(p)], src, log)
            # The RM core (kernel-independent), then only the two modules
            # (nvidia-modeset's core is not needed).
            run(["make", f"-j{jobs}", "kernel-open/nvidia/nv-kernel.o_binary"], src, log)
            run(["make", f"-j{jobs}", "-C", "kernel-open", "modules",
                 f"NV_KERNEL_MODULES={' '.join(MODULES)}",
                 f"SYSSRC={syssrc}", f"SYSOUT={sysout}"], src, log)
            staged = work / "out"
            staged.mkdir()
            for m in MODULES:
                shutil.copy2(src / "kernel-open" / f"{m}.ko", staged / f"{m}.ko")
            shutil.copy2(src / "kernel-open" / "Module.symvers", staged / "Module.symvers")
            log.write(f"built in {time.monotonic() - t0:.0f} s\n")
        shutil.copy2(logpath, staged / "build.log")
        if out.exists():
            shutil.rmtree(out)
        staged.rename(out)
    if not quiet:
        print(f"realdrv: built in {time.monotonic() - t0:.0f} s", file=sys.stderr)
    return out


def build_vgpu(drv: Path, kver: str, out: Path) -> Path:
    """vgpu.ko from this checkout, built in out as DKMS builds it on a node:
    by kmod/dkms-build.sh from a copy of the sources DKMS gets, with the
    nvidia_get_rm_ops line read from the driver's nvidia.ko itself
    (kmod/nvidia-symvers.sh; written to out/kmod/nvidia.symvers), not from
    the build's Module.symvers, which a node no longer has.
    tests/realdrv/test_symvers.py checks that line against the build's
    Module.symvers, and the VM run loads this vgpu.ko over that nvidia.ko."""
    out.mkdir(parents=True, exist_ok=True)
    for d in ("vgpu", "include"):
        dst = out / "kmod" / d
        if dst.exists():
            shutil.rmtree(dst)
        shutil.copytree(ROOT / "kmod" / d, dst,
                        ignore=shutil.ignore_patterns("*.o", "*.ko", "*.cmd", "*.mod*", "*.order",
                                                      "*.symvers", ".*"))
    for f in ("dkms-build.sh", "nvidia-symvers.sh"):
        shutil.copy2(ROOT / "kmod" / f, out / "kmod" / f)
    env = {k: v for k, v in os.environ.items() if k != "NVIDIA_SYMVERS"}
    env["NVIDIA_KO"] = str(drv / "nvidia.ko")
    r = subprocess.run(["sh", str(out / "kmod" / "dkms-build.sh"), kver], env=env,
                       capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"vgpu.ko against the real driver failed:\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    return out / "kmod" / "vgpu" / "vgpu.ko"


def cached(kver: str | None = None, cache: Path | None = None,
           release: str = RELEASE) -> Path | None:
    """The cached build for kver (default: the newest kernel with headers)
    if there is one, without building: the one of the vendor archive's key
    where the archive is here, else the newest of this release."""
    try:
        kver = kver or default_kernel()
    except SystemExit:
        return None
    cache = cache or cache_root()
    vdir = Path(os.environ.get("NVGEN_VENDOR", ROOT.parent / "shared" / "vendor"))
    archive = vdir / archive_name(release)
    if archive.is_file():
        dirs = [cache / f"{release}-{kver}-{key(archive, patches(release, kver))}"]
    else:
        dirs = sorted(cache.glob(f"{release}-{kver}-*"), key=lambda p: p.stat().st_mtime,
                      reverse=True) if cache.is_dir() else []
    for d in dirs:
        if all((d / f"{m}.ko").is_file() for m in MODULES) and (d / "Module.symvers").is_file():
            return d
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m tools.realdrv.build", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--release", default=RELEASE, choices=sorted(ZERO_GPU),
                    help=f"the driver release to build (default {RELEASE})")
    ap.add_argument("--kernel", help="kernel version to build for (default: newest with headers)")
    ap.add_argument("--cache", type=Path, help="cache directory (default: $VGPU_CACHE/realdrv, "
                    "VGPU_CACHE defaulting to /var/cache/vgpu)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--vgpu-out", type=Path,
                    help="also build this checkout's vgpu.ko against the real driver, here")
    ap.add_argument("-q", "--quiet", action="store_true")
    a = ap.parse_args(argv)
    if platform.machine() != "x86_64":
        sys.exit("realdrv: the VM test bed is x86_64 only")
    kver = a.kernel or default_kernel()
    try:
        out = build(kver, a.cache or cache_root(), a.jobs, a.quiet, a.release)
        if a.vgpu_out:
            print(build_vgpu(out, kver, a.vgpu_out.resolve()), file=sys.stderr)
    except RuntimeError as e:
        print(f"realdrv: {e}", file=sys.stderr)
        return 1
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
