#!/usr/bin/env python3
"""nlfuzz: a fuzzer of vgpu.ko's generic-netlink family, generated from its API.

    python tools/fuzz/nlfuzz.py --seed 1 --messages 5000
    python tools/fuzz/nlfuzz.py --seed 1 --seconds 30

Run as root where vgpu.ko (and a driver, nvsim in the VM) is loaded.  The last
line printed is a JSON object: messages sent, messages/s, the errno
histogram, the findings.  ``run(seed, messages=None, seconds=None)`` is the
same for another driver to import.

What is generated comes from the API's sources, not from a hand-written list:

* kmod/include/uapi/vgpu.h: the commands (enum vgpu_cmd), the attribute
  enums and each attribute's type (the comment grammar the header defines),
  the limits (#define VGPU_*);
* kmod/vgpu/netlink.c and netlink-gen.c (generated from kmod/netlink/vgpu.yaml):
  the nla_policy tables (type, MIN/MAX/RANGE/MASK
  bounds, NUL_STRING lengths, NLA_REJECT, which policy a nest uses), the
  genl_ops table (which commands have doit, dumpit, start, GENL_ADMIN_PERM)
  and, per handler, the attributes it reads and requires (GENL_REQ_ATTR_CHECK,
  ``if (!attrs[X])``), following the static calls of netlink.c.

The only hand-written knowledge is what no policy can say: which GPU nest
attributes SLICE_NEW and SLICE_SET need (read from vgpu_check_new_gpu /
vgpu_check_set_gpu too, where they are found), that a compute policy needs
basis points, and which minors are real GPUs (asked of the running system).

Every message goes on a raw AF_NETLINK socket, packed here; after each one a
NLMSG_NOOP with NLM_F_ACK is sent as a barrier, so every reply of the fuzzed
message is collected (none, an ack, an error, messages, a whole dump) and
checked: framing, header, echo, errno (from a sane set and, for each case
the policy decides, the one it must give), extack TLVs, and every attribute
of every reply against the header's types.  Slices the fuzzer makes are
named NAME_PREFIX* and use ids the system did not have at the start; at the
end they are all deleted and the slice set, vgpu.ko's debugfs counters and
the schedulers' settings must be back to what they were.
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import json
import os
import random
import re
import socket
import struct
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:      # run as a script: the repository's vgpu package
    sys.path.insert(0, str(ROOT))

from vgpu.abi.nvclient import RmClient  # noqa: E402
from vgpu.vgpuko.netlink import (  # noqa: E402
    CTRL_CMD_GETFAMILY, GENL_ID_CTRL, GENLHDR, NETLINK_ADD_MEMBERSHIP, NETLINK_CAP_ACK,
    NETLINK_EXT_ACK, NETLINK_GENERIC, NLA_F_NESTED, NLA_F_NET_BYTEORDER, NLA_TYPE_MASK, NLAHDR,
    NLHDR, NLM_F_ACK, NLM_F_ACK_TLVS, NLM_F_CAPPED, NLM_F_DUMP, NLM_F_MULTI, NLM_F_REQUEST,
    NLMSG_DONE, NLMSG_ERROR, NLMSG_NOOP, NLMSG_OVERRUN,
    NLMSGERR_ATTR_MISS_NEST, NLMSGERR_ATTR_MISS_TYPE, NLMSGERR_ATTR_MSG, NLMSGERR_ATTR_OFFS,
    SOL_NETLINK, align4, nest, nla, nlmsg, parse_attrs)

HEADER = ROOT / "kmod" / "include" / "uapi" / "vgpu.h"
NETLINK_C = ROOT / "kmod" / "vgpu" / "netlink.c"
NVABI_H = ROOT / "kmod" / "include" / "nvabi.h"
VSTATE = Path("/sys/kernel/debug/vgpu/state")
NAME_PREFIX = "nlfuzz-"
NOBODY = 65534

# ------------------------------------------------------------ netlink ABI
# the constants, headers and the encoder are the library's (vgpu.vgpuko.netlink,
# standard library only): one netlink encoder for the client and the fuzzer
NLMSG_MIN_TYPE = 0x10
CTRL_ATTR_FAMILY_ID, CTRL_ATTR_FAMILY_NAME, CTRL_ATTR_MCAST_GROUPS = 1, 2, 7
CTRL_ATTR_MCAST_GRP_NAME, CTRL_ATTR_MCAST_GRP_ID = 1, 2
NLMSGERR_ATTR_COOKIE, NLMSGERR_ATTR_POLICY = 3, 4
PING_SEQ_BIT = 0x80000000

#: what the family may answer; anything else is a finding (kernel-internal
#: codes like ENOTSUPP 524 or ERESTARTSYS 512 leaking out, ENOMEM, EFAULT...)
SANE_ERRNOS = {errno.EINVAL, errno.ERANGE, errno.E2BIG, errno.EEXIST, errno.ENOENT,
               errno.ENODEV, errno.EBUSY, errno.EPERM, errno.EOPNOTSUPP, errno.EBADF,
               errno.ENOSPC, errno.EMSGSIZE}
POLICY_ERRNOS = {errno.EINVAL, errno.ERANGE}


# =================================================================== spec
def _strip_c_comments(text: str) -> str:
    return re.sub(r"/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text, flags=re.S)


def _c_eval(expr: str, names: dict[str, int]) -> int | None:
    """A constant C expression of integers and known names, or None."""
    e = re.sub(r"\b(0x[0-9a-fA-F]+|\d+)[uUlL]+\b", r"\1", expr.strip())
    e = re.sub(r"\(\s*(?:u8|u16|u32|u64|int|long)\s*\)", "", e)

    def name(m):
        n = m.group(0)
        if n in names and isinstance(names[n], int):
            return str(names[n])
        raise KeyError(n)
    try:
        e = re.sub(r"\b[A-Za-z_]\w*\b", name, e)
        if not re.fullmatch(r"[\d\sxa-fA-F()+\-*/<>|&~^]*", e):
            return None
        return int(eval(e.replace("/", "//"), {"__builtins__": {}}, {}))  # noqa: S307
    except (KeyError, SyntaxError, ValueError, TypeError, ZeroDivisionError):
        return None


_TYPE_RE = re.compile(r"(u8|u32|u64|s32 \(sent as u32\)|binary|NUL-terminated string|pad"
                      r"|nested: (\w+\*?))(?=$|[,:; ])")


@dataclass
class Attr:
    name: str
    value: int
    type: str               # unspec u8 u32 u64 s32 binary string pad nested
    ref: str | None = None  # nested: the enum of its entries


@dataclass
class Pol:
    """One entry of a kernel nla_policy table."""
    nla: str                            # NLA_U32, NLA_REJECT, NLA_NESTED ...
    lo: int | None = None
    hi: int | None = None
    mask: int | None = None
    strlen: int | None = None           # NLA_NUL_STRING's .len
    nested: str | None = None           # the nested policy's name


@dataclass
class Op:
    cmd: int
    name: str
    doit: str | None
    dumpit: str | None
    start: str | None
    admin: bool
    reads: set = field(default_factory=set)      # VGPU_A_* the handler reads
    required: set = field(default_factory=set)   # ... and requires


class Spec:
    """The API as the header and netlink.c state it."""

    def __init__(self, header: Path = HEADER, netlink_c: Path = NETLINK_C):
        htext = header.read_text()
        self.defines: dict[str, object] = {}
        self.enums: dict[str, list[tuple[str, int, str | None]]] = {}
        self._parse_header(htext)
        self.attrs: dict[str, dict[int, Attr]] = {}      # enum -> value -> Attr
        self.by_name: dict[str, Attr] = {}
        self._attr_types()
        self.policies: dict[str, dict[int, Pol]] = {}
        self.policy_enum: dict[str, str] = {}
        self.family_policy = None
        self.ops: dict[int, Op] = {}
        self.check_rules: dict[str, set] = {"new": set(), "set": set()}
        if netlink_c.exists():
            # the policies and the ops table are generated beside netlink.c
            gen = netlink_c.with_name("netlink-gen.c")
            self._parse_netlink(netlink_c.read_text() +
                                ("\n" + gen.read_text() if gen.exists() else ""))
        self.cmds = {n: v for n, v, _c in self.enums["vgpu_cmd"] if not n.startswith("__")}
        self.cmd_names = {v: n for n, v in self.cmds.items()}

    # --------------------------------------------------------- header
    def _parse_header(self, text: str) -> None:
        for m in re.finditer(r'^#define\s+(VGPU_\w+)\s+("[^"]*"|[^\n/]+)', text, re.M):
            name, val = m.group(1), m.group(2).strip()
            if val.startswith('"'):
                self.defines[name] = val.strip('"')
            else:
                v = _c_eval(val, self.defines)
                if v is not None:
                    self.defines[name] = v
        body_text = re.sub(r"//[^\n]*", "", text)
        for m in re.finditer(r"\benum\s+(\w+)\s*\{(.*?)\}\s*;", body_text, re.S):
            members, nxt = [], 0
            toks = list(re.finditer(r"/\*.*?\*/|(\w+)\s*(?:=\s*([^,]*?))?\s*,", m.group(2), re.S))
            for i, t in enumerate(toks):
                if t.group(1) is None:
                    continue
                if t.group(2):
                    nxt = _c_eval(t.group(2), self.defines)
                comment = None
                if i + 1 < len(toks) and toks[i + 1].group(1) is None and \
                        "\n" not in m.group(2)[t.end():toks[i + 1].start()]:
                    c = toks[i + 1].group(0)[2:-2]
                    comment = " ".join(re.sub(r"^\s*\*(?!/)\s?", "", ln).strip()
                                       for ln in c.splitlines()).strip()
                members.append((t.group(1), nxt, comment))
                self.defines[t.group(1)] = nxt
                nxt += 1
            self.enums[m.group(1)] = members
        # the #defines that use enum members (VGPU_CMD_MAX ...)
        for m in re.finditer(r'^#define\s+(VGPU_\w+)\s+([^\n/"]+)', text, re.M):
            if m.group(1) not in self.defines:
                v = _c_eval(m.group(2), self.defines)
                if v is not None:
                    self.defines[m.group(1)] = v

    def _attr_types(self) -> None:
        attr_enums = {e: ms for e, ms in self.enums.items() if re.fullmatch(r"vgpu_\w*attr", e)}
        for ename, members in attr_enums.items():
            out = {}
            for name, val, comment in members:
                if name.startswith("__"):
                    continue
                if name.endswith("_UNSPEC") and val == 0:
                    out[val] = Attr(name, val, "unspec")
                    continue
                m = _TYPE_RE.match(comment or "")
                if m is None:
                    raise ValueError(f"{name}: its comment does not start with its type")
                t = {"s32 (sent as u32)": "s32", "NUL-terminated string": "string"}.get(
                    m.group(1), m.group(1).split(":")[0])
                a = Attr(name, val, t)
                if m.group(2):
                    ref = m.group(2)
                    for e2, ms2 in attr_enums.items():
                        names = [n for n, _v, _c in ms2 if not n.startswith("__")]
                        if (ref.endswith("*") and all(n.startswith(ref[:-1]) for n in names)) \
                                or ref in names:
                            a.ref = e2
                out[val] = a
                self.by_name[name] = a
            self.attrs[ename] = out

    def maxattr(self, ename: str) -> int:
        return max(self.attrs[ename])

    # ------------------------------------------------------ netlink.c
    def _parse_netlink(self, src: str) -> None:
        src = _strip_c_comments(src)
        names = dict(self.defines)
        if NVABI_H.exists():
            for m in re.finditer(r"^#define\s+(NV\w+)\s+([^\n/]+)", NVABI_H.read_text(), re.M):
                v = _c_eval(m.group(2), names)
                if v is not None:
                    names[m.group(1)] = v
        ranges = {}
        for m in re.finditer(r"struct\s+netlink_range_validation\s+(\w+)[^=]*=\s*\{(.*?)\}\s*;",
                             src, re.S):
            lo = re.search(r"\.min\s*=\s*([^,}]+)", m.group(2))
            hi = re.search(r"\.max\s*=\s*([^,}]+)", m.group(2))
            ranges[m.group(1)] = (_c_eval(lo.group(1), names) if lo else None,
                                  _c_eval(hi.group(1), names) if hi else None)
        maxes = {}
        for ename, ms in self.enums.items():
            for n, _v, _c in ms:
                if n.startswith("__") and n.endswith("_MAX"):
                    maxes[n[2:]] = ename
        for m in re.finditer(r"struct\s+nla_policy\s+(\w+)\s*\[\s*(\w+)\s*\+\s*1\s*\]\s*=\s*"
                             r"\{(.*?)\n\}\s*;", src, re.S):
            pname, ename = m.group(1), maxes.get(m.group(2))
            self.policy_enum[pname] = ename
            pol = {}
            for e in re.finditer(r"\[\s*(\w+)\s*\]\s*=\s*(\{[^{}]*\}|NLA_POLICY_\w+\s*\("
                                 r"(?:[^()]|\([^()]*\))*\))", m.group(3)):
                aval = names.get(e.group(1))
                if aval is None:
                    continue
                pol[aval] = self._pol(e.group(2), names, ranges)
            self.policies[pname] = pol
        fam = re.search(r"struct\s+genl_family\s+\w+[^=;]*=\s*\{(.*?)\}\s*;", src, re.S)
        if fam:
            p = re.search(r"\.policy\s*=\s*(\w+)", fam.group(1))
            self.family_policy = p.group(1) if p else None
        funcs = self._functions(src)
        ops = re.search(r"struct\s+genl_ops\s+\w+\s*\[\s*\]\s*=\s*\{(.*?)\n\}\s*;", src, re.S)
        for om in re.finditer(r"\{([^{}]*)\}", ops.group(1) if ops else ""):
            body = om.group(1)

            def f(key):
                x = re.search(rf"\.{key}\s*=\s*(\w+)", body)
                return x.group(1) if x else None
            cmdname = f("cmd")
            op = Op(cmd=names[cmdname], name=cmdname, doit=f("doit"), dumpit=f("dumpit"),
                    start=f("start"), admin="GENL_ADMIN_PERM" in body)
            for h in (op.doit, op.start, op.dumpit):
                if h:
                    r, q = self._closure(h, funcs)
                    op.reads |= r
                    op.required |= q
            self.ops[op.cmd] = op
        for key, fn in (("new", "vgpu_check_new_gpu"), ("set", "vgpu_check_set_gpu")):
            if fn in funcs:
                self.check_rules[key] = {names[n] for n in
                                         re.findall(r"if\s*\(\s*!tb\[(VGPU_GPU_A_\w+)\]\s*\)",
                                                    funcs[fn]) if n in names}

    @staticmethod
    def _pol(text: str, names, ranges) -> Pol:
        if text.startswith("{"):
            t = re.search(r"\.type\s*=\s*(NLA_\w+)", text)
            p = Pol(t.group(1) if t else "NLA_UNSPEC")
            ln = re.search(r"\.len\s*=\s*([^,}]+)", text)
            if ln:
                p.strlen = _c_eval(ln.group(1), names)
            return p
        kind = re.match(r"NLA_POLICY_(\w+)\s*\(", text).group(1)
        args = [a.strip() for a in text[text.index("(") + 1:text.rindex(")")].split(",")]
        if kind in ("NESTED", "NESTED_ARRAY"):
            return Pol("NLA_NESTED", nested=args[0])
        p = Pol(args[0])
        if kind == "MIN":
            p.lo = _c_eval(args[1], names)
        elif kind == "MAX":
            p.hi = _c_eval(args[1], names)
        elif kind == "RANGE":
            p.lo, p.hi = _c_eval(args[1], names), _c_eval(args[2], names)
        elif kind == "MASK":
            p.mask = _c_eval(args[1], names)
        elif kind == "FULL_RANGE":
            p.lo, p.hi = ranges.get(args[1].lstrip("&"), (None, None))
        return p

    @staticmethod
    def _functions(src: str) -> dict[str, str]:
        out = {}
        for m in re.finditer(r"^(?:static\s+)?[A-Za-z_][\w \t\*]*?\b(\w+)\s*\([^;{]*\)\s*\{",
                             src, re.M):
            if m.group(1) in ("if", "for", "while", "switch", "return", "sizeof"):
                continue
            depth, i = 0, m.end() - 1
            while i < len(src):
                if src[i] == "{":
                    depth += 1
                elif src[i] == "}":
                    depth -= 1
                    if depth == 0:
                        break
                i += 1
            out[m.group(1)] = src[m.end():i]
        return out

    def _closure(self, fn: str, funcs: dict[str, str]) -> tuple[set, set]:
        reads, req, seen, todo = set(), set(), set(), [fn]
        while todo:
            f = todo.pop()
            if f in seen or f not in funcs:
                continue
            seen.add(f)
            body = funcs[f]
            for n in re.findall(r"attrs\[(VGPU_A_\w+)\]", body):
                reads.add(self.defines[n])
            for n in re.findall(r"GENL_REQ_ATTR_CHECK\(\s*info\s*,\s*(VGPU_A_\w+)\)", body):
                req.add(self.defines[n])
                reads.add(self.defines[n])
            for n in re.findall(r"if\s*\(\s*!\s*(?:info->)?attrs\[(VGPU_A_\w+)\]\s*\)", body):
                req.add(self.defines[n])
            todo += [c for c in re.findall(r"\b(\w+)\s*\(", body) if c in funcs]
        return reads, req

    # -------------------------------------------------------- derived
    def policy_of(self, pname: str | None) -> tuple[dict[int, Pol], str]:
        return self.policies.get(pname or "", {}), self.policy_enum.get(pname or "", "")

    def request_attrs(self, pname: str) -> list[int]:
        """The attributes a policy lets in (not NLA_REJECT)."""
        pol, ename = self.policy_of(pname)
        return sorted(v for v, p in pol.items() if p.nla != "NLA_REJECT")

    def rejected_attrs(self, pname: str) -> list[int]:
        pol, _e = self.policy_of(pname)
        return sorted(v for v, p in pol.items() if p.nla == "NLA_REJECT")


# ================================================================= encoding
PACK = {"u8": "=B", "u32": "=I", "s32": "=I", "u64": "=Q"}
TYPE_MAX = {"u8": 0xFF, "u32": 0xFFFFFFFF, "s32": 0xFFFFFFFF, "u64": (1 << 64) - 1}
NLA_TYPE_OF = {"NLA_U8": "u8", "NLA_U16": "u16", "NLA_U32": "u32", "NLA_U64": "u64",
               "NLA_S32": "s32"}


def put_int(t: int, typ: str, v: int) -> bytes:
    return nla(t, struct.pack(PACK[typ], v & TYPE_MAX[typ]))


# ================================================================== socket
class Timeout(Exception):
    pass


class Sock:
    """A raw NETLINK_GENERIC socket; exchange() sends one datagram and a
    NOOP barrier, and returns every message answering it."""

    def __init__(self, timeout: float = 10.0, rcvbuf: int | None = None, cap_ack: bool = False):
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC,
                                  NETLINK_GENERIC)
        if rcvbuf:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.bind((0, 0))
        self.pid = self.sock.getsockname()[0]
        self.sock.setsockopt(SOL_NETLINK, NETLINK_EXT_ACK, 1)
        if cap_ack:
            self.sock.setsockopt(SOL_NETLINK, NETLINK_CAP_ACK, 1)
        self.cap_ack = cap_ack
        self.sock.settimeout(timeout)
        self.seq = random.randrange(1, 1 << 20)
        self.pending: list[tuple[bytes, int, int, int]] = []

    def close(self) -> None:
        self.sock.close()

    def next_seq(self) -> int:
        self.seq = (self.seq + 1) & 0x7FFFFFFF or 1
        return self.seq

    def recv_datagram(self) -> tuple[list[tuple[int, int, int, int, bytes]], str | None]:
        try:
            data = self.sock.recv(1 << 20)
        except socket.timeout:
            raise Timeout() from None
        out, pos = [], 0
        while pos < len(data):
            if pos + NLHDR.size > len(data):
                return out, f"{len(data) - pos} stray bytes after the last message"
            ln, t, fl, seq, pid = NLHDR.unpack_from(data, pos)
            if ln < NLHDR.size or pos + ln > len(data):
                return out, f"message with nlmsg_len {ln} at {pos} of a {len(data)}-byte datagram"
            out.append((t, fl, seq, pid, data[pos:pos + ln]))
            pos += align4(ln)
        return out, None

    def exchange(self, data: bytes, seq: int, barrier: bool = True) -> tuple[list, list[str]]:
        """Send data (a message with sequence number seq, perhaps malformed),
        then the barrier; the messages with seq (t, flags, seq, pid, bytes)
        and the framing problems seen.  Without the barrier (a dump on a
        small receive buffer, where the barrier's ack could overrun it),
        until the request's NLMSG_DONE or NLMSG_ERROR."""
        ping = self.next_seq() | PING_SEQ_BIT
        self.sock.send(data)
        if barrier:
            self.sock.send(nlmsg(NLMSG_NOOP, NLM_F_REQUEST | NLM_F_ACK, ping, 0, b""))
        got, problems, pinged, done, multi = [], [], not barrier, False, not barrier
        while not pinged or (multi and not done):
            msgs, prob = self.recv_datagram()
            if prob:
                problems.append(prob)
            for m in msgs:
                t, fl, s, _pid, raw = m
                if s == ping and t == NLMSG_ERROR:
                    pinged = True
                elif s == seq:
                    got.append(m)
                    if fl & NLM_F_MULTI:
                        multi = True
                    if t in (NLMSG_DONE, NLMSG_ERROR):
                        done = True
                else:
                    problems.append(f"message type {t} seq {s:#x} answers neither the request "
                                    f"({seq:#x}) nor the barrier ({ping:#x})")
        return got, problems


def resolve_family(sk: Sock, name: str) -> tuple[int, dict[str, int]]:
    seq = sk.next_seq()
    payload = GENLHDR.pack(CTRL_CMD_GETFAMILY, 1, 0) + nla(CTRL_ATTR_FAMILY_NAME, name.encode() + b"\0")
    got, _p = sk.exchange(nlmsg(GENL_ID_CTRL, NLM_F_REQUEST, seq, 0, payload), seq)
    for t, _fl, _s, _pid, raw in got:
        if t == NLMSG_ERROR:
            err = -struct.unpack_from("=i", raw, 16)[0]
            raise OSError(err, f"family {name!r}: {os.strerror(err)}")
        attrs, _ = parse_attrs(raw[20:])
        fid, groups = None, {}
        for at, _f, pl in attrs:
            if at == CTRL_ATTR_FAMILY_ID:
                fid = struct.unpack_from("=H", pl)[0]
            elif at == CTRL_ATTR_MCAST_GROUPS:
                for _i, _f2, g in parse_attrs(pl)[0]:
                    d = {a: p for a, _f3, p in parse_attrs(g)[0]}
                    groups[d[CTRL_ATTR_MCAST_GRP_NAME].split(b"\0")[0].decode()] = \
                        struct.unpack_from("=I", d[CTRL_ATTR_MCAST_GRP_ID])[0]
        return fid, groups
    raise OSError(errno.ENOENT, f"family {name!r}: no answer")


# ================================================================ checking
@dataclass
class Outcome:
    """What one request got: errno (0: acked or answered without error,
    None: nothing at all), the decoded family messages, problems."""
    err: int | None
    msgs: list
    problems: list
    extack: str | None = None
    dump: bool = False


class Checker:
    """Validates replies against the spec."""

    def __init__(self, spec: Spec, family: int):
        self.spec = spec
        self.family = family
        self.cmd_reply = {op.cmd for op in spec.ops.values()} | {
            spec.cmds.get("VGPU_CMD_SLICE_GET", 4)}

    def _check_attrs(self, data: bytes, ename: str, where: str, probs: list, depth=0) -> dict:
        attrs, prob = parse_attrs(data)
        if prob:
            probs.append(f"{where}: {prob}")
        table = self.spec.attrs.get(ename, {})
        out: dict = {}
        for t, fl, pl in attrs:
            a = table.get(t)
            if a is None or a.type == "unspec":
                probs.append(f"{where}: attribute type {t} unknown in enum {ename}")
                continue
            w = f"{where}.{a.name}"
            if fl & NLA_F_NET_BYTEORDER:
                probs.append(f"{w}: NLA_F_NET_BYTEORDER set")
            if a.type == "nested":
                if not fl & NLA_F_NESTED:
                    probs.append(f"{w}: nest without NLA_F_NESTED")
                if depth > 4:
                    probs.append(f"{w}: nested deeper than the header allows")
                    continue
                out.setdefault(a.name, []).append(self._check_attrs(pl, a.ref, w, probs, depth + 1))
                continue
            if fl & NLA_F_NESTED:
                probs.append(f"{w}: NLA_F_NESTED on a {a.type}")
            if a.type in PACK:
                want = struct.calcsize(PACK[a.type])
                if len(pl) != want:
                    probs.append(f"{w}: {len(pl)} bytes for a {a.type}")
                    continue
                out[a.name] = struct.unpack(PACK[a.type], pl)[0]
            elif a.type == "string":
                if not pl.endswith(b"\0") or b"\0" in pl[:-1]:
                    probs.append(f"{w}: not one NUL-terminated string: {pl[:40]!r}")
                    continue
                out[a.name] = pl[:-1].decode(errors="replace")
            elif a.type == "pad":
                if len(pl):
                    probs.append(f"{w}: a pad attribute with {len(pl)} bytes")
            else:
                out[a.name] = pl
        return out

    def check(self, got: list, sk: Sock, sent_type: int, sent_len: int, probs: list) -> Outcome:
        err, msgs, extack, dump = None, [], None, False
        for t, fl, seq, pid, raw in got:
            if pid != sk.pid:
                probs.append(f"reply type {t} addressed to port {pid}, not {sk.pid}")
            if t == NLMSG_ERROR or t == NLMSG_DONE:
                if t == NLMSG_DONE:
                    dump = True
                if len(raw) < NLHDR.size + 4:
                    probs.append(f"type {t}: {len(raw)} bytes, no error code")
                    continue
                code = struct.unpack_from("=i", raw, 16)[0]
                if code > 0 or code < -4095:
                    probs.append(f"type {t}: error code {code} is not 0 or -errno")
                    continue
                if err not in (None, 0):
                    probs.append(f"a second terminal message (error {code}) after {-err}")
                err = -code
                pos = 20
                if t == NLMSG_ERROR:
                    if len(raw) < 36:
                        probs.append("NLMSG_ERROR without the request's header")
                        continue
                    eln, et, _ef, eseq, _ep = NLHDR.unpack_from(raw, 20)
                    if eseq != seq or et != sent_type:
                        probs.append(f"NLMSG_ERROR echoes type {et} seq {eseq}, sent {sent_type}/{seq}")
                    pos = 36 if fl & NLM_F_CAPPED else 20 + align4(eln)
                    if len(raw) < pos:
                        probs.append(f"NLMSG_ERROR shorter ({len(raw)}) than its echo ({pos})")
                if fl & NLM_F_ACK_TLVS:
                    tl, prob = parse_attrs(raw[pos:])
                    if prob:
                        probs.append(f"extack TLVs: {prob}")
                    for at, _f, pl in tl:
                        if at == NLMSGERR_ATTR_MSG:
                            if not pl.endswith(b"\0") or not pl[:-1].isascii():
                                probs.append(f"extack message not a NUL-terminated ASCII string: {pl!r}")
                            extack = pl.split(b"\0")[0].decode(errors="replace")
                        elif at == NLMSGERR_ATTR_OFFS:
                            off = struct.unpack_from("=I", pl)[0] if len(pl) == 4 else None
                            if off is None or off >= max(sent_len, 1):
                                probs.append(f"extack offset {off} outside the {sent_len}-byte request")
                        elif at in (NLMSGERR_ATTR_MISS_TYPE, NLMSGERR_ATTR_MISS_NEST) and len(pl) != 4:
                            probs.append(f"extack TLV {at}: {len(pl)} bytes")
                elif len(raw) > pos:
                    probs.append(f"type {t}: {len(raw) - pos} bytes past the error/echo, no NLM_F_ACK_TLVS")
            elif t == self.family:
                if fl & NLM_F_MULTI:
                    dump = True
                if len(raw) < 20:
                    probs.append(f"family message of {len(raw)} bytes, no genl header")
                    continue
                cmd, ver, res = GENLHDR.unpack_from(raw, 16)
                if cmd not in self.cmd_reply:
                    probs.append(f"reply with command {cmd}")
                if ver != self.spec.defines["VGPU_GENL_VERSION"] or res:
                    probs.append(f"reply genl version {ver} reserved {res}")
                d = self._check_attrs(raw[20:], "vgpu_attr", self.spec.cmd_names.get(cmd, str(cmd)), probs)
                d["_cmd"] = cmd
                msgs.append(d)
            else:
                probs.append(f"unexpected message type {t}")
        return Outcome(err=err if err is not None else (0 if msgs else None), msgs=msgs,
                       problems=probs, extack=extack, dump=dump)


def _child_result(pid: int, r: int) -> dict:
    """What a forked child wrote on its pipe r (one JSON object; {} if
    nothing), once it has exited and been reaped."""
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return json.loads(data or b"{}")


def slices_of(msgs: list) -> list[dict]:
    """Slice messages -> {id, name, open_files, gpus: [{index, limit, used, allocs}]}."""
    out = []
    for d in msgs:
        if "VGPU_A_SLICE_ID" not in d or "VGPU_A_SLICE_GPUS" not in d:
            continue
        gpus = []
        for lst in d.get("VGPU_A_SLICE_GPUS", []):
            for g in lst.get("VGPU_A_GPU", []):
                gpus.append({"index": g.get("VGPU_GPU_A_INDEX"), "limit": g.get("VGPU_GPU_A_MEM_LIMIT"),
                             "used": g.get("VGPU_GPU_A_MEM_USED"), "allocs": g.get("VGPU_GPU_A_ALLOCS"),
                             "real_minor": g.get("VGPU_GPU_A_REAL_MINOR"),
                             "gpu_id": g.get("VGPU_GPU_A_GPU_ID")})
        out.append({"id": d["VGPU_A_SLICE_ID"], "name": d.get("VGPU_A_SLICE_NAME", ""),
                    "open_files": d.get("VGPU_A_SLICE_OPEN_FILES"), "gpus": gpus, "raw": d})
    return out


# =============================================================== the fuzzer
@dataclass
class Case:
    desc: str
    cmd: int
    data: bytes
    seq: int
    mtype: int
    expect: str = "any"                  # ok | err | none | any
    errnos: set | None = None            # allowed errnos for "err"
    valid: bool = False                  # a well-formed request (the model's checks apply)
    sid: int | None = None               # the slice id it names
    gpus: list | None = None             # NEW: [(real_minor, limit)], SET: {index: limit}
    name: str | None = None


class Fuzzer:
    def __init__(self, seed: int, spec: Spec | None = None, log=None):
        self.seed = seed
        self.rng = random.Random(seed)
        self.spec = spec or Spec()
        self.D = self.spec.defines
        self.C = self.spec.cmds
        self.log = log or (lambda *a: None)
        self.sk = Sock()
        self.family, self.groups = resolve_family(self.sk, self.D["VGPU_GENL_NAME"])
        self.checker = Checker(self.spec, self.family)
        self.lock = threading.RLock()
        self.sent = 0
        self.errnos: Counter = Counter()
        self.categories: Counter = Counter()
        self.findings: list[dict] = []
        self.nfindings = 0
        self.model: dict[int, int] = {}        # fuzz slice id -> nr of GPUs
        self.made: set[int] = set()            # every id a NEW of ours created
        self.real_minors = self._real_minors()
        self.allocating = False
        self.hist: dict[int, list] = {}
        self.unpriv: dict = {}
        self.gpu_ids: dict[int, int] = {}
        self.top = self.spec.family_policy or "vgpu_policy"
        self.start_slices = {s["id"]: s for s in self.dump_slices(self.sk)}
        self.start_state = read_counters()
        self.start_sched = self.dump_sched()
        base = 0x6E6C0000 + (seed % 0x1000) * 0x40     # "nl..": away from the tests' ids
        self.pool = [i for i in range(base, base + 24) if i not in self.start_slices]
        self.edge_ids = [i for i in (1, 2, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFE, 0xFFFFFFFF)
                         if i not in self.start_slices]
        self.cg_fd = None
        if Path("/sys/fs/cgroup/cgroup.controllers").exists():     # cgroup v2
            try:
                self.cg_fd = os.open("/sys/fs/cgroup", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError:
                pass

    # ------------------------------------------------------ bookkeeping
    def finding(self, kind: str, detail: str, case: Case | None = None) -> None:
        with self.lock:
            self.nfindings += 1
            if len(self.findings) < 50:
                f = {"kind": kind, "detail": detail}
                if case is not None:
                    f["case"] = case.desc
                    f["hex"] = case.data[:256].hex()
                self.findings.append(f)
        self.log(f"FINDING {kind}: {detail}" + (f" [{case.desc}]" if case else ""))

    def _real_minors(self) -> list[int]:
        out = []
        for p in Path("/dev").glob("nvidia[0-9]*"):
            m = re.fullmatch(r"nvidia(\d+)", p.name)
            if m:
                out.append(int(m.group(1)))
        return sorted(out) or [0]

    def fresh_name(self) -> str:
        return f"{NAME_PREFIX}{self.seed}-{self.rng.randrange(1 << 30):x}"

    # ----------------------------------------------------- transactions
    def send(self, case: Case, sk: Sock | None = None, check_model: bool = True) -> Outcome:
        sk = sk or self.sk
        probs: list[str] = []
        try:
            got, fprobs = sk.exchange(case.data, case.seq)
            probs += fprobs
        except Timeout:
            self.finding("timeout", "no answer (or no barrier ack) within the socket timeout", case)
            return Outcome(None, [], ["timeout"])
        sent_len = min(len(case.data), NLHDR.unpack_from(case.data)[0]) if len(case.data) >= 16 else len(case.data)
        out = self.checker.check(got, sk, case.mtype, sent_len, probs)
        with self.lock:
            self.sent += 1
            self.errnos[errno.errorcode.get(out.err, str(out.err)) if out.err else
                        ("ok" if out.err == 0 else "no-reply")] += 1
        for p in out.problems:
            self.finding("malformed-reply", p, case)
        if out.err and out.err not in SANE_ERRNOS:
            self.finding("errno", f"errno {out.err} ({errno.errorcode.get(out.err, '?')})"
                         f" extack {out.extack!r}", case)
        if case.sid is not None and check_model:
            self.hist.setdefault(case.sid, []).append(f"{case.desc}:{out.err}")
        if case.expect == "ok" and out.err != 0:
            self.finding("refused", f"a valid request got {out.err} "
                         f"({errno.errorcode.get(out.err or 0, out.err)}): {out.extack!r}; slice "
                         f"{case.sid} history {self.hist.get(case.sid, [])[-6:]}", case)
        elif case.expect == "err" and (out.err in (0, None) or
                                       (case.errnos and out.err not in case.errnos)):
            self.finding("accepted" if not out.err else "wrong-errno",
                         f"expected {sorted(errno.errorcode.get(e, e) for e in case.errnos or [])}, "
                         f"got {out.err} {out.extack!r}", case)
        elif case.expect == "none" and out.err is not None:
            self.finding("answered", f"expected no reply, got {out.err}", case)
        elif case.expect == "ack0" and out.err != 0:
            self.finding("control", f"expected an ack (0), got {out.err}", case)
        self.check_slices(out.msgs, case)
        if check_model:
            self.update_model(case, out)
        return out

    def check_slices(self, msgs: list, case: Case | None) -> None:
        for s in slices_of(msgs):
            for g in s["gpus"]:
                if g["used"] is None or g["limit"] is None:
                    self.finding("slice-reply", f"slice {s['id']} GPU without limit/used", case)
                elif g["used"] > g["limit"]:
                    self.finding("quota", f"slice {s['id']} GPU {g['index']}: mem_used "
                                 f"{g['used']} > quota {g['limit']}", case)
                if s["name"].startswith(NAME_PREFIX) and (g["used"] or g["allocs"]) \
                        and not getattr(self, "allocating", False):
                    self.finding("quota", f"fuzz slice {s['id']} shows use {g['used']} "
                                 f"allocs {g['allocs']} nobody made", case)

    def update_model(self, case: Case, out: Outcome) -> None:
        C = self.C
        if len(case.data) < 20 or case.mtype != self.family or \
                not NLHDR.unpack_from(case.data)[2] & NLM_F_REQUEST:
            return          # never reached the family (a control type, no NLM_F_REQUEST)
        ok = out.err == 0
        with self.lock:
            if case.cmd == C["VGPU_CMD_SLICE_NEW"] and ok:
                ss = slices_of(out.msgs)
                if not ss:
                    self.finding("reply", "NEW succeeded without the new slice", case)
                    return
                s = ss[0]
                self.made.add(s["id"])
                if s["id"] in self.model and case.valid:
                    self.finding("model", f"NEW of slice {s['id']} succeeded, it existed", case)
                if s["id"] in self.start_slices:
                    self.finding("model", f"NEW made slice {s['id']}, which existed before", case)
                self.model[s["id"]] = len(s["gpus"])
                if case.valid:
                    if s["id"] != case.sid or s["name"] != (case.name or ""):
                        self.finding("reply", f"NEW answered id {s['id']} name {s['name']!r}, "
                                     f"asked {case.sid} {case.name!r}", case)
                    if case.gpus is not None and [(g["real_minor"], g["limit"]) for g in s["gpus"]] \
                            != [tuple(g[:2]) for g in case.gpus]:
                        self.finding("reply", f"NEW answered GPUs {s['gpus']}, asked {case.gpus}", case)
                for g in s["gpus"]:
                    if g["real_minor"] is not None and g["gpu_id"]:
                        self.gpu_ids.setdefault(g["real_minor"], g["gpu_id"])
            elif case.cmd == C["VGPU_CMD_SLICE_NEW"] and case.valid and out.err == errno.EEXIST \
                    and case.sid not in self.model and case.sid not in self.start_slices:
                self.finding("model", f"NEW of slice {case.sid}: EEXIST, the model has none", case)
            elif case.cmd == C["VGPU_CMD_SLICE_DEL"] and ok:
                if case.sid is not None and case.valid and case.sid not in self.model:
                    self.finding("model", f"DEL of slice {case.sid} succeeded, none existed", case)
                self.model.pop(case.sid, None)
            elif case.cmd in (C["VGPU_CMD_SLICE_GET"], C["VGPU_CMD_SLICE_SET"]) and case.valid \
                    and not out.dump:
                if ok and case.sid not in self.model:
                    self.finding("model", f"{self.spec.cmd_names[case.cmd]} of slice {case.sid} "
                                 f"succeeded, the model has none", case)
                if out.err == errno.ENOENT and case.sid in self.model:
                    self.finding("model", f"{self.spec.cmd_names[case.cmd]} of slice {case.sid}: "
                                 f"ENOENT, the model has it", case)
                if ok and case.cmd == C["VGPU_CMD_SLICE_SET"] and case.gpus:
                    s = slices_of(out.msgs)
                    lim = {g["index"]: g["limit"] for g in s[0]["gpus"]} if s else {}
                    for i, want in case.gpus.items():
                        if lim.get(i) != want:
                            self.finding("reply", f"SET limit of GPU {i}: asked {want}, "
                                         f"reply says {lim.get(i)}", case)

    # ------------------------------------------------------- building
    def msg(self, cmd: int, attrs: bytes, *, flags: int = NLM_F_REQUEST | NLM_F_ACK,
            version: int | None = None, reserved: int = 0, mtype: int | None = None,
            sk: Sock | None = None, **kw) -> Case:
        sk = sk or self.sk
        seq = sk.next_seq()
        ver = self.D["VGPU_GENL_VERSION"] if version is None else version
        payload = GENLHDR.pack(cmd & 0xFF, ver & 0xFF, reserved & 0xFFFF) + attrs
        mt = self.family if mtype is None else mtype
        return Case(desc=kw.pop("desc", ""), cmd=cmd, data=nlmsg(mt, flags, seq, 0, payload),
                    seq=seq, mtype=mt, **kw)

    def pick_id(self, fresh: bool | None = None) -> int:
        r = self.rng
        if fresh is True:
            free = [i for i in self.pool if i not in self.model]
            return r.choice(free) if free else r.choice(self.pool)
        if fresh is False and self.model and r.random() < 0.8:
            return r.choice(sorted(self.model))
        if r.random() < 0.05 and self.edge_ids:
            return r.choice(self.edge_ids)
        return r.choice(self.pool)

    def value_for(self, pol: Pol, attr: Attr, valid: bool = True) -> int:
        """A value the policy accepts (valid) or one it must refuse (None if
        the policy refuses none)."""
        r = self.rng
        typ = NLA_TYPE_OF.get(pol.nla, attr.type)
        tmax = TYPE_MAX.get(typ, 0xFFFFFFFF)
        lo = pol.lo if pol.lo is not None else 0
        hi = pol.hi if pol.hi is not None else tmax
        if valid:
            if pol.mask is not None:
                return r.randrange(pol.mask + 1) & pol.mask
            return r.choice([lo, hi, r.randint(lo, hi), min(lo + 1, hi), max(hi - 1, lo)])
        cands = []
        if pol.mask is not None and pol.mask != tmax:
            cands += [pol.mask + 1 if pol.mask + 1 <= tmax else tmax,
                      (~pol.mask & tmax), 1 << (pol.mask.bit_length())]
        if lo > 0:
            cands += [lo - 1, 0]
        if hi < tmax:
            cands += [hi + 1, tmax, r.randint(hi + 1, tmax)]
        return r.choice(cands) if cands else None

    def gpu_nest(self, kind: str, index: int, real_minor: int | None = None,
                 limit: int | None = None, compute: bool = False) -> bytes:
        gp = self.spec.policies.get("vgpu_gpu_policy", {})
        A = self.D
        parts = []
        if kind == "set" or self.rng.random() < 0.3:
            parts.append(put_int(A["VGPU_GPU_A_INDEX"], "u32", index))
        if kind == "new":
            parts.append(put_int(A["VGPU_GPU_A_REAL_MINOR"], "u32", real_minor))
            if self.rng.random() < 0.2 and real_minor in self.gpu_ids:
                parts.append(put_int(A["VGPU_GPU_A_GPU_ID"], "u32", self.gpu_ids[real_minor]))
        if limit is not None:
            parts.append(put_int(A["VGPU_GPU_A_MEM_LIMIT"], "u64", limit))
        if compute:
            pol = self.rng.randrange(A["__VGPU_COMPUTE_POLICY_MAX"])
            parts.append(put_int(A["VGPU_GPU_A_COMPUTE_POLICY"], "u32", pol))
            bpp = gp.get(A["VGPU_GPU_A_COMPUTE_BP"])
            parts.append(put_int(A["VGPU_GPU_A_COMPUTE_BP"], "u32",
                                 self.value_for(bpp, self.spec.by_name["VGPU_GPU_A_COMPUTE_BP"])
                                 if bpp else 5000))
            if self.rng.random() < 0.5:
                parts.append(put_int(A["VGPU_GPU_A_PRIORITY"], "u32",
                                     self.rng.randrange(A["__VGPU_PRIORITY_MAX"])))
        self.rng.shuffle(parts)
        return nest(A["VGPU_A_GPU"], parts)

    def limit(self) -> int:
        return self.rng.choice([0, 1, 4096, 64 << 20, 256 << 20, 16 << 30, 1 << 63,
                                (1 << 64) - 1, self.rng.randrange(1 << 40)])

    def optional_attrs(self, op: Op, skip: set) -> list[tuple[int, bytes]]:
        """Valid values for some optional attributes the handler reads."""
        out, pol = [], self.spec.policies.get(self.top, {})
        for v in sorted(op.reads - op.required - skip):
            p, a = pol.get(v), self.spec.attrs["vgpu_attr"].get(v)
            if p is None or a is None or p.nla == "NLA_REJECT" or self.rng.random() < 0.6:
                continue
            if a.name == "VGPU_A_SLICE_CGROUP_FD":
                if self.cg_fd is None or self.rng.random() < 0.5:
                    continue
                out.append((v, put_int(v, "u32", self.cg_fd)))
            elif a.name == "VGPU_A_SLICE_NAME":
                continue
            elif a.name == "VGPU_A_SLICE_ALLOW":
                ap = self.spec.policies.get(p.nested, {})
                keys = [((self.rng.randrange(self.D["__VGPU_AUDIT_KIND_MAX"])) << 32) |
                        self.rng.randrange(1 << 32) for _ in range(self.rng.randrange(4))]
                out.append((v, nest(v, [put_int(self.D["VGPU_A_ALLOW"], "u64", k) for k in keys])))
                del ap
            elif a.name == "VGPU_A_SLICE_FLAGS" and op.name != "VGPU_CMD_SLICE_DEL":
                continue
            elif a.type in PACK:
                out.append((v, put_int(v, a.type, self.value_for(p, a))))
        return out

    def valid_case(self, cmd: int, sk: Sock | None = None, dump: bool = False) -> Case:
        """A well-formed request of cmd (the policy's attributes, with the
        values it accepts; slices from the pool)."""
        A, C, r = self.D, self.C, self.rng
        op = self.spec.ops[cmd]
        name = op.name
        attrs, kw = [], {"valid": True}
        if name == "VGPU_CMD_SLICE_NEW":
            sid = self.pick_id(fresh=r.random() < 0.8)
            n = r.randint(1, len(self.real_minors))
            minors = r.sample(self.real_minors, n)
            gpus = [(m, self.limit()) for m in minors]
            nm = self.fresh_name()
            if r.random() < 0.1:
                nm = (NAME_PREFIX + "x" * 200)[:A["VGPU_SLICE_NAME_MAX"] - 1]
            attrs += [put_int(A["VGPU_A_SLICE_ID"], "u32", sid),
                      nla(A["VGPU_A_SLICE_NAME"], nm.encode() + b"\0"),
                      nest(A["VGPU_A_SLICE_GPUS"], [self.gpu_nest("new", i, m, lim, r.random() < 0.3)
                                                    for i, (m, lim) in enumerate(gpus)])]
            attrs += [b for _v, b in self.optional_attrs(op, {A["VGPU_A_SLICE_GPUS"]})]
            kw.update(sid=sid, gpus=gpus, name=nm,
                      expect="ok" if sid not in self.model else "err",
                      errnos={errno.EEXIST})
        elif name in ("VGPU_CMD_SLICE_SET", "VGPU_CMD_SLICE_DEL", "VGPU_CMD_SLICE_GET",
                      "VGPU_CMD_AUDIT_GET"):
            sid = self.pick_id(fresh=False)
            attrs.append(put_int(A["VGPU_A_SLICE_ID"], "u32", sid))
            kw["sid"] = sid
            exists = sid in self.model
            if name == "VGPU_CMD_SLICE_SET":
                limits = {}
                if exists and r.random() < 0.7:
                    nests = []
                    for i in sorted(r.sample(range(self.model[sid]), r.randint(1, self.model[sid]))):
                        lim = self.limit() if r.random() < 0.8 else None
                        comp = lim is None or r.random() < 0.3
                        nests.append(self.gpu_nest("set", i, limit=lim, compute=comp))
                        if lim is not None:
                            limits[i] = lim
                    attrs.append(nest(A["VGPU_A_SLICE_GPUS"], nests))
                attrs += [b for _v, b in self.optional_attrs(op, {A["VGPU_A_SLICE_GPUS"]})]
                kw["gpus"] = limits
            elif name == "VGPU_CMD_SLICE_DEL":
                if r.random() < 0.5:
                    attrs.append(put_int(A["VGPU_A_SLICE_FLAGS"], "u32",
                                         r.randrange(A["VGPU_SLICE_F_ALL"] + 1)))
            kw.update(expect="ok" if exists else "err", errnos={errno.ENOENT})
            if name == "VGPU_CMD_AUDIT_GET":
                dump = True
        elif name in ("VGPU_CMD_SCHED_SET", "VGPU_CMD_SCHED_GET"):
            # SET only where it changes nothing: a minor with no GPU, or a
            # scheduler's own current values
            cur = self.start_sched
            if name == "VGPU_CMD_SCHED_SET":
                if cur and r.random() < 0.6:
                    m = r.choice(sorted(cur))
                    attrs += [put_int(A["VGPU_A_SCHED_REAL_MINOR"], "u32", m),
                              put_int(A["VGPU_A_SCHED_PERIOD_US"], "u32", cur[m][0]),
                              put_int(A["VGPU_A_SCHED_LAYERS"], "u32", cur[m][1])]
                    kw.update(expect="ok")
                else:
                    m = r.randint(max(self.real_minors) + 1, 247)
                    attrs.append(put_int(A["VGPU_A_SCHED_REAL_MINOR"], "u32", m))
                    kw.update(expect="err", errnos={errno.ENODEV})
            else:
                m = r.choice(self.real_minors + [r.randint(0, 247)])
                attrs.append(put_int(A["VGPU_A_SCHED_REAL_MINOR"], "u32", m))
        if dump and name != "VGPU_CMD_AUDIT_GET":
            attrs, kw = [], {"valid": True, "expect": "ok"}
        kw.setdefault("desc", f"valid {name[9:]}{' dump' if dump else ''}")
        flags = NLM_F_REQUEST | (NLM_F_DUMP if dump else NLM_F_ACK)
        return self.msg(cmd, b"".join(attrs), flags=flags, sk=sk, **kw)

    # ------------------------------------------------------- mutations
    def mutated_case(self) -> Case:
        """One request with one thing wrong, picked from the mutation classes
        (the slice it names kept for the model, should it be accepted)."""
        self._base = None
        c = self._mutated()
        if c.sid is None and self._base is not None and c.cmd == self._base.cmd:
            c.sid = self._base.sid
        return c

    def _mutated(self) -> Case:
        r, A = self.rng, self.D
        cmds = sorted(self.spec.ops)
        cmd = r.choice(cmds)
        op = self.spec.ops[cmd]
        pol = self.spec.policies.get(self.top, {})
        top = self.spec.attrs["vgpu_attr"]
        mclass = r.choice(["missing", "duplicated", "oversized", "undersized", "wrong-type",
                           "out-of-range", "reject", "unknown-type", "bad-nla-len",
                           "truncated", "deep-nest", "nest-flag", "unknown-flags",
                           "bad-version", "reserved", "bad-nlmsg-len", "dump-on-doit",
                           "unknown-cmd", "control-type", "no-request-flag", "string",
                           "gpu-nest", "allow-list", "too-many-gpus", "empty", "havoc"])
        self.categories[mclass] += 1
        base = self._base = self.valid_case(cmd, dump=self.spec.ops[cmd].doit is None)
        genl_attrs = base.data[20:] if base else b""
        dump_only = op.doit is None
        flags = NLM_F_REQUEST | (NLM_F_DUMP if dump_only else NLM_F_ACK)
        E = {"expect": "err", "errnos": POLICY_ERRNOS}
        desc = f"{mclass} {op.name[9:]}"
        destructive = op.name in ("VGPU_CMD_SLICE_SET", "VGPU_CMD_SLICE_DEL")

        def attrs_list():
            return [(t, f, p) for t, f, p in parse_attrs(genl_attrs)[0]]

        def enc(lst):
            return b"".join(nla(t, p, f) for t, f, p in lst)

        if mclass == "missing" and op.required:
            drop = r.choice(sorted(op.required))
            body = enc([a for a in attrs_list() if a[0] != drop])
            return self.msg(cmd, body, flags=flags, desc=desc + f" {top[drop].name}",
                            expect="err", errnos={errno.EINVAL})
        if mclass == "duplicated":
            lst = attrs_list()
            if lst:
                a = r.choice(lst)
                lst.insert(r.randrange(len(lst) + 1), a)
            return self.msg(cmd, enc(lst), flags=flags, desc=desc)
        if mclass in ("oversized", "undersized", "wrong-type", "out-of-range", "string"):
            cands = [v for v in self.spec.request_attrs(self.top) if v in top and top[v].type != "string"]
            v = r.choice(cands)
            a, p = top[v], pol[v]
            lst = [x for x in attrs_list() if x[0] != v]
            if mclass == "string":
                a = self.spec.by_name["VGPU_A_SLICE_NAME"]
                p = pol[a.value]
                v = a.value
                L = p.strlen or 127
                lst = [x for x in attrs_list() if x[0] != v]
                pl, exp = r.choice([(b"x" * (L + 1) + b"\0", E), (b"x" * 8, E), (b"", E),
                                    (b"ab\0cd\0", {"expect": "any"}),
                                    ((NAME_PREFIX + "y" * L).encode()[:L] + b"\0", {"expect": "any"})])
                lst.append((v, 0, pl))
                return self.msg(cmd, enc(lst), flags=flags, desc=desc, **exp)
            if a.type == "nested":
                pl = r.choice([b"\x01\x02\x03", b"\0" * 5, struct.pack("=I", 7)])
                lst.append((v, r.choice([0, NLA_F_NESTED]), pl))
                return self.msg(cmd, enc(lst), flags=flags, desc=desc + f" {a.name}", **E)
            size = struct.calcsize(PACK.get(a.type, "=I"))
            if mclass == "oversized":
                pl = bytes(r.randrange(256) for _ in range(size + r.choice([1, 2, 4, 8, 60])))
            elif mclass == "undersized":
                pl = bytes(r.randrange(256) for _ in range(r.randrange(size)))
            elif mclass == "wrong-type":
                other = {1: 4, 4: 8, 8: 4}.get(size, 4)
                pl = struct.pack({1: "=B", 4: "=I", 8: "=Q"}[other], r.randrange(1 << (8 * other)))
            else:
                val = self.value_for(p, a, valid=False)
                if val is None:
                    return self.valid_case(cmd)
                pl = struct.pack(PACK[a.type], val)
            lst.append((v, 0, pl))
            return self.msg(cmd, enc(lst), flags=flags, desc=desc + f" {a.name}", **E)
        if mclass == "reject":
            v = r.choice(self.spec.rejected_attrs(self.top))
            lst = attrs_list() + [(v, 0, struct.pack("=Q", r.randrange(1 << 64)))]
            r.shuffle(lst)
            return self.msg(cmd, enc(lst), flags=flags, desc=desc + f" {top[v].name}",
                            expect="err", errnos={errno.EINVAL})
        if mclass == "unknown-type":
            t = r.choice([0, self.spec.maxattr("vgpu_attr") + 1, r.randint(64, NLA_TYPE_MASK)])
            lst = attrs_list() + [(t, 0, struct.pack("=I", r.randrange(1 << 32)))]
            r.shuffle(lst)
            return self.msg(cmd, enc(lst), flags=flags, desc=desc + f" type {t}",
                            expect="err", errnos={errno.EINVAL})
        if mclass == "bad-nla-len":
            body = bytearray(genl_attrs or put_int(A["VGPU_A_SLICE_ID"], "u32", self.pick_id()))
            # rewrite one attribute header's length to something inconsistent
            offs, pos = [], 0
            while pos + 4 <= len(body):
                ln = struct.unpack_from("=H", body, pos)[0]
                offs.append(pos)
                if ln < 4:
                    break
                pos += align4(ln)
            o = r.choice(offs)
            struct.pack_into("=H", body, o, r.choice([0, 1, 3, len(body) - o + 4, 0xFFFF]))
            exp = {"expect": "any"} if destructive else E
            if destructive:
                return self.valid_case(cmd)
            return self.msg(cmd, bytes(body), flags=flags, desc=desc, **exp)
        if mclass == "truncated":
            body = genl_attrs or put_int(A["VGPU_A_SLICE_ID"], "u32", self.pick_id())
            cut = r.randrange(1, min(len(body), 12) + 1)
            if destructive:
                return self.valid_case(cmd)
            # still well-formed where the cut ends the top level at an
            # attribute's end (within its padding): else one is broken
            left, pos = len(body) - cut, 0
            whole = left == 0
            while pos + 4 <= len(body):
                ln = struct.unpack_from("=H", body, pos)[0]
                if ln < 4:
                    break
                whole |= pos + ln <= left <= pos + align4(ln)
                pos += align4(ln)
            return self.msg(cmd, body[:-cut], flags=flags, desc=desc + f" -{cut}",
                            **({"expect": "any"} if whole else E))
        if mclass == "deep-nest":
            depth = r.randint(3, 40)
            inner = put_int(1, "u32", 1)
            types = [A["VGPU_A_SLICE_GPUS"], A["VGPU_A_GPU"], A["VGPU_GPU_A_INDEX"],
                     A["VGPU_A_SLICE_ALLOW"], A["VGPU_A_SLICE_GPUS"]]
            for i in range(depth):
                inner = nest(types[i % len(types)] if r.random() < 0.7 else r.randint(1, 40), inner)
                if len(inner) > 60000:
                    break
            lst = [x for x in attrs_list() if x[0] != A["VGPU_A_SLICE_GPUS"]]
            body = enc(lst) + nest(A["VGPU_A_SLICE_GPUS"], inner)
            return self.msg(cmd, body, flags=flags, desc=desc + f" {depth}", **E)
        if mclass == "nest-flag":
            lst = attrs_list()
            if not lst:
                return self.valid_case(cmd)
            i = r.randrange(len(lst))
            t, f, p = lst[i]
            lst[i] = (t, f ^ NLA_F_NESTED, p)
            return self.msg(cmd, enc(lst), flags=flags, desc=desc + f" attr {t}", **E)
        if mclass == "unknown-flags":
            which = r.choice(["slice-flags", "layers", "nlmsg", "byteorder"])
            if which == "slice-flags":
                v = A["VGPU_A_SLICE_FLAGS"]
                bad = self.value_for(pol[v], top[v], valid=False)
                lst = [x for x in attrs_list() if x[0] != v] + [(v, 0, struct.pack("=I", bad))]
                return self.msg(cmd, enc(lst), flags=flags, desc=desc + " SLICE_FLAGS", **E)
            if which == "layers":
                v = A["VGPU_A_SCHED_LAYERS"]
                bad = self.value_for(pol[v], top[v], valid=False)
                lst = [x for x in attrs_list() if x[0] != v] + [(v, 0, struct.pack("=I", bad))]
                return self.msg(cmd, enc(lst), flags=flags, desc=desc + " SCHED_LAYERS", **E)
            if which == "byteorder":
                lst = attrs_list()
                if lst:
                    i = r.randrange(len(lst))
                    t, f, p = lst[i]
                    lst[i] = (t, f | NLA_F_NET_BYTEORDER, p)
                if destructive:
                    return self.valid_case(cmd)
                return self.msg(cmd, enc(lst), flags=flags, desc=desc + " NET_BYTEORDER")
            extra = r.choice([0x10, 0x20, 0x40, 0x80, 0x400, 0x800, 0x1000, 0x8000])
            c = self.msg(cmd, genl_attrs, flags=flags | extra, desc=desc + f" nlmsg {extra:#x}",
                         valid=base.valid if base else False, sid=base.sid if base else None)
            return c
        if mclass == "bad-version":
            ver = r.choice([0, 2, 3, 0x7F, 0xFF])
            c = self.msg(cmd, genl_attrs, flags=flags, version=ver, desc=desc + f" v{ver}")
            return c
        if mclass == "reserved":
            return self.msg(cmd, genl_attrs, flags=flags, reserved=r.randint(1, 0xFFFF),
                            desc=desc, expect="err", errnos={errno.EINVAL})
        if mclass == "bad-nlmsg-len":
            seq = self.sk.next_seq()
            payload = GENLHDR.pack(cmd, A["VGPU_GENL_VERSION"], 0) + genl_attrs
            kind = r.choice(["short", "nogenl", "long", "huge"])
            if kind == "short":
                ln, exp = r.randrange(16), "none"
            elif kind == "nogenl":
                ln, exp = r.randint(16, 19), "err"
                payload = payload[:ln - 16]
            elif kind == "long":
                ln, exp = 16 + len(payload) + r.randint(1, 64), "none"
            else:
                ln, exp = 0xFFFFFFFF, "none"
            return Case(desc=desc + f" {kind} {ln}", cmd=cmd, seq=seq, mtype=self.family,
                        data=nlmsg(self.family, flags, seq, 0, payload, length=ln),
                        expect=exp, errnos={errno.EINVAL})
        if mclass == "dump-on-doit":
            no_dump = [c for c, o in self.spec.ops.items() if o.dumpit is None]
            no_doit = [c for c, o in self.spec.ops.items() if o.doit is None]
            if no_dump and (r.random() < 0.7 or not no_doit):
                c = r.choice(no_dump)
                b = self.valid_case(c)
                return self.msg(c, b.data[20:], flags=NLM_F_REQUEST | NLM_F_DUMP,
                                desc=f"dump-on-doit {self.spec.cmd_names[c][9:]}",
                                expect="err", errnos={errno.EOPNOTSUPP})
            c = r.choice(no_doit)
            b = self.valid_case(c)
            return self.msg(c, b.data[20:], flags=NLM_F_REQUEST | NLM_F_ACK,
                            desc=f"doit-on-dump-only {self.spec.cmd_names[c][9:]}",
                            expect="err", errnos={errno.EOPNOTSUPP})
        if mclass == "unknown-cmd":
            c = r.choice([x for x in list(range(0, 16)) + [0x7F, 0xFF] if x not in self.spec.ops])
            return self.msg(c, genl_attrs, flags=r.choice([flags, NLM_F_REQUEST | NLM_F_DUMP]),
                            desc=f"unknown-cmd {c}", expect="err", errnos={errno.EOPNOTSUPP})
        if mclass == "control-type":
            t = r.choice([NLMSG_NOOP, NLMSG_ERROR, NLMSG_DONE, NLMSG_OVERRUN, 0, 5, 15])
            c = self.msg(cmd, genl_attrs, flags=NLM_F_REQUEST | NLM_F_ACK, mtype=t,
                         desc=f"control-type {t}")
            c.expect = "ack0"       # netlink acks control types without looking further
            return c
        if mclass == "no-request-flag":
            f = r.choice([0, NLM_F_ACK, NLM_F_DUMP])
            c = self.msg(cmd, genl_attrs, flags=f, desc=f"no-request-flag {f:#x} {op.name[9:]}")
            c.expect = "ack0" if f & NLM_F_ACK else "none"
            return c
        if mclass == "gpu-nest":
            return self.bad_gpu_nest(cmd)
        if mclass == "allow-list":
            n = r.choice([0, 1, A["VGPU_MAX_ALLOW"], A["VGPU_MAX_ALLOW"] + 1])
            bad = r.random() < 0.3
            keys = [(r.randrange(A["__VGPU_AUDIT_KIND_MAX"] + (2 if bad else 0)) << 32)
                    | r.randrange(1 << 32) for _ in range(n)]
            lst = [x for x in attrs_list() if x[0] != A["VGPU_A_SLICE_ALLOW"]]
            allow = nest(A["VGPU_A_SLICE_ALLOW"], [put_int(A["VGPU_A_ALLOW"], "u64", k) for k in keys])
            exp = {"expect": "any"}
            if n > A["VGPU_MAX_ALLOW"] and op.name in ("VGPU_CMD_SLICE_NEW", "VGPU_CMD_SLICE_SET"):
                exp = {"expect": "err", "errnos": {errno.E2BIG, errno.EINVAL, errno.ENOENT,
                                                   errno.EEXIST}}
            return self.msg(cmd, enc(lst) + allow, flags=flags, desc=desc + f" {n}", **exp)
        if mclass == "too-many-gpus":
            n = A["VGPU_MAX_SLICE_GPUS"] + r.randint(1, 4)
            nests = [nest(A["VGPU_A_GPU"], [put_int(A["VGPU_GPU_A_REAL_MINOR"], "u32",
                                                    self.real_minors[i % len(self.real_minors)]),
                                            put_int(A["VGPU_GPU_A_MEM_LIMIT"], "u64", 1 << 20)])
                     for i in range(n)]
            lst = [x for x in attrs_list() if x[0] != A["VGPU_A_SLICE_GPUS"]]
            exp = {"expect": "err", "errnos": {errno.E2BIG}} if op.name == "VGPU_CMD_SLICE_NEW" \
                else {"expect": "any"}
            return self.msg(cmd, enc(lst) + nest(A["VGPU_A_SLICE_GPUS"], nests), flags=flags,
                            desc=desc + f" {n}", **exp)
        if mclass == "empty":
            exp = {"expect": "err", "errnos": {errno.EINVAL}} if op.required else {"expect": "any"}
            return self.msg(cmd, b"", flags=flags, desc=desc, **exp)
        if mclass == "havoc" and not destructive:
            body = bytearray(genl_attrs)
            for _ in range(r.randint(1, 8)):
                if not body:
                    break
                i = r.randrange(len(body))
                body[i] = r.choice([0, 0xFF, body[i] ^ (1 << r.randrange(8)), r.randrange(256)])
            return self.msg(cmd, bytes(body), flags=flags, desc=desc)
        return self.valid_case(cmd, dump=(op.doit is None))

    def bad_gpu_nest(self, cmd: int) -> Case:
        """SLICE_NEW / SLICE_SET with one GPU nest wrong."""
        r, A = self.rng, self.D
        new = r.random() < 0.5
        c = self.C["VGPU_CMD_SLICE_NEW" if new else "VGPU_CMD_SLICE_SET"]
        sid = self.pick_id(fresh=new)
        gp = self.spec.policies.get("vgpu_gpu_policy", {})
        gt = self.spec.attrs["vgpu_gpu_attr"]
        kind = r.choice(["missing", "reject", "unknown", "range", "index", "dup-minor",
                         "no-bp", "wrong-entry", "no-gpus", "nomem-limit", "absent-minor"])
        nests, errs = [], POLICY_ERRNOS | {errno.ENOENT}
        req = self.spec.check_rules["new" if new else "set"]
        if kind == "missing" and req:
            drop = r.choice(sorted(req))
            body = [put_int(A["VGPU_GPU_A_REAL_MINOR"], "u32", self.real_minors[0]),
                    put_int(A["VGPU_GPU_A_MEM_LIMIT"], "u64", 1 << 20),
                    put_int(A["VGPU_GPU_A_INDEX"], "u32", 0)]
            body = [b for b in body if NLAHDR.unpack_from(b)[1] != drop]
            nests.append(nest(A["VGPU_A_GPU"], body))
        elif kind == "reject":
            v = r.choice([v for v, p in gp.items() if p.nla == "NLA_REJECT"])
            nests.append(self.gpu_nest("new" if new else "set", 0, self.real_minors[0], 1 << 20))
            nests.append(nest(A["VGPU_A_GPU"], [put_int(A["VGPU_GPU_A_INDEX"], "u32", 1),
                                                 nla(v, struct.pack("=Q", 1))]))
        elif kind == "unknown":
            t = r.choice([0, max(gt) + 1, r.randint(max(gt) + 1, NLA_TYPE_MASK)])
            nests.append(nest(A["VGPU_A_GPU"], [put_int(A["VGPU_GPU_A_REAL_MINOR"], "u32", self.real_minors[0]),
                                                 put_int(A["VGPU_GPU_A_MEM_LIMIT"], "u64", 1 << 20),
                                                 put_int(A["VGPU_GPU_A_INDEX"], "u32", 0),
                                                 nla(t, b"\0" * 4)]))
        elif kind == "range":
            cands = [v for v, p in gp.items() if p.nla != "NLA_REJECT" and
                     self.value_for(p, gt[v], valid=False) is not None]
            v = r.choice(cands)
            val = self.value_for(gp[v], gt[v], valid=False)
            nests.append(nest(A["VGPU_A_GPU"], [put_int(A["VGPU_GPU_A_REAL_MINOR"], "u32", self.real_minors[0]),
                                                 put_int(A["VGPU_GPU_A_MEM_LIMIT"], "u64", 1 << 20),
                                                 put_int(A["VGPU_GPU_A_INDEX"], "u32", 0),
                                                 put_int(v, gt[v].type, val)]))
        elif kind == "index":
            nests.append(nest(A["VGPU_A_GPU"], [put_int(A["VGPU_GPU_A_REAL_MINOR"], "u32", self.real_minors[0]),
                                                 put_int(A["VGPU_GPU_A_MEM_LIMIT"], "u64", 1 << 20),
                                                 put_int(A["VGPU_GPU_A_INDEX"], "u32",
                                                         r.randint(1, A["VGPU_MAX_SLICE_GPUS"] - 1))]))
        elif kind == "dup-minor" and new:
            m = self.real_minors[0]
            nests = [nest(A["VGPU_A_GPU"], [put_int(A["VGPU_GPU_A_REAL_MINOR"], "u32", m),
                                             put_int(A["VGPU_GPU_A_MEM_LIMIT"], "u64", 1 << 20)])] * 2
        elif kind == "no-bp":
            nests.append(nest(A["VGPU_A_GPU"], [put_int(A["VGPU_GPU_A_REAL_MINOR"], "u32", self.real_minors[0]),
                                                 put_int(A["VGPU_GPU_A_MEM_LIMIT"], "u64", 1 << 20),
                                                 put_int(A["VGPU_GPU_A_INDEX"], "u32", 0),
                                                 put_int(A["VGPU_GPU_A_COMPUTE_POLICY"], "u32",
                                                         r.randint(1, A["__VGPU_COMPUTE_POLICY_MAX"] - 1))]))
            if not new:
                errs = {errno.EINVAL, errno.ENOENT}
                # the slice's own bp may make this valid on SET
                return self.msg(c, put_int(A["VGPU_A_SLICE_ID"], "u32", sid) + nest(A["VGPU_A_SLICE_GPUS"], nests),
                                desc=f"gpu-nest {kind} SET", sid=sid)
        elif kind == "wrong-entry":
            nests.append(put_int(r.choice([A["VGPU_A_PID"], A["VGPU_A_ALLOW"], A["VGPU_A_AUDIT_ENTRY"],
                                            0, 9]), "u32", 1))
        elif kind == "no-gpus":
            pass
        elif kind == "nomem-limit" and not new:
            nests.append(nest(A["VGPU_A_GPU"], [put_int(A["VGPU_GPU_A_INDEX"], "u32", 0)]))
        elif kind == "absent-minor" and new:
            m = r.randint(max(self.real_minors) + 1, 247)
            nests.append(nest(A["VGPU_A_GPU"], [put_int(A["VGPU_GPU_A_REAL_MINOR"], "u32", m),
                                                 put_int(A["VGPU_GPU_A_MEM_LIMIT"], "u64", 1 << 20)]))
            errs = {errno.ENODEV, errno.EEXIST}
        else:
            return self.valid_case(c)
        if kind == "no-gpus" and not new:
            return self.valid_case(c)
        body = put_int(A["VGPU_A_SLICE_ID"], "u32", sid) + \
            nla(A["VGPU_A_SLICE_NAME"], self.fresh_name().encode() + b"\0") * new + \
            nest(A["VGPU_A_SLICE_GPUS"], nests)
        if not new:
            errs = errs | {errno.ENOENT}
        else:
            errs = errs | {errno.EEXIST} if kind == "absent-minor" else errs
        return self.msg(c, body, desc=f"gpu-nest {kind} {'NEW' if new else 'SET'}",
                        expect="err", errnos=errs, sid=sid)

    # --------------------------------------------------------- queries
    def dump_slices(self, sk: Sock, barrier: bool = True) -> list[dict]:
        c = self.msg(self.C["VGPU_CMD_SLICE_GET"], b"", flags=NLM_F_REQUEST | NLM_F_DUMP, sk=sk,
                     desc="dump SLICE_GET")
        try:
            got, probs = sk.exchange(c.data, c.seq, barrier=barrier)
        except Timeout:
            self.finding("timeout", "SLICE_GET dump: no end within the socket timeout", c)
            return []
        with self.lock:
            self.sent += 1
        out = self.checker.check(got, sk, c.mtype, len(c.data), probs)
        for p in out.problems:
            self.finding("malformed-reply", p, c)
        if out.err not in (0, None):
            self.finding("dump", f"SLICE_GET dump failed: {out.err} {out.extack!r}", c)
        ss = slices_of(out.msgs)
        ids = [s["id"] for s in ss]
        if ids != sorted(set(ids)):
            self.finding("dump", f"dump ids not strictly ascending/unique: {ids[:20]}...", c)
        self.check_slices(out.msgs, c)
        return ss

    def dump_sched(self) -> dict[int, tuple[int, int]]:
        c = self.msg(self.C["VGPU_CMD_SCHED_GET"], b"", flags=NLM_F_REQUEST | NLM_F_DUMP,
                     desc="dump SCHED_GET")
        got, probs = self.sk.exchange(c.data, c.seq)
        out = self.checker.check(got, self.sk, c.mtype, len(c.data), probs)
        return {d["VGPU_A_SCHED_REAL_MINOR"]: (d["VGPU_A_SCHED_PERIOD_US"], d["VGPU_A_SCHED_LAYERS"])
                for d in out.msgs if "VGPU_A_SCHED_REAL_MINOR" in d}

    def new_slice(self, sid: int, gpus, sk: Sock | None = None, name: str | None = None,
                  expect: str = "ok") -> Outcome:
        A = self.D
        nm = name or self.fresh_name()
        body = put_int(A["VGPU_A_SLICE_ID"], "u32", sid) + nla(A["VGPU_A_SLICE_NAME"], nm.encode() + b"\0") + \
            nest(A["VGPU_A_SLICE_GPUS"], [nest(A["VGPU_A_GPU"], [put_int(A["VGPU_GPU_A_REAL_MINOR"], "u32", m),
                                                                  put_int(A["VGPU_GPU_A_MEM_LIMIT"], "u64", lim)])
                                          for m, lim in gpus])
        c = self.msg(self.C["VGPU_CMD_SLICE_NEW"], body, sk=sk, desc="new", sid=sid, name=nm,
                     gpus=list(gpus), valid=True, expect=expect, errnos={errno.EEXIST})
        return self.send(c, sk)

    def simple(self, cmd_name: str, sid: int, sk: Sock | None = None, expect="any",
               errnos=None, extra: bytes = b"", check_model: bool = True) -> Outcome:
        c = self.msg(self.C[cmd_name], put_int(self.D["VGPU_A_SLICE_ID"], "u32", sid) + extra,
                     sk=sk, desc=cmd_name[9:], sid=sid, valid=True, expect=expect, errnos=errnos)
        return self.send(c, sk, check_model=check_model)

    def delete(self, sid: int, force: bool = True, sk: Sock | None = None, expect="any",
               errnos=None) -> Outcome:
        extra = put_int(self.D["VGPU_A_SLICE_FLAGS"], "u32", self.D["VGPU_SLICE_F_FORCE"]) if force else b""
        return self.simple("VGPU_CMD_SLICE_DEL", sid, sk, expect, errnos, extra)

    # ---------------------------------------------------------- phases
    def phase_systematic(self) -> None:
        """Every command, valid and with every policy violation the spec
        lets us derive, once each."""
        A, top = self.D, self.spec.attrs["vgpu_attr"]
        pol = self.spec.policies.get(self.top, {})
        for cmd in sorted(self.spec.ops):
            op = self.spec.ops[cmd]
            for dump in ([False] if op.doit else []) + ([True] if op.dumpit else []):
                if op.doit is None:
                    # a dump-only command wants a live slice
                    sid = self.pick_id(fresh=True)
                    self.new_slice(sid, [(self.real_minors[0], 1 << 20)])
                self.send(self.valid_case(cmd, dump=dump))
            for v in sorted(pol):
                a, p = top.get(v), pol[v]
                if a is None:
                    continue
                base = self.valid_case(cmd).data[20:]
                lst = [x for x in parse_attrs(base)[0] if x[0] != v]
                body = b"".join(nla(t, pl, f) for t, f, pl in lst)
                flags = NLM_F_REQUEST | (NLM_F_ACK if op.doit else NLM_F_DUMP)
                if p.nla == "NLA_REJECT":
                    self.send(self.msg(cmd, body + nla(v, b"\0" * 8), flags=flags,
                                       desc=f"sys reject {a.name} {op.name[9:]}",
                                       expect="err", errnos={errno.EINVAL}))
                    continue
                if a.type in PACK:
                    bad = self.value_for(p, a, valid=False)
                    if bad is not None:
                        self.send(self.msg(cmd, body + put_int(v, a.type, bad), flags=flags,
                                           desc=f"sys range {a.name}={bad} {op.name[9:]}",
                                           expect="err", errnos=POLICY_ERRNOS))
                    size = struct.calcsize(PACK[a.type])
                    for pl in (b"\0" * (size + 4), b"\0" * max(size - 1, 0)):
                        self.send(self.msg(cmd, body + nla(v, pl), flags=flags,
                                           desc=f"sys len {len(pl)} {a.name} {op.name[9:]}",
                                           expect="err", errnos=POLICY_ERRNOS))
                if a.type == "nested":
                    self.send(self.msg(cmd, body + nla(v, put_int(1, "u32", 1)), flags=flags,
                                       desc=f"sys nest-flagless {a.name} {op.name[9:]}",
                                       expect="err", errnos=POLICY_ERRNOS))
            for t in (0, self.spec.maxattr("vgpu_attr") + 1):
                self.send(self.msg(cmd, nla(t, b"\0" * 4) + self.valid_case(cmd).data[20:],
                                   flags=NLM_F_REQUEST | (NLM_F_ACK if op.doit else NLM_F_DUMP),
                                   desc=f"sys unknown type {t} {op.name[9:]}",
                                   expect="err", errnos={errno.EINVAL}))
        for name, v in self.C.items():
            if v not in self.spec.ops and not name.startswith("__") and v != self.D.get("VGPU_CMD_MAX", -1) + 1:
                self.send(self.msg(v, b"", desc=f"sys send-only {name}", expect="err",
                                   errnos={errno.EOPNOTSUPP}))

    def phase_random(self, deadline: float, budget: int) -> None:
        n = 0
        while n < budget and time.monotonic() < deadline:
            if self.rng.random() < 0.35:
                cmd = self.rng.choice(sorted(self.spec.ops))
                c = self.valid_case(cmd, dump=self.spec.ops[cmd].doit is None or
                                    (self.spec.ops[cmd].dumpit is not None and self.rng.random() < 0.2))
            else:
                c = self.mutated_case()
            self.send(c)
            n += 1
            # keep the pool from filling up
            if len(self.model) > len(self.pool) * 3 // 4:
                self.delete(self.rng.choice(sorted(self.model)))

    def phase_unprivileged(self) -> None:
        """As nobody (uid/gid 65534, no capabilities): every command, valid
        or not, doit and dump, is EPERM (GENL_ADMIN_PERM); joining the
        multicast groups is refused; nothing changes."""
        cases = []
        for cmd in sorted(self.spec.ops):
            op = self.spec.ops[cmd]
            if not op.admin:
                self.finding("perm", f"{op.name} lacks GENL_ADMIN_PERM in netlink.c")
            for dump in ([False] if op.doit else []) + ([True] if op.dumpit else []):
                cases.append((cmd, dump, self.valid_case(cmd, dump=dump).data[20:]))
            cases.append((cmd, False, self.mutated_case().data[20:]))
        victim = sorted(self.model)[0] if self.model else None
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            res = {"errs": [], "groups": {}, "error": None}
            try:
                os.close(r)
                os.setgroups([])
                os.setgid(NOBODY)
                os.setuid(NOBODY)
                sk = Sock(timeout=10)
                fam, groups = resolve_family(sk, self.D["VGPU_GENL_NAME"])
                for cmd, dump, body in cases:
                    seq = sk.next_seq()
                    flags = NLM_F_REQUEST | (NLM_F_DUMP if dump else NLM_F_ACK)
                    data = nlmsg(fam, flags, seq, 0, GENLHDR.pack(cmd, 1, 0) + body)
                    got, _p = sk.exchange(data, seq)
                    code = None
                    for t, _f, _s, _pid, raw in got:
                        if t in (NLMSG_ERROR, NLMSG_DONE):
                            code = -struct.unpack_from("=i", raw, 16)[0]
                        elif t == fam:
                            code = code or 0
                    res["errs"].append([cmd, dump, code])
                for g, gid in groups.items():
                    try:
                        sk.sock.setsockopt(SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, gid)
                        res["groups"][g] = 0
                    except OSError as e:
                        res["groups"][g] = e.errno
                # a user namespace's CAP_NET_ADMIN is not the host's
                # (where unprivileged user namespaces are allowed)
                libc = ctypes.CDLL(None, use_errno=True)
                try:
                    if libc.unshare(0x10000000):        # CLONE_NEWUSER
                        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWUSER)")
                    sk2 = Sock(timeout=10)
                    seq = sk2.next_seq()
                    body = cases[0][2]
                    got, _p = sk2.exchange(nlmsg(fam, NLM_F_REQUEST | NLM_F_ACK, seq, 0,
                                                 GENLHDR.pack(cases[0][0], 1, 0) + body), seq)
                    res["userns"] = [-struct.unpack_from("=i", raw, 16)[0]
                                     for t, _f, _s, _p2, raw in got if t == NLMSG_ERROR]
                except OSError as e:
                    res["userns"] = f"unshare: {e}"
            except BaseException as e:      # noqa: BLE001
                res["error"] = repr(e)
            os.write(w, json.dumps(res).encode())
            os._exit(0)
        os.close(w)
        res = _child_result(pid, r)
        self.sent += len(cases) + 1
        if res.get("error"):
            self.finding("perm", f"unprivileged child failed: {res['error']}")
        for cmd, dump, code in res.get("errs", []):
            self.errnos[errno.errorcode.get(code, str(code)) if code else "ok"] += 1
            if code != errno.EPERM:
                self.finding("perm", f"uid {NOBODY}: {self.spec.cmd_names[cmd]}"
                             f"{' dump' if dump else ''} got {code}, not EPERM")
        for g, e in res.get("groups", {}).items():
            if e != errno.EPERM:
                self.finding("perm", f"uid {NOBODY} joined multicast group {g!r} ({e})")
        if isinstance(res.get("userns"), list) and res["userns"] != [errno.EPERM]:
            self.finding("perm", f"root of a user namespace got {res['userns']}, not EPERM")
        self.unpriv = res
        if victim is not None:
            self.simple("VGPU_CMD_SLICE_GET", victim, expect="ok")

    def phase_concurrent(self, seconds: float, threads: int = 3, procs: int = 2) -> None:
        """Several threads and processes create, change, delete and dump
        the same few slice ids at once; every reply is checked; afterwards
        GET, the dump and the nodes agree."""
        ids = self.pool[:4]
        for sid in ids:
            if sid in self.model:
                self.delete(sid)
        self.model = {k: v for k, v in self.model.items() if k not in ids}
        stop = time.monotonic() + seconds
        seed = self.rng.randrange(1 << 30)

        def worker(k: int, out: list | None = None):
            rng = random.Random(seed + k)
            sk = Sock(timeout=10)
            n = 0
            try:
                while time.monotonic() < stop:
                    sid = rng.choice(ids)
                    op = rng.choice(["new", "new", "del", "delf", "set", "get", "dump", "audit", "bad"])
                    A = self.D
                    if op == "new":
                        m = rng.choice(self.real_minors)
                        c = self.msg(self.C["VGPU_CMD_SLICE_NEW"],
                                     put_int(A["VGPU_A_SLICE_ID"], "u32", sid) +
                                     nla(A["VGPU_A_SLICE_NAME"], f"{NAME_PREFIX}c{k}".encode() + b"\0") +
                                     nest(A["VGPU_A_SLICE_GPUS"], [nest(A["VGPU_A_GPU"], [
                                         put_int(A["VGPU_GPU_A_REAL_MINOR"], "u32", m),
                                         put_int(A["VGPU_GPU_A_MEM_LIMIT"], "u64", rng.randrange(1 << 34))])]),
                                     sk=sk, desc="conc new", expect="any")
                    elif op in ("del", "delf"):
                        extra = put_int(A["VGPU_A_SLICE_FLAGS"], "u32", 1) if op == "delf" else b""
                        c = self.msg(self.C["VGPU_CMD_SLICE_DEL"], put_int(A["VGPU_A_SLICE_ID"], "u32", sid) + extra,
                                     sk=sk, desc="conc del")
                    elif op == "set":
                        c = self.msg(self.C["VGPU_CMD_SLICE_SET"], put_int(A["VGPU_A_SLICE_ID"], "u32", sid) +
                                     nest(A["VGPU_A_SLICE_GPUS"], [nest(A["VGPU_A_GPU"], [
                                         put_int(A["VGPU_GPU_A_INDEX"], "u32", 0),
                                         put_int(A["VGPU_GPU_A_MEM_LIMIT"], "u64", rng.randrange(1 << 34))])]) +
                                     put_int(A["VGPU_A_SLICE_MAX_CHANNELS"], "u32", rng.randrange(64)),
                                     sk=sk, desc="conc set")
                    elif op == "get":
                        c = self.msg(self.C["VGPU_CMD_SLICE_GET"], put_int(A["VGPU_A_SLICE_ID"], "u32", sid),
                                     sk=sk, desc="conc get")
                    elif op == "audit":
                        c = self.msg(self.C["VGPU_CMD_AUDIT_GET"], put_int(A["VGPU_A_SLICE_ID"], "u32", sid),
                                     flags=NLM_F_REQUEST | NLM_F_DUMP, sk=sk, desc="conc audit")
                    elif op == "bad":
                        c = self.msg(self.C["VGPU_CMD_SLICE_NEW"], put_int(A["VGPU_A_SLICE_ID"], "u32", sid) +
                                     nest(A["VGPU_A_SLICE_GPUS"], [nest(A["VGPU_A_GPU"], [
                                         put_int(A["VGPU_GPU_A_REAL_MINOR"], "u32", 0)])]),
                                     sk=sk, desc="conc bad new", expect="err", errnos={errno.EINVAL})
                    else:
                        c = self.msg(self.C["VGPU_CMD_SLICE_GET"], b"", flags=NLM_F_REQUEST | NLM_F_DUMP,
                                     sk=sk, desc="conc dump")
                    o = self.send(c, sk, check_model=False)
                    if op == "new" and o.err == 0:
                        with self.lock:
                            self.made.add(sid)
                    if o.err == errno.EBUSY:
                        self.finding("conc", f"{op}: EBUSY with no files open", c)
                    n += 1
            finally:
                sk.close()
            if out is not None:
                out.append(n)

        pids = []
        for k in range(procs):
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(r)
                self.findings, self.nfindings, self.sent = [], 0, 0
                self.errnos = Counter()
                try:
                    worker(100 + k)
                except BaseException as e:      # noqa: BLE001
                    self.finding("conc", f"worker process: {e!r}")
                os.write(w, json.dumps({"f": self.findings, "n": self.nfindings, "sent": self.sent,
                                        "errnos": self.errnos}).encode())
                os._exit(0)
            os.close(w)
            pids.append((pid, r))
        ths = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
        for t in ths:
            t.start()
        for t in ths:
            t.join()
        for pid, r in pids:
            res = _child_result(pid, r)
            self.sent += res.get("sent", 0)
            self.errnos.update(res.get("errnos", {}))
            for f in res.get("f", []):
                self.findings.append(f) if len(self.findings) < 50 else None
            self.nfindings += res.get("n", 0)
        # GET, dump and nodes agree
        dumped = {s["id"] for s in self.dump_slices(self.sk)}
        for sid in ids:
            o = self.simple("VGPU_CMD_SLICE_GET", sid, check_model=False)
            live = o.err == 0
            if live != (sid in dumped):
                self.finding("conc", f"slice {sid}: GET says {'live' if live else o.err}, the dump "
                             f"{'lists' if sid in dumped else 'lacks'} it")
            if live:
                self.made.add(sid)
                self.model[sid] = len(slices_of(o.msgs)[0]["gpus"])
                node = Path(f"/dev/vgpu/{sid}/nvidiactl")
                if Path("/dev/vgpu").exists() and not wait(node.exists, 2.0):
                    self.finding("conc", f"live slice {sid} has no {node}")
            self.delete(sid)
            self.model.pop(sid, None)
        for sid in ids:
            node = Path(f"/dev/vgpu/{sid}")
            if not wait(lambda: not node.exists(), 3.0):
                self.finding("conc", f"deleted slice {sid} still has {node}")

    def phase_held_open(self) -> None:
        """A slice deleted while a process holds its nodes open: EBUSY
        unless forced; forced, it leaves the API at once, the files keep
        working and are counted until closed; its id can be reused at once;
        SET/GET/dump hammering meanwhile never shows used > quota."""
        sid = self.pick_id(fresh=True)
        m = self.real_minors[0]
        o = self.new_slice(sid, [(m, 64 << 20)])
        if o.err:
            return
        self.model[sid] = 1
        d = Path(f"/dev/vgpu/{sid}")
        if not wait((d / "nvidiactl").exists, 3.0):
            self.finding("held-open", f"no {d}/nvidiactl")
            return
        fds = []
        for n in ("nvidiactl", "nvidia0", "nvidia-uvm"):
            try:
                fds.append(os.open(d / n, os.O_RDWR | os.O_CLOEXEC))
            except OSError as e:
                if n != "nvidia-uvm":
                    self.finding("held-open", f"open {d / n}: {e}")
        client = alloc = None
        try:
            client = RmClient(str(d))
            g = client.open_gpus()[0]
            self.allocating = True
            alloc = g.alloc(8 << 20)
        except Exception as e:                       # noqa: BLE001
            self.log(f"held-open: no RM client ({e!r}); fds only")
        o = self.simple("VGPU_CMD_SLICE_GET", sid, expect="ok")
        ss = slices_of(o.msgs)
        if ss and ss[0]["open_files"] < len(fds):
            self.finding("held-open", f"open_files {ss[0]['open_files']} < {len(fds)} fds")
        self.delete(sid, force=False, expect="err", errnos={errno.EBUSY})
        # hammer: SET (same limit) / GET / dump while another thread force-deletes
        stop = time.monotonic() + 1.5
        A = self.D

        def hammer():
            sk = Sock(timeout=10)
            try:
                while time.monotonic() < stop:
                    c = self.msg(self.C["VGPU_CMD_SLICE_SET"], put_int(A["VGPU_A_SLICE_ID"], "u32", sid) +
                                 nest(A["VGPU_A_SLICE_GPUS"], [nest(A["VGPU_A_GPU"], [
                                     put_int(A["VGPU_GPU_A_INDEX"], "u32", 0),
                                     put_int(A["VGPU_GPU_A_MEM_LIMIT"], "u64", 64 << 20)])]), sk=sk,
                                 desc="held set")
                    self.send(c, sk, check_model=False)
                    self.dump_slices(sk)
            finally:
                sk.close()
        t = threading.Thread(target=hammer)
        t.start()
        time.sleep(0.5)
        self.delete(sid, force=True, expect="ok")
        self.model.pop(sid, None)
        t.join()
        self.simple("VGPU_CMD_SLICE_GET", sid, expect="err", errnos={errno.ENOENT})
        if any(s["id"] == sid for s in self.dump_slices(self.sk)):
            self.finding("held-open", f"force-deleted slice {sid} still dumped")
        try:
            fd = os.open(d / "nvidiactl", os.O_RDWR | os.O_CLOEXEC)
            os.close(fd)
            self.finding("held-open", f"{d}/nvidiactl opens after the force delete")
        except OSError:
            pass
        # the id again, while the old slice's files are open
        o = self.new_slice(sid, [(m, 32 << 20)], expect="ok")
        if o.err == 0:
            self.model[sid] = 1
            o = self.simple("VGPU_CMD_SLICE_GET", sid, expect="ok")
            ss = slices_of(o.msgs)
            if ss and (ss[0]["open_files"] or ss[0]["gpus"][0]["used"]):
                self.finding("held-open", f"reused id {sid}: the new slice shows the old one's "
                             f"files/use: {ss[0]['open_files']} {ss[0]['gpus'][0]['used']}")
        st = read_counters()
        if st.get("files", 0) < len(fds):
            self.finding("held-open", f"debugfs files {st.get('files')} < {len(fds)} open")
        try:
            if client is not None:
                if alloc is not None:
                    client.free(alloc)
                client.close()
        except Exception as e:                       # noqa: BLE001
            self.finding("held-open", f"the old slice's client failed after the delete: {e!r}")
        for fd in fds:
            os.close(fd)
        self.allocating = False
        self.delete(sid, force=False, expect="ok")
        self.model.pop(sid, None)

    def phase_huge_dump(self, n: int) -> None:
        """n slices with long names on every GPU, dumped with a small
        receive buffer (many parts) and while they are deleted; an
        abandoned dump; each one's AUDIT_GET."""
        A, made = self.D, []
        base = 0x6E6D0000 + (self.seed % 0x100) * 0x400
        for i in range(n):
            sid = base + i
            if sid in self.start_slices:
                continue
            nm = (f"{NAME_PREFIX}{i}-" + "z" * 200)[:A["VGPU_SLICE_NAME_MAX"] - 1]
            o = self.new_slice(sid, [(m, 1 << 20) for m in self.real_minors], name=nm)
            if o.err == 0:
                made.append(sid)
                self.model[sid] = len(self.real_minors)
            elif o.err == errno.ENOSPC:
                break
        small = Sock(timeout=10, rcvbuf=4096)
        try:
            got = [s["id"] for s in self.dump_slices(small, barrier=False)]
            missing = set(made) - set(got)
            if missing:
                self.finding("dump", f"{len(missing)} of {len(made)} slices missing from a dump")
        finally:
            small.close()
        # abandoned dumps: SLICE_GET and AUDIT_GET, socket closed mid-way
        for cmd, body in ((self.C["VGPU_CMD_SLICE_GET"], b""),
                          (self.C["VGPU_CMD_AUDIT_GET"], put_int(A["VGPU_A_SLICE_ID"], "u32", made[0]) if made else b"")):
            sk = Sock(timeout=5, rcvbuf=4096)
            seq = sk.next_seq()
            sk.sock.send(nlmsg(self.family, NLM_F_REQUEST | NLM_F_DUMP, seq, 0,
                               GENLHDR.pack(cmd, 1, 0) + body))
            try:
                sk.recv_datagram()
            except Timeout:
                self.finding("dump", "abandoned dump: not even a first part")
            sk.close()
            self.sent += 1
        for sid in made[: min(len(made), 20)]:
            c = self.msg(self.C["VGPU_CMD_AUDIT_GET"], put_int(A["VGPU_A_SLICE_ID"], "u32", sid),
                         flags=NLM_F_REQUEST | NLM_F_DUMP, desc="audit of a huge-dump slice",
                         expect="ok")
            self.send(c)
        # dump while deleting
        stop = threading.Event()
        seen_dups = []

        def dumper():
            sk = Sock(timeout=10, rcvbuf=4096)
            try:
                while not stop.is_set():
                    ids = [s["id"] for s in self.dump_slices(sk, barrier=False)]
                    if len(ids) != len(set(ids)):
                        seen_dups.append(ids)
            finally:
                sk.close()
        t = threading.Thread(target=dumper)
        t.start()
        for sid in made:
            self.delete(sid)
            self.model.pop(sid, None)
        stop.set()
        t.join()
        if seen_dups:
            self.finding("dump", "a dump listed a slice twice while slices were deleted")

    def phase_api_works(self) -> None:
        """The family still works: create, get, set, delete a slice."""
        sid = self.pick_id(fresh=True)
        m = self.real_minors[-1]
        o = self.new_slice(sid, [(m, 128 << 20)])
        if o.err:
            self.finding("api", f"after fuzzing, NEW fails: {o.err} {o.extack!r}")
            return
        self.model[sid] = 1
        o = self.simple("VGPU_CMD_SLICE_GET", sid, expect="ok")
        s = slices_of(o.msgs)
        if not s or s[0]["gpus"][0]["limit"] != 128 << 20 or s[0]["gpus"][0]["real_minor"] != m:
            self.finding("api", f"after fuzzing, GET answers {s}")
        c = self.msg(self.C["VGPU_CMD_SLICE_SET"], put_int(self.D["VGPU_A_SLICE_ID"], "u32", sid) +
                     nest(self.D["VGPU_A_SLICE_GPUS"], [nest(self.D["VGPU_A_GPU"], [
                         put_int(self.D["VGPU_GPU_A_INDEX"], "u32", 0),
                         put_int(self.D["VGPU_GPU_A_MEM_LIMIT"], "u64", 64 << 20)])]),
                     desc="api set", sid=sid, valid=True, expect="ok", gpus={0: 64 << 20})
        self.send(c)
        self.delete(sid, force=False, expect="ok")
        self.model.pop(sid, None)
        self.simple("VGPU_CMD_SLICE_GET", sid, expect="err", errnos={errno.ENOENT})

    def cleanup(self) -> None:
        """Delete every slice this run made; then the slices, the debugfs
        counters and the schedulers are what they were at the start."""
        for s in self.dump_slices(self.sk):
            if s["id"] in self.start_slices:
                continue
            if s["id"] in self.made or s["name"].startswith(NAME_PREFIX):
                self.delete(s["id"])
            else:
                self.finding("cleanup", f"slice {s['id']} ({s['name']!r}) appeared, not made "
                             f"by this run's NEWs")
                self.delete(s["id"])
        self.model.clear()
        left = {s["id"] for s in self.dump_slices(self.sk)}
        if left != set(self.start_slices):
            self.finding("cleanup", f"slices after cleanup {sorted(left)[:10]} != at start "
                         f"{sorted(self.start_slices)[:10]}")
        A = self.D
        for m, (period, layers) in self.start_sched.items():
            c = self.msg(self.C["VGPU_CMD_SCHED_SET"], put_int(A["VGPU_A_SCHED_REAL_MINOR"], "u32", m) +
                         put_int(A["VGPU_A_SCHED_PERIOD_US"], "u32", period) +
                         put_int(A["VGPU_A_SCHED_LAYERS"], "u32", layers), desc="restore sched",
                         expect="ok")
            self.send(c)
        now = self.dump_sched()
        for m, v in self.start_sched.items():
            if now.get(m) != v:
                self.finding("cleanup", f"scheduler {m}: {now.get(m)} != {v} at start")
        last = {}

        def same():
            nonlocal last
            last = read_counters()
            return all(last.get(k) == v for k, v in self.start_state.items()
                       if k != "calls_broken")
        if self.start_state and not wait(same, 5.0):
            diff = {k: (v, last.get(k)) for k, v in self.start_state.items() if last.get(k) != v}
            self.finding("cleanup", f"vgpu debugfs counters (start, now) differ: {diff}")

    def close(self) -> None:
        if self.cg_fd is not None:
            os.close(self.cg_fd)
        self.sk.close()


def wait(pred, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while True:
        if pred():
            return True
        if time.monotonic() > end:
            return False
        time.sleep(0.05)


def read_counters() -> dict[str, int]:
    """vgpu.ko's debugfs top-level counters ("key value" lines)."""
    out = {}
    try:
        for line in VSTATE.read_text().splitlines():
            f = line.split()
            if len(f) == 2 and f[0] != "slice":
                try:
                    out[f[0]] = int(f[1])
                except ValueError:
                    pass
    except OSError:
        pass
    return out


# ===================================================================== run
def run(seed: int, messages: int | None = None, seconds: float | None = None,
        log=None, huge: int = 64, concurrent_s: float | None = None) -> dict:
    """Fuzz vgpu.ko's family: systematic cases, then random ones until
    `messages` or `seconds` (default: 2000 messages), the unprivileged,
    concurrent, held-open and huge-dump phases, the check that the API
    still works, and the cleanup.  Returns the summary (see the CLI)."""
    if messages is None and seconds is None:
        messages = 2000
    t0 = time.monotonic()
    fz = Fuzzer(seed, log=log)
    phases = {}
    try:
        def timed(name, fn, *a):
            t = time.monotonic()
            if log:
                log(f"phase {name} at {t - t0:.1f}s, {fz.sent} messages so far")
            n = fz.sent
            fn(*a)
            phases[name] = {"messages": fz.sent - n, "seconds": round(time.monotonic() - t, 2)}
        timed("systematic", fz.phase_systematic)
        budget_s = seconds if seconds is not None else 1e9
        conc = concurrent_s if concurrent_s is not None else \
            (min(5.0, budget_s * 0.15) if seconds is not None else 3.0)
        # what follows the random phase takes about 10 s under emulation
        reserve = min(10.0, budget_s * 0.35) if seconds is not None else 0.0
        random_deadline = t0 + max(budget_s - conc - reserve, 1.0) if seconds is not None else 1e18
        timed("random", fz.phase_random, random_deadline, messages if messages is not None else 1 << 62)
        timed("unprivileged", fz.phase_unprivileged)
        timed("concurrent", fz.phase_concurrent, conc)
        timed("held_open", fz.phase_held_open)
        timed("huge_dump", fz.phase_huge_dump, huge)
        timed("api_works", fz.phase_api_works)
    except Exception as e:          # noqa: BLE001
        import traceback
        fz.finding("crash", f"the fuzzer itself: {e!r}\n{traceback.format_exc()[-1500:]}")
    finally:
        try:
            fz.cleanup()
        finally:
            fz.close()
    dt = time.monotonic() - t0
    return {"seed": seed, "messages": fz.sent, "seconds": round(dt, 2),
            "messages_per_s": round(fz.sent / dt, 1) if dt else 0.0,
            "errnos": dict(sorted(fz.errnos.items(), key=lambda kv: -kv[1])),
            "mutations": dict(sorted(fz.categories.items())), "phases": phases,
            "unprivileged": {"userns": fz.unpriv.get("userns"), "groups": fz.unpriv.get("groups")},
            "findings": fz.findings, "nfindings": fz.nfindings}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--messages", type=int, help="random messages after the systematic ones")
    g.add_argument("--seconds", type=float, help="time budget of the whole run")
    ap.add_argument("--huge", type=int, default=64, help="slices of the huge-dump phase")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args(argv)
    log = (lambda m: print(m, file=sys.stderr)) if a.verbose else None
    try:
        res = run(a.seed, messages=a.messages, seconds=a.seconds, log=log, huge=a.huge)
    except OSError as e:        # no vgpu.ko (family not found), not root ...
        print(json.dumps({"seed": a.seed, "error": str(e)}))
        return 2
    print(json.dumps(res))
    return 1 if res["nfindings"] else 0


if __name__ == "__main__":
    sys.exit(main())
