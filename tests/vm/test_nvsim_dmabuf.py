"""NV_ESC_EXPORT_TO_DMABUF_FD on nvsim (kmod/nvsim/dmabuf.c): video memory
exported as a dma-buf, GPUDirect RDMA's path without nvidia-peermem.

What is checked is the driver's behaviour as read in 535.261.03 and
595.45.04 (kernel-open/nvidia/nv-dmabuf.c, osapi.c): the exported memory is
dup'd into RM's internal client, so its FB stays allocated after the owner
frees its handle or exits, until the dma-buf's last close in whichever
process holds it; the params are checked as the driver checks them; the
params' hClient need not be the caller's (the hole vgpu.ko's policy closes
by refusing the escape: tests/vm/test_vgpu_dmabuf.py); and a dma-buf with a
hole below a handle keeps that handle dup'd after its last close, until the
GPU's last reference goes (nv_dma_buf_release's range).

The layout is the release's: nvsim presents 595.45.04 by default, the
client lays the params out for whatever release nvsim presents.
"""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

import pytest

from vgpu.abi import nvabi as A
from vgpu.abi.nvclient import RmClient, export_dma_buf, raw_ioctl
from conftest import DEV
from polling import wait_until

MiB = 1 << 20
KiB = 1 << 10
STATS = Path("/sys/kernel/debug/nvsim/stats")
NV_ERR_OPERATING_SYSTEM = 0x59
GPU_INFO_INDEX_DMABUF_CAPABILITY = A.NV2080_CTRL_GPU_INFO_INDEX_DMABUF_CAPABILITY


def count(s, name: str) -> int:
    """A "name <n>" line of nvsim's state (dmabufs, dmabuf_dups, dmabuf_orphans)."""
    return int(s.extra[name].split()[1])


def release() -> str:
    for line in STATS.read_text().splitlines():
        k, _, v = line.partition(" ")
        if k == "release":
            return v.strip()
    raise AssertionError("nvsim stats has no release line")


def new_layout() -> bool:
    """mappingType and bAllowMmap exist (570 on)."""
    return int(release().split(".")[0]) >= 570


def exported(c: RmClient, gpu, handles, sizes, **kw) -> tuple[int, int]:
    """(status, fd) of an export through gpu's node, without raising."""
    sizes = list(sizes)
    offsets = kw.pop("offsets", [0] * len(sizes))
    client = kw.pop("client", c.hClient)
    return export_dma_buf(gpu.fd, c.version, client, handles, offsets, sizes, **kw)


def fdinfo(fd: int) -> dict[str, str]:
    out = {}
    for line in Path(f"/proc/self/fdinfo/{fd}").read_text().splitlines():
        k, _, v = line.partition(":")
        out[k.strip()] = v.strip()
    return out


def test_dma_buf_capability_is_reported(client, gpu0):
    """GPU_GET_INFO_V2 DMABUF_CAPABILITY is _YES (osDmabufIsSupported on a
    kernel with dma-buf, getGpuInfos): what nv->dma_buf_supported is."""
    p = A.NV2080_CTRL_GPU_GET_INFO_V2_PARAMS(gpuInfoListSize=1)
    p.gpuInfoList[0].index = GPU_INFO_INDEX_DMABUF_CAPABILITY
    client.control(gpu0.hSubdevice, A.NV2080_CTRL_CMD_GPU_GET_INFO_V2, p)
    assert p.gpuInfoList[0].data == 1


