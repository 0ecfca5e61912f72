"""What a slice is told about GPU identity, peers, fabric, sharing, FB
regions and NUMA memory: the rewrites and virtualisations of control.c
(NUMA_INFO: cards.c).

nvsim presents two GPUs; each slice here sits on the second, so that
"another GPU" is always one the host has and the slice does not.  Every
answer vgpu.ko makes itself must not reach nvsim (its debugfs stats name the
last control it saw); every rewrite must reach it and come back cut to the
slice.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import pytest

from vgpu.abi import nvabi as A
from vgpu.abi import nvrel
from vgpu.abi.nvclient import raw_ioctl
from vgpu_fixtures import MiB, real_cards, status
# fixtures (vgpu_leak_check is autouse: vgpu.ko's leak check after every test)
from vgpu_fixtures import kern, make_slice, vgpu_leak_check  # noqa: F401

STATS = Path("/sys/kernel/debug/nvsim/stats")
NV_ERR_INSUFFICIENT_PERMISSIONS = 0x1B
NV_ERR_INVALID_ARGUMENT = 0x1F
INVALID = A.NV0000_CTRL_GPU_INVALID_ID
# 595.45.04's sizes of the controls driven with raw bytes (vgpu/abi/nvrel.py
# gives another release's where it differs).
BASE_SIZES = {
    A.NV2080_CTRL_CMD_GET_GPU_FABRIC_PROBE_INFO: 56, A.NV2080_CTRL_CMD_NVLINK_GET_NVLINK_CAPS: 48,
    A.NV2080_CTRL_CMD_NVLINK_GET_NVLINK_STATUS: 13864, A.NV2080_CTRL_CMD_FIFO_DISABLE_CHANNELS: 536,
    A.NVA06F_CTRL_CMD_STOP_CHANNEL: 1, A.NVA06F_CTRL_CMD_SET_INTERLEAVE_LEVEL: 4,
}


def size_of(c, cmd: int) -> int:
    return nvrel.size(c.version, "control", cmd, BASE_SIZES[cmd])


def last_control() -> int:
    for line in STATS.read_text().splitlines():
        if line.startswith("last_control "):
            return int(line.split()[1], 16)
    raise AssertionError("nvsim stats lack last_control")


def nvsim_param(name: str) -> str:
    return Path(f"/sys/module/nvsim/parameters/{name}").read_text().strip()


@pytest.fixture
def two():
    cards = real_cards()
    assert len(cards) >= 2, "nvsim must present two GPUs"
    return cards


@pytest.fixture
def second(make_slice, two):
    """A slice on the host's second GPU, and a client of it."""
    sl = make_slice(gpus=((two[1].minor, 256 * MiB),))
    return sl, sl.client(), two


def marked(c) -> None:
    """Make the NULL control the last nvsim saw (a certain forward)."""
    status(lambda: c.control(c.hClient, 0))
    assert last_control() == 0


# ------------------------------------------------------------ identity
def test_id_info_v1_numbers_the_gpu_as_the_container_does(second):
    sl, c, cards = second
    p = A.NV0000_CTRL_GPU_GET_ID_INFO_PARAMS(gpuId=cards[1].gpu_id, szName=0x1234)
    c.control(c.hClient, A.NV0000_CTRL_CMD_GPU_GET_ID_INFO, p)
    assert p.deviceInstance == 0            # the host calls it 1
    assert p.szName == 0x1234               # the caller's, unread by the driver
    other = A.NV0000_CTRL_GPU_GET_ID_INFO_PARAMS(gpuId=cards[0].gpu_id)
    assert status(lambda: c.control(c.hClient, A.NV0000_CTRL_CMD_GPU_GET_ID_INFO,
                                    other)) == NV_ERR_INVALID_ARGUMENT


@pytest.mark.parametrize("cmd", [A.NV0000_CTRL_CMD_GPU_ATTACH_IDS, A.NV0000_CTRL_CMD_GPU_DETACH_IDS])
def test_attach_and_detach_name_only_the_slices_gpus(second, cmd):
    sl, c, cards = second
    kind = (A.NV0000_CTRL_GPU_ATTACH_IDS_PARAMS if cmd == A.NV0000_CTRL_CMD_GPU_ATTACH_IDS
            else A.NV0000_CTRL_GPU_DETACH_IDS_PARAMS)

    def ids(*v):
        p = kind()
        for i in range(32):
            p.gpuIds[i] = v[i] if i < len(v) else INVALID
        return p

    c.control(c.hClient, cmd, ids(cards[1].gpu_id))
    marked(c)
    assert status(lambda: c.control(c.hClient, cmd, ids(cards[1].gpu_id, cards[0].gpu_id))) \
        == NV_ERR_INVALID_ARGUMENT
    assert last_control() == 0              # refused before the driver
    c.control(c.hClient, cmd, ids(0xFFFF))  # ALL: the driver does nothing
    assert last_control() == cmd


