"""vgpu.ko over NVIDIA's own driver (595.45.04, no GPU): slices whose
nodes stack on the real nvidiactl and nvidia-uvm, every call below reaching
NVIDIA's RM core through vgpu.ko's call page at the caller's privilege.

The slices name GPU minor 0, for which the driver has no GPU (conftest.py).
Each test says which driver function decides what it checks.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct

import pytest

from vgpu.abi import nvabi as A
from vgpu.abi import uapi as U
from vgpu.abi.nvclient import RmClient
from vgpu_fixtures import MiB, in_child, read_vstate, status, wait_until
# fixtures (vgpu_leak_check is autouse: vgpu.ko's leak check after every test)
from vgpu_fixtures import kern, make_slice, vgpu_leak_check  # noqa: F401

# privileged (RMCTRL_FLAGS_PRIVILEGED), 16 bytes: clientCount (u32), then
# resourceCount (u64); the policy refuses it (kmod/vgpu/policy/595.45.04.tsv)
GET_CLIENT_DATABASE_INFO = 0x0000013D


def real_clients() -> int:
    """The driver's own count of clients, asked on the real node as root."""
    with RmClient("/dev") as c:
        raw = c.control(c.hClient, GET_CLIENT_DATABASE_INFO, bytes(16))
        return struct.unpack_from("<I", raw, 0)[0] - 1     # less this one


@pytest.fixture
def rsl(make_slice):
    return make_slice(gpus=[(0, 64 * MiB)])


def test_version_and_cards_through_a_slice(rsl):
    """The version check (nv.c, nvidia_ioctl: NV_ESC_CHECK_VERSION_STR) and
    CARD_INFO reach the driver; the driver lists no GPU, so neither does
    vgpu.ko's rewrite."""
    with RmClient(rsl.prefix, alloc_client=False) as c:
        assert c.version == "595.45.04"
        assert c.cards == []


def test_xfer_reaches_the_driver(rsl):
    """The same calls through NV_ESC_IOCTL_XFER_CMD (nv.c copies the header,
    then the parameters it points to)."""
    with RmClient(rsl.prefix, xfer=True) as c:
        assert c.version == "595.45.04"
        ids = c.control(c.hClient, A.NV0000_CTRL_CMD_GPU_GET_ATTACHED_IDS, bytes(128))
        assert set(ids) == {0xFF}


def test_nv0000_controls_and_their_rewrites(rsl):
    """A forwarded control with embedded pointers (GET_BUILD_VERSION: three
    strings laid out in the call page) answers as the driver does directly;
    GET_ATTACHED_IDS and GET_PROBED_IDS, asked by vgpu.ko through the kernel
    entry and rewritten to the slice's GPUs, list none (the driver has
    none); GET_FABRIC_STATUS is answered by vgpu.ko with what the driver
    says for a system without a fabric manager (cliresCtrlCmdSystemGetFabricStatus)."""
    def build_version(c):
        n = 256
        bufs = [ctypes.create_string_buffer(n) for _ in range(3)]
        p = A.NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_PARAMS(
            sizeOfStrings=n,
            pDriverVersionBuffer=ctypes.addressof(bufs[0]),
            pVersionBuffer=ctypes.addressof(bufs[1]),
            pTitleBuffer=ctypes.addressof(bufs[2]))
        c.control(c.hClient, A.NV0000_CTRL_CMD_SYSTEM_GET_BUILD_VERSION, p)
        return [b.value for b in bufs], p.changelistNumber

    with RmClient("/dev") as direct:
        want = build_version(direct)
    c = rsl.client()
    assert build_version(c) == want
    assert want[0][0] == b"595.45.04"
    for cmd, size in ((A.NV0000_CTRL_CMD_GPU_GET_ATTACHED_IDS, 128),
                      (A.NV0000_CTRL_CMD_GPU_GET_PROBED_IDS, 384)):
        raw = c.control(c.hClient, cmd, bytes(size))
        ids = struct.unpack_from(f"<{min(size, 128) // 4}I", raw, 0)
        assert set(ids) == {0xFFFFFFFF}, (hex(cmd), ids[:4])
    p = A.NV0000_CTRL_SYSTEM_GET_FABRIC_STATUS_PARAMS(fabricStatus=7)
    c.control(c.hClient, A.NV0000_CTRL_CMD_SYSTEM_GET_FABRIC_STATUS, p)
    assert p.fabricStatus == A.NV0000_CTRL_GET_SYSTEM_FABRIC_STATUS_SKIP


def test_calls_reach_the_driver_at_the_callers_privilege(make_slice, kern):
    """The proof that vgpu.ko lends no privilege: a privileged control that
    the slice's allow-list forwards works for root, and is refused by the
    real RM (escape.c, RmIoctl: the caller's credentials, osIsAdministrator)
    to the same open file once its process is an unprivileged user.  The
    audit record shows the second call forwarded, not refused by vgpu.ko."""
    sl = make_slice(gpus=[(0, 64 * MiB)])
    kern.slice_set(sl.id, allow=[(U.VGPU_AUDIT_CONTROL, GET_CLIENT_DATABASE_INFO)])
    c = sl.client()
    c.control(c.hClient, GET_CLIENT_DATABASE_INFO, bytes(16))

    def as_nobody():
        os.setgid(65534)
        os.setuid(65534)
        return status(lambda: c.control(c.hClient, GET_CLIENT_DATABASE_INFO, bytes(16)))

    assert in_child(as_nobody) == {"ok": A.NV_ERR_INSUFFICIENT_PERMISSIONS}
    rec = {(e.kind, e.number): e for e in kern.audit_get(sl.id).entries}
    e = rec[(U.VGPU_AUDIT_CONTROL, GET_CLIENT_DATABASE_INFO)]
    assert (e.calls, e.refused, e.let_through) == (2, 0, 2)


