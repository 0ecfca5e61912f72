"""vgpu/kernel.py without the module: message encoding and decoding, error
parsing (extack), and the clear error when vgpu.ko is not loaded."""

from __future__ import annotations

import errno
import struct
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from vgpu import kernel as K  # noqa: E402
from vgpu import uapi as U  # noqa: E402


def _encode(attrs, cmd=U.VGPU_CMD_SLICE_GET) -> bytes:
    m = K.vgpumsg()
    m["cmd"] = cmd
    m["version"] = U.VGPU_GENL_VERSION
    m["attrs"] = attrs
    m["header"]["type"] = 0x20
    m.encode()
    return bytes(m.data)


def test_pyroute2_encoding_matches_raw_encoder():
    b = _encode([["VGPU_A_SLICE_ID", 7],
                 ["VGPU_A_SLICE_GPUS", {"attrs": [["VGPU_A_GPU", {"attrs": [
                     ["VGPU_GPU_A_REAL_MINOR", 1], ["VGPU_GPU_A_MEM_LIMIT", 1 << 33]]}]]}],
                 ["VGPU_A_SLICE_NAME", "ctr"]])
    raw = K.encode_attrs([K.Nla.u32(U.VGPU_A_SLICE_ID, 7),
                          K.Nla.nest(U.VGPU_A_SLICE_GPUS, K.Nla.nest(
                              U.VGPU_A_GPU, K.Nla.u32(U.VGPU_GPU_A_REAL_MINOR, 1),
                              K.Nla.u64(U.VGPU_GPU_A_MEM_LIMIT, 1 << 33))),
                          K.Nla.string(U.VGPU_A_SLICE_NAME, "ctr")])
    assert b[20:] == raw
    # nests carry NLA_F_NESTED (strict validation requires it)
    t = struct.unpack_from("=H", raw, 8 + 2)[0]
    assert t == U.VGPU_A_SLICE_GPUS | 0x8000


def test_decode_slice_reply():
    b = _encode([["VGPU_A_SLICE_ID", 9], ["VGPU_A_SLICE_NAME", "n"],
                 ["VGPU_A_SLICE_MAJOR", 240], ["VGPU_A_SLICE_BASE_MINOR", 32],
                 ["VGPU_A_SLICE_OPEN_FILES", 3],
                 ["VGPU_A_SLICE_PIDS", {"attrs": [["VGPU_A_PID", 10], ["VGPU_A_PID", 11]]}],
                 ["VGPU_A_SLICE_GPUS", {"attrs": [
                     ["VGPU_A_GPU", {"attrs": [["VGPU_GPU_A_INDEX", 0], ["VGPU_GPU_A_MEM_LIMIT", 100],
                                               ["VGPU_GPU_A_MEM_USED", 40], ["VGPU_GPU_A_MEM_PEAK", 60],
                                               ["VGPU_GPU_A_MINOR", 34]]}],
                     ["VGPU_A_GPU", {"attrs": [["VGPU_GPU_A_INDEX", 1]]}]]}]])
    m = K.vgpumsg(b)
    m.decode()
    s = K.slice_from_msg(m)
    assert (s.id, s.name, s.major, s.base_minor, s.open_files, s.pids) == (9, "n", 240, 32, 3, [10, 11])
    assert [g.index for g in s.gpus] == [0, 1]
    assert (s.gpu(0).mem_limit, s.gpu(0).mem_used, s.gpu(0).mem_peak, s.gpu(0).minor) == (100, 40, 60, 34)
    assert s.gpu_devno(1) == __import__("os").makedev(240, 32 + U.VGPU_MINOR_GPU0 + 1)


def _capturing_kernel(sent: list) -> K.VgpuKernel:
    """A VgpuKernel without a socket: each request's attribute bytes go to
    sent, and every answer is one slice (id 1)."""
    k = K.VgpuKernel.__new__(K.VgpuKernel)
    k.family_id = 0x20

    def transact(cmd, payload_attrs, flags, **kw):
        sent.append((cmd, payload_attrs))
        m = K.vgpumsg(_encode([["VGPU_A_SLICE_ID", 1]]))
        m.decode()
        return [m]
    k._transact = transact
    return k


