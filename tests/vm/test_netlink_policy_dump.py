"""The loaded vgpu.ko's family is what kmod/netlink/vgpu.yaml says: its
policies as the kernel itself reports them (CTRL_CMD_GETPOLICY: each
attribute's type, bounds, mask, string length and nested policy; refused
attributes are not listed), its commands with their do/dump and
GENL_ADMIN_PERM (CTRL_CMD_GETFAMILY), its multicast groups, and
SLICE_GET's replies (the spec's reply attributes, no other)."""

from __future__ import annotations

import os
import struct

import pytest

from tools import ynl_gen as G
from vgpu.vgpuko.netlink import (CTRL_CMD_GETFAMILY, GENL_ID_CTRL, GENLHDR, NLHDR, NLM_F_DUMP,
                                 NLM_F_REQUEST, NLMSG_DONE, NLMSG_ERROR, GenlSocket, nla,
                                 parse_attrs, parse_error)
# fixtures (vgpu_leak_check is autouse: vgpu.ko's leak check after every test)
from vgpu_fixtures import kern, make_slice, sl, vgpu_leak_check  # noqa: F401

pytestmark = pytest.mark.skipif(
    os.environ.get("VGPU_IN_VM") != "1" or not os.path.exists("/sys/module/vgpu"),
    reason="needs the VM test bed with vgpu.ko (tools/vm/vm.py run --load-nvsim --load-vgpu)")

# include/uapi/linux/genetlink.h, include/uapi/linux/netlink.h
CTRL_CMD_GETPOLICY = 10
CTRL_ATTR_FAMILY_ID, CTRL_ATTR_FAMILY_NAME = 1, 2
CTRL_ATTR_OPS, CTRL_ATTR_MCAST_GROUPS = 6, 7
CTRL_ATTR_POLICY, CTRL_ATTR_OP_POLICY, CTRL_ATTR_OP = 8, 9, 10
CTRL_ATTR_OP_ID, CTRL_ATTR_OP_FLAGS = 1, 2
CTRL_ATTR_MCAST_GRP_NAME = 1
CTRL_ATTR_POLICY_DO, CTRL_ATTR_POLICY_DUMP = 1, 2
GENL_ADMIN_PERM, GENL_CMD_CAP_DO, GENL_CMD_CAP_DUMP = 0x01, 0x02, 0x04
(NL_POLICY_TYPE_ATTR_TYPE, NL_POLICY_TYPE_ATTR_MIN_VALUE_S, NL_POLICY_TYPE_ATTR_MAX_VALUE_S,
 NL_POLICY_TYPE_ATTR_MIN_VALUE_U, NL_POLICY_TYPE_ATTR_MAX_VALUE_U,
 NL_POLICY_TYPE_ATTR_MIN_LENGTH, NL_POLICY_TYPE_ATTR_MAX_LENGTH,
 NL_POLICY_TYPE_ATTR_POLICY_IDX, NL_POLICY_TYPE_ATTR_POLICY_MAXTYPE) = range(1, 10)
NL_POLICY_TYPE_ATTR_MASK = 12
NL_ATTR_TYPE = {"u8": 2, "u32": 4, "u64": 5, "string": 12, "nest": 13}
UMAX = {"u8": 0xFF, "u32": 0xFFFFFFFF, "u64": 0xFFFFFFFFFFFFFFFF}


def _request(cmd: int, attrs: bytes, dump: bool, family: int = GENL_ID_CTRL,
             version: int = 1) -> list[bytes]:
    """The genetlink payloads of the answer (after the genl header)."""
    s = GenlSocket(timeout=10)
    try:
        s.send(family, NLM_F_REQUEST | (NLM_F_DUMP if dump else 0),
               GENLHDR.pack(cmd, version, 0) + attrs)
        out = []
        while True:
            for mtype, flags, _seq, msg in s.recv_msgs():
                if mtype == NLMSG_ERROR:
                    err = parse_error(flags, msg)
                    if err is not None:
                        raise err
                    return out
                if mtype == NLMSG_DONE:
                    return out
                out.append(msg[NLHDR.size + GENLHDR.size:])
                if not dump:
                    return out
    finally:
        s.close()


def _attrs(data: bytes) -> dict[int, bytes]:
    got, problem = parse_attrs(data)
    assert problem is None, problem
    return {t: v for t, _f, v in got}


def _u(v: bytes) -> int:
    return int.from_bytes(v, "little")


@pytest.fixture(scope="module")
def fam():
    return G.load()


@pytest.fixture(scope="module")
def family():
    name = nla(CTRL_ATTR_FAMILY_NAME, b"vgpu\0")
    (msg,) = _request(CTRL_CMD_GETFAMILY, name, dump=False)
    return _attrs(msg)


@pytest.fixture(scope="module")
def policies():
    """(policy index -> attr type -> {NL_POLICY_TYPE_ATTR_*: bytes}, cmd -> (do, dump) index)."""
    pols: dict[int, dict[int, dict[int, bytes]]] = {}
    ops: dict[int, tuple] = {}
    for msg in _request(CTRL_CMD_GETPOLICY, nla(CTRL_ATTR_FAMILY_NAME, b"vgpu\0"), dump=True):
        a = _attrs(msg)
        if CTRL_ATTR_POLICY in a:
            for idx, body in _attrs(a[CTRL_ATTR_POLICY]).items():
                for t, desc in _attrs(body).items():
                    pols.setdefault(idx, {})[t] = _attrs(desc)
        if CTRL_ATTR_OP_POLICY in a:
            for cmd, body in _attrs(a[CTRL_ATTR_OP_POLICY]).items():
                b = _attrs(body)
                ops[cmd] = (b.get(CTRL_ATTR_POLICY_DO), b.get(CTRL_ATTR_POLICY_DUMP))
    return pols, ops


