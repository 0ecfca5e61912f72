"""vgpuctl: administer GPU slices through vgpud's admin API (docs/api.md).

One table, ``COMMANDS``, defines every subcommand: its arguments, its
options (with the converter that validates each value locally, before
anything is sent), its one-line summary and its function.  The parser and
the usage texts are generated from it, as in ``wg``.

Every value is checked by vgpu.common.values, the parsers the daemon's API and
config file use too, before anything is sent; a bad one is a usage error
quoting it.  Standard library only (and vgpu.common.values, vgpu.abi, vgpu.cli).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time

from vgpu import __version__
from vgpu.abi import allowlist
from vgpu.abi import trace
from vgpu.cli import histview, report, rtconfig
from vgpu.cli.cdi import CDI_HOOK, cdi_spec
from vgpu.cli.tracefile import SeqGaps, StopSignals, copy_records, emit_line, open_output
from vgpu.common import apiclient as ac
from vgpu.common.files import atomic_write
from vgpu.common.request import LABELS as K8S_LABELS
from vgpu.common.values import (POLICIES, PRIORITIES, BadValue, format_duration, format_percent,
                         format_size, parse_compute, parse_container, parse_duration, parse_gpus,
                         parse_label, parse_pid, parse_policy, parse_priority, parse_profile,
                         parse_size, quote)

PROG = "vgpuctl"

EXIT_OK = 0
EXIT_ERROR = 1          # vgpud refused or failed the request, or did not answer; a refused file
EXIT_USAGE = 2          # bad command line or value
EXIT_UNAVAILABLE = 3    # vgpud is not running
EXIT_PERMISSION = 4     # permission denied on the API socket
EXIT_NOT_FOUND = 5      # no such slice (container)

EXIT_TEXT = f"""\
exit status:
  {EXIT_OK}  success
  {EXIT_ERROR}  vgpud refused or failed the request (admission, kernel, ...), or did not
     answer within --timeout; runtime configure: the config was refused or
     could not be written
  {EXIT_USAGE}  usage error: unknown command or option, or a bad value (quoted)
  {EXIT_UNAVAILABLE}  vgpud is not running (no socket, or nothing listens on it)
  {EXIT_PERMISSION}  permission denied (not root, nor in the group set as api.group)
  {EXIT_NOT_FOUND}  no slice for that container"""


class UsageError(Exception):
    pass


# ------------------------------------------------------------ converters
# Each takes the option's text and returns the value sent on the wire, or
# raises vgpu.common.values.BadValue (the value and a reason: "is not a size
# (...)"); parse_args() turns it into one usage error (invalid()).  The
# values the daemon also takes are parsed by vgpu.common.values' own parsers.

c_size = parse_size
c_percent = parse_compute
c_duration = parse_duration
c_priority = parse_priority
c_policy = parse_policy
c_profile = parse_profile
c_pid = parse_pid
c_gpus = parse_gpus
c_label = parse_label
c_container = parse_container


def _choice(*choices: str):
    def conv(text: str) -> str:
        if text not in choices:
            raise BadValue(text, f"is not one of {', '.join(choices)}")
        return text
    conv.choices = choices
    return conv


def c_nonempty(text: str) -> str:
    if not text or "\0" in text:
        raise BadValue(text, "must be a non-empty string")
    return text


def c_count(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise BadValue(text, "is not a positive whole number")
    return int(text)


c_onoff = _choice("on", "off")


def c_time(text: str) -> tuple[str, float]:
    """--since/--until: histview.parse_time's times (-24h, yesterday, 08:00,
    2026-12-01T08:00, @<unix seconds>); the text is kept for check_range's
    message."""
    return text, histview.parse_time(text)


def c_one_gpu(text: str) -> int | str:
    gpus = parse_gpus(text)
    if len(gpus) != 1:
        raise BadValue(text, "names more than one GPU (give one index or UUID)")
    return gpus[0]


def c_label_sel(text: str) -> str:
    k, v = parse_label(text)
    return f"{k}={v}"


def c_hours(text: str) -> int:
    n = c_count(text)
    if n > 168:
        raise BadValue(text, "is more than 168 (a week)")
    return n


def c_step(text: str) -> float:
    x = parse_duration(text)
    if x < 1:
        raise BadValue(text, "is under a second")
    return x


def invalid(label: str, text: str, e: BadValue) -> UsageError:
    """The usage error for a value a converter refused: the value quoted,
    then the parser's reason (vgpu.common.values' core text, less its "is ")."""
    reason = e.reason.removeprefix("is ") if e.value == text and not e.at else str(e)
    return UsageError(f"invalid {label} {quote(text)}: {reason}")


# ------------------------------------------------------------ the table
class Opt:
    """``--name METAVAR``: ``conv`` validates; ``multi`` collects repeats
    (lists are extended, pairs go into a dict); ``metavar=None`` is a flag;
    ``required``: the command refuses to run without it."""
    __slots__ = ("name", "metavar", "help", "conv", "dest", "multi", "required")

    def __init__(self, name, metavar, help, conv=None, dest=None, multi=False, required=False):
        self.name, self.metavar, self.help = name, metavar, help
        self.conv, self.multi, self.required = conv, multi, required
        self.dest = dest or name.lstrip("-").replace("-", "_")

    def spelling(self) -> str:
        return self.name if self.metavar is None else f"{self.name} {self.metavar}"


class Cmd:
    __slots__ = ("name", "args", "opts", "summary", "run", "groups")

    def __init__(self, name, args, opts, summary, run, groups=()):
        self.name, self.args, self.opts = name, args, opts
        self.summary, self.run, self.groups = summary, run, groups


GLOBAL_OPTS = (
    Opt("--socket", "PATH", "vgpud's API socket (default: $VGPU_SOCKET, else "
        "/run/vgpu/vgpud.sock)", c_nonempty),
    Opt("--timeout", "S", "how long to wait for vgpud's connect, send and each reply "
        "(default 5; e.g. 2, 500ms)", c_duration),
    Opt("--json", None, "machine-readable output: the API's result objects as JSON "
        "(events, top: JSON lines)"),
    Opt("--help", None, "this text (after a command: that command's)"),
    Opt("--version", None, "the version of vgpu"),
)

O_MEMORY = Opt("--memory", "SIZE", "memory quota per GPU, a Kubernetes quantity: 8Gi, "
               "512Mi, 1.5Gi, 4G (4x10^9) or bytes", c_size)
O_COMPUTE = Opt("--compute", "PCT", "compute quota: 30% (0 to 100)", c_percent)
O_PRIORITY = Opt("--priority", "|".join(PRIORITIES), "scheduling priority", c_priority)
O_POLICY = Opt("--policy", "|".join(POLICIES), "compute policy", c_policy)
O_PROFILE = Opt("--profile", "NAME", "a profile of the config file", c_profile)
O_GPU = Opt("--gpu", "GPU", "GPU index or UUID; repeat or comma-separate for several",
            c_gpus, dest="gpus", multi=True)
QUOTA_OPTS = (O_MEMORY, O_COMPUTE, O_PRIORITY, O_POLICY, O_PROFILE)
TIME_HELP = "-24h, -90m, yesterday, 08:00, 2026-12-01T08:00, @<unix seconds>"
HISTORY_OPTS = (
    Opt("--container", "C", "one container's slice", c_container),
    Opt("--label", "KEY=VALUE", "slices with this label; repeat: all of them", c_label,
        dest="labels", multi=True),
    Opt("--gpu", "GPU", "slices on this GPU (host index or UUID)", c_one_gpu),
    Opt("--since", "T", f"from (default -24h; {TIME_HELP})", c_time),
    Opt("--until", "T", "to (default now)", c_time),
    Opt("--step", "D", "bucket size (e.g. 1m, 5m, 1h; default: to fit the width)", c_step),
)


def cmd_list(client, o):
    res = client.request("list")
    if o["json"]:
        return emit_json(res)
    slices = res.get("slices", [])
    rows = [_slice_row(s) for s in slices]
    headers = ["CONTAINER", "GPUS", "MEMORY USED", "LIMIT", "PEAK", "COMPUTE",
               "PRIORITY", "POLICY", "PROFILE", "PIDS"]
    pods = [pod_of(s) for s in slices]
    if any(p != "-" for p in pods):         # a Kubernetes node: say whose each slice is
        headers.insert(1, "POD")
        for r, p in zip(rows, pods):
            r.insert(1, p)
    print_table(headers, rows)
    return EXIT_OK


def pod_of(s: dict) -> str:
    """NAMESPACE/POD[/CONTAINER] from the Kubernetes names the hook put in
    a slice's labels (K8S_LABELS); "-" for a slice outside Kubernetes."""
    lab = s.get("labels") if isinstance(s.get("labels"), dict) else {}
    pod, ns = lab.get(K8S_LABELS["pod_name"]), lab.get(K8S_LABELS["pod_namespace"])
    if not pod:
        return "-"
    name = f"{ns}/{pod}" if ns else str(pod)
    c = lab.get(K8S_LABELS["container_name"])
    return f"{name}/{c}" if c else name


