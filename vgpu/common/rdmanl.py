"""The kernel's RDMA netlink (NETLINK_RDMA, the nldev client: what
`rdma resource show` reads): the RDMA objects user processes hold, by
device, type and process, for a slice's usage by type (docs/rdma.md).

Standard library only.  The constants are the kernel's uapi
(include/uapi/rdma/rdma_netlink.h); tests/host/test_rdmanl.py compiles them
from the header and compares.  The objects' dumps need the device's index
(drivers/infiniband/core/nldev.c, res_get_common_dumpit), so every device
is listed first (RDMA_NLDEV_CMD_GET).  A pid is reported in the reader's
pid namespace (vgpud: the host's); objects the kernel made (no pid) are
left out."""
from __future__ import annotations

import errno
import os
import socket
import struct

NETLINK_RDMA = 20
RDMA_NL_NLDEV = 5
CMD_GET = 1
#: type -> (dump command, table attribute, entry attribute)
RES = {"qp": (10, 19, 20), "cq": (12, 35, 36), "mr": (13, 40, 41), "pd": (14, 46, 47)}
ATTR_DEV_INDEX, ATTR_DEV_NAME, ATTR_RES_PID = 1, 2, 28

NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
NLA_TYPE_MASK = 0x3FFF
_HDR = struct.Struct("=IHHII")
_NLA = struct.Struct("=HH")


def nl_type(op: int) -> int:
    """RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, op)."""
    return (RDMA_NL_NLDEV << 10) + op


def attrs(data: bytes) -> list[tuple[int, bytes]]:
    """The netlink attributes of ``data`` as (type, payload); a truncated
    one ends the list (what the kernel sends is still input)."""
    out, off = [], 0
    while off + _NLA.size <= len(data):
        length, typ = _NLA.unpack_from(data, off)
        if length < _NLA.size or off + length > len(data):
            break
        out.append((typ & NLA_TYPE_MASK, data[off + _NLA.size:off + length]))
        off += (length + 3) & ~3
    return out


def attr_u32(typ: int, value: int) -> bytes:
    return _NLA.pack(8, typ) + struct.pack("=I", value)


class RdmaNetlink:
    """One NETLINK_RDMA socket; ``timeout`` bounds every receive."""

    def __init__(self, timeout: float = 2.0):
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC,
                                  NETLINK_RDMA)
        self.sock.settimeout(timeout)
        self.sock.bind((0, 0))
        self.seq = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "RdmaNetlink":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def dump(self, op: int, payload: bytes = b"") -> list[bytes]:
        """The attribute payloads of every message of a dump of ``op``."""
        self.seq += 1
        msg = _HDR.pack(_HDR.size + len(payload), nl_type(op),
                        NLM_F_REQUEST | NLM_F_DUMP, self.seq, 0) + payload
        self.sock.send(msg)
        out = []
        while True:
            data = self.sock.recv(1 << 16)
            off = 0
            while off + _HDR.size <= len(data):
                length, typ, _flags, seq, _pid = _HDR.unpack_from(data, off)
                if length < _HDR.size or off + length > len(data):
                    raise OSError(errno.EPROTO, "a truncated netlink message")
                body = data[off + _HDR.size:off + length]
                off += (length + 3) & ~3
                if seq != self.seq:
                    continue
                if typ == NLMSG_DONE:
                    return out
                if typ == NLMSG_ERROR:
                    (err,) = struct.unpack_from("=i", body)
                    if err:
                        raise OSError(-err, os.strerror(-err))
                    return out
                out.append(body)

    def devices(self) -> dict[str, int]:
        """{device name: index}."""
        out = {}
        for body in self.dump(CMD_GET):
            a = dict(attrs(body))
            if ATTR_DEV_INDEX in a and ATTR_DEV_NAME in a and len(a[ATTR_DEV_INDEX]) == 4:
                out[a[ATTR_DEV_NAME].split(b"\0", 1)[0].decode(errors="replace")] = \
                    struct.unpack("=I", a[ATTR_DEV_INDEX])[0]
        return out

    def pids(self, index: int, kind: str) -> list[int]:
        """The pid of each user object of ``kind`` ("qp", "cq", "mr", "pd")
        on the device of ``index``, one per object."""
        op, table, entry = RES[kind]
        out = []
        for body in self.dump(op, attr_u32(ATTR_DEV_INDEX, index)):
            for t, tbl in attrs(body):
                if t != table:
                    continue
                for e, ent in attrs(tbl):
                    if e != entry:
                        continue
                    pid = dict(attrs(ent)).get(ATTR_RES_PID)
                    if pid is not None and len(pid) == 4:
                        out.append(struct.unpack("=I", pid)[0])
        return out


def objects_by_pid(hca: str, timeout: float = 2.0) -> dict[int, dict[str, int]]:
    """{pid: {"qp", "cq", "mr", "pd": count}} of one device's user objects;
    {} where the device is not there.  OSError as the kernel says it."""
    with RdmaNetlink(timeout) as nl:
        index = nl.devices().get(hca)
        if index is None:
            return {}
        out: dict[int, dict[str, int]] = {}
        for kind in RES:
            for pid in nl.pids(index, kind):
                d = out.setdefault(pid, dict.fromkeys(RES, 0))
                d[kind] += 1
        return out