def _compare(fam, s, idx: int, pols, seen: set, errors: list) -> None:
    if (s.name, idx) in seen:
        return
    seen.add((s.name, idx))
    live = pols.get(idx, {})
    names = G._names(fam)
    listed = {a.value for a in s.attrs[1:] if not a.rejected}
    if set(live) != listed:
        errors.append(f"{s.policy}: the kernel lists attributes {sorted(live)}, the spec "
                      f"accepts {sorted(listed)} (refused ones are not listed)")
    for a in s.attrs[1:]:
        if a.rejected or a.value not in live:
            continue
        d = live[a.value]
        where = f"{s.policy}[{a.cname}]"
        if _u(d[NL_POLICY_TYPE_ATTR_TYPE]) != NL_ATTR_TYPE[a.type]:
            errors.append(f"{where}: kernel type {_u(d[NL_POLICY_TYPE_ATTR_TYPE])}, spec {a.type}")
            continue
        if a.type in UMAX:
            c = a.checks
            if "flags-mask" in c:
                got = {"mask": _u(d.get(NL_POLICY_TYPE_ATTR_MASK, b""))}
                want = {"mask": G.c_eval(c["flags-mask"], names)}
            else:
                got = {"min": _u(d[NL_POLICY_TYPE_ATTR_MIN_VALUE_U]),
                       "max": _u(d[NL_POLICY_TYPE_ATTR_MAX_VALUE_U])}
                want = {"min": G.c_eval(c.get("min", 0), names),
                        "max": G.c_eval(c["max"], names) if "max" in c else UMAX[a.type]}
            if got != want:
                errors.append(f"{where}: kernel {got}, spec {want}")
        elif a.type == "string":
            got = _u(d.get(NL_POLICY_TYPE_ATTR_MAX_LENGTH, b""))
            want = G.c_eval(a.checks["max-len"], names)
            if got != want:
                errors.append(f"{where}: kernel max length {got}, spec {want}")
        elif a.type == "nest":
            sub = fam.sets[a.nested]
            if _u(d[NL_POLICY_TYPE_ATTR_POLICY_MAXTYPE]) != len(sub.attrs) - 1:
                errors.append(f"{where}: nested maxtype {_u(d[NL_POLICY_TYPE_ATTR_POLICY_MAXTYPE])}")
            _compare(fam, sub, _u(d[NL_POLICY_TYPE_ATTR_POLICY_IDX]), pols, seen, errors)


def test_live_policies_are_the_spec(fam, policies):
    pols, ops = policies
    cmd_ops = [op for op in fam.ops if "do" in op or "dump" in op]
    oprefix = G.cname(fam.raw["operations"]["name-prefix"])
    # every command is validated against the family policy (index 0 here)
    idxs = {i for pair in ops.values() for i in pair if i is not None}
    assert len(idxs) == 1, ops
    assert {c for c in ops} == {fam.consts[oprefix + G.cname(op["name"])] for op in cmd_ops}
    errors: list[str] = []
    _compare(fam, fam.sets["slice"], _u(idxs.pop()), pols, set(), errors)
    assert not errors, "\n".join(errors)


def test_live_commands_and_groups_are_the_spec(fam, family):
    oprefix = G.cname(fam.raw["operations"]["name-prefix"])
    live = {}
    for body in _attrs(family[CTRL_ATTR_OPS]).values():
        a = _attrs(body)
        live[_u(a[CTRL_ATTR_OP_ID])] = _u(a[CTRL_ATTR_OP_FLAGS])
    want = {}
    for op in fam.ops:
        if "do" not in op and "dump" not in op:
            continue
        f = GENL_ADMIN_PERM if "admin-perm" in op.get("flags", []) else 0
        f |= (GENL_CMD_CAP_DO if "do" in op else 0) | (GENL_CMD_CAP_DUMP if "dump" in op else 0)
        want[fam.consts[oprefix + G.cname(op["name"])]] = f
    # GENL_CMD_CAP_HASPOL (0x08) comes with the family policy: not the spec's to say
    assert {c: f & 0x7 for c, f in live.items()} == want
    groups = [_attrs(b)[CTRL_ATTR_MCAST_GRP_NAME].rstrip(b"\0").decode()
              for b in _attrs(family[CTRL_ATTR_MCAST_GROUPS]).values()]
    assert groups == [g["name"] for g in fam.mcgrps]
    assert struct.unpack("=H", family[CTRL_ATTR_FAMILY_ID])[0] > GENL_ID_CTRL


def test_slice_replies_carry_what_the_spec_says(fam, family, sl):  # noqa: F811
    """SLICE_GET's reply (do and dump) carries the spec's reply attributes:
    all of them but the one a dump adds when it cuts the pid list, no other."""
    fid = struct.unpack("=H", family[CTRL_ATTR_FAMILY_ID])[0]
    top = fam.sets["slice"].by_name()
    op = next(o for o in fam.ops if o["name"] == "slice-get")
    cmd = fam.consts["VGPU_CMD_SLICE_GET"]
    sid = nla(top["slice-id"].value, struct.pack("=I", sl.id))
    for kind, msgs in (("do", _request(cmd, sid, False, fid, fam.version)),
                       ("dump", _request(cmd, b"", True, fid, fam.version))):
        want = {top[a].value for a in op[kind]["reply"]["attributes"]}
        mine = [m for m in msgs if _u(_attrs(m)[top["slice-id"].value]) == sl.id]
        assert len(mine) == 1, kind
        got = set(_attrs(mine[0]))
        optional = {top["slice-pids-truncated"].value}
        assert got <= want and want - got <= optional, (kind, sorted(got), sorted(want))