def test_export_keeps_fb_after_free_until_last_close(client, gpu0, state):
    h, _ = client.alloc_vidmem(gpu0.hDevice, 64 * MiB)
    before = state()
    fd = client.export_dma_buf(gpu0, [h], [64 * MiB])
    try:
        info = fdinfo(fd)
        assert info.get("exp_name") == "nv_dmabuf" and int(info["size"]) == 64 * MiB
        assert os.get_inheritable(fd) is False                  # O_CLOEXEC
        s = state()
        assert (count(s, "dmabufs"), count(s, "dmabuf_dups")) == (1, 1)
        assert s.objects == before.objects                      # no object of the caller's
        client.free(h)
        s = state()
        assert s.fb_used(0) == 64 * MiB                         # the dup holds it
        assert s.pid_used(os.getpid(), 0) == 64 * MiB           # still the allocator's
        assert s.objects == before.objects - 1
        # what a client's FB_GET_INFO reports as free does not get it back
        free_kib = gpu0.fb_info([A.NV2080_CTRL_FB_INFO_INDEX_HEAP_FREE])
        assert free_kib[A.NV2080_CTRL_FB_INFO_INDEX_HEAP_FREE] * KiB == s.fb_total(0) - 64 * MiB
    finally:
        os.close(fd)
    s = state()
    assert s.fb_used(0) == 0
    assert (count(s, "dmabufs"), count(s, "dmabuf_dups")) == (0, 0)


def test_export_part_of_an_allocation(client, gpu0, state):
    """offset and size pick a page-aligned range; the whole object's FB
    stays allocated (the dup is of the object)."""
    h, _ = client.alloc_vidmem(gpu0.hDevice, 8 * MiB)
    fd = client.export_dma_buf(gpu0, [h], [4 * KiB], offsets=[8 * MiB - 4 * KiB])
    client.free(h)
    assert state().fb_used(0) == 8 * MiB
    os.close(fd)
    assert state().fb_used(0) == 0


def test_handles_added_to_a_dma_buf(client, gpu0, gpu1, state):
    """fd >= 0 adds handles to a dma-buf of ours (nv_dma_buf_reuse), on the
    dma-buf's GPU whichever GPU node the call came through."""
    a, _ = client.alloc_vidmem(gpu0.hDevice, 2 * MiB)
    b, _ = client.alloc_vidmem(gpu0.hDevice, 4 * MiB)
    fd = client.export_dma_buf(gpu0, [a], [2 * MiB], total_objects=2, total_size=6 * MiB)
    try:
        # added through GPU 1's node: still GPU 0's memory, dup'd on GPU 0
        assert client.export_dma_buf(gpu1, [b], [4 * MiB], fd=fd, index=1,
                                     total_objects=2, total_size=6 * MiB) == fd
        assert count(state(), "dmabuf_dups") == 2
        # a used slot
        st, _ = exported(client, gpu0, [b], [4 * MiB], fd=fd, index=1, total_objects=2,
                         total_size=6 * MiB)
        assert st == A.NV_ERR_IN_USE
        client.free(a)
        client.free(b)
        assert state().fb_used(0) == 6 * MiB
    finally:
        os.close(fd)
    assert state().fb_used(0) == 0


