"""ABI conformance of nvsim: ioctl sizes, device rules, escapes, version
check, card info and GPU attachment (nv-abi.md: "Device nodes", "Ioctl
encoding", "Escapes", "Driver version")."""

from __future__ import annotations

import ctypes
import errno

import pytest

from vgpu.abi import nvabi as A
from vgpu.abi.nvclient import RmError, _ioctl_obj, raw_ioctl

GiB = 1 << 30


def _einval(fn, *a, **kw):
    with pytest.raises(OSError) as ei:
        fn(*a, **kw)
    assert ei.value.errno == errno.EINVAL, f"expected EINVAL, got {ei.value!r}"


# ------------------------------------------------------------ sizes
# (escape, wrong size, which node) -- every one must be refused with EINVAL
# before the driver looks at the contents.
WRONG_SIZES = [
    (A.NV_ESC_RM_ALLOC, 40, "ctl"),          # neither NVOS21 (32) nor NVOS64 (48)
    (A.NV_ESC_RM_ALLOC, 31, "ctl"),
    (A.NV_ESC_RM_FREE, 12, "ctl"),
    (A.NV_ESC_RM_FREE, 20, "ctl"),
    (A.NV_ESC_RM_CONTROL, 28, "ctl"),
    (A.NV_ESC_RM_VID_HEAP_CONTROL, 180, "ctl"),
    (A.NV_ESC_RM_DUP_OBJECT, 32, "ctl"),
    (A.NV_ESC_RM_MAP_MEMORY, 48, "ctl"),     # NVOS33 without the fd
    (A.NV_ESC_RM_UNMAP_MEMORY, 24, "ctl"),
    (A.NV_ESC_CHECK_VERSION_STR, 71, "ctl"),
    (A.NV_ESC_IOCTL_XFER_CMD, 8, "ctl"),
    (A.NV_ESC_RM_ALLOC_MEMORY, 48, "gpu"),   # NVOS02 without the fd
    (A.NV_ESC_REGISTER_FD, 8, "gpu"),
]


@pytest.mark.parametrize("nr,size,node", WRONG_SIZES,
                         ids=[f"{A.ESCAPES[n][0]}-{s}" for n, s, _ in WRONG_SIZES])
def test_wrong_size_is_einval(res, state, nr, size, node):
    fd = res.open("nvidiactl" if node == "ctl" else "nvidia0")
    before = state().objects
    _einval(raw_ioctl, fd, nr, bytes(size))
    assert state().objects == before


def test_zero_size_is_einval(res):
    fd = res.open("nvidiactl")
    _einval(raw_ioctl, fd, A.NV_ESC_RM_ALLOC, b"")


# ------------------------------------------------------------ devices
@pytest.mark.parametrize("nr", [A.NV_ESC_RM_ALLOC, A.NV_ESC_RM_CONTROL, A.NV_ESC_RM_FREE,
                                A.NV_ESC_CARD_INFO, A.NV_ESC_CHECK_VERSION_STR,
                                A.NV_ESC_RM_VID_HEAP_CONTROL, A.NV_ESC_ATTACH_GPUS_TO_FD],
                         ids=lambda n: A.ESCAPES[n][0])
def test_ctl_only_escape_on_gpu_node_is_einval(res, nr):
    fd = res.open("nvidia0")
    size = A.escape_size(nr)
    _einval(raw_ioctl, fd, nr, bytes(size))


