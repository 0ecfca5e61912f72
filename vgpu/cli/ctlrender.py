"""vgpuctl's output: tables, a slice, an audit, events, sizes and times as
people read them, JSON for --json, and ``vgpuctl top``'s frames.
Standard library only."""
from __future__ import annotations

import json
import os
import sys
import time

from vgpu.cli.ctlargv import EXIT_OK, PROG
from vgpu.common.values import format_percent, format_size


def as_int(v) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


# ------------------------------------------------------------ output
def err(msg: str) -> None:
    sys.stderr.write(f"{PROG}: {msg}\n")


def emit_json(obj) -> int:
    sys.stdout.write(json.dumps(obj, indent=2, ensure_ascii=False) + "\n")
    return EXIT_OK


def size_text(n) -> str:
    if isinstance(n, bool) or not isinstance(n, int):
        return "-" if n is None else str(n)
    return format_size(n).replace(" ", "")


def pct_text(x) -> str:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return "-" if x is None else str(x)
    return format_percent(float(x))


def count_text(v) -> str:
    if isinstance(v, (list, dict)):
        return str(len(v))
    return "-" if v is None else str(v)


def _sum(gpus, key):
    vals = [g.get(key) for g in gpus if isinstance(g.get(key), int)]
    return sum(vals) if vals else None


def slice_row(s: dict) -> list[str]:
    gpus = s.get("gpus") or []
    comp = s.get("compute") or {}
    return [str(s.get("container", "?")),
            ",".join(str(g.get("index", "?")) for g in gpus) or "-",
            size_text(_sum(gpus, "memory_used")), size_text(_sum(gpus, "memory_limit")),
            size_text(_sum(gpus, "memory_peak")), pct_text(comp.get("percent")),
            str(comp.get("priority") or "-"), str(comp.get("policy") or "-"),
            str(s.get("profile") or "-"), count_text(s.get("pids"))]


def gpu_row(g: dict) -> list[str]:
    return [str(g.get("index", "?")), str(g.get("name") or "-"), str(g.get("uuid") or "-"),
            str(g.get("pci_bus_id") or "-"), size_text(g.get("memory_total")),
            size_text(g.get("memory_allocated")), size_text(g.get("memory_used")),
            pct_text(g.get("utilization")), count_text(g.get("slices"))]


def format_table(headers: list[str], rows: list[list[str]]) -> list[str]:
    widths = [len(h) for h in headers]
    for r in rows:
        for j, cell in enumerate(r):
            widths[j] = max(widths[j], len(cell))
    out = []
    for r in [headers, *rows]:
        out.append("  ".join(c.ljust(widths[j]) for j, c in enumerate(r)).rstrip())
    return out


def print_table(headers, rows) -> None:
    sys.stdout.write("\n".join(format_table(headers, rows)) + "\n")


def fmt_time(t) -> str:
    if isinstance(t, (int, float)) and not isinstance(t, bool):
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))
    return "-" if t is None else str(t)


def fmt_uptime(s) -> str:
    if not isinstance(s, (int, float)) or isinstance(s, bool):
        return "?"
    s = int(s)
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    if d:
        return f"{d}d {h}h {m}m"
    if h:
        return f"{h}h {m}m"
    if m:
        return f"{m}m {s}s"
    return f"{s}s"


def print_slice(s: dict) -> None:
    comp = s.get("compute") or {}
    dev = s.get("devices") or {}
    labels = s.get("labels") or {}
    pids = s.get("pids")
    rows = [
        ("container", s.get("container", "?")),
        ("slice id", s.get("slice_id", "-")),
        ("profile", s.get("profile") or "-"),
        ("labels", ", ".join(f"{k}={v}" for k, v in labels.items()) or "-"),
        ("cgroup", s.get("cgroup") or "-"),
        ("owner", " ".join(f"{k}={v}" for k, v in (s.get("owner") or {}).items())
         or "- (made through the API)"),
        ("pids", " ".join(map(str, pids)) if isinstance(pids, list) and pids else "-"),
        ("open files", s.get("open_files", "-")),
        ("quarantined", "yes: a process unmapped a call's parameter page (delete the slice)"
         if s.get("quarantined") else "no"),
        ("audit", _audit_text(s)),
        ("created", fmt_time(s.get("created"))),
        ("compute", f"{pct_text(comp.get('percent'))} {comp.get('policy') or '-'}, "
                    f"priority {comp.get('priority') or '-'}"),
    ]
    if dev:
        minors = dev.get("gpu_minors")
        rows.append(("devices", f"major {dev.get('major', '-')}, ctl minor "
                                f"{dev.get('ctl_minor', '-')}, uvm minor {dev.get('uvm_minor', '-')}, "
                                f"gpu minors "
                                f"{' '.join(map(str, minors)) if isinstance(minors, list) else '-'}"))
    rd = s.get("rdma")
    if isinstance(rd, dict):
        nodes = [n[0] for n in rd.get("nodes") or [] if isinstance(n, list) and n]
        used = rd.get("used") if isinstance(rd.get("used"), dict) else None
        held = (f"{used.get('handles', '?')} of " if used else "", f"{used.get('objects', '?')} of "
                if used else "")
        rows.append(("rdma", f"{rd.get('hca', '?')} ({' '.join(nodes) or 'no node'}), "
                             f"{held[0]}{rd.get('handles', '?')} contexts, "
                             f"{held[1]}{rd.get('objects', '?')} objects"))
        by = rd.get("objects_by_type") if isinstance(rd.get("objects_by_type"), dict) else None
        if by:
            rows.append(("rdma held", ", ".join(f"{n} {k.upper()}" for k, n in by.items())))
    for k, v in rows:
        print(f"{k + ':':<11} {v}")
    gpus = s.get("gpus") or []
    if gpus:
        print()
        print_table(["GPU", "UUID", "REAL MINOR", "LIMIT", "USED", "PEAK", "ALLOCS", "REFUSALS"],
                    [[str(g.get("index", "?")), str(g.get("uuid") or "-"),
                      str(g.get("real_minor", "-")), size_text(g.get("memory_limit")),
                      size_text(g.get("memory_used")), size_text(g.get("memory_peak")),
                      str(g.get("allocs", "-")), str(g.get("refusals", "-"))] for g in gpus])
        comp = [g for g in gpus if isinstance(g.get("compute"), dict)]
        if comp:
            print()
            print_table(["GPU", "POLICY", "TARGET", "PRIORITY", "GPU TIME", "ACHIEVED", "PAUSED",
                         "TSGS", "CHANNELS"], [_compute_row(g) for g in comp])


