"""The netlink client of vgpu.ko: create, change, destroy and list slices, and
listen to the module's events.

The API is the generic-netlink family "vgpu" of kmod/include/uapi/vgpu.h
(mirrored in vgpu/abi/uapi.py).  Messages are declared with pyroute2's genlmsg /
nla classes (``vgpumsg``), which do all encoding and decoding; the socket I/O
is a plain blocking AF_NETLINK socket owned here, so the client is synchronous,
has no event loop of its own, and can be driven from a worker thread of the
trio daemon (or the daemon can reuse ``vgpumsg`` on its own fd).

    with VgpuKernel() as k:
        s = k.slice_new(7, gpus=[(0, 4 << 30)], name="ctr-abc")
        k.slice_set(7, limits={0: 2 << 30})
        k.slice_set(7, compute={0: Compute(U.VGPU_COMPUTE_FIXED, 3000)})
        k.sched_set(0, period_us=50_000, layers=U.VGPU_SCHED_L_ALL)
        k.slice_set(7, audit=True, allow=[(U.VGPU_AUDIT_CONTROL, 0x20800145)])
        rec = k.audit_get(7)        # AuditRecord: what the slice used, verdicts, counts
        for s in k.slices(): ...
        k.slice_del(7, force=True)

Errors: every refusal is a ``VgpuError`` (an OSError) carrying the errno and
the kernel's extack message (``.extack``), attribute offset and missing
attribute when the kernel sent them.  ``VgpuNotLoaded`` when the family does
not exist.  ``raw_request`` sends arbitrary, even malformed, attributes for
hostile-input tests.

What it may call: the kernel's netlink API only.  It never opens device nodes.
"""

from __future__ import annotations

import errno as _errno
import socket
import threading
from typing import Iterator

from pyroute2.netlink import ctrlmsg

from vgpu.abi import uapi
from vgpu.vgpuko.messages import (AuditRecord, Compute, Event, SchedInfo, Slice, _audit_attrs,
                                  _decode, audit_from_msgs,
                                  sched_from_msg, slice_from_msg, vgpumsg)
from vgpu.vgpuko.netlink import (CTRL_CMD_GETFAMILY, GENL_ID_CTRL, GENLHDR, NLHDR, NLM_F_ACK,
                                 NLM_F_DUMP, NLM_F_MULTI, NLM_F_REQUEST, NLMSG_DONE, NLMSG_ERROR,
                                 NLMSG_NOOP, NLMSG_OVERRUN, TRACE_RCVBUF, GenlSocket, VgpuError,
                                 VgpuNotLoaded, encode_attrs, parse_error)
from vgpu.vgpuko.streams import EventStream, TraceStream


def _resolve_family(gs: GenlSocket, name: str) -> tuple[int, dict[str, int]]:
    msg = ctrlmsg()
    msg["cmd"] = CTRL_CMD_GETFAMILY
    msg["version"] = 1
    msg["attrs"].append(["CTRL_ATTR_FAMILY_NAME", name])
    msg.encode()
    payload = bytes(msg.data[NLHDR.size:])
    seq = gs.send(GENL_ID_CTRL, NLM_F_REQUEST, payload)
    while True:
        for mtype, flags, mseq, data in gs.recv_msgs():
            if mseq != seq:
                continue
            if mtype == NLMSG_ERROR:
                err = parse_error(flags, data, "CTRL_CMD_GETFAMILY")
                if err is None:
                    continue
                if err.errno == _errno.ENOENT:
                    raise VgpuNotLoaded()
                raise err
            reply = ctrlmsg(data)
            reply.decode()
            groups = {g.get_attr("CTRL_ATTR_MCAST_GRP_NAME"): g.get_attr("CTRL_ATTR_MCAST_GRP_ID")
                      for g in reply.get_attr("CTRL_ATTR_MCAST_GROUPS", [])}
            return reply.get_attr("CTRL_ATTR_FAMILY_ID"), groups