def test_bad_params_are_refused_as_the_driver_refuses_them(client, gpu0, gpu1, state):
    """nv_dma_buf_export, nv_dma_buf_create, nv_dma_buf_dup_mem_handles and
    RmDmabufVerifyMemHandle: each refusal leaves nothing dup'd or made."""
    h, _ = client.alloc_vidmem(gpu0.hDevice, 8 * MiB)
    other, _ = client.alloc_vidmem(gpu1.hDevice, 2 * MiB)
    sys_h, _ = client.alloc_vidmem(gpu0.hDevice, 2 * MiB, hclass=A.NV01_MEMORY_SYSTEM)
    M = 2 * MiB
    INVAL, PARENT = A.NV_ERR_INVALID_ARGUMENT, A.NV_ERR_INVALID_OBJECT_PARENT
    cases = [
        ("totalSize 0", dict(handles=[h], sizes=[M], total_size=0), INVAL),
        ("numObjects 0", dict(handles=[], sizes=[], total_size=M), INVAL),
        ("totalObjects 0", dict(handles=[h], sizes=[M], total_objects=0), INVAL),
        ("numObjects past the array", dict(handles=[h], sizes=[M], num_objects=129,
                                           total_objects=200), INVAL),
        ("numObjects past totalObjects", dict(handles=[h, h], sizes=[M, M],
                                              total_objects=1), INVAL),
        ("fd -2", dict(handles=[h], sizes=[M], fd=-2), INVAL),
        ("index leaves no room", dict(handles=[h], sizes=[M], index=2, total_objects=2), INVAL),
        ("totalObjects past kmalloc", dict(handles=[h], sizes=[M], total_objects=0xFFFFFFFF),
         A.NV_ERR_NO_MEMORY),
        ("unknown client", dict(handles=[h], sizes=[M], client=0xC1D0FFFF),
         A.NV_ERR_INVALID_OBJECT_HANDLE),
        ("unknown handle", dict(handles=[0x5CA0F00D], sizes=[M]), A.NV_ERR_OBJECT_NOT_FOUND),
        ("the client itself", dict(handles=[client.hClient], sizes=[M]), A.NV_ERR_INVALID_OBJECT),
        ("a device", dict(handles=[gpu0.hDevice], sizes=[M]), A.NV_ERR_INVALID_OBJECT),
        ("another GPU's memory", dict(handles=[other], sizes=[M]), PARENT),
        ("offset not page-aligned", dict(handles=[h], sizes=[M], offsets=[512]), INVAL),
        ("size not page-aligned", dict(handles=[h], sizes=[M + 512]), INVAL),
        ("system memory", dict(handles=[sys_h], sizes=[M]), INVAL),
        ("size 0", dict(handles=[h], sizes=[0], total_size=M), INVAL),
        ("size past the allocation", dict(handles=[h], sizes=[16 * MiB]), INVAL),
        ("range past the allocation", dict(handles=[h], sizes=[M], offsets=[7 * MiB]), INVAL),
        ("size past totalSize", dict(handles=[h], sizes=[M], total_size=M - 4 * KiB), INVAL),
        ("sizes short of totalSize", dict(handles=[h], sizes=[M], total_size=2 * M), INVAL),
        ("a good handle, then a bad one", dict(handles=[h, 0x5CA0F00D], sizes=[M, M]),
         A.NV_ERR_OBJECT_NOT_FOUND),
        ("into an fd that is no dma-buf", dict(handles=[h], sizes=[M], fd=client.fd),
         NV_ERR_OPERATING_SYSTEM),
    ]
    if new_layout():
        cases += [
            ("mappingType 2", dict(handles=[h], sizes=[M], mapping_type=2), INVAL),
            ("FORCE_PCIE on a PCIe board", dict(handles=[h], sizes=[M], mapping_type=1),
             A.NV_ERR_NOT_SUPPORTED),
            ("mmap of video memory", dict(handles=[h], sizes=[M], allow_mmap=True),
             A.NV_ERR_NOT_SUPPORTED),
        ]
    before = state()
    wrong = []
    for name, kw, want in cases:
        kw = dict(kw)
        handles, sizes = kw.pop("handles"), kw.pop("sizes")
        st, fd = exported(client, gpu0, handles, sizes, **kw)
        if st == 0 and fd >= 0 and kw.get("fd", -1) == -1:
            os.close(fd)
        s = state()
        if st != want or count(s, "dmabufs") or count(s, "dmabuf_dups") or \
                s.fb_used(0) != before.fb_used(0):
            wrong.append(f"{name}: status {st:#x} (want {want:#x}), state {s.extra}")
    assert not wrong, "\n".join(wrong)


