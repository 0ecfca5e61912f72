"""vgpu/vgpuko/client.py without the module: message encoding and decoding, error
parsing (extack), and the clear error when vgpu.ko is not loaded."""

from __future__ import annotations

import errno
import struct
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

from vgpu.vgpuko import client, messages, netlink
from vgpu.abi import uapi


def _encode(attrs, cmd=uapi.VGPU_CMD_SLICE_GET) -> bytes:
    m = messages.vgpumsg()
    m["cmd"] = cmd
    m["version"] = uapi.VGPU_GENL_VERSION
    m["attrs"] = attrs
    m["header"]["type"] = 0x20
    m.encode()
    return bytes(m.data)


def test_pyroute2_encoding_matches_raw_encoder():
    b = _encode([["VGPU_A_SLICE_ID", 7],
                 ["VGPU_A_SLICE_GPUS", {"attrs": [["VGPU_A_GPU", {"attrs": [
                     ["VGPU_GPU_A_REAL_MINOR", 1], ["VGPU_GPU_A_MEM_LIMIT", 1 << 33]]}]]}],
                 ["VGPU_A_SLICE_NAME", "ctr"]])
    raw = netlink.encode_attrs([netlink.Nla.u32(uapi.VGPU_A_SLICE_ID, 7),
                          netlink.Nla.nest(uapi.VGPU_A_SLICE_GPUS, netlink.Nla.nest(
                              uapi.VGPU_A_GPU, netlink.Nla.u32(uapi.VGPU_GPU_A_REAL_MINOR, 1),
                              netlink.Nla.u64(uapi.VGPU_GPU_A_MEM_LIMIT, 1 << 33))),
                          netlink.Nla.string(uapi.VGPU_A_SLICE_NAME, "ctr")])
    assert b[20:] == raw
    # nests carry NLA_F_NESTED (strict validation requires it)
    t = struct.unpack_from("=H", raw, 8 + 2)[0]
    assert t == uapi.VGPU_A_SLICE_GPUS | 0x8000


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
    m = messages.vgpumsg(b)
    m.decode()
    s = messages.slice_from_msg(m)
    assert (s.id, s.name, s.major, s.base_minor, s.open_files, s.pids) == (9, "n", 240, 32, 3, [10, 11])
    assert [g.index for g in s.gpus] == [0, 1]
    assert (s.gpu(0).mem_limit, s.gpu(0).mem_used, s.gpu(0).mem_peak, s.gpu(0).minor) == (100, 40, 60, 34)
    assert s.gpu_devno(1) == __import__("os").makedev(240, 32 + uapi.VGPU_MINOR_GPU0 + 1)


def _capturing_kernel(sent: list) -> client.VgpuKernel:
    """A VgpuKernel without a socket: each request's attribute bytes go to
    sent, and every answer is one slice (id 1)."""
    k = client.VgpuKernel.__new__(client.VgpuKernel)
    k.family_id = 0x20

    def transact(cmd, payload_attrs, flags, **kw):
        sent.append((cmd, payload_attrs))
        m = messages.vgpumsg(_encode([["VGPU_A_SLICE_ID", 1]]))
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
    gpus = netlink.Nla.nest(uapi.VGPU_A_SLICE_GPUS, netlink.Nla.nest(
        uapi.VGPU_A_GPU, netlink.Nla.u32(uapi.VGPU_GPU_A_REAL_MINOR, 1),
        netlink.Nla.u64(uapi.VGPU_GPU_A_MEM_LIMIT, 1 << 33)))
    assert [c for c, _ in sent] == [uapi.VGPU_CMD_SLICE_NEW] * 3 + [uapi.VGPU_CMD_SLICE_SET] * 2
    new = [p for c, p in sent if c == uapi.VGPU_CMD_SLICE_NEW]
    setl = [p for c, p in sent if c == uapi.VGPU_CMD_SLICE_SET]
    assert new == [
        netlink.encode_attrs([netlink.Nla.u32(uapi.VGPU_A_SLICE_ID, 7), gpus,
                        netlink.Nla.u32(uapi.VGPU_A_SLICE_MAX_CHANNELS, 64)]),
        netlink.encode_attrs([netlink.Nla.u32(uapi.VGPU_A_SLICE_ID, 8), gpus,
                        netlink.Nla.u32(uapi.VGPU_A_SLICE_MAX_CHANNELS, 0)]),
        netlink.encode_attrs([netlink.Nla.u32(uapi.VGPU_A_SLICE_ID, 9), gpus]),
    ]
    assert setl == [
        netlink.encode_attrs([netlink.Nla.u32(uapi.VGPU_A_SLICE_ID, 7),
                        netlink.Nla.u32(uapi.VGPU_A_SLICE_MAX_CHANNELS, 128)]),
        netlink.encode_attrs([netlink.Nla.u32(uapi.VGPU_A_SLICE_ID, 7)]),
    ]