def cmd_show(client, o):
    res = client.request("show", container=o["container"])
    if o["json"]:
        return emit_json(res)
    print_slice(res.get("slice", {}))
    return EXIT_OK


def cmd_create(client, o):
    if "cgroup" in o and "pid" in o:
        raise UsageError("create: give --cgroup or --pid, not both")
    args = {k: o[k] for k in ("cgroup", "pid", "gpus", "memory", "compute", "priority",
                              "policy", "profile", "labels") if k in o}
    res = client.request("create", container=o["container"], **args)
    if o["json"]:
        return emit_json(res)
    print_slice(res.get("slice", {}))
    return EXIT_OK


def cmd_set_quota(client, o):
    args = {k: o[k] for k in ("memory", "compute", "priority", "policy", "profile", "gpus")
            if k in o}
    if not (args.keys() - {"gpus"}):
        raise UsageError("set-quota: nothing to change (give --memory, --compute, "
                         "--priority, --policy or --profile)")
    res = client.request("set-quota", container=o["container"], **args)
    if o["json"]:
        return emit_json(res)
    print_slice(res.get("slice", {}))
    return EXIT_OK


def cmd_delete(client, o):
    args = {"force": True} if o.get("force") else {}
    res = client.request("delete", container=o["container"], **args)
    if o["json"]:
        return emit_json(res)
    print(f"deleted {o['container']}")
    return EXIT_OK


def cmd_audit(client, o):
    res = client.request("audit", container=o["container"])
    if o["json"]:
        emit_json(res)
    else:
        print_audit(res)
    path = o.get("allow_list")
    if path is None:
        return EXIT_OK
    items, skipped = audit_allow_items(res.get("entries") or [])
    try:
        n = allowlist.write(path, items)
    except OSError as e:
        err(f"audit: cannot write {path}: {e.strerror or e}")
        return EXIT_ERROR
    # stdout stays the JSON document with --json
    out = sys.stderr if o["json"] else sys.stdout
    note = f" ({skipped} of an unknown kind left out)" if skipped else ""
    out.write(f"wrote {n} item{'' if n == 1 else 's'} the policy refused or vgpu.ko does not "
              f"implement to {path}{note}\n")
    return EXIT_OK


#: the verdicts whose items an allow-list is for
ALLOW_VERDICTS = ("refuse", "not-implemented")


