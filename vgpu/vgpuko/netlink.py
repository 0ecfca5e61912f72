"""Raw generic netlink for vgpu.ko's family, standard library only: the
header structs and constants, the attribute encoder (``Nla``,
``encode_attrs`` and the byte-level ``nla``/``nest``/``nlmsg``), the
attribute walker, a blocking NETLINK_GENERIC socket with extended acks and
the NLMSG_ERROR parser.

It is the one netlink encoder of the tree: the client (vgpu.vgpuko.client)
sends through it, and the fuzzer (tools/fuzz/nlfuzz.py), which must not need
pyroute2, builds its messages with it.
"""

from __future__ import annotations

import errno as _errno
import os
import socket
import struct
import time
from dataclasses import dataclass

NETLINK_GENERIC = 16
SOL_NETLINK = 270
NETLINK_ADD_MEMBERSHIP = 1
NETLINK_DROP_MEMBERSHIP = 2
NETLINK_CAP_ACK = 10
NETLINK_EXT_ACK = 11
NLMSG_NOOP, NLMSG_ERROR, NLMSG_DONE, NLMSG_OVERRUN = 1, 2, 3, 4
NLM_F_MULTI = 0x2
NLM_F_CAPPED = 0x100
NLM_F_ACK_TLVS = 0x200
NLMSGERR_ATTR_MSG = 1
NLMSGERR_ATTR_OFFS = 2
NLMSGERR_ATTR_MISS_TYPE = 5
NLMSGERR_ATTR_MISS_NEST = 6
NLHDR = struct.Struct("=IHHII")
GENLHDR = struct.Struct("=BBH")
NLAHDR = struct.Struct("=HH")
RECV_BUF = 1 << 20
TRACE_RCVBUF = 16 << 20      # a trace socket's receive buffer: bursts of 16 KiB records
SO_RCVBUFFORCE = 33

NOT_LOADED = "vgpu.ko is not loaded: generic netlink family 'vgpu' not found"


def align4(n: int) -> int:
    return (n + 3) & ~3


# ------------------------------------------------------------------ errors
class VgpuError(OSError):
    """The kernel refused a request: errno plus its extack message, if any."""

    def __init__(self, errno: int, message: str | None = None, *, op: str = "",
                 extack: str | None = None, offset: int | None = None,
                 miss_type: int | None = None, miss_nest: int | None = None):
        if message is None:
            message = extack or os.strerror(errno)
        super().__init__(errno, message)
        self.op = op
        self.extack = extack
        self.offset = offset
        self.miss_type = miss_type
        self.miss_nest = miss_nest

    def __str__(self) -> str:
        name = _errno.errorcode.get(self.errno, str(self.errno))
        out = f"{self.op + ': ' if self.op else ''}{name} ({os.strerror(self.errno)})"
        if self.extack:
            out += f": {self.extack}"
        elif self.strerror and self.strerror != os.strerror(self.errno):
            out += f": {self.strerror}"
        if self.miss_type is not None:
            out += f" [missing attribute {self.miss_type}]"
        return out


class VgpuNotLoaded(VgpuError):
    def __init__(self):
        super().__init__(_errno.ENOENT, NOT_LOADED)

    def __str__(self) -> str:
        return NOT_LOADED



# the values of linux/netlink.h and linux/genetlink.h (pyroute2 names them too)
NLM_F_REQUEST, NLM_F_ACK, NLM_F_ECHO = 0x1, 0x4, 0x8
NLM_F_ROOT, NLM_F_MATCH = 0x100, 0x200
NLM_F_DUMP = NLM_F_ROOT | NLM_F_MATCH
NLA_F_NESTED, NLA_F_NET_BYTEORDER = 0x8000, 0x4000
NLA_TYPE_MASK = 0x3FFF
GENL_ID_CTRL = 0x10
CTRL_CMD_GETFAMILY = 3


# ------------------------------------------------- raw attribute encoding
@dataclass
class Nla:
    """A raw attribute for raw_request: type, payload bytes (or a list of
    nested Nla), optional NLA_F_* flag bits and a length override (the
    nla_len written in the header, for malformed-length tests)."""
    type: int
    data: bytes | list["Nla"] = b""
    flags: int = 0
    length: int | None = None

    @classmethod
    def u8(cls, t: int, v: int) -> "Nla":
        return cls(t, struct.pack("=B", v & 0xFF))

    @classmethod
    def u32(cls, t: int, v: int) -> "Nla":
        return cls(t, struct.pack("=I", v & 0xFFFFFFFF))

    @classmethod
    def u64(cls, t: int, v: int) -> "Nla":
        return cls(t, struct.pack("=Q", v & 0xFFFFFFFFFFFFFFFF))

    @classmethod
    def string(cls, t: int, s: str | bytes, nul: bool = True) -> "Nla":
        b = s.encode() if isinstance(s, str) else bytes(s)
        return cls(t, b + (b"\0" if nul else b""))

    @classmethod
    def nest(cls, t: int, *children: "Nla", flag: bool = True) -> "Nla":
        return cls(t, list(children), NLA_F_NESTED if flag else 0)


def encode_attrs(attrs) -> bytes:
    """Encode a list of Nla (or (type, value) pairs: int -> u32, bytes -> raw,
    list -> nest with NLA_F_NESTED)."""
    out = bytearray()
    for a in attrs:
        if not isinstance(a, Nla):
            t, v = a
            if isinstance(v, bool) or isinstance(v, int):
                a = Nla.u32(t, int(v))
            elif isinstance(v, (bytes, bytearray)):
                a = Nla(t, bytes(v))
            elif isinstance(v, str):
                a = Nla.string(t, v)
            else:
                a = Nla(t, list(v), NLA_F_NESTED)
        payload = encode_attrs(a.data) if isinstance(a.data, list) else bytes(a.data)
        out += nla(a.type, payload, a.flags, a.length)
    return bytes(out)