def _audit_text(s: dict) -> str:
    if "audit" not in s:
        return "-"
    text = ("on: what the policy refuses is forwarded and recorded" if s.get("audit")
            else "off")
    n = s.get("allow_count")
    if isinstance(n, int) and not isinstance(n, bool) and n:
        text += f"; allow-list of {n} item{'' if n == 1 else 's'}"
    return text


def print_audit(res: dict) -> None:
    """An audit record: a table sorted by kind (escape, class, control, uvm)
    and number, then one summary line."""
    order = {"escape": 0, "class": 1, "control": 2, "uvm": 3}
    entries = [e for e in res.get("entries") or [] if isinstance(e, dict)]
    entries.sort(key=lambda e: (order.get(e.get("kind"), 9), str(e.get("kind")),
                                as_int(e.get("number"))))
    if entries:
        print_table(["KIND", "NUMBER", "NAME", "VERDICT", "CALLS", "REFUSED", "LET-THROUGH"],
                    [[str(e.get("kind", "?")), _number(e.get("kind"), e.get("number")),
                      str(e.get("name") or "-"), str(e.get("verdict", "?")),
                      str(e.get("calls", "-")), str(e.get("refused", "-")),
                      str(e.get("let_through", "-"))] for e in entries])
    else:
        print("nothing recorded" + ("" if res.get("audit") else
                                    " (audit mode is off: only refusals are recorded)"))
    calls = sum(as_int(e.get("calls")) for e in entries)
    refused = sum(as_int(e.get("refused")) for e in entries)
    let = sum(as_int(e.get("let_through")) for e in entries)
    n = res.get("allow_count")
    parts = [f"{plural(len(entries), 'item')}, {plural(calls, 'call')}: {refused} refused, "
             f"{let} let through",
             f"audit mode {'on' if res.get('audit') else 'off'}",
             f"allow-list {plural(n, 'item') if isinstance(n, int) else '-'}"]
    dropped = as_int(res.get("dropped"))
    if dropped:
        parts.append(f"{plural(dropped, 'call')} not recorded (the record is full)")
    print("; ".join(parts))


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _number(kind, number) -> str:
    if isinstance(number, bool) or not isinstance(number, int):
        return "-" if number is None else str(number)
    return f"0x{number:02x}" if kind == "escape" else f"0x{number:08x}"


def _compute_row(g: dict) -> list[str]:
    c = g.get("compute") or {}
    t = c.get("gpu_time_s")
    paused = c.get("paused")
    return [str(g.get("index", "?")), str(c.get("policy") or "-"), pct_text(c.get("percent")),
            str(c.get("priority") or "-"),
            f"{t:.3f}s" if isinstance(t, (int, float)) and not isinstance(t, bool) else "-",
            pct_text(c.get("achieved_percent")),
            "-" if paused is None else ("yes" if paused else "no"),
            count_text(c.get("tsgs")), count_text(c.get("channels"))]


def _per_gpu(gpus: list, key: str) -> str:
    """A compute figure of each GPU of a slice, comma-separated."""
    vals = [(g.get("compute") or {}).get(key) for g in gpus]
    if not vals or all(v is None for v in vals):
        return "-"
    return ",".join(pct_text(v) for v in vals)


def fmt_event(ev: dict) -> str:
    t = ev.get("time")
    if isinstance(t, (int, float)) and not isinstance(t, bool):
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t)) + f".{int(t * 1000) % 1000:03d}"
    else:
        ts = str(t) if t is not None else "-"
    rest = []
    for k, v in ev.items():
        if k in ("time", "type", "container"):
            continue
        if isinstance(v, str) and v and " " not in v:
            rest.append(f"{k}={v}")
        else:
            rest.append(f"{k}={json.dumps(v, ensure_ascii=False)}")
    return " ".join([ts, str(ev.get("type", "?")), str(ev.get("container") or "-"), *rest])