def audit_allow_items(entries: list) -> tuple[list, int]:
    """The items of an audit record's entries that an allow-list would
    forward: the policy refuses them or vgpu.ko does not implement them,
    and the slice called them (refused, or let through by audit mode or
    its allow-list).  -> (allowlist.AllowItem list, entries of a kind this
    vgpuctl does not know)."""
    items, skipped = [], 0
    for e in entries:
        if not isinstance(e, dict) or e.get("verdict") not in ALLOW_VERDICTS:
            continue
        if not (_int(e.get("refused")) > 0 or _int(e.get("let_through")) > 0):
            continue
        kind, number = e.get("kind"), e.get("number")
        if kind not in allowlist.KINDS or isinstance(number, bool) or \
                not isinstance(number, int) or not 0 <= number <= 0xFFFFFFFF:
            skipped += 1
            continue
        name = e.get("name") if isinstance(e.get("name"), str) else ""
        items.append(allowlist.AllowItem.of(kind, number, name))
    return items, skipped


def _int(v) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def cmd_set_audit(client, o):
    on = o["mode"] == "on"
    res = client.request("set-audit", container=o["container"], audit=on)
    if o["json"]:
        return emit_json(res)
    s = res.get("slice") or {}
    line = f"audit mode {'on' if s.get('audit', on) else 'off'} for {o['container']} " \
           f"(slice {s.get('slice_id', '-')})"
    if on:
        line += (": what the policy refuses is forwarded and recorded "
                 f"(vgpuctl audit {o['container']})")
    print(line)
    return EXIT_OK


def cmd_gpus(client, o):
    res = client.request("gpus")
    if o["json"]:
        return emit_json(res)
    gpus = res.get("gpus", [])
    print_table(["GPU", "NAME", "UUID", "BUS ID", "MEMORY", "ALLOCATED", "USED", "UTIL",
                 "SLICES"], [_gpu_row(g) for g in gpus])
    sched = [g for g in gpus if isinstance(g.get("scheduler"), dict)]
    if sched:
        print()
        print_table(["GPU", "SCHED PERIOD", "LAYERS", "SWITCHES", "SCHED CPU"],
                    [_sched_row(g) for g in sched])
    return EXIT_OK


def _sched_row(g: dict) -> list[str]:
    sc = g.get("scheduler") or {}
    per = sc.get("period_us")
    cpu = sc.get("cpu_s")
    return [str(g.get("index", "?")), _dur(per / 1e6) if isinstance(per, (int, float)) else "-",
            "+".join(sc.get("layers") or []) or "none", str(sc.get("switches", "-")),
            f"{cpu:.3f}s" if isinstance(cpu, (int, float)) else "-"]


def _dur(seconds: float) -> str:
    return format_duration(seconds)


def cmd_status(client, o):
    res = client.request("status")
    if o["json"]:
        return emit_json(res)
    kernel = res.get("kernel") or {}
    rows = [
        ("vgpud", f"version {res.get('version', '?')}, pid {res.get('pid', '?')}, "
                  f"up {fmt_uptime(res.get('uptime_s'))}"),
        ("vgpu.ko", "loaded" if kernel.get("loaded") else "NOT LOADED"),
        ("slices", _count(res.get("slices"))),
        ("gpus", _count(res.get("gpus"))),
        ("config", res.get("config", "-")),
    ]
    st = res.get("state")
    if isinstance(st, dict):
        # saved false: the disk is full or read-only; vgpu.ko has the changes
        # and vgpud retries (docs/api.md, "When the state file cannot be written")
        err = st.get("error") or {}
        rows.append(("state", f"saved ({st.get('path', '-')})" if st.get("saved") else
                     f"NOT SAVED: {st.get('path', '-')}: {err.get('message', '?')} "
                     f"({err.get('errno', '?')}); vgpud retries"))
    sc = res.get("scheduler")
    if isinstance(sc, dict):
        per = sc.get("period_s")
        text = (f"period {_dur(per) if isinstance(per, (int, float)) else '-'}, layers "
                f"{'+'.join(sc['layers']) if sc.get('layers') else 'kernel default'}")
        if sc.get("supported") is False:
            text += " (vgpu.ko has no scheduler: compute not enforced)"
        rows.append(("scheduler", text))
    hist = res.get("history")
    if isinstance(hist, dict):
        # the usage history's writer (docs/history.md): a broken disk shows here
        if not hist.get("enabled"):
            text = "off"
        else:
            text = (f"{hist.get('state', '?')}, {_count(hist.get('written'))} samples written "
                    f"({hist.get('path', '-')})")
            lost = sum(x for x in (hist.get("dropped"), hist.get("lost"))
                       if isinstance(x, int) and not isinstance(x, bool))
            if lost:
                text += f", {lost} dropped"
            if hist.get("state") not in ("ok", "starting") and hist.get("last_error"):
                text += f"; last error: {hist['last_error']}"
        rows.append(("history", text))
    fc = res.get("forecast")
    if isinstance(fc, dict) and (fc.get("adjusted") or fc.get("held")):
        adj = fc.get("adjusted") or []
        rows.append(("forecast", ", ".join(f"{a.get('container')} compute "
                                           f"{_pct(a.get('compute'))}" for a in adj)
                     or "no adjustment" + (f"; held: {', '.join(map(str, fc['held']))}"
                                           if fc.get("held") else "")))
    img = res.get("image_env_profiles")
    if isinstance(img, list):
        # which profiles let a container image ask with its own VGPU_* variables
        rows.append(("image env", f"profiles {', '.join(map(str, img))}" if img
                     else "ignored (no profile allows it)"))
    for k, v in rows:
        print(f"{k + ':':<10} {v}")
    return EXIT_OK


