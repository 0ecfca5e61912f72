#!/usr/bin/env python3
"""vgpu.ko's cost per call: the same ioctl through a slice's virtual node and
on nvsim directly, as a median ratio over many calls.

Measured (each a single ioctl, or a pair, timed with perf_counter_ns around
the libc call on a prepared ctypes struct, so the Python overhead is the
same on both sides; direct and virtual calls alternate so drift hits both):

  passthrough   CHECK_VERSION_STR (query) on the control node
  alloc+free    RM_ALLOC of 4 KiB FB (class 0x40) then RM_FREE of it
  fb-info-v2    RM_CONTROL NV2080_CTRL_CMD_FB_GET_INFO_V2 (8 indexes)

then the same again with --handles (default 100,000) live FB objects held in
the slice by another client, to show whether the cost grows with the size
of the slice's object table.  Targets (mediation must cost little, after the
call page and the post-call checks): passthrough <= 1.1x, alloc+free <= 1.3x, no growth
with handles.

Runs inside the VM with nvsim and vgpu.ko loaded (see bench/README.md).
Prints a table; exit status 0 unless the setup fails.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vgpu.abi import nvabi  # noqa: E402
from vgpu.vgpuko.client import VgpuKernel  # noqa: E402
from vgpu.abi.nvclient import RmClient, _libc  # noqa: E402

MiB = 1 << 20
GiB = 1 << 30


class Side:
    """Prepared structs and ioctl numbers for one side (direct or virtual)."""

    def __init__(self, prefix: str):
        self.c = RmClient(prefix)
        self.g = self.c.open_gpus()[0]
        c, g = self.c, self.g
        self.fd = c.fd
        self.ver = nvabi.nv_ioctl_rm_api_version_t(cmd=nvabi.NV_RM_API_VERSION_CMD_QUERY)
        self.ver_cmd = nvabi.nv_ioctl(nvabi.NV_ESC_CHECK_VERSION_STR, ctypes.sizeof(self.ver))
        self.mp = nvabi.NV_MEMORY_ALLOCATION_PARAMS(owner=0x5647, size=4096)
        self.alloc = nvabi.NVOS64_PARAMETERS(hRoot=c.hClient, hObjectParent=g.hDevice,
                                         hObjectNew=0x5D000000, hClass=nvabi.NV01_MEMORY_LOCAL_USER,
                                         pAllocParms=ctypes.addressof(self.mp),
                                         paramsSize=ctypes.sizeof(self.mp))
        self.alloc_cmd = nvabi.nv_ioctl(nvabi.NV_ESC_RM_ALLOC, ctypes.sizeof(self.alloc))
        self.free = nvabi.NVOS00_PARAMETERS(hRoot=c.hClient, hObjectParent=g.hDevice,
                                        hObjectOld=0x5D000000)
        self.free_cmd = nvabi.nv_ioctl(nvabi.NV_ESC_RM_FREE, ctypes.sizeof(self.free))
        self.fbi = nvabi.NV2080_CTRL_FB_GET_INFO_V2_PARAMS(fbInfoListSize=8)
        for i, ix in enumerate([7, 8, 9, 0x0A, 0x16, 0x20, 0x12, 0x05]):
            self.fbi.fbInfoList[i].index = ix
        self.ctl = nvabi.NVOS54_PARAMETERS(hClient=c.hClient, hObject=g.hSubdevice,
                                       cmd=nvabi.NV2080_CTRL_CMD_FB_GET_INFO_V2,
                                       params=ctypes.addressof(self.fbi),
                                       paramsSize=ctypes.sizeof(self.fbi))
        self.ctl_cmd = nvabi.nv_ioctl(nvabi.NV_ESC_RM_CONTROL, ctypes.sizeof(self.ctl))
        self.ver_addr = ctypes.addressof(self.ver)
        self.alloc_addr = ctypes.addressof(self.alloc)
        self.free_addr = ctypes.addressof(self.free)
        self.ctl_addr = ctypes.addressof(self.ctl)

    def close(self):
        self.c.close()

    # each returns nanoseconds for one operation
    def passthrough(self) -> int:
        ioctl, fd, cmd, addr = _libc.ioctl, self.fd, self.ver_cmd, self.ver_addr
        t0 = time.perf_counter_ns()
        r = ioctl(fd, cmd, addr)
        t1 = time.perf_counter_ns()
        assert r == 0
        return t1 - t0

    def alloc_free(self) -> int:
        ioctl, fd = _libc.ioctl, self.fd
        ac, aa, fc, fa = self.alloc_cmd, self.alloc_addr, self.free_cmd, self.free_addr
        t0 = time.perf_counter_ns()
        r1 = ioctl(fd, ac, aa)
        r2 = ioctl(fd, fc, fa)
        t1 = time.perf_counter_ns()
        assert r1 == 0 and r2 == 0 and self.alloc.status == 0 and self.free.status == 0, \
            (nvabi.status_name(self.alloc.status), nvabi.status_name(self.free.status))
        return t1 - t0

    def fb_info(self) -> int:
        ioctl, fd, cmd, addr = _libc.ioctl, self.fd, self.ctl_cmd, self.ctl_addr
        t0 = time.perf_counter_ns()
        r = ioctl(fd, cmd, addr)
        t1 = time.perf_counter_ns()
        assert r == 0 and self.ctl.status == 0, nvabi.status_name(self.ctl.status)
        return t1 - t0


OPS = [("passthrough", "passthrough", 1.1), ("alloc+free", "alloc_free", 1.3),
       ("fb-info-v2", "fb_info", None)]


def measure(direct: Side, virt: Side, n: int, warmup: int = 50) -> dict[str, tuple[float, float, float]]:
    out = {}
    for label, meth, _target in OPS:
        fd_, fv = getattr(direct, meth), getattr(virt, meth)
        for _ in range(warmup):
            fd_()
            fv()
        td, tv = [], []
        for _ in range(n):
            td.append(fd_())
            tv.append(fv())
        md, mv = statistics.median(td), statistics.median(tv)
        out[label] = (md, mv, mv / md)
    return out


def fill_handles(prefix: str, count: int) -> RmClient:
    """Another client of the slice holding count live 4 KiB FB objects."""
    c = RmClient(prefix)
    g = c.open_gpus()[0]
    mp = nvabi.NV_MEMORY_ALLOCATION_PARAMS(owner=0x5647, size=4096)
    p = nvabi.NVOS64_PARAMETERS(hRoot=c.hClient, hObjectParent=g.hDevice,
                            hClass=nvabi.NV01_MEMORY_LOCAL_USER, pAllocParms=ctypes.addressof(mp),
                            paramsSize=ctypes.sizeof(mp))
    cmd = nvabi.nv_ioctl(nvabi.NV_ESC_RM_ALLOC, ctypes.sizeof(p))
    addr = ctypes.addressof(p)
    h = 0x5E000000
    for i in range(count):
        p.hObjectNew = h + i
        mp.size = 4096
        if _libc.ioctl(c.fd, cmd, addr) != 0 or p.status != 0:
            raise SystemExit(f"filling handles: allocation {i} failed: "
                             f"{nvabi.status_name(p.status)} / errno {ctypes.get_errno()}")
    return c


def delete_slice(k, sid: int) -> None:
    """Delete the bench's slice, retried for up to 10 s while the files the
    bench closed are still being released (EBUSY)."""
    for _ in range(100):
        try:
            k.slice_del(sid, force=True)
            return
        except OSError:
            time.sleep(0.1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", "--calls", type=int, default=2000, help="calls per measurement")
    ap.add_argument("--handles", type=int, default=100_000, help="live handles for the second run")
    ap.add_argument("--slice-id", type=int, default=4242)
    args = ap.parse_args(argv)

    with VgpuKernel() as k:
        s = k.slice_new(args.slice_id, gpus=[(0, 8 * GiB)], name="bench")
        prefix = f"/dev/vgpu/{s.id}"
        filler = None
        try:
            direct, virt = Side("/dev"), Side(prefix)
            rows = []
            res0 = measure(direct, virt, args.calls)
            t0 = time.monotonic()
            filler = fill_handles(prefix, args.handles)
            fill_s = time.monotonic() - t0
            live = k.slice_get(s.id).gpu(0).allocs
            res1 = measure(direct, virt, args.calls)
            for label, _m, target in OPS:
                d0, v0, r0 = res0[label]
                d1, v1, r1 = res1[label]
                rows.append([label, f"{d0 / 1000:.1f}", f"{v0 / 1000:.1f}", f"{r0:.2f}x",
                             f"{d1 / 1000:.1f}", f"{v1 / 1000:.1f}", f"{r1:.2f}x",
                             f"{r1 / r0:.2f}", f"<= {target}x" if target else "-"])
            print(f"vgpu overhead: median of {args.calls} calls each, microseconds; "
                  f"second run with {live} live FB objects in the slice "
                  f"(filled in {fill_s:.1f}s)")
            header = ["op", "direct", "vgpu", "ratio", "direct@N", "vgpu@N", "ratio@N",
                      "growth", "target"]
            widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
            print("  ".join(h.ljust(w) for h, w in zip(header, widths)))
            for r in rows:
                print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)))
            direct.close()
            virt.close()
        finally:
            if filler is not None:
                filler.close()
            delete_slice(k, s.id)
    return 0


if __name__ == "__main__":
    sys.exit(main())
