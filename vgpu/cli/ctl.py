"""vgpuctl: administer GPU slices through vgpud's admin API (docs/api.md).

One table, ``COMMANDS``, defines every subcommand: its arguments, its
options (with the converter that validates each value locally, before
anything is sent), its one-line summary and its function.  The parser and
the usage texts are generated from it, as in ``wg``.

The commands with heavy imports live in modules of their own, which the
table names by "module:name" reference and vgpuctl imports only when that
command runs (vgpu.cli.ctlargv.resolve): ``audit`` (vgpu.cli.ctlaudit),
``trace`` (vgpu.cli.ctltrace), ``history``, ``report`` and ``forecast``
(vgpu.cli.ctlhist), ``runtime`` (vgpu.cli.ctlruntime).  So --help and the
commands defined here start without them (bench/cli_start.py).

Every value is checked by vgpu.common.values, the parsers the daemon's API and
config file use too, before anything is sent; a bad one is a usage error
quoting it.  Standard library only (and vgpu.common.values, vgpu.abi, vgpu.cli).
"""

from __future__ import annotations

import json
import os
import sys
import time

from vgpu import __version__
from vgpu.cli import rtdefaults
from vgpu.cli.ctlargv import (ARG_CONV, ARG_KEYS, ARG_LABELS, EXIT_ERROR, EXIT_NOT_FOUND, EXIT_OK,
                              EXIT_PERMISSION, EXIT_TEXT, EXIT_UNAVAILABLE, EXIT_USAGE, GLOBAL_OPTS,
                              HISTORY_OPTS, O_GPU, PROG, QUOTA_OPTS, RDMA_OPTS, Cmd, Opt, UsageError,
                              c_count,
                              c_duration, c_gpus, c_hours, c_label, c_nonempty, c_pid, invalid,
                              resolve)
from vgpu.cli.ctlrender import (count_text, emit_json, err, fmt_event, fmt_uptime, gpu_row,
                                pct_text, print_slice, print_table, run_top, slice_row)
from vgpu.common import apiclient as ac
from vgpu.common.request import LABELS as K8S_LABELS
from vgpu.common.values import POLICIES, PRIORITIES, BadValue, format_duration, quote


def cmd_list(client, o):
    res = client.request("list")
    if o["json"]:
        return emit_json(res)
    slices = res.get("slices", [])
    rows = [slice_row(s) for s in slices]
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


def _rdma_arg(o) -> dict:
    """--rdma-hca, --rdma-handles, --rdma-objects as the API's rdma object."""
    return {k: o[f"rdma_{k}"] for k in ("hca", "handles", "objects") if f"rdma_{k}" in o}


def cmd_create(client, o):
    if "cgroup" in o and "pid" in o:
        raise UsageError("create: give --cgroup or --pid, not both")
    args = {k: o[k] for k in ("cgroup", "pid", "gpus", "memory", "compute", "priority",
                              "policy", "profile", "labels") if k in o}
    rdma = _rdma_arg(o)
    if rdma or o.get("rdma"):
        args["rdma"] = rdma or True
    res = client.request("create", container=o["container"], **args)
    if o["json"]:
        return emit_json(res)
    print_slice(res.get("slice", {}))
    return EXIT_OK