# ------------------------------------------------------------------ client
class VgpuKernel:
    """A synchronous client of vgpu.ko's netlink family.

    Thread-safe (one request at a time per instance).  ``timeout`` bounds
    every wait for the kernel's answer (seconds; None waits forever)."""

    def __init__(self, timeout: float | None = 10.0):
        self.timeout = timeout
        self._lock = threading.Lock()
        self._gs = GenlSocket(timeout)
        try:
            self.family_id, self.mcast_groups = _resolve_family(self._gs, uapi.VGPU_GENL_NAME)
        except BaseException:
            self._gs.close()
            raise

    def close(self) -> None:
        self._gs.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def is_current(self) -> bool:
        """Whether the family this client resolved is still the one vgpu.ko
        has registered: one CTRL_CMD_GETFAMILY round trip.  False when the
        module is gone (VgpuNotLoaded) or was loaded again (a new family id:
        genl allocates ids cyclically, so a reload gets another one)."""
        with self._lock:
            try:
                fid, _ = _resolve_family(self._gs, uapi.VGPU_GENL_NAME)
            except VgpuNotLoaded:
                return False
            except socket.timeout:
                raise VgpuError(_errno.ETIMEDOUT, f"no answer from nlctrl within "
                                f"{self.timeout}s", op="GETFAMILY") from None
        return fid == self.family_id

    # -------------------------------------------------------- plumbing
    def _transact(self, cmd: int, payload_attrs: bytes, flags: int, *, op: str,
                  version: int = uapi.VGPU_GENL_VERSION, raw_payload: bytes | None = None,
                  mtype: int | None = None) -> list:
        """Send one request and collect replies until the ACK / DONE / error."""
        payload = raw_payload if raw_payload is not None else \
            GENLHDR.pack(cmd, version, 0) + payload_attrs
        dump = bool(flags & NLM_F_DUMP)
        out = []
        with self._lock:
            seq = self._gs.send(self.family_id if mtype is None else mtype, flags, payload)
            while True:
                try:
                    msgs = self._gs.recv_msgs()
                except socket.timeout:
                    raise VgpuError(_errno.ETIMEDOUT, f"no answer from vgpu.ko within "
                                    f"{self.timeout}s", op=op) from None
                for t, f, s, data in msgs:
                    if s != seq:
                        continue            # a late answer to an abandoned request
                    if t == NLMSG_ERROR:
                        err = parse_error(f, data, op)
                        if err is not None:
                            raise err
                        return out          # the ACK
                    if t == NLMSG_DONE:
                        err = parse_error(f, data, op) if len(data) >= NLHDR.size + 4 else None
                        if err is not None:
                            raise err
                        return out
                    if t in (NLMSG_NOOP, NLMSG_OVERRUN):
                        continue
                    out.append(_decode(data))
                    if not dump and not (flags & NLM_F_ACK) and not (f & NLM_F_MULTI):
                        return out

    def _request(self, cmd: int, attrs: list, *, dump: bool = False) -> list:
        msg = vgpumsg()
        msg["cmd"] = cmd
        msg["version"] = uapi.VGPU_GENL_VERSION
        msg["attrs"] = attrs
        msg["header"]["type"] = self.family_id
        msg.encode()
        payload = bytes(msg.data[NLHDR.size + GENLHDR.size:])
        flags = NLM_F_REQUEST | (NLM_F_DUMP if dump else NLM_F_ACK)
        return self._transact(cmd, payload, flags, op=uapi.CMD_NAMES.get(cmd, str(cmd))[5:])

    def raw_request(self, cmd: int, attrs=(), *, flags: int | None = None,
                    version: int = uapi.VGPU_GENL_VERSION, payload: bytes | None = None,
                    dump: bool = False, mtype: int | None = None) -> list:
        """Send cmd with arbitrary attributes (Nla objects or (type, value)
        pairs, see encode_attrs), or an arbitrary genl payload (header
        included) with payload=.  Returns the decoded replies (vgpumsg);
        raises VgpuError with the kernel's errno and extack."""
        if flags is None:
            flags = NLM_F_REQUEST | (NLM_F_DUMP if dump else NLM_F_ACK)
        return self._transact(cmd, encode_attrs(attrs), flags, op=f"raw cmd {cmd}",
                              version=version, raw_payload=payload, mtype=mtype)

    # -------------------------------------------------------- commands
    def slice_new(self, id: int, gpus, name: str | None = None,
                  uvm_policy: int | None = None, flags: int | None = None,
                  cgroup_fd: int | None = None, compute: dict | None = None,
                  max_channels: int | None = None, audit: bool | None = None,
                  allow: list[tuple[int, int]] | None = None,
                  trace: bool | None = None) -> Slice:
        """Create slice id with gpus = [(real_minor, mem_limit[, gpu_id]), ...];
        cgroup_fd: an open fd of a cgroup v2 directory to bind the slice to;
        compute: {container GPU index: Compute | (policy, bp[, priority]) | dict};
        max_channels: channels the slice may hold on each of its GPUs (0: no
        cap; None: the kernel's default); audit: audit mode (None: the
        kernel's default, off); allow: its allow-list, [(enum
        vgpu_audit_kind, number), ...] (None: none); trace: send its calls on
        the "trace" group (None: off).  A bad allow entry raises ValueError
        before anything is sent."""
        tail = _audit_attrs(audit, allow, trace)
        compute = {int(i): Compute.of(c) for i, c in (compute or {}).items()}
        entries = []
        for i, g in enumerate(gpus):
            real_minor, limit = g[0], g[1]
            ga = [["VGPU_GPU_A_REAL_MINOR", int(real_minor)],
                  ["VGPU_GPU_A_MEM_LIMIT", int(limit)]]
            if len(g) > 2 and g[2] is not None:
                ga.append(["VGPU_GPU_A_GPU_ID", int(g[2])])
            if i in compute:
                ga += compute[i].attrs()
            entries.append(["VGPU_A_GPU", {"attrs": ga}])
        attrs = [["VGPU_A_SLICE_ID", int(id)], ["VGPU_A_SLICE_GPUS", {"attrs": entries}]]
        if name is not None:
            attrs.append(["VGPU_A_SLICE_NAME", name])
        if uvm_policy is not None:
            attrs.append(["VGPU_A_SLICE_UVM_POLICY", int(uvm_policy)])
        if flags is not None:
            attrs.append(["VGPU_A_SLICE_FLAGS", int(flags)])
        if cgroup_fd is not None:
            attrs.append(["VGPU_A_SLICE_CGROUP_FD", int(cgroup_fd)])
        if max_channels is not None:
            attrs.append(["VGPU_A_SLICE_MAX_CHANNELS", int(max_channels)])
        attrs += tail
        replies = self._request(uapi.VGPU_CMD_SLICE_NEW, attrs)
        for r in replies:
            return slice_from_msg(r)
        return self.slice_get(id)

    def slice_set(self, id: int, limits: dict[int, int] | None = None,
                  uvm_policy: int | None = None, cgroup_fd: int | None = None,
                  compute: dict | None = None,
                  max_channels: int | None = None, audit: bool | None = None,
                  allow: list[tuple[int, int]] | None = None,
                  trace: bool | None = None) -> Slice | None:
        """Change limits ({container GPU index: bytes}), compute settings
        ({index: Compute | (policy, bp[, priority]) | dict}), the UVM policy,
        the bound cgroup (cgroup_fd: an open fd of a cgroup v2 directory),
        the per-GPU channel cap (max_channels, 0: no cap), audit mode
        (audit) and/or the allow-list (allow: [(kind, number), ...] replaces
        it; [] clears it) and/or tracing (trace).  None leaves a setting as
        it is."""
        tail = _audit_attrs(audit, allow, trace)
        attrs = [["VGPU_A_SLICE_ID", int(id)]]
        limits = {int(i): b for i, b in (limits or {}).items()}
        compute = {int(i): Compute.of(c) for i, c in (compute or {}).items()}
        if limits or compute:
            entries = []
            for i in sorted(set(limits) | set(compute)):
                ga = [["VGPU_GPU_A_INDEX", i]]
                if i in limits:
                    ga.append(["VGPU_GPU_A_MEM_LIMIT", int(limits[i])])
                if i in compute:
                    ga += compute[i].attrs()
                entries.append(["VGPU_A_GPU", {"attrs": ga}])
            attrs.append(["VGPU_A_SLICE_GPUS", {"attrs": entries}])
        if uvm_policy is not None:
            attrs.append(["VGPU_A_SLICE_UVM_POLICY", int(uvm_policy)])
        if cgroup_fd is not None:
            attrs.append(["VGPU_A_SLICE_CGROUP_FD", int(cgroup_fd)])
        if max_channels is not None:
            attrs.append(["VGPU_A_SLICE_MAX_CHANNELS", int(max_channels)])
        attrs += tail
        replies = self._request(uapi.VGPU_CMD_SLICE_SET, attrs)
        return slice_from_msg(replies[0]) if replies else None

    def slice_del(self, id: int, force: bool = False) -> None:
        attrs = [["VGPU_A_SLICE_ID", int(id)]]
        if force:
            attrs.append(["VGPU_A_SLICE_FLAGS", uapi.VGPU_SLICE_F_FORCE])
        self._request(uapi.VGPU_CMD_SLICE_DEL, attrs)

    def slice_get(self, id: int) -> Slice:
        replies = self._request(uapi.VGPU_CMD_SLICE_GET, [["VGPU_A_SLICE_ID", int(id)]])
        if not replies:
            raise VgpuError(_errno.EPROTO, "SLICE_GET answered without a slice", op="SLICE_GET")
        return slice_from_msg(replies[0])

    def slices(self) -> list[Slice]:
        """Every slice, with its usage (a dump)."""
        return [slice_from_msg(m) for m in self._request(uapi.VGPU_CMD_SLICE_GET, [], dump=True)]

    # ----------------------------------------------------------- audit
    def audit_get(self, slice_id: int) -> AuditRecord:
        """A slice's audit record (VGPU_CMD_AUDIT_GET, a dump of one slice:
        the kernel snapshots the record and sends its items over as many
        messages as they need).  ENOENT: no such slice."""
        msgs = self._request(uapi.VGPU_CMD_AUDIT_GET, [["VGPU_A_SLICE_ID", int(slice_id)]],
                             dump=True)
        return audit_from_msgs(msgs, int(slice_id))

    # ------------------------------------------------------- scheduler
    def sched_set(self, real_minor: int, period_us: int | None = None,
                  layers: int | None = None) -> SchedInfo:
        """Set a real GPU's scheduling period and/or layers (VGPU_SCHED_L_*);
        creates its scheduler if it has none yet."""
        attrs = [["VGPU_A_SCHED_REAL_MINOR", int(real_minor)]]
        if period_us is not None:
            attrs.append(["VGPU_A_SCHED_PERIOD_US", int(period_us)])
        if layers is not None:
            attrs.append(["VGPU_A_SCHED_LAYERS", int(layers)])
        replies = self._request(uapi.VGPU_CMD_SCHED_SET, attrs)
        return sched_from_msg(replies[0]) if replies else self.sched_get(real_minor)

    def sched_get(self, real_minor: int) -> SchedInfo:
        replies = self._request(uapi.VGPU_CMD_SCHED_GET,
                                [["VGPU_A_SCHED_REAL_MINOR", int(real_minor)]])
        if not replies:
            raise VgpuError(_errno.EPROTO, "SCHED_GET answered without a scheduler",
                            op="SCHED_GET")
        return sched_from_msg(replies[0])

    def scheds(self) -> list[SchedInfo]:
        """Every real GPU's scheduler (a dump)."""
        return [sched_from_msg(m) for m in self._request(uapi.VGPU_CMD_SCHED_GET, [], dump=True)]

    # ---------------------------------------------------------- events
    def subscribe(self, timeout: float | None = None) -> "EventStream":
        """A new socket joined to the events group (join before acting, so
        nothing is missed)."""
        gid = self.mcast_groups.get(uapi.VGPU_GENL_MCGRP_EVENTS)
        if gid is None:
            raise VgpuError(_errno.ENOENT, f"family '{uapi.VGPU_GENL_NAME}' has no multicast group "
                            f"'{uapi.VGPU_GENL_MCGRP_EVENTS}'", op="subscribe")
        return EventStream(self.family_id, gid, timeout)

    def trace_stream(self, timeout: float | None = None,
                     rcvbuf: int = TRACE_RCVBUF) -> "TraceStream":
        """A new socket joined to the "trace" group: the calls of every
        slice whose VGPU_A_SLICE_TRACE is on (join before turning it on)."""
        gid = self.mcast_groups.get(uapi.VGPU_GENL_MCGRP_TRACE)
        if gid is None:
            raise VgpuError(_errno.ENOENT, f"family '{uapi.VGPU_GENL_NAME}' has no multicast group "
                            f"'{uapi.VGPU_GENL_MCGRP_TRACE}' (vgpu.ko older than tracing)",
                            op="trace")
        return TraceStream(self.family_id, gid, timeout, rcvbuf)

    def events(self, timeout: float | None = None) -> Iterator[Event]:
        """Events as they come; stops after timeout seconds without one."""
        with self.subscribe(timeout) as es:
            yield from es