def cmd_events(client, o):
    out = sys.stdout
    try:
        for ev in client.events():
            if o["json"]:
                out.write(json.dumps(ev, separators=(",", ":"), ensure_ascii=False) + "\n")
            else:
                out.write(fmt_event(ev) + "\n")
            out.flush()
    except KeyboardInterrupt:
        return EXIT_OK
    err(f"vgpud closed the event stream")
    return EXIT_ERROR


def cmd_top(client, o):
    return run_top(client, o, sys.stdout)


def cmd_trace(client, o):
    """Record a slice's calls (docs/trace.md) to --output: the header, each
    record as it comes (flushed: a crash loses nothing written), and on any
    stop a trailer with the counts; then one summary line on stderr."""
    path = o["output"]
    if path != "-" and not o.get("force") and os.path.lexists(path):
        err(f"trace: {quote(path)} exists (--force overwrites it)")
        return EXIT_ERROR
    header, records = client.trace(o["container"])
    seqs = SeqGaps()
    with records:
        try:
            out = open_output(path, bool(o.get("force")))
        except OSError as e:
            err(f"trace: cannot write {quote(path)}: {e.strerror or e}")
            return EXIT_ERROR
        try:
            # A stop signal is taken only while waiting for vgpud, so that
            # no line is half written before the trailer; not on stdout,
            # whose reader may stop reading while Ctrl-C must still work
            with StopSignals(guard=out is not sys.stdout) as sig:
                emit_line(out, trace.dumps(header))
                reason, failure = copy_records(records, out, seqs, o, sig)
                records.close()                     # vgpud stops tracing now
                emit_line(out, trace.dumps({"end": True, "records": seqs.records,
                                    "lost": seqs.lost()}))
                if out is not sys.stdout:
                    out.close()
        except BrokenPipeError:
            raise                                   # main's: the reader went away
        except OSError as e:
            err(f"trace: writing {quote(path)}: {e.strerror or e}")
            return EXIT_ERROR
        finally:
            if out is not sys.stdout and not out.closed:
                try:
                    out.close()
                except OSError:
                    pass
    where = "stdout" if path == "-" else path
    sys.stderr.write(f"trace of {o['container']}: {_plural(seqs.records, 'record')}, "
                     f"{seqs.lost()} lost -> {where}{f' ({reason})' if reason else ''}\n")
    if failure is not None:
        raise failure
    return EXIT_OK


def cmd_cdi(client, o):
    if o["generate"] != "generate":
        raise UsageError(f'cdi: unknown action {quote(o["generate"])} (only "generate")')
    slices = client.request("list").get("slices", [])
    fuse = o.get("fuse_mount") or os.environ.get("VGPU_FUSE_MOUNT") or "/run/vgpu/private/fs"
    sock = ac.socket_path(o.get("socket"))
    text = json.dumps(cdi_spec(slices, fuse, o.get("hook") or CDI_HOOK,
                               None if sock == ac.DEFAULT_SOCKET else sock), indent=2) + "\n"
    out = o.get("output")
    if not out or out == "-":
        sys.stdout.write(text)
        return EXIT_OK
    try:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        atomic_write(out, text)
    except OSError as e:
        err(f"cdi generate: cannot write {out}: {e.strerror or e}")
        return EXIT_ERROR
    return EXIT_OK


def cmd_runtime(client, o):
    if o["configure"] != "configure":
        raise UsageError(f'runtime: unknown action {quote(o["configure"])} (only "configure")')
    try:
        return rtconfig.run(o)
    except rtconfig.Refused as e:
        err(f"runtime configure: {e}")
        return EXIT_ERROR


def history_doc(client, o, columns: int = 120) -> dict:
    """The ``history`` op's document for the selectors and range of o
    (--since default -24h, --until now; --step default: a round step for
    ``columns`` columns)."""
    now = time.time()
    since_text, since = o.get("since", (None, now - 86400.0))
    until_text, until = o.get("until", (None, now))
    try:
        histview.check_range(since, until, since_text, until_text)
    except BadValue as e:
        label = "--until" if until_text is not None else "--since"
        raise invalid(label, e.value, e) from None
    step = o.get("step") or histview.auto_step(since, until, columns)
    args = {"since": since, "until": until, "step": step}
    for k, key in (("container", "container"), ("labels", "label"), ("gpu", "gpu")):
        if k in o:
            args[key] = o[k]
    return client.request("history", **args)


def cmd_history(client, o):
    if o.get("csv") and o["json"]:
        raise UsageError("history: give --json or --csv, not both")
    tty = sys.stdout.isatty()
    width = _term_width() if tty else 100
    doc = history_doc(client, o, max(40, width - 40))
    if o["json"]:
        return emit_json(doc)
    if o.get("csv"):
        sys.stdout.write(histview.render_csv(doc))
        return EXIT_OK
    if not doc.get("series"):
        print(f"no history between {fmt_time(doc.get('since'))} and "
              f"{fmt_time(doc.get('until'))} for this selection")
        return EXIT_OK
    sys.stdout.write(histview.render_terminal(doc, width, color=tty and
                                              not os.environ.get("NO_COLOR")))
    return EXIT_OK


def _term_width() -> int:
    return shutil.get_terminal_size((100, 24)).columns


def cmd_report(client, o):
    doc = history_doc(client, o, 480)
    page = report.render_html(doc, generated=time.time())
    path = o["html"]
    if path == "-":
        sys.stdout.write(page)
        return EXIT_OK
    try:
        atomic_write(path, page)
    except OSError as e:
        err(f"report: cannot write {path}: {e.strerror or e}")
        return EXIT_ERROR
    if o["json"]:
        return emit_json({"path": path, "series": len(doc.get("series") or []),
                          "bytes": len(page.encode())})
    print(f"wrote {path} ({len(doc.get('series') or [])} series)")
    return EXIT_OK