def test_bad_params_when_adding_to_a_dma_buf(client, gpu0, state):
    h, _ = client.alloc_vidmem(gpu0.hDevice, 2 * MiB)
    fd = client.export_dma_buf(gpu0, [h], [2 * MiB], total_objects=2, total_size=4 * MiB)
    try:
        cases = [
            ("more handles than it has slots", dict(handles=[h, h, h], sizes=[4 * KiB] * 3,
                                                    total_objects=3), A.NV_ERR_INVALID_ARGUMENT),
            ("index past its slots", dict(handles=[h], sizes=[4 * KiB], index=2, total_objects=3),
             A.NV_ERR_INVALID_ARGUMENT),
            ("its used slot", dict(handles=[h], sizes=[4 * KiB], index=0, total_objects=2),
             A.NV_ERR_IN_USE),
            ("a closed fd", dict(handles=[h], sizes=[4 * KiB], index=1, fd=1000),
             NV_ERR_OPERATING_SYSTEM),
        ]
        if new_layout():
            cases += [
                ("another mapping type", dict(handles=[h], sizes=[2 * MiB], index=1,
                                              total_objects=2, mapping_type=1),
                 A.NV_ERR_INVALID_ARGUMENT),
                ("mmap asked now", dict(handles=[h], sizes=[2 * MiB], index=1, total_objects=2,
                                        allow_mmap=True), A.NV_ERR_INVALID_ARGUMENT),
            ]
        wrong = []
        for name, kw, want in cases:
            kw = dict(kw)
            kw.setdefault("fd", fd)
            st, _ = exported(client, gpu0, kw.pop("handles"), kw.pop("sizes"),
                             total_size=4 * MiB, **kw)
            if st != want or count(state(), "dmabuf_dups") != 1:
                wrong.append(f"{name}: status {st:#x} (want {want:#x})")
        assert not wrong, "\n".join(wrong)
    finally:
        os.close(fd)


def test_malformed_calls_are_einval(client, gpu0, state):
    """nvidia_ioctl: the release's size exactly, and a GPU node."""
    h, _ = client.alloc_vidmem(gpu0.hDevice, 2 * MiB)
    with pytest.raises(OSError) as ei:
        export_dma_buf(client.fd, client.version, client.hClient, [h], [0], [2 * MiB])
    assert ei.value.errno == errno.EINVAL
    other = 2600 if new_layout() else 2608          # the other releases' layout
    with pytest.raises(OSError) as ei:
        raw_ioctl(gpu0.fd, A.NV_ESC_EXPORT_TO_DMABUF_FD, bytes(other))
    assert ei.value.errno == errno.EINVAL
    assert count(state(), "dmabufs") == 0


def test_another_processs_memory_is_exported(res, state):
    """The params' hClient is looked up among all clients (RmDmabufVerifyMemHandle:
    serverGetClientUnderLock), not the caller's: a process exports another
    process's memory, which then outlives its owner.  The hole vgpu.ko's
    policy closes by refusing the escape."""
    r1, w1 = os.pipe()
    r2, w2 = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r1)
            os.close(w2)
            c = RmClient(DEV)
            g, = c.open_gpus([0])
            h, _ = c.alloc_vidmem(g.hDevice, 32 * MiB)
            os.write(w1, f"{c.hClient} {h}\n".encode())
            os.read(r2, 1)                  # the parent has exported it
            c.free(h)
            c.close()
        finally:
            os._exit(0)
    os.close(w1)
    os.close(r2)
    hclient, h = (int(x) for x in os.read(r1, 64).split())
    c = res.client()
    g, = c.open_gpus([0])
    fd = c.export_dma_buf(g, [h], [32 * MiB], client=hclient)
    os.write(w2, b"x")
    os.waitpid(pid, 0)
    os.close(r1)
    os.close(w2)
    try:
        s = state()
        assert s.clients == 1                           # the owner's is gone
        assert s.fb_used(0) == 32 * MiB                 # its memory is not
        assert s.pid_used(pid, 0) == 32 * MiB
    finally:
        os.close(fd)
    assert state().fb_used(0) == 0


