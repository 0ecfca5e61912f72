"""Trace files: what a slice's processes asked of the driver (docs/trace.md).

One JSON object per line: a header, then one record per open, close, ioctl
and mmap, then optionally a trailer.  This module owns the format: it turns
the kernel's records (``vgpu.vgpuko.messages.TraceRecord``, or anything with the same
attributes) into JSON objects, adds NVIDIA's names and the NV_STATUS the
parameters carry back, and reads a file back with every field checked (a
trace may come from another machine: it is input like any other).

Standard library only: vgpuctl and vgpu-replay import it at start-up.
"""

from __future__ import annotations

import ctypes
import gzip
import json
from dataclasses import dataclass, field
from typing import Any, Iterable

from vgpu.abi import nvabi
from vgpu.abi import nvnames
from vgpu.abi import uapi

VERSION = 1
#: A record holds at most four 16 KiB blobs and MAX_LISTS lists of two
#: more each, in hex: 640 KiB.
MAX_LINE = 1 << 20
#: The most embedded lists one record carries ("lists").
MAX_LISTS = 8

NODE_CTL, NODE_UVM = "ctl", "uvm"


def node_name(node: int) -> str:
    """A minor relative to a slice's base -> ctl, uvm or gpuN."""
    if node == uapi.VGPU_MINOR_CTL:
        return NODE_CTL
    if node == uapi.VGPU_MINOR_UVM:
        return NODE_UVM
    return f"gpu{node - uapi.VGPU_MINOR_GPU0}"


def _status_offset(nr: int, uvm: bool, size: int) -> int | None:
    """Where the NV_STATUS the driver writes back lies in the top-level
    parameters, or None where they carry none (or it is not known here)."""
    if uvm:
        st = nvabi.UVM_PARAMS.get(nr)
        if st is None or ctypes.sizeof(st) != size:
            return None
        return st.rmStatus.offset
    entry = nvabi.ESCAPES.get(nr)
    if entry is None:
        return None
    st = entry[1]
    if nr == nvabi.NV_ESC_RM_ALLOC and size == ctypes.sizeof(nvabi.NVOS21_PARAMETERS):
        st = nvabi.NVOS21_PARAMETERS
    if nr == nvabi.NV_ESC_RM_ALLOC_MEMORY:
        return nvabi.NVOS02_PARAMETERS.status.offset
    if nr == nvabi.NV_ESC_RM_MAP_MEMORY:
        return nvabi.NVOS33_PARAMETERS.status.offset
    if not isinstance(st, type) or not issubclass(st, ctypes.Structure):
        return None
    if nr == nvabi.NV_ESC_STATUS_CODE:      # a GPU's state, not a call's status
        return None
    f = getattr(st, "status", None)
    if f is None or f.size != 4 or f.offset + 4 > size:
        return None
    return f.offset


def status_of(nr: int, uvm: bool, size: int, out: bytes | None) -> int | None:
    """The NV_STATUS in the parameters after the call, or None."""
    if not out:
        return None
    off = _status_offset(nr, uvm, size)
    if off is None or off + 4 > len(out):
        return None
    return int.from_bytes(out[off:off + 4], "little")


def _hex(b: bytes | None) -> str | None:
    return None if b is None else bytes(b).hex()