def nla(t: int, payload: bytes = b"", flags: int = 0, length: int | None = None) -> bytes:
    """One attribute, bytes: header (``length`` overrides the nla_len written,
    for malformed-length messages), payload, padding to 4."""
    ln = NLAHDR.size + len(payload) if length is None else length
    return (NLAHDR.pack(ln & 0xFFFF, (t | flags) & 0xFFFF) + payload
            + bytes(align4(len(payload)) - len(payload)))


def nest(t: int, children: list[bytes] | bytes, flag: bool = True) -> bytes:
    """A nest of encoded attributes, with NLA_F_NESTED unless ``flag`` is False."""
    body = children if isinstance(children, bytes) else b"".join(children)
    return nla(t, body, NLA_F_NESTED if flag else 0)


def nlmsg(mtype: int, flags: int, seq: int, pid: int, payload: bytes,
          length: int | None = None) -> bytes:
    """One netlink message, bytes (``length`` overrides the nlmsg_len written)."""
    ln = NLHDR.size + len(payload) if length is None else length
    return NLHDR.pack(ln & 0xFFFFFFFF, mtype, flags & 0xFFFF, seq, pid) + payload


def parse_attrs(data: bytes) -> tuple[list[tuple[int, int, bytes]], str | None]:
    """Walk a run of attributes: ([(type, flag bits, payload)], the problem
    that stopped the walk or None)."""
    out, pos = [], 0
    while pos < len(data):
        if pos + 4 > len(data):
            return out, f"{len(data) - pos} stray bytes after the attributes"
        ln, t = NLAHDR.unpack_from(data, pos)
        if ln < 4 or pos + ln > len(data):
            return out, f"attribute {t & NLA_TYPE_MASK} has nla_len {ln} at {pos} of {len(data)}"
        out.append((t & NLA_TYPE_MASK, t & ~NLA_TYPE_MASK & 0xFFFF, data[pos + 4:pos + ln]))
        pos += align4(ln)
    return out, None


# ----------------------------------------------------------------- socket
class GenlSocket:
    """A blocking NETLINK_GENERIC socket with extended acks."""

    def __init__(self, timeout: float | None):
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC,
                                  NETLINK_GENERIC)
        try:
            self.sock.bind((0, 0))
            self.pid = self.sock.getsockname()[0]
            for opt in (NETLINK_EXT_ACK, NETLINK_CAP_ACK):
                try:
                    self.sock.setsockopt(SOL_NETLINK, opt, 1)
                except OSError:
                    pass
            self.sock.settimeout(timeout)
        except BaseException:
            self.sock.close()
            raise
        self.seq = int(time.monotonic_ns() & 0xFFFF) << 8

    def close(self) -> None:
        self.sock.close()

    def send(self, mtype: int, flags: int, payload: bytes) -> int:
        self.seq = (self.seq + 1) & 0xFFFFFFFF or 1
        hdr = NLHDR.pack(NLHDR.size + len(payload), mtype, flags, self.seq, 0)
        self.sock.sendto(hdr + payload, (0, 0))
        return self.seq

    def recv_msgs(self) -> list[tuple[int, int, int, bytes]]:
        """One datagram, split: [(type, flags, seq, whole message bytes)]."""
        data = self.sock.recv(RECV_BUF)
        out = []
        off = 0
        while off + NLHDR.size <= len(data):
            length, mtype, flags, seq, _pid = NLHDR.unpack_from(data, off)
            if length < NLHDR.size or off + length > len(data):
                break
            out.append((mtype, flags, seq, data[off:off + length]))
            off += align4(length)
        return out


def parse_error(flags: int, msg: bytes, op: str = "") -> VgpuError | None:
    """NLMSG_ERROR (or NLMSG_DONE of a dump) -> VgpuError, None for an ACK."""
    if len(msg) < NLHDR.size + 4:
        return VgpuError(_errno.EPROTO, "truncated netlink error message", op=op)
    (err,) = struct.unpack_from("=i", msg, NLHDR.size)
    if err == 0:
        return None
    extack = offs = miss_type = miss_nest = None
    if flags & NLM_F_ACK_TLVS:
        mtype = struct.unpack_from("=H", msg, 4)[0]
        if mtype == NLMSG_ERROR:
            pos = NLHDR.size + 4
            if flags & NLM_F_CAPPED or len(msg) < pos + NLHDR.size:
                pos += NLHDR.size
            else:
                pos += align4(struct.unpack_from("=I", msg, pos)[0])
        else:
            pos = NLHDR.size + 4
        while pos + NLAHDR.size <= len(msg):
            ln, t = NLAHDR.unpack_from(msg, pos)
            if ln < NLAHDR.size:
                break
            val = msg[pos + 4:pos + ln]
            t &= 0x3FFF
            if t == NLMSGERR_ATTR_MSG:
                extack = val.split(b"\0", 1)[0].decode(errors="replace")
            elif t == NLMSGERR_ATTR_OFFS and len(val) >= 4:
                offs = struct.unpack_from("=I", val)[0]
            elif t == NLMSGERR_ATTR_MISS_TYPE and len(val) >= 4:
                miss_type = struct.unpack_from("=I", val)[0]
            elif t == NLMSGERR_ATTR_MISS_NEST and len(val) >= 4:
                miss_nest = struct.unpack_from("=I", val)[0]
            pos += align4(ln)
    return VgpuError(-err, None, op=op, extack=extack, offset=offs, miss_type=miss_type,
                     miss_nest=miss_nest)