def test_process_exit_with_the_dma_buf_open_releases_it(state, wait_state):
    """A process that exits holding the dma-buf (its client and memory
    handle too): the kernel's last fput at exit runs the release."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            c = RmClient(DEV)
            g, = c.open_gpus([0])
            h, _ = c.alloc_vidmem(g.hDevice, 16 * MiB)
            c.export_dma_buf(g, [h], [16 * MiB])
            c.free(h)
            os.write(w, b"x")
        finally:
            os._exit(0)                     # the fds stay open until exit
    os.close(w)
    assert os.read(r, 1) == b"x"
    os.close(r)
    os.waitpid(pid, 0)
    s = wait_state(lambda s: s.fb_used(0) == 0 and count(s, "dmabufs") == 0)
    assert s.fb_used(0) == 0 and count(s, "dmabuf_dups") == 0


def test_a_dma_buf_passed_on_outlives_its_exporter(res, state, wait_state):
    """The FB lives until the dma-buf's last close in any process holding
    it: the exporter closes everything, a child that inherited the fd keeps
    it pinned until it exits."""
    c = res.client()
    g, = c.open_gpus([0])
    h, _ = c.alloc_vidmem(g.hDevice, 16 * MiB)
    fd = c.export_dma_buf(g, [h], [16 * MiB])
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(w)
        os.read(r, 1)                       # hold fd until told
        os._exit(0)
    os.close(r)
    os.close(fd)
    c.close()
    s = wait_state(lambda s: s.clients == 0)
    assert s.fb_used(0) == 16 * MiB and count(s, "dmabufs") == 1
    os.write(w, b"x")
    os.close(w)
    os.waitpid(pid, 0)
    s = wait_state(lambda s: s.fb_used(0) == 0)
    assert count(s, "dmabufs") == 0


def test_a_hole_below_a_handle_outlives_the_last_close(res, state, wait_state):
    """nv_dma_buf_release undups slots 0 .. num_objects - 1 only: a
    dma-buf whose one handle sits at index 1 of 2 keeps it dup'd in RM's
    internal client after its last close (the driver WARNs), until the
    GPU's last reference goes and RM frees that client with the GPU's state
    (nv_stop_device -> memmgrStateDestroy_IMPL)."""
    c = res.client()
    g, = c.open_gpus([0])
    h, _ = c.alloc_vidmem(g.hDevice, 8 * MiB)
    fd = c.export_dma_buf(g, [h], [8 * MiB], index=1, total_objects=2, total_size=16 * MiB)
    c.free(h)
    os.close(fd)
    s = state()
    assert count(s, "dmabufs") == 0 and count(s, "dmabuf_orphans") == 1
    assert s.fb_used(0) == 8 * MiB and count(s, "dmabuf_dups") == 1
    assert re.search(r"gpu 0 gpu_id 0x[0-9a-f]+ open_count 1\b", STATS.read_text())
    c.close()                               # the GPU's last attach
    s = wait_state(lambda s: s.fb_used(0) == 0)
    assert count(s, "dmabuf_orphans") == 0 and count(s, "dmabuf_dups") == 0


def test_the_dma_buf_holds_the_gpu_open(res, state, wait_state):
    """nvidia_dev_get: the dma-buf is a reference on its GPU until its
    release (nvidia_dev_put)."""
    c = res.client()
    g, = c.open_gpus([0])
    h, _ = c.alloc_vidmem(g.hDevice, 2 * MiB)
    fd = c.export_dma_buf(g, [h], [2 * MiB])
    assert re.search(r"gpu 0 gpu_id 0x[0-9a-f]+ open_count 2\b", STATS.read_text())
    c.close()
    wait_state(lambda s: s.clients == 0)
    assert re.search(r"gpu 0 gpu_id 0x[0-9a-f]+ open_count 1\b", STATS.read_text())
    assert state().fb_used(0) == 2 * MiB
    os.close(fd)
    assert re.search(r"gpu 0 gpu_id 0x[0-9a-f]+ open_count 0\b", STATS.read_text())
    assert state().fb_used(0) == 0


def test_many_dma_bufs_of_one_allocation(client, gpu0, state):
    """Each export dups again; the FB goes with the last of them."""
    h, _ = client.alloc_vidmem(gpu0.hDevice, 4 * MiB)
    fds = [client.export_dma_buf(gpu0, [h], [4 * MiB]) for _ in range(8)]
    client.free(h)
    assert count(state(), "dmabuf_dups") == 8
    for fd in fds[:-1]:
        os.close(fd)
    assert state().fb_used(0) == 4 * MiB
    os.close(fds[-1])
    assert state().fb_used(0) == 0
    assert wait_until(lambda: count(state(), "dmabufs") == 0, 1.0)