def record_json(rec) -> dict[str, Any]:
    """A kernel trace record -> the file's JSON object for it."""
    op = uapi.TRACE_OP_NAMES.get(rec.op, f"op{rec.op}")
    d: dict[str, Any] = {"seq": rec.seq, "t_ns": rec.time_ns, "dur_ns": rec.duration_ns,
                         "pid": rec.pid, "tid": rec.tid, "file": rec.file,
                         "node": node_name(rec.node), "op": op, "ret": rec.ret}
    if rec.op == uapi.VGPU_TRACE_OPEN:
        d["open_flags"] = rec.open_flags or 0
    elif rec.op == uapi.VGPU_TRACE_MMAP:
        prot = rec.prot or 0
        d.update(addr=rec.addr, length=rec.length, offset=rec.offset,
                 prot="".join(c for bit, c in ((uapi.VGPU_TRACE_PROT_READ, "r"),
                                               (uapi.VGPU_TRACE_PROT_WRITE, "w"),
                                               (uapi.VGPU_TRACE_PROT_SHARED, "s"))
                              if prot & bit))
    elif rec.op == uapi.VGPU_TRACE_IOCTL:
        uvm = rec.node == uapi.VGPU_MINOR_UVM
        nr = rec.nr or 0
        d["nr"] = nr
        d["name"] = nvnames.name("uvm" if uvm else "escape", nr)
        d["size"] = rec.size or 0
        if rec.item_kind is not None:
            kind = uapi.AUDIT_KIND_NAMES.get(rec.item_kind, str(rec.item_kind))
            d["item"] = {"kind": kind, "number": rec.item,
                         "name": nvnames.name(kind, rec.item or 0)}
        if rec.verdict is not None:
            d["verdict"] = uapi.AUDIT_VERDICT_NAMES.get(rec.verdict, str(rec.verdict))
        st = status_of(nr, uvm, d["size"], rec.args_out)
        if st is not None:
            d["status"] = st
            d["status_name"] = nvabi.status_name(st)
        for k in ("args_in", "args_out", "params_in", "params_out"):
            v = getattr(rec, k)
            if v is not None:
                d[{"args_in": "in", "args_out": "out"}.get(k, k)] = _hex(v)
        if rec.params_ptr is not None:
            d["params_ptr"] = rec.params_ptr
        if getattr(rec, "lists", None):
            d["lists"] = [{k: v for k, v in (("offset", off), ("ptr", ptr), ("in", _hex(bi)),
                                             ("out", _hex(bo))) if v is not None}
                          for off, ptr, bi, bo in rec.lists]
        if rec.fd_offset is not None and rec.fd_file is not None:
            d["fd"] = {"offset": rec.fd_offset, "file": rec.fd_file}
        fl = rec.flags or 0
        for bit, k in ((uapi.VGPU_TRACE_F_XFER, "xfer"), (uapi.VGPU_TRACE_F_TRUNCATED, "truncated"),
                       (uapi.VGPU_TRACE_F_UNREADABLE, "unreadable")):
            if fl & bit:
                d[k] = True
    return d


def header_json(container: str, slice_id: int, gpus: list[dict], *, release: str = "",
                started: str = "", host: str = "", vgpu_version: str = "") -> dict:
    return {"trace": VERSION, "container": container, "slice_id": slice_id,
            "release": release, "gpus": gpus, "started": started, "host": host,
            "vgpu_version": vgpu_version}


def dumps(obj: dict) -> str:
    return json.dumps(obj, separators=(",", ":"), sort_keys=False)


# ------------------------------------------------------------------ reading
class TraceError(ValueError):
    """A trace file that cannot be used; the message names the line."""


@dataclass
class Record:
    """One record of a trace file, checked (docs/trace.md)."""
    line: int
    seq: int
    op: str
    file: int
    node: str
    ret: int
    pid: int = 0
    nr: int = 0
    name: str = ""
    size: int = 0
    item: dict | None = None
    verdict: str | None = None
    status: int | None = None
    args_in: bytes | None = None
    args_out: bytes | None = None
    params_ptr: int | None = None
    params_in: bytes | None = None
    params_out: bytes | None = None
    fd: tuple[int, int] | None = None
    #: (offset of the pointer in params_in, the pointer, what it named
    #: before, after): RM_CONTROL's embedded lists
    lists: list[tuple[int, int, bytes | None, bytes | None]] = field(default_factory=list)
    xfer: bool = False
    truncated: bool = False
    unreadable: bool = False
    addr: int = 0
    length: int = 0
    offset: int = 0
    prot: str = ""
    open_flags: int = 0
    raw: dict = field(default_factory=dict, repr=False)


