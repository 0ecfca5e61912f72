"""GPUDirect RDMA's two entry points through a slice: NV_ESC_EXPORT_TO_DMABUF_FD
and NV50_THIRD_PARTY_P2P (0x503C) with its controls.

The policy refuses both (docs/mediator.md, "GPUDirect RDMA: memory an adapter
pins"): the export dups any client's memory, and keeps its FB allocated
after the owner's free, until the dma-buf's last close, which no ioctl
reports.  Refused, nothing reaches nvsim, and the slice's charge and the
GPU's FB stay as they were.

Audit mode and allow-lists, which forward refused items, never
forward these two (vgpu_never_forwarded): forwarded, the slice's free would
return the charge while the FB stayed pinned, so the slice could allocate
its quota again on top of it, and it could export another slice's memory
by handle (docs/mediator.md, "GPUDirect RDMA").
"""

from __future__ import annotations

import ctypes
import errno
from pathlib import Path

import pytest

from vgpu.abi import nvabi as A
from vgpu.abi import uapi as U
from vgpu.abi.nvclient import export_dma_buf
# fixtures (vgpu_leak_check is autouse: vgpu.ko's leak check after every test)
from vgpu_fixtures import (kern, make_slice, nvsim_fb, nvsim_stat, sl, status,  # noqa: F401
                           vgpu_leak_check)

MiB = 1 << 20
NVSIM_STATE = Path("/sys/kernel/debug/nvsim/state")
NV50_THIRD_PARTY_P2P = 0x503C
NV503C_CTRL_CMD_REGISTER_VA_SPACE = 0x503C0102
NV503C_CTRL_CMD_REGISTER_VIDMEM = 0x503C0104
NV503C_CTRL_CMD_REGISTER_PID = 0x503C0106


def nvsim_count(name: str) -> int:
    for line in NVSIM_STATE.read_text().splitlines():
        f = line.split()
        if len(f) == 2 and f[0] == name:
            return int(f[1])
    raise KeyError(name)


def audit_entry(kern, sid: int, kind: int, number: int):
    return {(e.kind, e.number): e for e in kern.audit_get(sid).entries}.get((kind, number))


def test_export_is_refused_and_nothing_is_pinned(sl, kern, res):
    c = sl.client()
    g = c.gpu(0)
    h, _ = c.alloc_vidmem(g.hDevice, 64 * MiB)
    used, fb = sl.used(0), nvsim_fb(0)
    assert used == 64 * MiB
    # a host client's memory is refused as well (the driver would export it)
    host = res.client()
    hg, = host.open_gpus([0])
    hh, _ = host.alloc_vidmem(hg.hDevice, 2 * MiB)
    for node, hclient, handle, size in ((g.fd, c.hClient, h, 64 * MiB),
                                        (g.fd, host.hClient, hh, 2 * MiB),
                                        (c.fd, c.hClient, h, 64 * MiB)):
        with pytest.raises(OSError) as ei:
            export_dma_buf(node, c.version, hclient, [handle], [0], [size])
        assert ei.value.errno == errno.EPERM
    assert nvsim_count("dmabufs") == 0 and nvsim_count("dmabuf_dups") == 0
    assert (sl.used(0), nvsim_fb(0)) == (used, fb + 2 * MiB)
    e = audit_entry(kern, sl.id, U.VGPU_AUDIT_ESCAPE, A.NV_ESC_EXPORT_TO_DMABUF_FD)
    assert (e.verdict, e.calls, e.refused, e.let_through) == (U.VGPU_AUDIT_REFUSE, 3, 3, 0)
    c.free(h)
    host.free(hh)
    assert (sl.used(0), nvsim_fb(0)) == (0, 0)


# What a GPU_GET_INFO list asks: two items the driver answers as it is
# (nvsim: control.c) around DMABUF_CAPABILITY (nvsim: cuda.c).
INFO_INDEXES = [A.NV2080_CTRL_GPU_INFO_INDEX_SYSMEM_ACCESS,
                A.NV2080_CTRL_GPU_INFO_INDEX_DMABUF_CAPABILITY,
                A.NV2080_CTRL_GPU_INFO_INDEX_GPU_SM_VERSION]
DMABUF_AT = 1