def test_alloc_memory_only_on_gpu_node(client, gpu0, state):
    # RM_ALLOC_MEMORY with the same, valid, parameters: refused on the control
    # node, accepted on the GPU node.
    c = client
    p = A.nv_ioctl_nvos02_parameters_with_fd()
    p.params.hRoot, p.params.hObjectParent, p.params.hObjectNew = c.hClient, gpu0.hDevice, 0x5CA00001
    p.params.hClass, p.params.limit, p.fd = A.NV01_MEMORY_LOCAL_USER, (1 << 20) - 1, gpu0.fd
    _einval(raw_ioctl, c.fd, A.NV_ESC_RM_ALLOC_MEMORY, p)
    assert state().fb_used(0) == 0
    out = A.nv_ioctl_nvos02_parameters_with_fd.from_bytes(raw_ioctl(gpu0.fd, A.NV_ESC_RM_ALLOC_MEMORY, p))
    assert out.params.status == A.NV_OK
    assert state().fb_used(0) == 1 << 20


@pytest.mark.parametrize("nr", [0x00, 0x26, 0x60, 0x7F, 199, 203, 215, 230, 255])
def test_unknown_escape_is_einval(res, nr):
    for node in ("nvidiactl", "nvidia0"):
        fd = res.open(node)
        _einval(raw_ioctl, fd, nr, bytes(16))


@pytest.mark.parametrize("type_", [0x00, ord("G"), 0xFF])
def test_ioctl_type_byte_is_ignored(res, state, type_):
    c = res.client()
    # RM_ALLOC of a device under the client with an odd _IOC_TYPE
    c.attach_gpus([c.cards[0].gpu_id])
    dp = A.NV0080_ALLOC_PARAMETERS(deviceId=0)
    p = A.NVOS64_PARAMETERS(hRoot=c.hClient, hObjectParent=c.hClient, hObjectNew=0x5CA00080,
                            hClass=A.NV01_DEVICE_0, pAllocParms=ctypes.addressof(dp),
                            paramsSize=ctypes.sizeof(dp))
    out = A.NVOS64_PARAMETERS.from_bytes(raw_ioctl(c.fd, A.NV_ESC_RM_ALLOC, p, type_=type_))
    assert out.status == A.NV_OK
    assert out.hObjectNew == 0x5CA00080
    assert state().objects >= 2   # client + device


# ------------------------------------------------------------ version
def test_version_query_returns_driver_version(res):
    c = res.client(alloc_client=False)
    assert c.version
    assert all(ch.isdigit() or ch == "." for ch in c.version), c.version
    with open("/sys/module/nvsim/parameters/driver_version") as f:
        assert c.version == f.read().strip()


def test_version_strict_match_is_recognized(res):
    c = res.client(alloc_client=False)
    r = c.check_version(c.version, A.NV_RM_API_VERSION_CMD_STRICT)
    assert r.reply == A.NV_RM_API_VERSION_REPLY_RECOGNIZED


@pytest.mark.parametrize("cmd,version", [(A.NV_RM_API_VERSION_CMD_STRICT, b"1.2.3"),
                                         (A.NV_RM_API_VERSION_CMD_STRICT, b"595.45.05"),
                                         (A.NV_RM_API_VERSION_CMD_RELAXED, b"1.2.3")],
                         ids=["strict-other", "strict-near", "relaxed-other-major"])
def test_version_mismatch_is_refused(res, cmd, version):
    """A mismatch: EINVAL, reply UNRECOGNIZED, and the driver's own version
    copied back into versionString (so the caller can say what it found)."""
    c = res.client(alloc_client=False)
    p = A.nv_ioctl_rm_api_version_t(cmd=cmd, versionString=version)
    with pytest.raises(OSError) as ei:
        _ioctl_obj(c.fd, A.nv_ioctl(A.NV_ESC_CHECK_VERSION_STR, ctypes.sizeof(p)), p)
    assert ei.value.errno == errno.EINVAL
    assert p.reply == A.NV_RM_API_VERSION_REPLY_UNRECOGNIZED
    assert p.versionString.decode() == c.version


def test_version_relaxed_same_major(res):
    c = res.client(alloc_client=False)
    major = c.version.split(".")[0]
    r = c.check_version(major + ".0.1", A.NV_RM_API_VERSION_CMD_RELAXED)
    assert r.reply == A.NV_RM_API_VERSION_REPLY_RECOGNIZED