@dataclass
class Trace:
    header: dict
    records: list[Record]
    trailer: dict | None = None

    def lost(self) -> int:
        """Records missing by their sequence numbers."""
        seqs = sorted(r.seq for r in self.records)
        return sum(b - a - 1 for a, b in zip(seqs, seqs[1:]) if b > a + 1)


_NODES = {NODE_CTL, NODE_UVM} | {f"gpu{i}" for i in range(uapi.VGPU_MAX_SLICE_GPUS)}
_OPS = set(uapi.TRACE_OP_NAMES.values())


def _int(d: dict, k: str, where: str, *, lo: int = 0, hi: int = (1 << 64) - 1,
         default: int | None = None) -> int:
    v = d.get(k, default)
    if v is None:
        raise TraceError(f"{where}: {k}: missing")
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise TraceError(f"{where}: {k}: {json.dumps(v)[:40]} is not an integer in {lo}..{hi}")
    return v


def _blob(d: dict, k: str, where: str) -> bytes | None:
    v = d.get(k)
    if v is None:
        return None
    if not isinstance(v, str) or len(v) > 2 * uapi.VGPU_TRACE_MAX_PARAMS:
        raise TraceError(f"{where}: {k}: not a hex string of at most "
                         f"{uapi.VGPU_TRACE_MAX_PARAMS} bytes")
    try:
        return bytes.fromhex(v)
    except ValueError:
        raise TraceError(f"{where}: {k}: {v[:40]!r} is not hex") from None


def _lists(d: dict, params_in: bytes | None,
           where: str) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """A record's "lists": each [{offset, ptr, in, out}], its pointer's 8
    bytes inside params_in and apart from every other's."""
    v = d.get("lists")
    if v is None:
        return []
    if not isinstance(v, list):
        raise TraceError(f"{where}: lists: not a list of {{offset, ptr, in, out}}")
    if len(v) > MAX_LISTS:
        raise TraceError(f"{where}: lists: {len(v)} lists, more than {MAX_LISTS}")
    if v and params_in is None:
        raise TraceError(f"{where}: lists: the record has no params_in for them to lie in")
    out = []
    for i, e in enumerate(v):
        w = f"{where}: lists[{i}]"
        if not isinstance(e, dict):
            raise TraceError(f"{w}: not {{offset, ptr, in, out}}")
        off = _int(e, "offset", w, hi=uapi.VGPU_TRACE_MAX_PARAMS)
        if off + 8 > len(params_in):
            raise TraceError(f"{w}: offset: {off} leaves no 8-byte pointer inside the "
                             f"{len(params_in)} bytes of params_in")
        for o, *_ in out:
            if abs(o - off) < 8:
                raise TraceError(f"{w}: offset: {off} overlaps the list at offset {o}")
        out.append((off, _int(e, "ptr", w), _blob(e, "in", w), _blob(e, "out", w)))
    return out