def test_decode_max_channels():
    m = messages.vgpumsg(_encode([["VGPU_A_SLICE_ID", 9], ["VGPU_A_SLICE_MAX_CHANNELS", 48]]))
    m.decode()
    s = messages.slice_from_msg(m)
    assert s.max_channels == 48 and s.extra == {}
    m = messages.vgpumsg(_encode([["VGPU_A_SLICE_ID", 9]]))
    m.decode()
    assert messages.slice_from_msg(m).max_channels == 0            # an older vgpu.ko: absent


def _err_msg(err: int, extack: str | None, capped=True, offs=None) -> tuple[int, bytes]:
    orig = struct.pack("=IHHII", 36, 0x20, 5, 1, 0)
    tlv = b""
    if extack is not None:
        s = extack.encode() + b"\0"
        tlv += struct.pack("=HH", 4 + len(s), netlink.NLMSGERR_ATTR_MSG) + s + bytes((-len(s)) % 4)
    if offs is not None:
        tlv += struct.pack("=HHI", 8, netlink.NLMSGERR_ATTR_OFFS, offs)
    body = struct.pack("=i", err) + orig + (b"" if capped else bytes(20)) + tlv
    flags = (netlink.NLM_F_CAPPED if capped else 0) | (netlink.NLM_F_ACK_TLVS if tlv else 0)
    return flags, struct.pack("=IHHII", 16 + len(body), netlink.NLMSG_ERROR, flags, 1, 0) + body


@pytest.mark.parametrize("capped", [True, False])
def test_parse_error_with_extack(capped):
    flags, msg = _err_msg(-errno.EINVAL, "bad VGPU_A_SLICE_ID", capped=capped, offs=24)
    e = netlink.parse_error(flags, msg, "SLICE_NEW")
    assert isinstance(e, netlink.VgpuError) and isinstance(e, OSError)
    assert e.errno == errno.EINVAL and e.extack == "bad VGPU_A_SLICE_ID" and e.offset == 24
    assert "SLICE_NEW" in str(e) and "EINVAL" in str(e) and "bad VGPU_A_SLICE_ID" in str(e)


def test_parse_ack_and_plain_error():
    flags, msg = _err_msg(0, None)
    assert netlink.parse_error(flags, msg) is None
    flags, msg = _err_msg(-errno.EPERM, None)
    e = netlink.parse_error(flags, msg, "SLICE_DEL")
    assert e.errno == errno.EPERM and e.extack is None


def test_not_loaded_is_clear():
    """Outside the VM the family does not exist (host kernel, no modules)."""
    try:
        k = client.VgpuKernel(timeout=2)
    except netlink.VgpuNotLoaded as e:
        assert e.errno == errno.ENOENT
        assert str(e) == "vgpu.ko is not loaded: generic netlink family 'vgpu' not found"
        return
    except OSError as e:   # no netlink at all in this sandbox
        pytest.skip(f"no generic netlink here: {e}")
    k.close()
    pytest.skip("vgpu.ko is loaded on this machine")