def gpu_info(c, hsub, indexes: list[int], v1: bool = False) -> list[tuple[int, int]]:
    """(index, data) of each entry after GPU_GET_INFO_V2, or V1 with the list
    behind its pointer."""
    if v1:
        lst = (A.NV2080_CTRL_GPU_INFO * len(indexes))()
        for i, ix in enumerate(indexes):
            lst[i].index, lst[i].data = ix, 0xDEAD
        p = A.NV2080_CTRL_GPU_GET_INFO_PARAMS(gpuInfoListSize=len(indexes),
                                              gpuInfoList=ctypes.addressof(lst))
        c.control(hsub, A.NV2080_CTRL_CMD_GPU_GET_INFO, p)
        return [(e.index, e.data) for e in lst]
    p = A.NV2080_CTRL_GPU_GET_INFO_V2_PARAMS(gpuInfoListSize=len(indexes))
    for i, ix in enumerate(indexes):
        p.gpuInfoList[i].index, p.gpuInfoList[i].data = ix, 0xDEAD
    c.control(hsub, A.NV2080_CTRL_CMD_GPU_GET_INFO_V2, p)
    return [(p.gpuInfoList[i].index, p.gpuInfoList[i].data) for i in range(len(indexes))]


@pytest.mark.parametrize("v1", [False, True], ids=["v2", "v1"])
def test_dmabuf_capability_reads_no_through_a_slice(sl, res, v1):
    """The driver says YES (nvsim as RM on a kernel with dma-buf); through a
    slice, which can never export, the same entry reads NO and every other
    entry is the driver's own answer."""
    host = res.client()
    hg, = host.open_gpus([0])
    direct = gpu_info(host, hg.hSubdevice, INFO_INDEXES, v1)
    assert direct[DMABUF_AT][1] == A.NV2080_CTRL_GPU_INFO_INDEX_DMABUF_CAPABILITY_YES
    c = sl.client()
    g = c.gpu(0)
    got = gpu_info(c, g.hSubdevice, INFO_INDEXES, v1)
    want = list(direct)
    want[DMABUF_AT] = (A.NV2080_CTRL_GPU_INFO_INDEX_DMABUF_CAPABILITY,
                       A.NV2080_CTRL_GPU_INFO_INDEX_DMABUF_CAPABILITY_NO)
    assert got == want
    # asked alone, and more than once in a list
    assert gpu_info(c, g.hSubdevice, [INFO_INDEXES[DMABUF_AT]] * 3, v1) == [want[DMABUF_AT]] * 3


def test_gpu_info_v1_list_bounds_are_the_drivers(sl, res):
    """V1 through a slice fails as the driver's deprecated layer does: more
    entries than V2's list holds is NV_ERR_OUT_OF_RANGE, a count without a
    list NV_ERR_INVALID_ARGUMENT; nothing of the caller's memory is written."""
    c = sl.client()
    g = c.gpu(0)
    host = res.client()
    hg, = host.open_gpus([0])
    n = A.NV2080_CTRL_GPU_INFO_MAX_LIST_SIZE + 1
    lst = (A.NV2080_CTRL_GPU_INFO * n)()
    for client, hsub in ((host, hg.hSubdevice), (c, g.hSubdevice)):
        for count, ptr, want in ((n, ctypes.addressof(lst), A.NV_ERR_OUT_OF_RANGE),
                                 (1, 0, A.NV_ERR_INVALID_ARGUMENT)):
            p = A.NV2080_CTRL_GPU_GET_INFO_PARAMS(gpuInfoListSize=count, gpuInfoList=ptr)
            got = status(lambda: client.control(hsub, A.NV2080_CTRL_CMD_GPU_GET_INFO, p))
            assert got == want, (client is c, count, ptr)
    assert all((e.index, e.data) == (0, 0) for e in lst)