def test_without_the_allow_list_vgpu_refuses_it_first(rsl, kern):
    c = rsl.client()
    assert status(lambda: c.control(c.hClient, GET_CLIENT_DATABASE_INFO, bytes(16))) \
        == A.NV_ERR_INSUFFICIENT_PERMISSIONS
    rec = {(e.kind, e.number): e for e in kern.audit_get(rsl.id).entries}
    e = rec[(U.VGPU_AUDIT_CONTROL, GET_CLIENT_DATABASE_INFO)]
    assert (e.calls, e.refused, e.let_through) == (1, 1, 0)


def test_a_client_belongs_to_its_file_and_goes_with_it(rsl):
    """Another file of the same slice may not use a client (vgpu.ko answers
    NV_ERR_INVALID_CLIENT before the driver); closing the file that made it
    frees it in the driver (nv.c, nvidia_close: RmFreeUnusedClients)."""
    before = real_clients()
    a = RmClient(rsl.prefix)
    b = RmClient(rsl.prefix)
    try:
        assert real_clients() == before + 2
        assert status(lambda: b.control(a.hClient, A.NV0000_CTRL_CMD_GPU_GET_ATTACHED_IDS,
                                        bytes(128), client=a.hClient)) == A.NV_ERR_INVALID_CLIENT
        assert status(lambda: b.free(a.hClient, parent=0, client=a.hClient)) \
            == A.NV_ERR_INVALID_CLIENT
        # an object b's own client lacks: the driver's answer, forwarded
        assert status(lambda: b.control(a.hClient, A.NV0000_CTRL_CMD_GPU_GET_ATTACHED_IDS,
                                        bytes(128))) == A.NV_ERR_OBJECT_NOT_FOUND
    finally:
        a.close()
        b.close()
    assert wait_until(lambda: real_clients() == before)
    assert wait_until(lambda: read_vstate().get("files") == 0)


def test_root_client_handles_through_a_slice(rsl):
    """A chosen handle (hRoot, as the driver takes it) is made as asked; a
    duplicate is refused with the driver's status; a handle the driver picks
    (vgpu.ko picks it, above the driver's own range) exists in the driver.
    Each is recorded only after the driver's ownership check passed for it
    (mediate.c, vgpu_root_owned: an NV0020_GPU_MANAGEMENT allocated under it
    through the real file, found through the kernel entry); vgpu.ko's own
    pick range is refused to callers (a tenant's handle must not decide
    vgpu.ko's own picks)."""
    c = RmClient(rsl.prefix, alloc_client=False)
    d = RmClient(rsl.prefix, alloc_client=False)
    try:
        assert c.alloc_client(handle=0x12347) == 0x12347
        c.control(0x12347, A.NV0000_CTRL_CMD_GPU_GET_ATTACHED_IDS, bytes(128), client=0x12347)
        assert status(lambda: d.alloc_client(handle=0x12347)) == A.NV_ERR_INSERT_DUPLICATE_NAME
        assert status(lambda: d.alloc_client(handle=0xc1d80005)) == \
            A.NV_ERR_INSERT_DUPLICATE_NAME
        h = d.alloc_client()
        d.control(h, A.NV0000_CTRL_CMD_GPU_GET_ATTACHED_IDS, bytes(128), client=h)
    finally:
        c.close()
        d.close()


def test_os_event_on_the_client(rsl):
    """NV_ESC_ALLOC_OS_EVENT registers a key on the control file
    (escape.c: allocate_os_event), and NV01_EVENT_OS_EVENT on the client
    itself takes it (event_api.c, eventapiInit); a key never registered is
    the driver's NV_ERR_OBJECT_NOT_FOUND."""
    c = rsl.client()
    key = 77
    p = A.nv_ioctl_alloc_os_event_t(hClient=c.hClient, hDevice=0, fd=key)
    c.escape(A.NV_ESC_ALLOC_OS_EVENT, p)
    assert p.Status == 0

    def event(data):
        q = A.NV0005_ALLOC_PARAMETERS(hParentClient=0, hSrcResource=c.hClient,
                                      hClass=A.NV01_EVENT_OS_EVENT, notifyIndex=0, data=data)
        return c.alloc(c.hClient, A.NV01_EVENT_OS_EVENT, q)

    h = event(key)
    c.free(h)
    assert status(lambda: event(key + 1)) == A.NV_ERR_OBJECT_NOT_FOUND
    p = A.nv_ioctl_alloc_os_event_t(hClient=c.hClient, hDevice=0, fd=key)
    c.escape(A.NV_ESC_FREE_OS_EVENT, p)
    assert p.Status == 0


def test_the_gpu_node_the_driver_lacks_fails_cleanly(rsl):
    """The slice's nvidia0 opens the real node, for which the driver has no
    GPU: the open fails with the driver's errno and leaves nothing behind
    (the vgpu.ko leak check follows)."""
    with pytest.raises(OSError) as ei:
        os.close(os.open(rsl.path("nvidia0"), os.O_RDWR))
    assert ei.value.errno in (errno.ENODEV, errno.ENXIO), ei.value
    assert read_vstate().get("files") == 0