# ------------------------------------------------------------------ audit
def _allow_nest(*keys) -> netlink.Nla:
    return netlink.Nla.nest(uapi.VGPU_A_SLICE_ALLOW, *[netlink.Nla.u64(uapi.VGPU_A_ALLOW, k) for k in keys])


def _u8(t, v) -> netlink.Nla:
    return netlink.Nla(t, bytes([v]))


def test_audit_and_allow_encoded():
    """audit travels as a u8 0/1, the allow-list as VGPU_A_ALLOW u64 keys
    (kind << 32) | number in a VGPU_A_SLICE_ALLOW nest, sorted and distinct;
    [] is an empty nest (it clears), None sends nothing."""
    sent = []
    k = _capturing_kernel(sent)
    ctl = (uapi.VGPU_AUDIT_CONTROL << 32) | 0x20800A3E
    esc = (uapi.VGPU_AUDIT_ESCAPE << 32) | 0x5C
    uvm = (uapi.VGPU_AUDIT_UVM << 32) | 0x49
    k.slice_new(7, [(1, 1 << 33)], audit=True,
                allow=[(uapi.VGPU_AUDIT_UVM, 0x49), (uapi.VGPU_AUDIT_CONTROL, 0x20800A3E),
                       (uapi.VGPU_AUDIT_ESCAPE, 0x5C), (uapi.VGPU_AUDIT_CONTROL, 0x20800A3E)])
    k.slice_new(8, [(1, 1 << 33)], audit=False)
    k.slice_set(7, audit=False)
    k.slice_set(7, allow=[])
    k.slice_set(7, allow=[(uapi.VGPU_AUDIT_CLASS, 0xC86F)], audit=True, max_channels=4)
    gpus = netlink.Nla.nest(uapi.VGPU_A_SLICE_GPUS, netlink.Nla.nest(
        uapi.VGPU_A_GPU, netlink.Nla.u32(uapi.VGPU_GPU_A_REAL_MINOR, 1),
        netlink.Nla.u64(uapi.VGPU_GPU_A_MEM_LIMIT, 1 << 33)))
    sid = netlink.Nla.u32(uapi.VGPU_A_SLICE_ID, 7)
    assert [p for _, p in sent] == [
        netlink.encode_attrs([sid, gpus, _u8(uapi.VGPU_A_SLICE_AUDIT, 1), _allow_nest(esc, ctl, uvm)]),
        netlink.encode_attrs([netlink.Nla.u32(uapi.VGPU_A_SLICE_ID, 8), gpus, _u8(uapi.VGPU_A_SLICE_AUDIT, 0)]),
        netlink.encode_attrs([sid, _u8(uapi.VGPU_A_SLICE_AUDIT, 0)]),
        netlink.encode_attrs([sid, _allow_nest()]),
        netlink.encode_attrs([sid, netlink.Nla.u32(uapi.VGPU_A_SLICE_MAX_CHANNELS, 4),
                        _u8(uapi.VGPU_A_SLICE_AUDIT, 1),
                        _allow_nest((uapi.VGPU_AUDIT_CLASS << 32) | 0xC86F)]),
    ]
    # the empty nest is a bare header with NLA_F_NESTED
    assert sent[3][1][8:] == struct.pack("=HH", 4, uapi.VGPU_A_SLICE_ALLOW | 0x8000)


@pytest.mark.parametrize("allow,words", [
    ([(4, 1)], "allow[0]: kind 4 is not an enum vgpu_audit_kind (0..3)"),
    ([(True, 1)], "allow[0]: kind True"),
    ([(0, 1), ("control", 1)], "allow[1]: kind 'control'"),
    ([(2, 1 << 32)], "allow[0]: number 4294967296 is not a u32"),
    ([(2, -1)], "allow[0]: number -1 is not a u32"),
    ([7], "allow[0]: 7 is not a (kind, number) pair"),
    ([(2, i) for i in range(uapi.VGPU_MAX_ALLOW + 1)],
     "allow: 4097 items, more than VGPU_MAX_ALLOW (4096)"),
])
def test_bad_allow_refused_before_sending(allow, words):
    sent = []
    k = _capturing_kernel(sent)
    for call in (lambda: k.slice_new(7, [(1, 1)], allow=allow),
                 lambda: k.slice_set(7, allow=allow)):
        with pytest.raises(ValueError) as ei:
            call()
        assert words in str(ei.value)
    assert sent == []
    # distinct items count, not entries: 4096 items given twice is fine
    k.slice_set(7, allow=[(2, i) for i in range(uapi.VGPU_MAX_ALLOW)] * 2)
    assert len(sent) == 1