def cmd_forecast(client, o):
    if o.get("reset") and o.get("resume"):
        raise UsageError("forecast: give --reset or --resume, not both")
    args = {"label": o["label"]}
    if o.get("reset") or o.get("resume"):
        if "hours" in o:
            raise UsageError("forecast: --hours has no use with --reset or --resume")
        args["reset" if o.get("reset") else "resume"] = True
        res = client.request("forecast", **args)
        if o["json"]:
            return emit_json(res)
        if o.get("reset"):
            done = res.get("restored") or []
            print(f"{o['label']}: configured values restored"
                  f"{' for ' + ', '.join(map(str, done)) if done else ' (nothing was adjusted)'}"
                  f"; no new adjustment until --resume or a restart of vgpud")
        else:
            print(f"{o['label']}: forecast adjustments resumed")
        return EXIT_OK
    if "hours" in o:
        args["hours"] = o["hours"]
    res = client.request("forecast", **args)
    if o["json"]:
        return emit_json(res)
    print_forecast(res)
    return EXIT_OK


def print_forecast(res: dict) -> None:
    h = res.get("history") or {}
    n = h.get("samples") or 0
    print(f"forecast for {res.get('label')}: {res.get('slices', 0)} slice(s) now; "
          f"history: {n} point(s)"
          + (f" from {fmt_time(h.get('first'))} to {fmt_time(h.get('last'))}" if n else ""))
    rows = []
    for p in res.get("points") or []:
        m, g = p.get("memory") or {}, p.get("gpu") or {}
        t = p.get("t")
        rows.append([time.strftime("%a %H:%M", time.localtime(t))
                     if isinstance(t, (int, float)) else "-",
                     histview.fmt_bytes(m.get("p50")), histview.fmt_bytes(m.get("p95")),
                     histview.fmt_share(g.get("p50")), histview.fmt_share(g.get("p95")),
                     f"{g.get('confidence', 0):.2f}" if isinstance(g.get("confidence"),
                                                                   (int, float)) else "-",
                     str(g.get("source", "-"))])
    if rows:
        print()
        print_table(["TIME", "MEM P50", "MEM P95", "GPU P50", "GPU P95", "CONF", "FROM"], rows)
    rec = res.get("recommended") or {}
    rm, rc = rec.get("memory") or {}, rec.get("compute") or {}
    print()
    print(f"recommended: memory {_size(rm.get('bytes'))} for the label"
          + (f" ({_size(rm.get('per_slice'))} a slice)" if rm.get("per_slice") is not None else "")
          + f", compute {_pct(rc.get('percent'))} of a GPU"
          + (f" ({_pct(rc.get('per_slice'))} a slice)" if rc.get("per_slice") is not None else "")
          + (f"; confidence {rc.get('confidence'):.2f}"
             if isinstance(rc.get("confidence"), (int, float)) else ""))
    adj = res.get("adjustments") or []
    if adj:
        print("adjusted now: " + ", ".join(f"{a.get('container')} compute "
                                           f"{_pct(a.get('compute'))}" for a in adj))


def cmd_help(client, o):
    name = o.get("command")
    if name is None:
        sys.stdout.write(usage_text())
        return EXIT_OK
    cmd = find_command(name)
    sys.stdout.write(command_help(cmd))
    return EXIT_OK


