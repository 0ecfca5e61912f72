"""A small fake of vgpud's admin API, test support (tools/testbed/): the
CLI's, the API client's and the hook's host tests, and bench/container_start.py's
host mode.

It speaks docs/api.md version 1 (newline-delimited JSON on a Unix socket,
one thread per connection) over canned state: two 16 GiB GPUs and whatever
slices the test creates.  It is NOT the daemon and checks far less than
vgpu.daemon.api does; the daemon's own protocol tests cover the real server.

Misbehaviours for the error paths, set on the instance:

- ``deny``: answer every connection with one ``permission`` error and close;
- ``silent``: read requests, never answer (timeouts);
- ``delay``: seconds to wait before each reply;
- ``events``: the events sent after an ``events`` ack; then the stream is
  closed, unless ``hold_events`` (then it stays open until the client goes).
- ``hca``: the node's RDMA adapter (a grant), which ``plan`` and
  ``create`` give a request with ``rdma``; None (default): refused;
- ``trace_records``: the records sent after a ``trace`` ack (the header of
  ``make_trace_header``); then ``trace_end`` (an end line, if set), and the
  stream is closed unless ``hold_trace``.  ``trace_closed`` is set once
  the client has closed a trace connection.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time

GIB = 1 << 30


def make_gpu(index: int) -> dict:
    return {"index": index, "uuid": f"GPU-0000000{index}-fake", "name": "NVSIM Simulated GPU",
            "pci_bus_id": f"0000:0{index + 1}:00.0", "memory_total": 16 * GIB,
            "memory_allocated": 0, "memory_used": 0, "utilization": None, "slices": 0,
            "scheduler": {"period_us": 100000, "layers": ["tsg", "doorbell"],
                          "switches": 1234 + index, "cpu_s": 0.25}}


def make_slice(container: str, slice_id: int, args: dict) -> dict:
    gpus = args.get("gpus") or [0]
    mem = args.get("memory", 4 * GIB)
    return {
        "container": container, "slice_id": slice_id, "profile": args.get("profile"),
        "labels": args.get("labels", {}), "cgroup": args.get("cgroup"),
        "pids": [args["pid"]] if "pid" in args else [], "open_files": 0,
        "created": 1700000000.5,
        "gpus": [{"index": g, "uuid": f"GPU-0000000{g}-fake", "real_minor": g,
                  "memory_limit": mem, "memory_used": GIB // 2, "memory_peak": GIB,
                  "allocs": 3, "refusals": 0,
                  "compute": {"policy": args.get("policy", "share"),
                              "percent": args.get("compute", 25),
                              "priority": args.get("priority", "low"), "gpu_time_s": 12.5,
                              "achieved_percent": 24.5, "paused": False, "tsgs": 1,
                              "channels": 2}} for g in gpus],
        "compute": {"percent": args.get("compute", 25), "policy": args.get("policy", "share"),
                    "priority": args.get("priority", "low")},
        "devices": {"major": 510, "ctl_minor": 0, "uvm_minor": 1, "gpu_minors": [2]},
        "owner": args.get("owner"), "audit": False, "allow_count": 0,
    }


def make_history(since: float, step: float = 300.0, n: int = 12) -> dict:
    """A history document (vgpu.cli.histview's shape) of one slice, without
    the range (the fake answers with the request's)."""
    rows = [{"t": since + i * step, "step": step, "n": 30, "mem_used": (1 + i % 4) * GIB,
             "mem_used_min": GIB, "mem_used_max": (1 + i % 4) * GIB,
             "mem_used_p95": (1 + i % 4) * GIB, "mem_peak": 4 * GIB, "mem_limit": 4 * GIB,
             "gpu_time_ns": int(0.25 * step * 1e9), "covered_s": step, "share": 0.25,
             "share_max": 0.5, "compute_bp": 2500, "refusals": 1 if i == 5 else 0,
             "resets": 0, "source": "merged"} for i in range(n)]
    return {"series": [{"container": "web", "slice_id": 3, "labels": {"team": "web"},
                        "gpu": 0, "gpu_uuid": "GPU-00000000-fake", "rows": rows}],
            "windows": [{"profile": "day", "label": "team=web", "start": since,
                         "end": since + step * n / 2}]}


def make_forecast(label: str, hours: int) -> dict:
    t0 = 1764576000.0
    pts = [{"t": t0 + 3600 * i,
            "memory": {"p50": 2 * GIB, "p95": 3 * GIB, "lo": GIB, "hi": 3 * GIB,
                       "confidence": 0.8, "source": "week"},
            "gpu": {"p50": 0.2, "p95": 0.4, "lo": 0.1, "hi": 0.45, "confidence": 0.8,
                    "source": "week"}} for i in range(hours)]
    return {"label": label, "hours": hours, "bucket_s": 3600, "slices": 2,
            "history": {"samples": 2016, "first": t0 - 7 * 86400, "last": t0, "days": 7},
            "points": pts,
            "recommended": {"memory": {"bytes": int(3.45 * GIB), "per_slice": int(1.725 * GIB),
                                       "target": 3 * GIB, "confidence": 0.8},
                            "compute": {"percent": 46.0, "per_slice": 23.0, "target": 0.4,
                                        "confidence": 0.8}},
            "adjustments": [{"container": "w1", "compute": 46.0}]}


def make_audit(s: dict) -> dict:
    """A canned audit record of slice s, its entries deliberately unsorted:
    one of each kind and verdict; vgpud sorts them, vgpuctl must not rely
    on it."""
    return {"container": s["container"], "slice_id": s["slice_id"], "audit": s["audit"],
            "dropped": 0, "allow_count": s["allow_count"], "entries": [
                {"kind": "control", "number": 0x20801301, "name": "NV2080_CTRL_CMD_FB_GET_INFO",
                 "verdict": "rewrite", "calls": 4, "refused": 0, "let_through": 0},
                {"kind": "uvm", "number": 0x49, "name": "", "verdict": "not-implemented",
                 "calls": 3, "refused": 0, "let_through": 3},
                {"kind": "escape", "number": 0x5c, "name": "NV_ESC_RM_EXPORT_OBJECT_TO_FD",
                 "verdict": "refuse", "calls": 2, "refused": 2, "let_through": 0},
                {"kind": "control", "number": 0x20800145, "name": "", "verdict": "virtualise",
                 "calls": 1, "refused": 0, "let_through": 0},
                {"kind": "class", "number": 0xc86f, "name": "HOPPER_CHANNEL_GPFIFO_A",
                 "verdict": "forward", "calls": 1, "refused": 0, "let_through": 0},
                {"kind": "control", "number": 0x20800a3e, "name": "", "verdict": "refuse",
                 "calls": 7, "refused": 5, "let_through": 2},
            ]}


def make_trace_header(s: dict) -> dict:
    return {"trace": 1, "container": s["container"], "slice_id": s["slice_id"],
            "release": "595.45.04",
            "gpus": [{"index": g["index"], "memory_limit": g["memory_limit"]} for g in s["gpus"]],
            "started": "2026-12-02T06:10:00Z", "host": "node-7", "vgpu_version": "0.1.0"}


def make_trace_record(seq: int, op: str = "ioctl") -> dict:
    """A record as vgpu.abi.trace.record_json makes one (docs/trace.md)."""
    r = {"seq": seq, "t_ns": 1000 * seq, "dur_ns": 500, "pid": 321, "tid": 321, "file": 1,
         "node": "ctl", "op": op, "ret": 0}
    if op == "open":
        r["open_flags"] = 2
    elif op == "ioctl":
        r.update(nr=0x2b, name="NV_ESC_RM_ALLOC", size=48,
                 item={"kind": "class", "number": 0x41, "name": "NV01_ROOT_CLIENT"},
                 verdict="forward", status=0, status_name="NV_OK", **{"in": "00" * 48,
                                                                     "out": "00" * 48})
    return r


class FakeVgpud:
    def __init__(self, path: str):
        self.path = str(path)
        self.requests: list[dict] = []      # every parsed request, in order
        self.slices: dict[str, dict] = {}
        self.gpus = [make_gpu(0), make_gpu(1)]
        self.deny = False
        self.silent = False
        self.delay = 0.0
        self.events: list[dict] = []
        self.hold_events = False
        self.image_env_profiles: list[str] = []   # status; create's from_image check
        self.audits: dict[str, dict] = {}         # container -> audit result (else make_audit)
        self.trace_records: list[dict] = []
        self.trace_end: dict | None = None
        self.hold_trace = False
        self.trace_closed = threading.Event()
        self.history_doc: dict | None = None       # history's series and windows (else none)
        # the node's one RDMA adapter as a grant ({"hca", "nodes", "handles",
        # "objects"}), which plan and create give; None: the node has none
        self.hca: dict | None = None
        self._next_slice = 1
        self._stop = threading.Event()
        self._conns: list[socket.socket] = []
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        self.sock.listen(16)
        self.sock.settimeout(0.1)
        self._thread = threading.Thread(target=self._accept_loop, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self._stop.set()
        self._thread.join(5)
        for c in list(self._conns):
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()
        self.sock.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass

    # ------------------------------------------------------------------
    def _accept_loop(self):
        while not self._stop.is_set():
            try:
                c, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            self._conns.append(c)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    @staticmethod
    def _send(c, doc):
        c.sendall((json.dumps(doc) + "\n").encode())

    def _serve(self, c):
        try:
            if self.deny:
                self._send(c, {"v": 1, "id": None, "ok": False, "error": {
                    "code": "permission", "message": "uid 1000 is not root nor in group vgpu"}})
                return
            f = c.makefile("rb")
            for line in f:
                req = json.loads(line)
                self.requests.append(req)
                if self.silent:
                    continue
                if self.delay:
                    time.sleep(self.delay)
                rid, op, args = req.get("id"), req.get("op"), req.get("args", {})
                if req.get("v") != 1:
                    self._send(c, {"v": 1, "id": rid, "ok": False, "supported": [1], "error": {
                        "code": "unsupported-version", "message": "v: not supported"}})
                    continue
                if op == "events":
                    self._send(c, {"v": 1, "id": rid, "ok": True, "result": {}})
                    for ev in self.events:
                        self._send(c, {"v": 1, "event": ev})
                    if self.hold_events:
                        while not self._stop.is_set() and c.recv(1):
                            pass
                    return
                if op == "trace":
                    s = self.slices.get(args.get("container"))
                    if s is None:
                        self._send(c, {"v": 1, "id": rid, "ok": False, "error": {
                            "code": "not-found",
                            "message": f"no slice for container {json.dumps(args.get('container'))}"}})
                        return
                    self._send(c, {"v": 1, "id": rid, "ok": True, "result": make_trace_header(s)})
                    try:
                        for r in self.trace_records:
                            self._send(c, {"record": r})
                        if self.trace_end is not None:
                            self._send(c, self.trace_end)
                        if self.hold_trace:
                            while not self._stop.is_set() and c.recv(1):
                                pass
                    except OSError:
                        pass
                    if self.hold_trace:
                        self.trace_closed.set()
                    return
                try:
                    result = self._op(op, args)
                except KeyError as e:
                    code, msg = e.args
                    self._send(c, {"v": 1, "id": rid, "ok": False,
                                   "error": {"code": code, "message": msg}})
                else:
                    self._send(c, {"v": 1, "id": rid, "ok": True, "result": result})
        except OSError:
            pass
        finally:
            c.close()

    def _op(self, op, args):
        if op == "status":
            return {"version": "0.1.0", "pid": 4242, "uptime_s": 3725, "slices": len(self.slices),
                    "gpus": len(self.gpus), "kernel": {"loaded": True},
                    "config": "/etc/vgpu/vgpud.toml",
                    "image_env_profiles": list(self.image_env_profiles),
                    "scheduler": {"supported": True, "period_s": 0.1, "layers": None},
                    **({"state": self.state} if getattr(self, "state", None) else {})}
        if op == "gpus":
            return {"gpus": self.gpus}
        if op == "history":
            doc = dict(self.history_doc or {"series": [], "windows": []})
            doc.update({k: args.get(k) for k in ("since", "until", "step")})
            return doc
        if op == "forecast":
            if args.get("reset"):
                return {"label": args["label"], "restored": ["w1"], "held": True}
            if args.get("resume"):
                return {"label": args["label"], "restored": [], "held": False}
            return make_forecast(args["label"], args.get("hours", 24))
        if op == "list":
            return {"slices": list(self.slices.values())}
        name = args.get("container")
        if op in ("plan", "create") and "gpus" in args:
            # UUIDs to indexes, as vgpud's gpu_by_ref
            by_uuid = {g["uuid"]: g["index"] for g in self.gpus}
            args = {**args, "gpus": [by_uuid.get(g, g) for g in args["gpus"]]}
        if op in ("plan", "create") and "rdma" in args and name not in self.slices:
            want = args["rdma"] if isinstance(args["rdma"], dict) else {}
            if self.hca is None or want.get("hca", self.hca["hca"]) != self.hca["hca"]:
                raise KeyError("admission", "no RDMA adapter with a uverbs device on this "
                                            "node (/sys/class/infiniband)")
        if op == "plan":
            if name in self.slices:
                s = self.slices[name]
                return {"container": name, "exists": True,
                        "gpus": [{"index": g["index"], "uuid": g["uuid"]} for g in s["gpus"]],
                        "rdma": {k: s["rdma"][k] for k in ("hca", "nodes", "handles", "objects")}
                        if s.get("rdma") else None}
            return {"container": name, "exists": False,
                    "gpus": [{"index": g, "uuid": f"GPU-0000000{g}-fake"}
                             for g in args.get("gpus") or [0]],
                    "rdma": dict(self.hca) if "rdma" in args else None}
        if op == "create":
            if name in self.slices:
                # as vgpud: the same owner gets its slice back, anyone else is refused
                if args.get("owner") is not None and \
                        self.slices[name].get("owner") == args["owner"]:
                    return {"slice": self.slices[name], "reused": True}
                raise KeyError("exists", f"container {json.dumps(name)} already has a slice")
            if args.get("from_image") and args.get("profile") not in self.image_env_profiles:
                raise KeyError("admission", "a request from the container image's environment "
                                            "needs a profile with allow_image_env = true")
            if args.get("memory", 0) > 16 * GIB:
                raise KeyError("admission", "memory 40GiB exceeds GPU 0's 16GiB "
                                            "(oversubscription is off)")
            self.slices[name] = make_slice(name, self._next_slice, args)
            if "rdma" in args:
                self.slices[name]["rdma"] = {**self.hca, "used": None, "objects_by_type": None}
            self._next_slice += 1
            return {"slice": self.slices[name]}
        if op in ("show", "set-quota", "delete", "attach", "audit", "set-audit"):
            if name not in self.slices:
                raise KeyError("not-found", f"no slice for container {json.dumps(name)}")
            s = self.slices[name]
            if op == "audit":
                return self.audits.get(name) or make_audit(s)
            if op == "set-audit":
                s["audit"] = args["audit"]
            if op == "delete":
                if "owner" in args and s.get("owner") != args["owner"]:
                    raise KeyError("not-owner", f"the slice of {json.dumps(name)} is owned "
                                                f"by someone else")
                del self.slices[name]
                return {}
            if op == "attach":
                # as vgpud: only a slice made without a cgroup; one container at a time
                if s.get("cgroup"):
                    raise KeyError("bad-request", f"slice {json.dumps(name)} was made for "
                                                  f"a container")
                if s.get("attached") not in (None, args["cgroup"]) and \
                        os.path.exists(os.path.join(s["attached"], "cgroup.procs")):
                    raise KeyError("exists", f"slice {json.dumps(name)} is attached to "
                                             f"{s['attached']}, whose processes still run")
                s["attached"] = args["cgroup"]
            if op == "set-quota":
                if "memory" in args:
                    if args["memory"] > 16 * GIB:
                        raise KeyError("admission", "memory exceeds GPU 0's 16GiB "
                                                    "(oversubscription is off)")
                    for g in s["gpus"]:
                        if "gpus" not in args or g["index"] in args["gpus"]:
                            g["memory_limit"] = args["memory"]
                for k in ("percent", "policy", "priority"):
                    src = "compute" if k == "percent" else k
                    if src in args:
                        s["compute"][k] = args[src]
                        for g in s["gpus"]:
                            g["compute"][k] = args[src]
                if "profile" in args:
                    s["profile"] = args["profile"]
            return {"slice": s}
        raise KeyError("unknown-op", f"op: unknown operation {json.dumps(op)}")