def test_decode_audit_and_allow_count():
    m = messages.vgpumsg(_encode([["VGPU_A_SLICE_ID", 9], ["VGPU_A_SLICE_AUDIT", 1],
                           ["VGPU_A_SLICE_ALLOW_COUNT", 12]]))
    m.decode()
    s = messages.slice_from_msg(m)
    assert s.audit is True and s.allow_count == 12 and s.extra == {}
    m = messages.vgpumsg(_encode([["VGPU_A_SLICE_ID", 9]]))
    m.decode()
    s = messages.slice_from_msg(m)                                 # an older vgpu.ko: absent
    assert s.audit is False and s.allow_count == 0


def _audit_msg(sid, audit, dropped, entries):
    """One AUDIT_GET reply message as vgpu.ko builds it."""
    return _encode([["VGPU_A_SLICE_ID", sid], ["VGPU_A_SLICE_AUDIT", audit],
                    ["VGPU_A_AUDIT_DROPPED", dropped],
                    ["VGPU_A_AUDIT", {"attrs": [["VGPU_A_AUDIT_ENTRY", {"attrs": [
                        ["VGPU_AUDIT_A_KIND", kind], ["VGPU_AUDIT_A_NUMBER", num],
                        ["VGPU_AUDIT_A_VERDICT", verdict], ["VGPU_AUDIT_A_CALLS", calls],
                        ["VGPU_AUDIT_A_REFUSED", refused],
                        ["VGPU_AUDIT_A_LET_THROUGH", let]]}]
                        for kind, num, verdict, calls, refused, let in entries]}]],
                   cmd=uapi.VGPU_CMD_AUDIT_GET)


def _dumping_kernel(sent: list, replies: list[bytes]) -> client.VgpuKernel:
    k = client.VgpuKernel.__new__(client.VgpuKernel)
    k.family_id = 0x20

    def transact(cmd, payload_attrs, flags, **kw):
        sent.append((cmd, payload_attrs, flags))
        out = []
        for r in replies:
            m = messages.vgpumsg(r)
            m.decode()
            out.append(m)
        return out
    k._transact = transact
    return k


def test_audit_get_merges_the_dump():
    """AUDIT_GET is a dump naming the slice; the entries of every message
    make one record, sorted by kind and number."""
    C, E, L = uapi.VGPU_AUDIT_CONTROL, uapi.VGPU_AUDIT_ESCAPE, uapi.VGPU_AUDIT_CLASS
    replies = [
        _audit_msg(7, 1, 3, [(C, 0x20800A3E, uapi.VGPU_AUDIT_REFUSE, 7, 5, 2),
                             (E, 0x5C, uapi.VGPU_AUDIT_REFUSE, 2, 0, 2)]),
        _audit_msg(7, 1, 3, [(L, 0xC86F, uapi.VGPU_AUDIT_FORWARD, 1 << 40, 0, 0)]),
        _audit_msg(7, 1, 3, [(uapi.VGPU_AUDIT_UVM, 0x49, uapi.VGPU_AUDIT_NOT_IMPLEMENTED, 3, 0, 3),
                             (C, 0x20801301, uapi.VGPU_AUDIT_REWRITE, 4, 0, 0)]),
    ]
    sent = []
    k = _dumping_kernel(sent, replies)
    rec = k.audit_get(7)
    (cmd, payload, flags), = sent
    assert cmd == uapi.VGPU_CMD_AUDIT_GET and flags & netlink.NLM_F_DUMP
    assert payload == netlink.encode_attrs([netlink.Nla.u32(uapi.VGPU_A_SLICE_ID, 7)])
    assert (rec.slice_id, rec.audit, rec.dropped) == (7, True, 3)
    assert [(e.kind_name, e.number, e.verdict_name, e.calls, e.refused, e.let_through)
            for e in rec.entries] == [
        ("escape", 0x5C, "refuse", 2, 0, 2),
        ("class", 0xC86F, "forward", 1 << 40, 0, 0),
        ("control", 0x20800A3E, "refuse", 7, 5, 2),
        ("control", 0x20801301, "rewrite", 4, 0, 0),
        ("uvm", 0x49, "not-implemented", 3, 0, 3),
    ]