def cmd_set_quota(client, o):
    args = {k: o[k] for k in ("memory", "compute", "priority", "policy", "profile", "gpus")
            if k in o}
    if _rdma_arg(o):
        args["rdma"] = _rdma_arg(o)
    if not (args.keys() - {"gpus"}):
        raise UsageError("set-quota: nothing to change (give --memory, --compute, "
                         "--priority, --policy, --profile, --rdma-handles or --rdma-objects)")
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
                 "SLICES"], [gpu_row(g) for g in gpus])
    for g in gpus:
        f = g.get("fault")
        if isinstance(f, dict):
            at = f.get("at")
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at)) \
                if isinstance(at, (int, float)) else "?"
            print(f"GPU {g.get('index', '?')} is unhealthy: XID {f.get('xid', '?')} at {when} "
                  f"(the device plugin advertises its devices Unhealthy until vgpud restarts)")
    paired = [g for g in gpus if isinstance(g.get("hca"), dict)]
    if paired:
        # nvidia-smi topo's words: PIX one switch, PXB switches, PHB one
        # host bridge, NODE one NUMA node, SYS across
        print()
        print_table(["GPU", "RDMA ADAPTER", "LINK"],
                    [[str(g.get("index", "?")), str(g["hca"].get("name", "?")),
                      str(g["hca"].get("link", "?"))] for g in paired])
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
        ("slices", count_text(res.get("slices"))),
        ("gpus", count_text(res.get("gpus"))),
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
            text = (f"{hist.get('state', '?')}, {count_text(hist.get('written'))} samples written "
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
                                           f"{pct_text(a.get('compute'))}" for a in adj)
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
        Opt("--rdma", None, "give the slice the RDMA adapter closest to its GPU, with "
            "[rdma]'s limits (docs/rdma.md)"),
        Opt("--rdma-hca", "NAME", "that adapter instead of the closest (implies --rdma)",
            c_nonempty),
        *RDMA_OPTS,
    ), "create a slice for a container (unset quotas: profile, then defaults)",
        cmd_create),
    Cmd("set-quota", ("CONTAINER",), (
        *QUOTA_OPTS, *RDMA_OPTS,
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
        "vgpu.cli.ctlaudit:cmd_audit"),
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
       "--seconds", "vgpu.cli.ctltrace:cmd_trace"),
    Cmd("history", (), (*HISTORY_OPTS,
        Opt("--csv", None, "CSV, one line per point (header first; times in UTC)"),
    ), "the slices' memory and GPU time over a time range (sparklines on a terminal; "
       "--json, --csv)", "vgpu.cli.ctlhist:cmd_history"),
    Cmd("report", (), (
        Opt("--html", "FILE", "write the report here (one self-contained HTML page; - is "
            "stdout)", c_nonempty, required=True),
        *HISTORY_OPTS,
    ), "an HTML report of the history: configured vs used memory, target vs achieved "
       "GPU time", "vgpu.cli.ctlhist:cmd_report"),
    Cmd("forecast", ("LABEL",), (
        Opt("--hours", "N", "hours ahead (default 24, at most 168)", c_hours),
        Opt("--reset", None, "restore the configured values of the label's slices that "
            "forecasts adjusted, and hold it (until --resume or a restart of vgpud)"),
        Opt("--resume", None, "let forecasts adjust the label's slices again"),
    ), "a label's (KEY=VALUE) predicted memory and GPU time by hour, and the quotas that "
       "would cover them", "vgpu.cli.ctlhist:cmd_forecast"),
    Cmd("status", (), (), "vgpud's version, uptime and counts; whether vgpu.ko is loaded "
        "and the state file saved", cmd_status),
    Cmd("cdi", ("generate",), (
        Opt("--output", "FILE", "write the spec here (e.g. /etc/cdi/vgpu.json; default: "
            "stdout)", c_nonempty),
        Opt("--fuse-mount", "DIR", "where vgpufs is mounted (default $VGPU_FUSE_MOUNT, "
            "else /run/vgpu/private/fs)", c_nonempty),
        Opt("--hook", "PATH", f"the vgpu-oci-hook the spec's createRuntime hook runs "
            f"(default {rtdefaults.CDI_HOOK})", c_nonempty),
        Opt("--driver-version", "V", "the NVIDIA driver's version whose files the spec "
            "brings (default: /proc/driver/nvidia/version, else vgpud's)",
            "vgpu.cli.ctlcdi:c_driver_version"),
        Opt("--driver-lib-dir", "DIR", "also take the driver's libraries (lib*.so.<version>) "
            "from DIR; repeat for several (default $VGPU_DRIVER_LIB_DIRS)",
            "vgpu.cli.ctlcdi:c_abs_dir",
            multi=True),
        Opt("--driver-bin-dir", "DIR", "look for nvidia-smi and the driver's other tools in "
            "DIR before PATH; repeat for several (default $VGPU_DRIVER_BIN_DIRS)",
            "vgpu.cli.ctlcdi:c_abs_dir",
            multi=True),
        Opt("--no-driver-files", None, "device nodes and the views only: no driver "
            "library, tool or firmware"),
    ), "cdi generate: write a CDI spec (kind vgpu.io/slice) with one device per slice",
        "vgpu.cli.ctlcdi:cmd_cdi"),
    Cmd("runtime", ("configure",), (
        Opt("--config", "PATH", f"containerd's config (default {rtdefaults.DEFAULT_CONFIG}); "
            "version 2 (containerd 1.x) is edited in place, version 3 (2.x) gets a drop-in",
            "vgpu.cli.rtconfig:parse_path"),
        Opt("--runtime-path", "PATH", f"the vgpu-runtime binary the handler runs (default "
            f"{rtdefaults.DEFAULT_RUNTIME_PATH})", "vgpu.cli.rtconfig:parse_abs_path"),
        Opt("--handler", "NAME", f"the handler's name, a RuntimeClass's handler (default "
            f"{rtdefaults.DEFAULT_HANDLER})", "vgpu.cli.rtconfig:parse_handler"),
        Opt("--set-default", None, "also make it containerd's default_runtime_name (every "
            "pod then runs through vgpu-runtime, which hands those asking for no slice to runc)"),
        Opt("--drop-in", "PATH", "version 3: the drop-in file (default "
            f"CONFIGDIR/{rtdefaults.DROP_IN_NAME}), added to imports",
            "vgpu.cli.rtconfig:parse_path"),
        Opt("--in-place", None, "version 3: edit the main file instead of a drop-in"),
        Opt("--config-version", "2|3", "the version to write when there is no config (default "
            "2: containerd 1.x reads it, 2.x migrates it)",
            "vgpu.cli.rtconfig:parse_config_version"),
        Opt("--force", None, "replace a different handler of that name, or another default "
            "runtime (--set-default)"),
        Opt("--toolkit-config", "PATH", "NVIDIA Container Toolkit's config, checked when its "
            f"handler is there (default {rtdefaults.TOOLKIT_CONFIG})",
            "vgpu.cli.rtconfig:parse_path"),
        Opt("--dry-run", None, "print the diff of what would change; write nothing"),
    ), "runtime configure: add the vgpu runtime handler to containerd's config "
       "(then restart containerd)", "vgpu.cli.ctlruntime:cmd_runtime"),
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
            v = resolve(opt.conv)(value) if opt.conv else value
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
        return resolve(cmd.run)(None, o)

    client = ac.ApiClient(o.get("socket"), o.get("timeout", 5.0))
    try:
        return resolve(cmd.run)(client, o)
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
