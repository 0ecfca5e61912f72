"""vgpu.common.rdmanl: its constants are the kernel's uapi header's
(compiled here), and its reading of the nldev dumps on messages built as
the kernel builds them (drivers/infiniband/core/nldev.c: a device handle,
then a nested table of nested entries).  The dump over a real socket runs
in the VM (tests/vm/test_rdma.py)."""
from __future__ import annotations

import shutil
import struct
import subprocess

import pytest

from vgpu.common import rdmanl as nl

HEADER_NAMES = {
    "NETLINK_RDMA": nl.NETLINK_RDMA, "RDMA_NL_NLDEV": nl.RDMA_NL_NLDEV,
    "RDMA_NLDEV_CMD_GET": nl.CMD_GET,
    "RDMA_NLDEV_ATTR_DEV_INDEX": nl.ATTR_DEV_INDEX, "RDMA_NLDEV_ATTR_DEV_NAME": nl.ATTR_DEV_NAME,
    "RDMA_NLDEV_ATTR_RES_PID": nl.ATTR_RES_PID,
    **{f"RDMA_NLDEV_CMD_RES_{k.upper()}_GET": v[0] for k, v in nl.RES.items()},
    **{f"RDMA_NLDEV_ATTR_RES_{k.upper()}": v[1] for k, v in nl.RES.items()},
    **{f"RDMA_NLDEV_ATTR_RES_{k.upper()}_ENTRY": v[2] for k, v in nl.RES.items()},
}


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
def test_the_constants_are_the_kernels(tmp_path):
    src = tmp_path / "c.c"
    src.write_text("#include <stdio.h>\n#include <linux/netlink.h>\n"
                   "#include <rdma/rdma_netlink.h>\nint main(void){\n"
                   + "".join(f'printf("{n} %d\\n", (int){n});\n' for n in HEADER_NAMES)
                   + "return 0;}\n")
    subprocess.run(["cc", "-o", str(tmp_path / "c"), str(src)], check=True)
    out = subprocess.run([str(tmp_path / "c")], capture_output=True, text=True, check=True)
    got = {ln.split()[0]: int(ln.split()[1]) for ln in out.stdout.splitlines()}
    assert got == HEADER_NAMES


def nla(typ: int, payload: bytes, nested: bool = False) -> bytes:
    raw = struct.pack("=HH", 4 + len(payload), typ | (0x8000 if nested else 0)) + payload
    return raw + b"\0" * (-len(raw) % 4)


def u32(typ: int, v: int) -> bytes:
    return nla(typ, struct.pack("=I", v))


def qp_dump(pids: list[int | None]) -> bytes:
    """A RES_QP_GET message's attributes: the device handle, then the QP
    table, one entry per QP with its pid (None: a kernel QP, no pid)."""
    entries = b"".join(nla(20, u32(21, 7) + (u32(28, p) if p is not None else
                                             nla(29, b"kern\0")), nested=True)
                       for p in pids)
    return u32(1, 3) + nla(2, b"rxe0\0") + nla(19, entries, nested=True)


def test_the_objects_of_each_process_are_counted(monkeypatch):
    sent = []

    def dump(self, op, payload=b""):
        sent.append((op, payload))
        if op == nl.CMD_GET:
            return [u32(1, 0) + nla(2, b"mlx5_0\0"), u32(1, 3) + nla(2, b"rxe0\0")]
        if op == nl.RES["qp"][0]:
            return [qp_dump([100, 100, None]), qp_dump([200])]
        return []
    monkeypatch.setattr(nl.RdmaNetlink, "__init__", lambda self, timeout=2.0: None)
    monkeypatch.setattr(nl.RdmaNetlink, "close", lambda self: None)
    monkeypatch.setattr(nl.RdmaNetlink, "dump", dump)
    got = nl.objects_by_pid("rxe0")
    assert got == {100: {"qp": 2, "cq": 0, "mr": 0, "pd": 0},
                   200: {"qp": 1, "cq": 0, "mr": 0, "pd": 0}}
    # each object dump names the device by its index (the kernel requires it)
    assert all(p == u32(1, 3) for op, p in sent if op != nl.CMD_GET)
    assert nl.objects_by_pid("mlx5_9") == {}


def test_attributes_past_the_end_are_not_read():
    good = u32(1, 3)
    assert nl.attrs(good + struct.pack("=HH", 40, 2) + b"ab") == [(1, struct.pack("=I", 3))]
    assert nl.attrs(struct.pack("=HH", 2, 1)) == []
    assert nl.nl_type(nl.CMD_GET) == (5 << 10) + 1
