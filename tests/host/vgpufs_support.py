"""What the vgpufs host tests share (test_fs.py, test_hook_mounts.py): a
fake slice source, a two-GPU slice, a vgpufs served by trio in this process
around a body run in a worker thread, and a child that mounts one."""
from __future__ import annotations

import textwrap

import trio

from vgpu.daemon import fs as vgpufs

MAJOR = 237
GiB = 1 << 30


class FakeSource:
    def __init__(self):
        self.s: dict[str, vgpufs.FsSlice] = {}
        self.version = "595.45.04"
        self.calls = 0

    def slices(self):
        self.calls += 1
        return self.s

    def driver_version(self):
        return self.version


def two_gpu_slice(name="c1", sid=1, base=16, mem=4 * GiB):
    return vgpufs.FsSlice(name, sid, MAJOR, base, [
        vgpufs.FsGpu(0, "NVIDIA H100 80GB HBM3", "GPU-0000aaaa", "0000:01:00.0", mem),
        vgpufs.FsGpu(1, "NVIDIA H100 80GB HBM3", "GPU-0000bbbb", "0000:02:00.0", mem),
    ])


def serve(mnt, src, body):
    """Mount vgpufs at mnt, run body(mnt) in a thread, unmount."""
    result = {}

    async def main():
        fs = vgpufs.VgpuFs(src, str(mnt))
        async with trio.open_nursery() as n:
            await n.start(fs.run)
            try:
                result["v"] = await trio.to_thread.run_sync(body, str(mnt))
            finally:
                n.cancel_scope.cancel()
    trio.run(main)
    return result.get("v")


# A vgpufs with one slice (argv[2], default "x") mounted at argv[1].
STALE_CHILD = textwrap.dedent("""
    import sys, os, trio
    from vgpu.daemon import fs as F
    NAME = sys.argv[2] if len(sys.argv) > 2 else "x"
    class S:
        def slices(self):
            return {NAME: F.FsSlice(NAME, 1, 237, 16, [])}
        def driver_version(self):
            return "1.0"
    async def main():
        fs = F.VgpuFs(S(), sys.argv[1])
        async with trio.open_nursery() as n:
            await n.start(fs.run)
            print("mounted", flush=True)
    trio.run(main)
""")