COMMANDS = (
    Cmd("list", (), (), "list the slices with their quotas and use", cmd_list),
    Cmd("show", ("CONTAINER",), (), "show one slice in full", cmd_show),
    Cmd("create", ("CONTAINER",), (
        Opt("--cgroup", "PATH", "the container's cgroup (v2 path)", c_nonempty),
        Opt("--pid", "PID", "a process of the container (instead of --cgroup)", c_pid),
        O_GPU, *QUOTA_OPTS,
        Opt("--label", "KEY=VALUE", "a label (schedules select slices by label); repeatable",
            c_label, dest="labels", multi=True),
    ), "create a slice for a container (unset quotas: profile, then defaults)",
        cmd_create),
    Cmd("set-quota", ("CONTAINER",), (
        *QUOTA_OPTS,
        Opt("--gpu", "GPU", "change the memory quota on these GPUs of the slice only "
            "(index or UUID; repeat or comma-separate)", c_gpus, dest="gpus", multi=True),
    ), "change an existing slice's quotas; returns once the kernel has applied them",
        cmd_set_quota),
    Cmd("delete", ("CONTAINER",), (
        Opt("--force", None, "delete even while processes of the slice have it open"),
    ), "delete a container's slice", cmd_delete),
    Cmd("audit", ("CONTAINER",), (
        Opt("--allow-list", "FILE", "also write the items the policy refused or vgpu.ko does "
            "not implement, as an allow-list for a profile's allow_list (kind, number, "
            "name; replaced atomically)", c_nonempty),
    ), "a slice's audit record: what it called, the policy's verdicts, the counts",
        cmd_audit),
    Cmd("set-audit", ("CONTAINER", "on|off"), (),
        "audit mode: forward and record what the policy refuses (trusted workloads only)",
        cmd_set_audit),
    Cmd("gpus", (), (), "list the GPUs with their memory, allocations and use", cmd_gpus),
    Cmd("top", (), (
        Opt("--once", None, "print one frame and exit (implied when stdout is not a terminal)"),
        Opt("--interval", "S", "seconds between frames (default 1)", c_duration),
    ), "a live view of GPUs and slices, refreshed each second (Ctrl-C quits)", cmd_top),
    Cmd("events", (), (), "stream events, one line each, until Ctrl-C", cmd_events),
    Cmd("trace", ("CONTAINER",), (
        Opt("--output", "FILE", "write the trace here, JSON lines (docs/trace.md); FILE.gz "
            "is gzip-compressed, - is stdout", c_nonempty, required=True),
        Opt("--count", "N", "stop after N records", c_count),
        Opt("--seconds", "S", "stop after S seconds (e.g. 30, 500ms, 2m)", c_duration),
        Opt("--force", None, "overwrite FILE if it exists"),
    ), "record a slice's calls through vgpu.ko to a file until Ctrl-C, --count or "
       "--seconds", cmd_trace),
    Cmd("history", (), (*HISTORY_OPTS,
        Opt("--csv", None, "CSV, one line per point (header first; times in UTC)"),
    ), "the slices' memory and GPU time over a time range (sparklines on a terminal; "
       "--json, --csv)", cmd_history),
    Cmd("report", (), (
        Opt("--html", "FILE", "write the report here (one self-contained HTML page; - is "
            "stdout)", c_nonempty, required=True),
        *HISTORY_OPTS,
    ), "an HTML report of the history: configured vs used memory, target vs achieved "
       "GPU time", cmd_report),
    Cmd("forecast", ("LABEL",), (
        Opt("--hours", "N", "hours ahead (default 24, at most 168)", c_hours),
        Opt("--reset", None, "restore the configured values of the label's slices that "
            "forecasts adjusted, and hold it (until --resume or a restart of vgpud)"),
        Opt("--resume", None, "let forecasts adjust the label's slices again"),
    ), "a label's (KEY=VALUE) predicted memory and GPU time by hour, and the quotas that "
       "would cover them", cmd_forecast),
    Cmd("status", (), (), "vgpud's version, uptime and counts; whether vgpu.ko is loaded "
        "and the state file saved", cmd_status),
    Cmd("cdi", ("generate",), (
        Opt("--output", "FILE", "write the spec here (e.g. /etc/cdi/vgpu.json; default: "
            "stdout)", c_nonempty),
        Opt("--fuse-mount", "DIR", "where vgpufs is mounted (default $VGPU_FUSE_MOUNT, "
            "else /run/vgpu/private/fs)", c_nonempty),
        Opt("--hook", "PATH", f"the vgpu-oci-hook the spec's createRuntime hook runs "
            f"(default {CDI_HOOK})", c_nonempty),
    ), "cdi generate: write a CDI spec (kind vgpu.io/slice) with one device per slice",
        cmd_cdi),
    Cmd("runtime", ("configure",), (
        Opt("--config", "PATH", f"containerd's config (default {rtconfig.DEFAULT_CONFIG}); "
            "version 2 (containerd 1.x) is edited in place, version 3 (2.x) gets a drop-in",
            rtconfig.parse_path),
        Opt("--runtime-path", "PATH", f"the vgpu-runtime binary the handler runs (default "
            f"{rtconfig.DEFAULT_RUNTIME_PATH})", rtconfig.parse_abs_path),
        Opt("--handler", "NAME", f"the handler's name, a RuntimeClass's handler (default "
            f"{rtconfig.DEFAULT_HANDLER})", rtconfig.parse_handler),
        Opt("--set-default", None, "also make it containerd's default_runtime_name (every "
            "pod then runs through vgpu-runtime, which hands those asking for no slice to runc)"),
        Opt("--drop-in", "PATH", "version 3: the drop-in file (default "
            f"CONFIGDIR/{rtconfig.DROP_IN_NAME}), added to imports", rtconfig.parse_path),
        Opt("--in-place", None, "version 3: edit the main file instead of a drop-in"),
        Opt("--config-version", "2|3", "the version to write when there is no config (default "
            "2: containerd 1.x reads it, 2.x migrates it)", rtconfig.parse_config_version),
        Opt("--force", None, "replace a different handler of that name"),
        Opt("--dry-run", None, "print the diff of what would change; write nothing"),
    ), "runtime configure: add the vgpu runtime handler to containerd's config "
       "(then restart containerd)", cmd_runtime),
    Cmd("help", ("[COMMAND]",), (), "this text, or a command's", cmd_help),
)


def find_command(name: str) -> Cmd:
    for c in COMMANDS:
        if c.name == name:
            return c
    near = [c.name for c in COMMANDS if c.name.startswith(name[:2])] if name else []
    hint = f"; did you mean {' or '.join(near)}?" if near else ""
    raise UsageError(f'unknown command "{name}"{hint} (see {PROG} --help)')


# ------------------------------------------------------------ usage texts
def _synopsis(cmd: Cmd) -> str:
    parts = [PROG, cmd.name, *cmd.args]
    parts += [o.spelling() if o.required else f"[{o.spelling()}]" for o in cmd.opts]
    return " ".join(parts)


def _opt_lines(opts) -> list[str]:
    width = max(len(o.spelling()) for o in opts)
    return [f"  {o.spelling():<{width}}  {o.help}" for o in opts]


def usage_text() -> str:
    width = max(len(c.name) for c in COMMANDS)
    lines = [f"usage: {PROG} [--socket PATH] [--timeout S] [--json] COMMAND [ARGS...]", "",
             "Administer GPU slices through vgpud.", "", "commands:"]
    for c in COMMANDS:
        lines.append(f"  {c.name:<{width}}  {c.summary}")
    lines += ["", "options (before or after the command):", *_opt_lines(GLOBAL_OPTS), "",
              "values: sizes as Kubernetes quantities, 8Gi, 512Mi, 4G (4x10^9) or bytes;",
              f"compute 30%; priority {'|'.join(PRIORITIES)}; policy {'|'.join(POLICIES)}.", "",
              EXIT_TEXT, "", f"'{PROG} help COMMAND' or '{PROG} COMMAND --help' for a "
              "command's options.", ""]
    return "\n".join(lines)


def command_help(cmd: Cmd) -> str:
    lines = [f"usage: {_synopsis(cmd)}", "", cmd.summary + ".", ""]
    if cmd.opts:
        lines += ["options:", *_opt_lines(cmd.opts), ""]
    lines += ["common options:", *_opt_lines(GLOBAL_OPTS), "", EXIT_TEXT, ""]
    return "\n".join(lines)