def test_third_party_p2p_is_refused(sl, kern):
    """NV50_THIRD_PARTY_P2P under the subdevice and its registration controls:
    NV_ERR_INSUFFICIENT_PERMISSIONS before the driver sees them."""
    c = sl.client()
    g = c.gpu(0)
    h, _ = c.alloc_vidmem(g.hDevice, 32 * MiB)
    used, fb = sl.used(0), nvsim_fb(0)
    marker, _ = c.alloc_vidmem(g.hDevice, 4096)
    c.free(marker)
    assert status(lambda: c.alloc(g.hSubdevice, NV50_THIRD_PARTY_P2P, bytes(4))) == \
        A.NV_ERR_INSUFFICIENT_PERMISSIONS
    assert int(nvsim_stat("last_class"), 16) == A.NV01_MEMORY_LOCAL_USER
    # the controls by number, whatever object they name (none exists here)
    for cmd, size in ((NV503C_CTRL_CMD_REGISTER_VA_SPACE, 16),
                      (NV503C_CTRL_CMD_REGISTER_VIDMEM, 32),
                      (NV503C_CTRL_CMD_REGISTER_PID, 4)):
        assert status(lambda: c.control(g.hSubdevice, cmd, bytes(size))) == \
            A.NV_ERR_INSUFFICIENT_PERMISSIONS, hex(cmd)
        assert int(nvsim_stat("last_control"), 16) != cmd
    assert (sl.used(0), nvsim_fb(0)) == (used, fb)
    e = audit_entry(kern, sl.id, U.VGPU_AUDIT_CLASS, NV50_THIRD_PARTY_P2P)
    assert (e.verdict, e.refused) == (U.VGPU_AUDIT_REFUSE, 1)
    c.free(h)


@pytest.mark.parametrize("how", ["audit", "allow-list"])
def test_audit_mode_and_allow_lists_never_forward_the_export(sl, kern, how):
    """The export is never forwarded (vgpu_never_forwarded): in audit mode,
    or with an allow-list naming it, it stays refused, recorded as refused,
    and nothing is pinned: forwarded, the slice's free would return its
    charge while the dma-buf kept the FB, past the slice's quota and its
    deletion."""
    if how == "audit":
        kern.slice_set(sl.id, audit=True)
    else:
        kern.slice_set(sl.id, allow=[(U.VGPU_AUDIT_ESCAPE, A.NV_ESC_EXPORT_TO_DMABUF_FD)])
    c = sl.client()
    g = c.gpu(0)
    h, _ = c.alloc_vidmem(g.hDevice, 128 * MiB)
    with pytest.raises(OSError) as ei:
        c.export_dma_buf(g, [h], [128 * MiB])
    assert ei.value.errno == errno.EPERM
    assert nvsim_count("dmabufs") == 0 and nvsim_count("dmabuf_dups") == 0
    c.free(h)
    assert (sl.used(0), nvsim_fb(0)) == (0, 0)
    e = audit_entry(kern, sl.id, U.VGPU_AUDIT_ESCAPE, A.NV_ESC_EXPORT_TO_DMABUF_FD)
    assert (e.verdict, e.refused, e.let_through) == (U.VGPU_AUDIT_REFUSE, 1, 0)


def test_audit_mode_never_forwards_third_party_p2p(sl, kern):
    """NV50_THIRD_PARTY_P2P likewise: what a persistent pin finds the
    memory by stays refused in audit mode."""
    kern.slice_set(sl.id, audit=True)
    c = sl.client()
    g = c.gpu(0)
    assert status(lambda: c.alloc(g.hSubdevice, NV50_THIRD_PARTY_P2P, bytes(4))) == \
        A.NV_ERR_INSUFFICIENT_PERMISSIONS
    e = audit_entry(kern, sl.id, U.VGPU_AUDIT_CLASS, NV50_THIRD_PARTY_P2P)
    assert (e.refused, e.let_through) == (1, 0)


def test_audit_mode_cannot_export_another_slices_memory(make_slice, kern):
    """The driver's lookup of the params' hClient takes any client, so a
    forwarded export would pin another slice's memory past its free: a
    slice in audit mode gets the refusal, and the other slice's memory
    goes at its free."""
    a = make_slice()
    b = make_slice()
    kern.slice_set(a.id, audit=True)
    ca = a.client()
    ga = ca.gpu(0)
    cb = b.client()
    gb = cb.gpu(0)
    hb, _ = cb.alloc_vidmem(gb.hDevice, 64 * MiB)
    with pytest.raises(OSError) as ei:
        ca.export_dma_buf(ga, [hb], [64 * MiB], client=cb.hClient)
    assert ei.value.errno == errno.EPERM
    cb.free(hb)
    assert (b.used(0), nvsim_fb(0)) == (0, 0)