def parse_record(d: Any, where: str) -> Record:
    if not isinstance(d, dict):
        raise TraceError(f"{where}: not a JSON object")
    op = d.get("op")
    if not isinstance(op, str) or op not in _OPS:      # a list or object is unhashable
        raise TraceError(f"{where}: op: {json.dumps(op)[:40]} is not one of {sorted(_OPS)}")
    node = d.get("node")
    if not isinstance(node, str) or node not in _NODES:
        raise TraceError(f"{where}: node: {json.dumps(node)[:40]} is not ctl, uvm or gpu0..gpu7")
    r = Record(line=0, seq=_int(d, "seq", where, lo=1), op=op, file=_int(d, "file", where),
               node=node, ret=_int(d, "ret", where, lo=-4095, hi=0, default=0),
               pid=_int(d, "pid", where, hi=(1 << 32) - 1, default=0), raw=d)
    if op == "open":
        r.open_flags = _int(d, "open_flags", where, hi=(1 << 32) - 1, default=0)
    elif op == "mmap":
        r.addr = _int(d, "addr", where)
        r.length = _int(d, "length", where, lo=1)
        r.offset = _int(d, "offset", where)
        p = d.get("prot", "")
        if not isinstance(p, str) or set(p) - set("rws"):
            raise TraceError(f"{where}: prot: {json.dumps(p)[:40]} is not made of r, w and s")
        r.prot = p
    elif op == "ioctl":
        r.nr = _int(d, "nr", where, hi=(1 << 32) - 1)
        r.size = _int(d, "size", where, hi=(1 << 32) - 1, default=0)
        r.name = d.get("name", "") if isinstance(d.get("name", ""), str) else ""
        item = d.get("item")
        if item is not None:
            if not isinstance(item, dict) or item.get("kind") not in uapi.AUDIT_KINDS:
                raise TraceError(f"{where}: item: not {{kind, number, name}}")
            _int(item, "number", where + ": item", hi=(1 << 32) - 1)
            r.item = item
        v = d.get("verdict")
        if v is not None and v not in uapi.AUDIT_VERDICT_NAMES.values():
            raise TraceError(f"{where}: verdict: {json.dumps(v)[:40]} is not a verdict")
        r.verdict = v
        if d.get("status") is not None:
            r.status = _int(d, "status", where, hi=(1 << 32) - 1)
        r.args_in = _blob(d, "in", where)
        r.args_out = _blob(d, "out", where)
        r.params_in = _blob(d, "params_in", where)
        r.params_out = _blob(d, "params_out", where)
        if d.get("params_ptr") is not None:
            r.params_ptr = _int(d, "params_ptr", where)
        r.lists = _lists(d, r.params_in, where)
        fd = d.get("fd")
        if fd is not None:
            if not isinstance(fd, dict):
                raise TraceError(f"{where}: fd: not {{offset, file}}")
            r.fd = (_int(fd, "offset", where + ": fd", hi=uapi.VGPU_TRACE_MAX_PARAMS - 4),
                    _int(fd, "file", where + ": fd"))
        for k in ("xfer", "truncated", "unreadable"):
            v = d.get(k, False)
            if not isinstance(v, bool):
                raise TraceError(f"{where}: {k}: {json.dumps(v)[:40]} is not true or false")
            setattr(r, k, v)
    return r


def parse_lines(lines: Iterable[str | bytes], name: str = "trace") -> Trace:
    header = None
    trailer = None
    records: list[Record] = []
    for i, line in enumerate(lines, 1):
        where = f"{name}:{i}"
        if len(line) > MAX_LINE:
            raise TraceError(f"{where}: line longer than {MAX_LINE} bytes")
        if not line.strip():
            continue
        try:
            d = json.loads(line)
        except (ValueError, RecursionError) as e:
            raise TraceError(f"{where}: not JSON: {str(e)[:80]}") from None
        if header is None:
            if not isinstance(d, dict) or d.get("trace") != VERSION:
                raise TraceError(f"{where}: not a vgpu trace header "
                                 f"(want {{\"trace\": {VERSION}, ...}} first)")
            header = d
            continue
        if trailer is not None:
            raise TraceError(f"{where}: a line after the trailer")
        if isinstance(d, dict) and d.get("end") is True:
            trailer = d
            continue
        r = parse_record(d, where)
        r.line = i
        records.append(r)
    if header is None:
        raise TraceError(f"{name}: empty (no header)")
    return Trace(header, records, trailer)


def load(path: str) -> Trace:
    """Read a trace file (plain, or gzip-compressed when it ends in .gz)."""
    if path.endswith(".gz"):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            return parse_lines(f, path)
    with open(path, encoding="utf-8") as f:
        return parse_lines(f, path)