# ------------------------------------------------------------ parsing
def parse_args(argv: list[str]) -> tuple[Cmd | None, dict]:
    """-> (command, options).  Options are keyed by dest; absent ones are
    absent (``json`` is always there).  Raises UsageError.  (None, {...})
    with ``help`` set means general help."""
    cmd: Cmd | None = None
    o: dict = {"json": False}
    positionals: list[str] = []
    table = {x.name: x for x in GLOBAL_OPTS}
    i, only_positional = 0, False
    while i < len(argv):
        a = argv[i]
        i += 1
        if only_positional or not a.startswith("-") or a == "-":
            if cmd is None:
                cmd = find_command(a)
                table.update({x.name: x for x in cmd.opts})
            else:
                positionals.append(a)
            continue
        if a == "--":
            only_positional = True
            continue
        if a == "-h":
            a = "--help"
        name, eq, value = a.partition("=")
        opt = table.get(name)
        if opt is None:
            where = f" for {cmd.name}" if cmd else ""
            raise UsageError(f'unknown option "{name}"{where} (see {PROG} '
                             f'{cmd.name + " " if cmd else ""}--help)')
        if opt.metavar is None:
            if eq:
                raise UsageError(f"{name} takes no value")
            o[opt.dest] = True
            continue
        if not eq:
            if i >= len(argv):
                raise UsageError(f"{name} needs a value ({opt.metavar})")
            value = argv[i]
            i += 1
        try:
            v = opt.conv(value) if opt.conv else value
        except BadValue as e:
            raise invalid(name, value, e) from None
        if opt.multi:
            if isinstance(v, tuple):
                o.setdefault(opt.dest, {})[v[0]] = v[1]
            else:
                lst = o.setdefault(opt.dest, [])
                for g in v:
                    if g in lst:
                        raise UsageError(f"{name}: GPU {g} named twice")
                    lst.append(g)
        else:
            if opt.dest in o:
                raise UsageError(f"{name} given twice")
            o[opt.dest] = v
    if o.get("help") or o.get("version"):
        return cmd, o
    if cmd is None:
        raise UsageError(f"no command given (see {PROG} --help)")
    required = [a for a in cmd.args if not a.startswith("[")]
    if len(positionals) < len(required):
        raise UsageError(f"{cmd.name}: missing {' '.join(required[len(positionals):])} "
                         f"(usage: {_synopsis(cmd)})")
    if len(positionals) > len(cmd.args):
        extra = positionals[len(cmd.args)]
        raise UsageError(f"{cmd.name}: unexpected argument {quote(extra)}")
    for opt in cmd.opts:
        if opt.required and opt.dest not in o:
            raise UsageError(f"{cmd.name}: missing {opt.spelling()} (usage: {_synopsis(cmd)})")
    for spec, value in zip(cmd.args, positionals):
        name = spec.strip("[]")
        key = ARG_KEYS.get(name, name.lower())
        conv = ARG_CONV.get(key)
        if conv is not None:
            try:
                value = conv(value)
            except BadValue as e:
                raise invalid(ARG_LABELS.get(name, name), value, e) from None
        o[key] = value
    if cmd.name == "help" and "command" in o:
        find_command(o["command"])
    return cmd, o


#: positional arguments: the option key of each spelling that is not a
#: word, and the converter that checks a value before anything is sent
ARG_KEYS = {"on|off": "mode"}
ARG_LABELS = {"on|off": "audit mode"}
ARG_CONV = {"container": c_container, "mode": c_onoff, "label": c_label_sel}


# ------------------------------------------------------------ output
def err(msg: str) -> None:
    sys.stderr.write(f"{PROG}: {msg}\n")


def emit_json(obj) -> int:
    sys.stdout.write(json.dumps(obj, indent=2, ensure_ascii=False) + "\n")
    return EXIT_OK


def _size(n) -> str:
    if isinstance(n, bool) or not isinstance(n, int):
        return "-" if n is None else str(n)
    return format_size(n).replace(" ", "")


def _pct(x) -> str:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return "-" if x is None else str(x)
    return format_percent(float(x))


def _count(v) -> str:
    if isinstance(v, (list, dict)):
        return str(len(v))
    return "-" if v is None else str(v)


def _sum(gpus, key):
    vals = [g.get(key) for g in gpus if isinstance(g.get(key), int)]
    return sum(vals) if vals else None


def _slice_row(s: dict) -> list[str]:
    gpus = s.get("gpus") or []
    comp = s.get("compute") or {}
    return [str(s.get("container", "?")),
            ",".join(str(g.get("index", "?")) for g in gpus) or "-",
            _size(_sum(gpus, "memory_used")), _size(_sum(gpus, "memory_limit")),
            _size(_sum(gpus, "memory_peak")), _pct(comp.get("percent")),
            str(comp.get("priority") or "-"), str(comp.get("policy") or "-"),
            str(s.get("profile") or "-"), _count(s.get("pids"))]