# ------------------------------------------------------------ top
def top_frame(client) -> dict:
    return {"status": client.request("status"), "gpus": client.request("gpus").get("gpus", []),
            "slices": client.request("list").get("slices", [])}


def render_top(frame: dict, width: int | None = None, height: int | None = None) -> list[str]:
    st = frame["status"]
    kernel = st.get("kernel") or {}
    head = (f"vgpud {st.get('version', '?')}  pid {st.get('pid', '?')}  "
            f"up {fmt_uptime(st.get('uptime_s'))}  vgpu.ko "
            f"{'loaded' if kernel.get('loaded') else 'NOT LOADED'}  "
            f"{len(frame['gpus'])} GPUs  {len(frame['slices'])} slices  "
            f"{time.strftime('%H:%M:%S')}")
    lines = [head, ""]
    lines += format_table(["GPU", "NAME", "MEMORY", "ALLOCATED", "USED", "UTIL", "SLICES"],
                          [[r[0], r[1], r[4], r[5], r[6], r[7], r[8]]
                           for r in map(gpu_row, frame["gpus"])])
    lines.append("")

    def used(s):
        return _sum(s.get("gpus") or [], "memory_used") or 0
    slices = sorted(frame["slices"], key=lambda s: (-used(s), str(s.get("container"))))
    rows = []
    for s in slices:
        gpus = s.get("gpus") or []
        lim, u = _sum(gpus, "memory_limit"), _sum(gpus, "memory_used")
        comp = s.get("compute") or {}
        target = _per_gpu(gpus, "percent")
        if target == "-":
            target = pct_text(comp.get("percent"))
        rows.append([str(s.get("container", "?")),
                     ",".join(str(g.get("index", "?")) for g in gpus) or "-",
                     size_text(u), size_text(lim),
                     f"{100 * u / lim:.0f}%" if lim and u is not None else "-",
                     size_text(_sum(gpus, "memory_peak")), target,
                     _per_gpu(gpus, "achieved_percent"),
                     str(comp.get("priority") or "-"), str(comp.get("policy") or "-"),
                     count_text(_sum(gpus, "refusals"))])
    lines += format_table(["CONTAINER", "GPUS", "USED", "LIMIT", "USE", "PEAK", "TARGET",
                           "ACHIEVED", "PRIORITY", "POLICY", "REFUSALS"], rows)
    rdma_rows = [rdma_row(s) for s in slices if isinstance(s.get("rdma"), dict)]
    if rdma_rows:
        lines.append("")
        lines += format_table(["CONTAINER", "ADAPTER", "CONTEXTS", "OBJECTS", "QP", "CQ", "MR",
                               "PD"], rdma_rows)
    if height is not None and len(lines) > height:
        lines = lines[:max(height - 1, 1)] + [f"... {len(lines) - height + 1} more lines"]
    if width is not None:
        lines = [ln[:width] for ln in lines]
    return lines


def rdma_row(s: dict) -> list[str]:
    """A slice's RDMA in `top`: its adapter, what the rdma cgroup counts
    against its limits, and the objects by type its processes hold."""
    rd = s["rdma"]
    used = rd.get("used") if isinstance(rd.get("used"), dict) else {}
    by = rd.get("objects_by_type") if isinstance(rd.get("objects_by_type"), dict) else {}

    def of(k: str, limit: str) -> str:
        return f"{count_text(used.get(k))}/{count_text(rd.get(limit))}"
    return [str(s.get("container", "?")), str(rd.get("hca", "?")), of("handles", "handles"),
            of("objects", "objects"), *(count_text(by.get(k)) for k in ("qp", "cq", "mr", "pd"))]


def run_top(client, o, out) -> int:
    interval = o.get("interval", 1.0)
    live = not o.get("once") and out.isatty()
    if not live:
        frame = top_frame(client)
        if o["json"]:
            return emit_json(frame)
        out.write("\n".join(render_top(frame)) + "\n")
        return EXIT_OK
    out.write("\x1b[?25l\x1b[H\x1b[2J")           # hide the cursor, clear
    try:
        while True:
            frame = top_frame(client)
            if o["json"]:
                out.write(json.dumps(frame, separators=(",", ":"), ensure_ascii=False) + "\n")
            else:
                try:
                    size = os.get_terminal_size(out.fileno())
                    w, h = size.columns, size.lines
                except (OSError, ValueError, AttributeError):
                    w, h = None, None
                lines = render_top(frame, w, h)
                # home, each line then clear to its end, clear below: no flicker
                out.write("\x1b[H" + "".join(ln + "\x1b[K\n" for ln in lines) + "\x1b[J")
            out.flush()
            time.sleep(interval)
    except KeyboardInterrupt:
        return EXIT_OK
    finally:
        out.write("\x1b[?25h")
        out.flush()