def test_max_channels_encoded():
    sent = []
    k = _capturing_kernel(sent)
    k.slice_new(7, [(1, 1 << 33)], max_channels=64)
    k.slice_new(8, [(1, 1 << 33)], max_channels=0)
    k.slice_new(9, [(1, 1 << 33)])
    k.slice_set(7, max_channels=128)
    k.slice_set(7)
    gpus = K.Nla.nest(U.VGPU_A_SLICE_GPUS, K.Nla.nest(
        U.VGPU_A_GPU, K.Nla.u32(U.VGPU_GPU_A_REAL_MINOR, 1),
        K.Nla.u64(U.VGPU_GPU_A_MEM_LIMIT, 1 << 33)))
    assert [c for c, _ in sent] == [U.VGPU_CMD_SLICE_NEW] * 3 + [U.VGPU_CMD_SLICE_SET] * 2
    new = [p for c, p in sent if c == U.VGPU_CMD_SLICE_NEW]
    setl = [p for c, p in sent if c == U.VGPU_CMD_SLICE_SET]
    assert new == [
        K.encode_attrs([K.Nla.u32(U.VGPU_A_SLICE_ID, 7), gpus,
                        K.Nla.u32(U.VGPU_A_SLICE_MAX_CHANNELS, 64)]),
        K.encode_attrs([K.Nla.u32(U.VGPU_A_SLICE_ID, 8), gpus,
                        K.Nla.u32(U.VGPU_A_SLICE_MAX_CHANNELS, 0)]),
        K.encode_attrs([K.Nla.u32(U.VGPU_A_SLICE_ID, 9), gpus]),
    ]
    assert setl == [
        K.encode_attrs([K.Nla.u32(U.VGPU_A_SLICE_ID, 7),
                        K.Nla.u32(U.VGPU_A_SLICE_MAX_CHANNELS, 128)]),
        K.encode_attrs([K.Nla.u32(U.VGPU_A_SLICE_ID, 7)]),
    ]


def test_decode_max_channels():
    m = K.vgpumsg(_encode([["VGPU_A_SLICE_ID", 9], ["VGPU_A_SLICE_MAX_CHANNELS", 48]]))
    m.decode()
    s = K.slice_from_msg(m)
    assert s.max_channels == 48 and s.extra == {}
    m = K.vgpumsg(_encode([["VGPU_A_SLICE_ID", 9]]))
    m.decode()
    assert K.slice_from_msg(m).max_channels == 0            # an older vgpu.ko: absent


def _err_msg(err: int, extack: str | None, capped=True, offs=None) -> tuple[int, bytes]:
    orig = struct.pack("=IHHII", 36, 0x20, 5, 1, 0)
    tlv = b""
    if extack is not None:
        s = extack.encode() + b"\0"
        tlv += struct.pack("=HH", 4 + len(s), K.NLMSGERR_ATTR_MSG) + s + bytes((-len(s)) % 4)
    if offs is not None:
        tlv += struct.pack("=HHI", 8, K.NLMSGERR_ATTR_OFFS, offs)
    body = struct.pack("=i", err) + orig + (b"" if capped else bytes(20)) + tlv
    flags = (K.NLM_F_CAPPED if capped else 0) | (K.NLM_F_ACK_TLVS if tlv else 0)
    return flags, struct.pack("=IHHII", 16 + len(body), K.NLMSG_ERROR, flags, 1, 0) + body


@pytest.mark.parametrize("capped", [True, False])
def test_parse_error_with_extack(capped):
    flags, msg = _err_msg(-errno.EINVAL, "bad VGPU_A_SLICE_ID", capped=capped, offs=24)
    e = K.parse_error(flags, msg, "SLICE_NEW")
    assert isinstance(e, K.VgpuError) and isinstance(e, OSError)
    assert e.errno == errno.EINVAL and e.extack == "bad VGPU_A_SLICE_ID" and e.offset == 24
    assert "SLICE_NEW" in str(e) and "EINVAL" in str(e) and "bad VGPU_A_SLICE_ID" in str(e)


def test_parse_ack_and_plain_error():
    flags, msg = _err_msg(0, None)
    assert K.parse_error(flags, msg) is None
    flags, msg = _err_msg(-errno.EPERM, None)
    e = K.parse_error(flags, msg, "SLICE_DEL")
    assert e.errno == errno.EPERM and e.extack is None


def test_not_loaded_is_clear():
    """Outside the VM the family does not exist (host kernel, no modules)."""
    try:
        k = K.VgpuKernel(timeout=2)
    except K.VgpuNotLoaded as e:
        assert e.errno == errno.ENOENT
        assert str(e) == "vgpu.ko is not loaded: generic netlink family 'vgpu' not found"
        return
    except OSError as e:   # no netlink at all in this sandbox
        pytest.skip(f"no generic netlink here: {e}")
    k.close()
    pytest.skip("vgpu.ko is loaded on this machine")