def test_audit_get_empty_record_and_protocol_errors():
    # an empty record is one message without entries
    k = _dumping_kernel([], [_audit_msg(7, 0, 0, [])])
    rec = k.audit_get(7)
    assert (rec.audit, rec.dropped, rec.entries) == (False, 0, [])
    # no message at all, or another slice's record: EPROTO
    for replies, words in (([], "without a record"),
                           ([_audit_msg(8, 0, 0, [])], "answered for slice 8")):
        k = _dumping_kernel([], replies)
        with pytest.raises(netlink.VgpuError) as ei:
            k.audit_get(7)
        assert ei.value.errno == errno.EPROTO and words in str(ei.value)
    # unknown kinds and verdicts (a newer module) still decode, by number
    k = _dumping_kernel([], [_audit_msg(7, 0, 0, [(9, 1, 17, 1, 1, 0)])])
    (e,) = k.audit_get(7).entries
    assert (e.kind_name, e.verdict_name) == ("kind-9", "verdict-17")


def test_audit_entry_with_pad_attributes():
    """On architectures without efficient unaligned access
    nla_put_u64_64bit puts a PAD attribute before each u64: it decodes as
    nothing."""
    P = uapi.VGPU_AUDIT_A_PAD
    entry = netlink.Nla.nest(uapi.VGPU_A_AUDIT_ENTRY, _u8(uapi.VGPU_AUDIT_A_KIND, uapi.VGPU_AUDIT_CONTROL),
                       netlink.Nla.u32(uapi.VGPU_AUDIT_A_NUMBER, 0x20800A3E),
                       _u8(uapi.VGPU_AUDIT_A_VERDICT, uapi.VGPU_AUDIT_REFUSE),
                       netlink.Nla(P), netlink.Nla.u64(uapi.VGPU_AUDIT_A_CALLS, 7),
                       netlink.Nla(P), netlink.Nla.u64(uapi.VGPU_AUDIT_A_REFUSED, 5),
                       netlink.Nla(P), netlink.Nla.u64(uapi.VGPU_AUDIT_A_LET_THROUGH, 2))
    attrs = netlink.encode_attrs([netlink.Nla.u32(uapi.VGPU_A_SLICE_ID, 7), _u8(uapi.VGPU_A_SLICE_AUDIT, 0),
                            netlink.Nla(uapi.VGPU_A_PAD), netlink.Nla.u64(uapi.VGPU_A_AUDIT_DROPPED, 1),
                            netlink.Nla.nest(uapi.VGPU_A_AUDIT, entry)])
    body = struct.pack("=BBH", uapi.VGPU_CMD_AUDIT_GET, 1, 0) + attrs
    msg = struct.pack("=IHHII", 16 + len(body), 0x20, netlink.NLM_F_MULTI, 1, 0) + body
    rec = _dumping_kernel([], [msg]).audit_get(7)
    assert rec.dropped == 1
    assert [(e.kind, e.number, e.verdict, e.calls, e.refused, e.let_through)
            for e in rec.entries] == [(uapi.VGPU_AUDIT_CONTROL, 0x20800A3E, uapi.VGPU_AUDIT_REFUSE,
                                      7, 5, 2)]