def test_async_attach_of_another_gpu_is_refused(second):
    sl, c, cards = second
    if c.version.startswith("535."):
        pytest.skip("535 has no ASYNC_ATTACH_ID")
    cmd = A.NV0000_CTRL_CMD_GPU_ASYNC_ATTACH_ID
    c.control(c.hClient, cmd, cards[1].gpu_id.to_bytes(4, "little"))
    assert status(lambda: c.control(c.hClient, cmd, cards[0].gpu_id.to_bytes(4, "little"))) \
        == NV_ERR_INVALID_ARGUMENT


def test_device_ids_are_the_containers(second):
    sl, c, cards = second
    p = A.NV0000_CTRL_GPU_GET_DEVICE_IDS_PARAMS(deviceIds=0xDEAD)
    c.control(c.hClient, A.NV0000_CTRL_CMD_GPU_GET_DEVICE_IDS, p)
    assert p.deviceIds == 0b1               # its one GPU, device 0


def test_active_devices_list_the_slices_gpus_only(second):
    sl, c, cards = second
    if c.version.startswith("535."):
        pytest.skip("535 has no GET_ACTIVE_DEVICE_IDS")
    p = A.NV0000_CTRL_GPU_GET_ACTIVE_DEVICE_IDS_PARAMS()
    c.control(c.hClient, A.NV0000_CTRL_CMD_GPU_GET_ACTIVE_DEVICE_IDS, p)
    assert p.numDevices == 1
    assert (p.devices[0].gpuId, p.devices[0].gpuInstanceId) == (cards[1].gpu_id, INVALID)
    assert p.devices[1].gpuId == 0


# ---------------------------------------------- peers, NVLink, fabric
def test_p2p_caps_v2_say_no_peer_without_the_driver(second):
    sl, c, cards = second
    marked(c)
    p = A.NV0000_CTRL_SYSTEM_GET_P2P_CAPS_V2_PARAMS(gpuCount=1, p2pCaps=0xFF)
    p.gpuIds[0] = cards[1].gpu_id
    c.control(c.hClient, A.NV0000_CTRL_CMD_SYSTEM_GET_P2P_CAPS_V2, p)
    assert p.p2pCaps == 0 and p.p2pOptimalReadCEs == 0
    assert set(p.p2pCapsStatus) == {A.NV0000_P2P_CAPS_STATUS_NOT_SUPPORTED}
    assert p.busPeerIds[0] == A.NV0000_CTRL_SYSTEM_GET_P2P_CAPS_INVALID_PEER
    assert last_control() == 0
    p.gpuIds[1] = cards[0].gpu_id
    p.gpuCount = 2
    assert status(lambda: c.control(c.hClient, A.NV0000_CTRL_CMD_SYSTEM_GET_P2P_CAPS_V2, p)) \
        == NV_ERR_INVALID_ARGUMENT
    p.gpuCount = 0
    assert status(lambda: c.control(c.hClient, A.NV0000_CTRL_CMD_SYSTEM_GET_P2P_CAPS_V2, p)) \
        == NV_ERR_INVALID_ARGUMENT


def test_p2p_caps_v1_fill_the_callers_peer_id_array(second):
    sl, c, cards = second
    peers = (ctypes.c_uint32 * 1)(7)
    p = A.NV0000_CTRL_SYSTEM_GET_P2P_CAPS_PARAMS(gpuCount=1, busPeerIds=ctypes.addressof(peers))
    p.gpuIds[0] = cards[1].gpu_id
    c.control(c.hClient, A.NV0000_CTRL_CMD_SYSTEM_GET_P2P_CAPS, p)
    assert peers[0] == A.NV0000_CTRL_SYSTEM_GET_P2P_CAPS_INVALID_PEER
    assert p.p2pCaps == 0