# ------------------------------------------------------------ card info
def test_card_info_lists_the_gpus(res, num_gpus, fb_size):
    c = res.client(alloc_client=False)
    arr = (A.nv_ioctl_card_info_t * 8)()
    out = raw_ioctl(c.fd, A.NV_ESC_CARD_INFO, bytes(arr))
    entries = [A.nv_ioctl_card_info_t.from_bytes(out[i * 72:(i + 1) * 72]) for i in range(8)]
    valid = [e for e in entries if e.valid]
    assert len(valid) == num_gpus
    assert all(e.valid == 0 for e in entries[num_gpus:]), "entries past the last GPU must have valid=0"
    assert [e.minor_number for e in valid] == list(range(num_gpus))
    assert len({e.gpu_id for e in valid}) == num_gpus
    for e in valid:
        assert e.pci_info.vendor_id == 0x10DE
        assert e.fb_size == fb_size


def test_card_info_exact_and_too_small(res, num_gpus):
    """An array of exactly num_gpus entries is filled; a smaller one is an
    error (nvidia_read_card_info)."""
    c = res.client(alloc_client=False)
    out = raw_ioctl(c.fd, A.NV_ESC_CARD_INFO, bytes(72 * num_gpus))
    assert all(out[i * 72] == 1 for i in range(num_gpus))
    if num_gpus > 1:
        _einval(raw_ioctl, c.fd, A.NV_ESC_CARD_INFO, bytes(72 * (num_gpus - 1)))


@pytest.mark.parametrize("size", [71, 73, 72 * 2 + 1, 100])
def test_card_info_non_multiple_size_is_einval(res, size):
    fd = res.open("nvidiactl")
    _einval(raw_ioctl, fd, A.NV_ESC_CARD_INFO, bytes(size))


# ------------------------------------------------------------ attach
def test_attach_gpus_twice_fails(res):
    c = res.client()
    ids = [card.gpu_id for card in c.cards]
    c.attach_gpus(ids)
    with pytest.raises(OSError):
        c.attach_gpus(ids)


def test_attach_unknown_gpu_id_fails(res):
    c = res.client()
    bad = max(card.gpu_id for card in c.cards) + 0x1000
    with pytest.raises(OSError):
        c.attach_gpus([bad])
    # nothing was attached: a correct attach still works afterwards
    c.attach_gpus([c.cards[0].gpu_id])


def test_attach_non_multiple_size_is_einval(res):
    c = res.client()
    _einval(raw_ioctl, c.fd, A.NV_ESC_ATTACH_GPUS_TO_FD,
            c.cards[0].gpu_id.to_bytes(4, "little") + b"\0\0")


def test_device_alloc_of_missing_instance(res):
    """A device instance with no GPU behind it is answered with an RM status
    (never an errno and never a crash)."""
    c = res.client()
    dp = A.NV0080_ALLOC_PARAMETERS(deviceId=7)       # no such device instance
    with pytest.raises(RmError) as ei:
        c.alloc(c.hClient, A.NV01_DEVICE_0, dp)
    assert ei.value.status != A.NV_OK


def test_client_handle_chosen_by_driver(res, state):
    a = res.client()
    b = res.client()
    assert a.hClient and b.hClient and a.hClient != b.hClient
    assert state().clients == 2


def test_fd_kinds_in_card_info_minor_match_nodes(res, num_gpus):
    c = res.client(alloc_client=False)
    import os
    import stat
    for card in c.cards:
        st = os.stat(f"/dev/nvidia{card.minor}")
        assert stat.S_ISCHR(st.st_mode)
        assert os.major(st.st_rdev) == A.NV_MAJOR_DEVICE_NUMBER
        assert os.minor(st.st_rdev) == card.minor
    st = os.stat("/dev/nvidiactl")
    assert os.minor(st.st_rdev) == A.NV_CONTROL_DEVICE_MINOR