def _gpu_row(g: dict) -> list[str]:
    return [str(g.get("index", "?")), str(g.get("name") or "-"), str(g.get("uuid") or "-"),
            str(g.get("pci_bus_id") or "-"), _size(g.get("memory_total")),
            _size(g.get("memory_allocated")), _size(g.get("memory_used")),
            _pct(g.get("utilization")), _count(g.get("slices"))]


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
        ("compute", f"{_pct(comp.get('percent'))} {comp.get('policy') or '-'}, "
                    f"priority {comp.get('priority') or '-'}"),
    ]
    if dev:
        minors = dev.get("gpu_minors")
        rows.append(("devices", f"major {dev.get('major', '-')}, ctl minor "
                                f"{dev.get('ctl_minor', '-')}, uvm minor {dev.get('uvm_minor', '-')}, "
                                f"gpu minors "
                                f"{' '.join(map(str, minors)) if isinstance(minors, list) else '-'}"))
    for k, v in rows:
        print(f"{k + ':':<11} {v}")
    gpus = s.get("gpus") or []
    if gpus:
        print()
        print_table(["GPU", "UUID", "REAL MINOR", "LIMIT", "USED", "PEAK", "ALLOCS", "REFUSALS"],
                    [[str(g.get("index", "?")), str(g.get("uuid") or "-"),
                      str(g.get("real_minor", "-")), _size(g.get("memory_limit")),
                      _size(g.get("memory_used")), _size(g.get("memory_peak")),
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
                                _int(e.get("number"))))
    if entries:
        print_table(["KIND", "NUMBER", "NAME", "VERDICT", "CALLS", "REFUSED", "LET-THROUGH"],
                    [[str(e.get("kind", "?")), _number(e.get("kind"), e.get("number")),
                      str(e.get("name") or "-"), str(e.get("verdict", "?")),
                      str(e.get("calls", "-")), str(e.get("refused", "-")),
                      str(e.get("let_through", "-"))] for e in entries])
    else:
        print("nothing recorded" + ("" if res.get("audit") else
                                    " (audit mode is off: only refusals are recorded)"))
    calls = sum(_int(e.get("calls")) for e in entries)
    refused = sum(_int(e.get("refused")) for e in entries)
    let = sum(_int(e.get("let_through")) for e in entries)
    n = res.get("allow_count")
    parts = [f"{_plural(len(entries), 'item')}, {_plural(calls, 'call')}: {refused} refused, "
             f"{let} let through",
             f"audit mode {'on' if res.get('audit') else 'off'}",
             f"allow-list {_plural(n, 'item') if isinstance(n, int) else '-'}"]
    dropped = _int(res.get("dropped"))
    if dropped:
        parts.append(f"{_plural(dropped, 'call')} not recorded (the record is full)")
    print("; ".join(parts))


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _number(kind, number) -> str:
    if isinstance(number, bool) or not isinstance(number, int):
        return "-" if number is None else str(number)
    return f"0x{number:02x}" if kind == "escape" else f"0x{number:08x}"


def _compute_row(g: dict) -> list[str]:
    c = g.get("compute") or {}
    t = c.get("gpu_time_s")
    paused = c.get("paused")
    return [str(g.get("index", "?")), str(c.get("policy") or "-"), _pct(c.get("percent")),
            str(c.get("priority") or "-"),
            f"{t:.3f}s" if isinstance(t, (int, float)) and not isinstance(t, bool) else "-",
            _pct(c.get("achieved_percent")),
            "-" if paused is None else ("yes" if paused else "no"),
            _count(c.get("tsgs")), _count(c.get("channels"))]


def _per_gpu(gpus: list, key: str) -> str:
    """A compute figure of each GPU of a slice, comma-separated."""
    vals = [(g.get("compute") or {}).get(key) for g in gpus]
    if not vals or all(v is None for v in vals):
        return "-"
    return ",".join(_pct(v) for v in vals)


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
                           for r in map(_gpu_row, frame["gpus"])])
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
            target = _pct(comp.get("percent"))
        rows.append([str(s.get("container", "?")),
                     ",".join(str(g.get("index", "?")) for g in gpus) or "-",
                     _size(u), _size(lim),
                     f"{100 * u / lim:.0f}%" if lim and u is not None else "-",
                     _size(_sum(gpus, "memory_peak")), target,
                     _per_gpu(gpus, "achieved_percent"),
                     str(comp.get("priority") or "-"), str(comp.get("policy") or "-"),
                     _count(_sum(gpus, "refusals"))])
    lines += format_table(["CONTAINER", "GPUS", "USED", "LIMIT", "USE", "PEAK", "TARGET",
                           "ACHIEVED", "PRIORITY", "POLICY", "REFUSALS"], rows)
    if height is not None and len(lines) > height:
        lines = lines[:max(height - 1, 1)] + [f"... {len(lines) - height + 1} more lines"]
    if width is not None:
        lines = [ln[:width] for ln in lines]
    return lines


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


# ------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    try:
        cmd, o = parse_args(argv)
    except UsageError as e:
        err(str(e))
        return EXIT_USAGE
    if o.get("help"):
        sys.stdout.write(command_help(cmd) if cmd is not None and cmd.name != "help"
                         else usage_text())
        return EXIT_OK
    if o.get("version"):
        sys.stdout.write(f"{PROG} {__version__}\n")
        return EXIT_OK
    if cmd.name == "help":
        return cmd.run(None, o)

    client = ac.ApiClient(o.get("socket"), o.get("timeout", 5.0))
    try:
        return cmd.run(client, o)
    except UsageError as e:
        err(str(e))
        return EXIT_USAGE
    except ac.DaemonUnavailable as e:
        err(str(e))
        return EXIT_UNAVAILABLE
    except ac.PermissionDenied as e:
        err(f"permission denied: {e.message}" if not e.message.startswith("permission")
            else e.message)
        return EXIT_PERMISSION
    except ac.ApiError as e:
        err(f"{cmd.name}: {e.message} ({e.code})")
        return EXIT_NOT_FOUND if e.code == "not-found" else EXIT_ERROR
    except ac.ClientError as e:
        err(str(e))
        return EXIT_ERROR
    except KeyboardInterrupt:
        sys.stderr.write("\n")
        return 130
    except BrokenPipeError:
        # the reader went away (vgpuctl list | head): not our error
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except OSError:
            pass
        return EXIT_OK
    finally:
        client.close()


if __name__ == "__main__":
    sys.exit(main())
