"""NVIDIA's own RM core, with no GPU, through the project's Python client:
what the driver itself says, the reference nvsim is modelled on.

Each test names the function of the 595.45.04 driver that decides it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from vgpu.abi import nvabi as A
from vgpu.abi.nvclient import RmClient
from vgpu_fixtures import in_child, status

NV_ERR_INSUFFICIENT_PERMISSIONS = 0x1B
NV_ERR_INVALID_CLIENT = 0x23
NV_ERR_OBJECT_NOT_FOUND = 0x57
# privileged (RMCTRL_FLAGS_PRIVILEGED), read-only, 16 bytes: kmod/vgpu/policy
GET_CLIENT_DATABASE_INFO = 0x0000013D


def test_the_driver_is_nvidias_and_its_release_is_the_vendor_one():
    assert Path("/sys/module/nvidia").is_dir()
    with RmClient("/dev", alloc_client=False) as c:
        assert c.version == "595.45.04"
        # CARD_INFO with no GPU: no valid entry (nv.c, nvidia_ioctl)
        assert c.cards == []


def test_nv0000_controls_on_a_root_client():
    with RmClient("/dev") as c:
        ids = c.control(c.hClient, A.NV0000_CTRL_CMD_GPU_GET_ATTACHED_IDS, bytes(128))
        assert set(ids) == {0xFF}                    # every id NV0000_CTRL_GPU_INVALID_ID
        p = A.NV0000_CTRL_SYSTEM_GET_FABRIC_STATUS_PARAMS(fabricStatus=7)
        c.control(c.hClient, A.NV0000_CTRL_CMD_SYSTEM_GET_FABRIC_STATUS, p)
        # cliresCtrlCmdSystemGetFabricStatus: SKIP unless a fabric manager
        # manages the system -- what vgpu.ko answers a slice (control.c)
        assert p.fabricStatus == A.NV0000_CTRL_GET_SYSTEM_FABRIC_STATUS_SKIP


def test_privilege_is_the_callers_at_each_call():
    """A privileged control works for root and is refused to an unprivileged
    user on root's own client through the inherited fd (the privilege is
    judged per call from the caller's credentials: escape.c,
    RmIoctl / osIsAdministrator)."""
    with RmClient("/dev") as c:
        c.control(c.hClient, GET_CLIENT_DATABASE_INFO, bytes(16))

        def as_nobody():
            os.setgid(65534)
            os.setuid(65534)
            return status(lambda: c.control(c.hClient, GET_CLIENT_DATABASE_INFO, bytes(16)))

        assert in_child(as_nobody) == {"ok": NV_ERR_INSUFFICIENT_PERMISSIONS}


def test_a_client_belongs_to_the_file_that_made_it():
    """Another open's client, from the same process: refused by the driver
    (rmclientValidate: the client's OS info is the file that made it).  An
    object the caller's own client lacks is clientGetResourceRef's
    NV_ERR_OBJECT_NOT_FOUND (serverControl)."""
    with RmClient("/dev") as a, RmClient("/dev") as b:
        got = {
            "control": status(lambda: b.control(a.hClient, A.NV0000_CTRL_CMD_GPU_GET_ATTACHED_IDS,
                                                bytes(128), client=a.hClient)),
            "free": status(lambda: b.free(a.hClient, parent=0, client=a.hClient)),
            "not in own client": status(lambda: b.control(
                a.hClient, A.NV0000_CTRL_CMD_GPU_GET_ATTACHED_IDS, bytes(128))),
        }
        assert got == {"control": A.NV_ERR_INVALID_CLIENT, "free": A.NV_ERR_INVALID_CLIENT,
                       "not in own client": NV_ERR_OBJECT_NOT_FOUND}
        assert status(lambda: a.control(a.hClient, A.NV0000_CTRL_CMD_GPU_GET_ATTACHED_IDS,
                                        bytes(128))) == 0


def test_root_client_handle_is_taken_from_hroot():
    """A root client's handle is asked for in hRoot (_rmAlloc hands it to
    serverAllocClient; RM builds with RS_COMPATABILITY_MODE, so it is taken
    as it is), 0 lets the driver pick, a duplicate is
    NV_ERR_INSERT_DUPLICATE_NAME; hObjectNew is where the handle made comes
    back, and what it held is ignored."""
    with RmClient("/dev", alloc_client=False) as c, RmClient("/dev", alloc_client=False) as d:
        assert c.alloc_client(handle=0x12346) == 0x12346
        assert status(lambda: d.alloc_client(handle=0x12346)) == A.NV_ERR_INSERT_DUPLICATE_NAME
        p = A.NVOS64_PARAMETERS(hRoot=0, hObjectParent=0, hObjectNew=0x5151,
                                hClass=A.NV01_ROOT_CLIENT)
        d.escape(A.NV_ESC_RM_ALLOC, p)
        assert p.status == 0 and p.hObjectNew != 0x5151
        assert p.hObjectNew & 0xFFF00000 == 0xC1D00000          # RS_CLIENT_HANDLE_BASE


def test_null_control_answers_before_any_lookup():
    """NVXXXX_CTRL_CMD_NULL, and any class's NULL command (category and
    index 0), is NV_OK before the client is looked up (control.c,
    _rmapiRmControl): no existence probe can be built on it."""
    with RmClient("/dev") as c:
        for cmd in (0, 0x20800000):
            p = A.NVOS54_PARAMETERS(hClient=0xDEAD0001, hObject=0xDEAD0002, cmd=cmd)
            c.escape(A.NV_ESC_RM_CONTROL, p)
            assert p.status == 0, hex(cmd)


def test_vgpu_binds_to_the_real_driver_and_reads_its_release():
    """vgpu.ko, linked against nvidia.ko's Module.symvers, takes the release
    from the driver's own nvidia_get_rm_ops handshake and picks its tables
    (kmod/vgpu/policy.c)."""
    if not Path("/sys/module/vgpu").is_dir():
        pytest.skip("vgpu.ko not loaded (--load-vgpu --vgpu-ko build/realdrv/kmod/vgpu/vgpu.ko)")
    import subprocess
    log = subprocess.run(["dmesg"], capture_output=True, text=True, check=True).stdout
    assert "mediating with the tables of release 595.45.04" in log
    state = Path("/sys/kernel/debug/vgpu/state").read_text()
    assert "slices 0" in state