def test_p2p_matrix_fabric_and_nvlink_answers(second):
    sl, c, cards = second
    g = c.gpu(0)
    marked(c)
    m = A.NV0000_CTRL_SYSTEM_GET_P2P_CAPS_MATRIX_PARAMS(grpACount=1)
    m.gpuIdGrpA[0] = cards[1].gpu_id
    m.p2pCaps[0][0] = 0xFF
    c.control(c.hClient, A.NV0000_CTRL_CMD_SYSTEM_GET_P2P_CAPS_MATRIX, m)
    assert m.p2pCaps[0][0] == 0
    m.gpuIdGrpA[0] = cards[0].gpu_id
    assert status(lambda: c.control(c.hClient, A.NV0000_CTRL_CMD_SYSTEM_GET_P2P_CAPS_MATRIX, m)) \
        == NV_ERR_INVALID_ARGUMENT
    f = A.NV0000_CTRL_SYSTEM_GET_FABRIC_STATUS_PARAMS(fabricStatus=7)
    c.control(c.hClient, A.NV0000_CTRL_CMD_SYSTEM_GET_FABRIC_STATUS, f)
    assert f.fabricStatus == A.NV0000_CTRL_GET_SYSTEM_FABRIC_STATUS_SKIP
    for cmd in (A.NV2080_CTRL_CMD_GET_GPU_FABRIC_PROBE_INFO, A.NV2080_CTRL_CMD_NVLINK_GET_NVLINK_CAPS,
                A.NV2080_CTRL_CMD_NVLINK_GET_NVLINK_STATUS):
        size = size_of(c, cmd)
        assert c.control(g.hSubdevice, cmd, b"\xff" * size) == bytes(size), hex(cmd)
    assert last_control() == 0              # none reached the driver


# ------------------------------------------------------- share policy
def test_inherited_share_policy_reaches_only_the_slices_processes(second):
    sl, c, cards = second
    cmd = A.NV0000_CTRL_CMD_CLIENT_SET_INHERITED_SHARE_POLICY

    def share(type_, target=0, action=0):
        return A.NV0000_CTRL_CLIENT_SET_INHERITED_SHARE_POLICY_PARAMS(
            sharePolicy=A.RS_SHARE_POLICY(target=target, accessMask=1, type=type_, action=action))

    marked(c)
    assert status(lambda: c.control(c.hClient, cmd, share(1))) == NV_ERR_INSUFFICIENT_PERMISSIONS
    assert last_control() == 0
    c.control(c.hClient, cmd, share(A.RS_SHARE_TYPE_PID, os.getpid()))
    assert last_control() == cmd
    # RM never reads a PID share's target (it gives the clients of the
    # caller's own process access: cliresShareCallback_IMPL); CUDA 535 passes
    # its client handle there, and it is forwarded as made
    marked(c)
    c.control(c.hClient, cmd, share(A.RS_SHARE_TYPE_PID, c.hClient))
    assert last_control() == cmd
    c.control(c.hClient, cmd, share(1, action=A.RS_SHARE_ACTION_FLAG_REVOKE))


# ------------------------------------------------------------ FB, NUMA
def test_fb_regions_end_at_the_quota(second):
    sl, c, cards = second
    g = c.gpu(0)
    p = A.NV2080_CTRL_CMD_FB_GET_FB_REGION_INFO_PARAMS()
    c.control(g.hSubdevice, A.NV2080_CTRL_CMD_FB_GET_FB_REGION_INFO, p)
    assert p.numFBRegions == 1
    r = p.fbRegion[0]
    assert r.limit - r.base + 1 - r.reserved == 256 * MiB
    sl.set_limit(0, 512 * MiB)
    c.control(g.hSubdevice, A.NV2080_CTRL_CMD_FB_GET_FB_REGION_INFO, p)
    assert p.fbRegion[0].limit - p.fbRegion[0].base + 1 == 512 * MiB


def test_numa_info_is_the_slices_share(second):
    sl, c, cards = second
    with pytest.raises(OSError):             # a GPU node's escape only
        c.escape(A.NV_ESC_NUMA_INFO, A.nv_ioctl_numa_info_t())
    fd = sl.open("nvidia0")
    try:
        p = A.nv_ioctl_numa_info_t()
        out = raw_ioctl(fd, A.NV_ESC_NUMA_INFO, bytes(p), size=ctypes.sizeof(p))
        p = A.nv_ioctl_numa_info_t.from_buffer_copy(out)
    finally:
        sl.close_fd(fd)
    if int(nvsim_param("numa_node")) < 0:
        assert (p.nid, p.numa_mem_size) == (-1, 0)
    else:                                    # a coherent platform: the FB is a node
        assert p.nid == int(nvsim_param("numa_node"))
        assert p.numa_mem_size == 256 * MiB


# ------------------------------------------------- channel scheduling
@pytest.mark.parametrize("cmd", [A.NV2080_CTRL_CMD_FIFO_DISABLE_CHANNELS, A.NVA06F_CTRL_CMD_STOP_CHANNEL,
                                 A.NVA06F_CTRL_CMD_SET_INTERLEAVE_LEVEL])
def test_channel_switches_are_answered_not_applied(second, cmd):
    sl, c, cards = second
    g = c.gpu(0)
    size = size_of(c, cmd)
    marked(c)
    c.control(g.hSubdevice, cmd, bytes(size))
    assert last_control() == 0
