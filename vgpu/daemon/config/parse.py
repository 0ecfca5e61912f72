"""vgpud's configuration file (TOML) parsed and validated into the schema
(vgpu.daemon.config.schema): every error message about the file.  No I/O
besides reading the file in load_config() and the allow-list files profiles
name (vgpu.abi.allowlist, read when the config is parsed, so that a bad one
fails the load).

Errors are collected, not raised one by one: ConfigError lists every problem
in the file, each as ``<file>: <dotted.key>: <quoted bad value> <reason>``
(TOML syntax errors as ``<file>:<line>: <reason>``).  The values vgpuctl,
the API and the hook also take (sizes, percentages, durations, policies,
priorities, profile names, GPUs) are parsed by vgpu.common.values: the text after
the key is theirs.
"""

from __future__ import annotations

import datetime
import ipaddress
import re
import tomllib
from pathlib import Path
from typing import Any, Mapping

from vgpu.abi import allowlist
from vgpu.daemon.policy import PLACEMENTS
from vgpu.common.values import (POLICIES, PRIORITIES, BadValue, format_duration, format_size,
                                parse_bool, parse_duration, parse_gpu, parse_percent,
                                parse_policy, parse_priority, parse_profile, parse_size, quote,
                                read_utf8)
from vgpu.common.rdma import HANDLES_MAX, OBJECTS_MAX, limit
from vgpu.daemon.config.schema import (Rdma, AUDIT_KEYS, AuditSpec, Config, ConfigError, DAYS,
                                       DEFAULT_CONFIG_PATH, FORECAST_KEYS, FORECAST_MODES,
                                       ForecastSpec, GC_MAX, GC_MIN, GROUP_RE, HISTORY_INTERVAL,
                                       HISTORY_RETENTION_MAX, HISTORY_SIZE_MIN, HISTORY_STEP,
                                       HOSTNAME_RE, History, K8S_FACTOR_MAX, K8S_NAMESPACE_RE,
                                       K8S_DRA_SOCK_MAX, K8S_POD_REQUESTS, K8S_SOCK_NAME_MAX,
                                       Kubernetes, LABEL_KEY_RE, LABEL_VALUE_RE, LEAD_MAX,
                                       LEAD_MIN, LIMIT_KEYS, LOG_LEVELS, Limits, MAX_CHANNELS_MAX,
                                       Node, OVER_QUOTA_ACTIONS, PERIOD_MAX, PERIOD_MIN, Paths,
                                       SCHED_LAYERS, SUN_PATH_MAX, SliceSpec, UVM_MODES, Window,
                                       days_text, parse_spec)

# --------------------------------------------------------------------------
# parsing


def parse_clock(v: str) -> datetime.time:
    """A local wall-clock time "HH:MM" (00:00 to 23:59; "24:00" is refused:
    write "00:00").  Here, not in vgpu.common.values: only the config has
    windows, and datetime costs every hook and vgpuctl start ~1.5 ms."""
    if not isinstance(v, str):
        raise BadValue(v, "is not a time of day (use HH:MM, e.g. 08:00)")
    hh, colon, mm = v.strip().partition(":")
    if (not colon or not 1 <= len(hh) <= 2 or len(mm) != 2
            or not (hh + mm).isascii() or not (hh + mm).isdigit()):
        raise BadValue(v, "is not a time of day (use HH:MM, e.g. 08:00)")
    h, mi = int(hh), int(mm)
    if h > 23 or mi > 59:
        raise BadValue(v, "is not a time of day (00:00 to 23:59)")
    return datetime.time(h, mi)


def load_config(path: str | Path = DEFAULT_CONFIG_PATH) -> Config:
    """Read and validate a config file; raises ConfigError (including for a
    file that cannot be read)."""
    return parse_config(read_utf8(path, ConfigError), str(path))


_TOML_POS_RE = re.compile(r"\s*\(at line (\d+), column (\d+)\)\s*\Z")
_TOML_END_RE = re.compile(r"\s*\(at end of document\)\s*\Z")


def parse_config(text: str, path: str = "<string>") -> Config:
    """Validate TOML text; raises ConfigError listing every problem."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        msg = str(e)
        m = _TOML_POS_RE.search(msg)
        if m:
            raise ConfigError(f"{path}:{m.group(1)}: {msg[:m.start()]} "
                              f"(column {m.group(2)})") from None
        m = _TOML_END_RE.search(msg)
        if m:
            line = text.count("\n") + (0 if text.endswith("\n") else 1)
            raise ConfigError(f"{path}:{max(line, 1)}: {msg[:m.start()]} "
                              f"(at end of file)") from None
        raise ConfigError(f"{path}: {msg}") from None
    return _Parser(path).parse(raw)


_SECTIONS = ("paths", "api", "node", "defaults", "scheduler", "metrics", "log", "gc",
             "history", "profiles", "schedule", "kubernetes", "rdma")


def _typename(v: Any) -> str:
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, int):
        return "an integer"
    if isinstance(v, float):
        return "a number"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, list):
        return "an array"
    if isinstance(v, dict):
        return "a table"
    return "a date or time"


class _Parser:
    def __init__(self, path: str):
        self.path = path
        self.errors: list[str] = []

    def err(self, key: str, msg: str) -> None:
        self.errors.append(f"{self.path}: {key}: {msg}")

    # -- helpers over one table ------------------------------------------
    def table(self, raw: Mapping[str, Any], key: str) -> dict[str, Any]:
        v = raw.get(key, {})
        if not isinstance(v, dict):
            self.err(key, f"{quote(v)} is {_typename(v)}, not a table (write [{key}])")
            return {}
        return v

    def unknown(self, tbl: Mapping[str, Any], prefix: str, known: tuple[str, ...]) -> None:
        for k in tbl:
            if k not in known:
                self.err(prefix + k, f"unknown key (known: {', '.join(known)})")

    def string(self, tbl: Mapping[str, Any], key: str, dotted: str, default: str) -> str | None:
        v = tbl.get(key, default)
        if not isinstance(v, str):
            self.err(dotted, f"{quote(v)} is {_typename(v)}, not a string")
            return None
        return v

    def choice(self, tbl, key, dotted, default, choices) -> str:
        v = tbl.get(key, default)
        if v not in choices or not isinstance(v, str):
            self.err(dotted, f"{quote(v)} is not one of {', '.join(choices)}")
            return default
        return v

    def duration(self, tbl, key, dotted, default, lo, hi) -> float:
        if key not in tbl:
            return default
        v = tbl[key]
        try:
            x = parse_duration(v)
        except BadValue as e:
            self.err(dotted, str(e))
            return default
        if not (lo - 1e-12 <= x <= hi + 1e-12):
            self.err(dotted, f"{quote(v)} is out of range ({format_duration(lo)} to "
                             f"{format_duration(hi)})")
            return default
        return x

    def abspath(self, tbl, key, dotted, default: Path) -> Path:
        v = tbl.get(key, str(default))
        if not isinstance(v, str):
            self.err(dotted, f"{quote(v)} is {_typename(v)}, not a string")
            return default
        if not v.startswith("/"):
            self.err(dotted, f"{quote(v)} is not an absolute path")
            return default
        if "\0" in v:
            self.err(dotted, f"{quote(v)} contains a NUL byte")
            return default
        return Path(v)

    # -- the file ---------------------------------------------------------
    def parse(self, raw: dict[str, Any]) -> Config:
        base = Config(path=self.path)
        self.unknown(raw, "", _SECTIONS)

        t = self.table(raw, "paths")
        self.unknown(t, "paths.", ("socket", "state_dir", "fuse_mount"))
        sock = self.abspath(t, "socket", "paths.socket", base.paths.socket)
        if len(str(sock).encode()) > SUN_PATH_MAX:
            self.err("paths.socket", f"{quote(str(sock))} is too long for a Unix socket "
                                     f"(at most {SUN_PATH_MAX} bytes)")
            sock = base.paths.socket
        paths = Paths(
            socket=sock,
            state_dir=self.abspath(t, "state_dir", "paths.state_dir", base.paths.state_dir),
            fuse_mount=None if t.get("fuse_mount") == "" else     # "" disables vgpufs
            self.abspath(t, "fuse_mount", "paths.fuse_mount", base.paths.fuse_mount),
        )

        t = self.table(raw, "api")
        self.unknown(t, "api.", ("group",))
        group = self.string(t, "group", "api.group", "")
        if group and not (GROUP_RE.match(group) or group.isdigit()):
            self.err("api.group", f"{quote(group)} is not a group name or number")
            group = ""
        group = group or ""

        node = self.parse_node(self.table(raw, "node"))

        t = self.table(raw, "defaults")
        d = parse_spec(t, self.err, "defaults.")
        defaults = d.merged_over(base.defaults)

        t = self.table(raw, "scheduler")
        self.unknown(t, "scheduler.", ("period", "layers"))
        period = self.duration(t, "period", "scheduler.period", base.scheduler_period,
                               PERIOD_MIN, PERIOD_MAX)
        layers = self.parse_layers(t["layers"]) if "layers" in t else None

        t = self.table(raw, "metrics")
        self.unknown(t, "metrics.", ("listen",))
        listen = self.string(t, "listen", "metrics.listen", base.metrics_listen)
        if listen is None:
            listen = base.metrics_listen
        elif listen:
            problem = _check_listen(listen)
            if problem:
                self.err("metrics.listen", f"{quote(listen)} {problem}")
                listen = base.metrics_listen

        t = self.table(raw, "log")
        self.unknown(t, "log.", ("level",))
        level = t.get("level", base.log_level)
        if isinstance(level, str) and level.lower() in LOG_LEVELS:
            level = level.lower()
        else:
            self.err("log.level", f"{quote(level)} is not one of {', '.join(LOG_LEVELS)}")
            level = base.log_level

        t = self.table(raw, "gc")
        self.unknown(t, "gc.", ("interval",))
        gc_interval = self.duration(t, "interval", "gc.interval", base.gc_interval,
                                    GC_MIN, GC_MAX)

        history = self.parse_history(self.table(raw, "history"))

        t = self.table(raw, "rdma")
        self.unknown(t, "rdma.", ("hca_handles", "hca_objects"))
        rdma_lim = {}
        for key, top in (("hca_handles", HANDLES_MAX), ("hca_objects", OBJECTS_MAX)):
            v = t.get(key, getattr(base.rdma, key))
            try:
                rdma_lim[key] = limit(f"rdma.{key}", v, top)
            except ValueError:
                self.err(f"rdma.{key}", f"{quote(v)} is not a whole number from 1 to {top}")
                rdma_lim[key] = getattr(base.rdma, key)
        rdma_cfg = Rdma(**rdma_lim)

        profiles: dict[str, SliceSpec] = {}
        limits: dict[str, Limits] = {}
        audit: dict[str, AuditSpec] = {}
        forecasts: dict[str, ForecastSpec] = {}
        t = self.table(raw, "profiles")
        for name, ptbl in t.items():
            try:
                parse_profile(name)
            except BadValue as e:
                self.err(f"profiles.{name}", str(e))
                continue
            if not isinstance(ptbl, dict):
                self.err(f"profiles.{name}", f"{quote(ptbl)} is {_typename(ptbl)}, "
                         f"not a table (write [profiles.{name}])")
                continue
            profiles[name] = parse_spec(ptbl, self.err, f"profiles.{name}.",
                                         LIMIT_KEYS + AUDIT_KEYS + FORECAST_KEYS)
            lim = self.parse_limits(ptbl, name, profiles[name].merged_over(defaults))
            if lim != Limits():
                limits[name] = lim
            aud = self.parse_audit(ptbl, name)
            if aud != AuditSpec():
                audit[name] = aud
            fc = self.parse_forecast(ptbl, name)
            if fc != ForecastSpec():
                forecasts[name] = fc

        schedule = self.parse_schedule(raw.get("schedule", []), profiles,
                                       bad_profiles=set(t) - set(profiles))

        kubernetes = self.parse_kubernetes(self.table(raw, "kubernetes"), node, profiles,
                                           set(t) - set(profiles))

        if self.errors:
            raise ConfigError(self.errors)
        return Config(kubernetes=kubernetes, path=self.path, paths=paths, api_group=group, node=node,
                      defaults=defaults, scheduler_period=period, scheduler_layers=layers,
                      metrics_listen=listen,
                      log_level=level, gc_interval=gc_interval, profiles=profiles,
                      limits=limits, audit=audit, schedule=schedule, history=history,
                      forecasts=forecasts, rdma=rdma_cfg)

    def long_duration(self, tbl, key, dotted, default, lo, hi) -> float:
        """A duration that may also be given in days or weeks ("35d", "2w")."""
        if key not in tbl:
            return default
        v = tbl[key]
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([dw])\s*", v) if isinstance(v, str) else None
        if m:
            x = float(m[1]) * (86400.0 if m[2] == "d" else 7 * 86400.0)
        else:
            try:
                x = parse_duration(v)
            except BadValue:
                self.err(dotted, f"{quote(v)} is not a duration (units: ms, s, m, h, d, w; "
                                 f"e.g. 35d)")
                return default
        if not (lo - 1e-9 <= x <= hi + 1e-9):
            self.err(dotted, f"{quote(v)} is out of range ({format_duration(lo)} to "
                             f"{days_text(hi)})")
            return default
        return x

    def parse_history(self, t: Mapping[str, Any]) -> History:
        base = History()
        self.unknown(t, "history.", ("enabled", "path", "interval", "raw_retention", "step",
                                     "retention", "max_size"))
        try:
            enabled = parse_bool(t.get("enabled", True))
        except BadValue as e:
            self.err("history.enabled", str(e))
            enabled = base.enabled
        path = None
        if "path" in t:
            path = self.abspath(t, "path", "history.path", Path("/"))
            if path == Path("/"):
                path = None
        interval = self.duration(t, "interval", "history.interval", base.interval,
                                 *HISTORY_INTERVAL)
        step = self.long_duration(t, "step", "history.step", base.step, *HISTORY_STEP)
        if "step" in t and 86400.0 % step:
            self.err("history.step", f"{quote(t['step'])} does not divide a day "
                                     f"(e.g. 1m, 5m, 15m, 1h)")
            step = base.step
        raw_ret = self.long_duration(t, "raw_retention", "history.raw_retention",
                                     base.raw_retention, step, HISTORY_RETENTION_MAX)
        ret = self.long_duration(t, "retention", "history.retention", base.retention,
                                 step, HISTORY_RETENTION_MAX)
        if "retention" in t and ret < raw_ret:
            self.err("history.retention", f"{quote(t['retention'])} is shorter than "
                                          f"raw_retention ({days_text(raw_ret)})")
            ret = max(base.retention, raw_ret)
        size = base.max_size
        if "max_size" in t:
            try:
                size = parse_size(t["max_size"])
                if size < HISTORY_SIZE_MIN:
                    raise BadValue(t["max_size"], f"is below {format_size(HISTORY_SIZE_MIN)}")
            except BadValue as e:
                self.err("history.max_size", str(e))
                size = base.max_size
        if interval >= step and "interval" in t:
            self.err("history.interval", f"{quote(t['interval'])} is not shorter than step "
                                         f"({format_duration(step)})")
            interval = base.interval
        return History(enabled=enabled, path=path, interval=interval, raw_retention=raw_ret,
                       step=step, retention=ret, max_size=size)

    def parse_forecast(self, t: Mapping[str, Any], name: str) -> ForecastSpec:
        """A profile's FORECAST_KEYS."""
        p = f"profiles.{name}."
        base = ForecastSpec()
        mode = self.choice(t, "forecast", p + "forecast", base.mode, FORECAST_MODES)
        label = None
        if "forecast_label" in t:
            v = t["forecast_label"]
            key, eq, value = v.partition("=") if isinstance(v, str) else ("", "", "")
            if not eq or not LABEL_KEY_RE.match(key) or not LABEL_VALUE_RE.match(value):
                self.err(p + "forecast_label", f"{quote(v)} is not a label selector "
                                               f"(write key=value, e.g. vgpu.io/class=inference)")
            else:
                label = v
        lead = self.duration(t, "forecast_lead", p + "forecast_lead", base.lead,
                             LEAD_MIN, LEAD_MAX)
        if mode != "off" and label is None and "forecast_label" not in t:
            self.err(p + "forecast", f"{quote(mode)} needs forecast_label (the label whose "
                                     f"demand is forecast, e.g. vgpu.io/class=inference)")
        return ForecastSpec(mode=mode, label=label, lead=lead)

    def parse_audit(self, t: Mapping[str, Any], name: str) -> AuditSpec:
        """A profile's AUDIT_KEYS; the allow-list file is read and checked
        here (each of its problems is an error of the config)."""
        p = f"profiles.{name}."
        out: dict[str, Any] = {}
        if "audit" in t:
            v = t["audit"]
            if not isinstance(v, bool):
                self.err(p + "audit", f"{quote(v)} is {_typename(v)}, not true or false")
            else:
                out["audit"] = v
        if "allow_list" in t:
            v = t["allow_list"]
            if not isinstance(v, str):
                self.err(p + "allow_list", f"{quote(v)} is {_typename(v)}, not a path")
            elif not v.startswith("/") or "\0" in v:
                self.err(p + "allow_list", f"{quote(v)} is not an absolute path "
                                           f"(e.g. \"/etc/vgpu/{name}.allow\")")
            else:
                try:
                    out["allow"] = tuple(allowlist.load(v))
                    out["allow_list"] = v
                except allowlist.AllowListError as e:
                    for line in e.errors:
                        self.err(p + "allow_list", line)
        return AuditSpec(**out)

    def parse_limits(self, t: Mapping[str, Any], name: str, eff: SliceSpec) -> Limits:
        """A profile's admission keys (LIMIT_KEYS); ``eff`` is the profile
        over [defaults], which must itself be within them."""
        p = f"profiles.{name}."
        out: dict[str, Any] = {}
        if "max_memory" in t:
            v = t["max_memory"]
            try:
                out["max_memory"] = parse_size(v)
                if out["max_memory"] == 0:
                    del out["max_memory"]
                    raise BadValue(v, "is zero (no slice could be made)")
            except BadValue as e:
                self.err(p + "max_memory", str(e))
        if "max_compute" in t:
            try:
                out["max_compute"] = parse_percent(t["max_compute"])
            except BadValue as e:
                self.err(p + "max_compute", str(e))
        for key, choices, parse in (("allow_priorities", PRIORITIES, parse_priority),
                                    ("allow_policies", POLICIES, parse_policy)):
            if key not in t:
                continue
            v = t[key]
            if not isinstance(v, list) or not v:
                self.err(p + key, f"{quote(v)} is not a non-empty list of "
                                  f"{', '.join(choices)}")
                continue
            ok = True
            for i, x in enumerate(v):
                try:
                    parse(x)
                except BadValue as e:
                    self.err(f"{p}{key}[{i}]", str(e))
                    ok = False
                    continue
                if v.index(x) != i:
                    self.err(f"{p}{key}[{i}]", f"{quote(x)} is listed twice")
                    ok = False
            if ok:
                out[key] = tuple(v)
        if "allow_image_env" in t:
            try:
                v = parse_bool(t["allow_image_env"])
            except BadValue as e:
                self.err(p + "allow_image_env", str(e))
            else:
                if v and not ("max_memory" in t and "max_compute" in t):
                    # the image is anyone's: what it may ask must be bounded
                    self.err(p + "allow_image_env", "true needs max_memory and max_compute "
                             f"in [profiles.{name}] (a request from an image must be bounded)")
                else:
                    out["allow_image_env"] = v
        if "allow_rdma" in t:
            try:
                out["allow_rdma"] = parse_bool(t["allow_rdma"])
            except BadValue as e:
                self.err(p + "allow_rdma", str(e))
        lim = Limits(**out)
        for problem in lim.problems(eff, name):
            self.err(f"profiles.{name}", f"its own settings (over [defaults]) break its "
                                         f"limits: {problem}")
        return lim

    def parse_layers(self, v: Any) -> tuple[str, ...] | None:
        """[scheduler] layers: a non-empty list of SCHED_LAYERS names, no repeats."""
        if not isinstance(v, list):
            self.err("scheduler.layers", f"{quote(v)} is {_typename(v)}, not a list "
                     f"(e.g. [\"tsg\", \"doorbell\"])")
            return None
        if not v:
            self.err("scheduler.layers", f"[] names no layer (known: {', '.join(SCHED_LAYERS)})")
            return None
        out: list[str] = []
        ok = True
        for i, x in enumerate(v):
            if not isinstance(x, str) or x not in SCHED_LAYERS:
                self.err(f"scheduler.layers[{i}]", f"{quote(x)} is not a layer "
                         f"(known: {', '.join(SCHED_LAYERS)})")
                ok = False
            elif x in out:
                self.err(f"scheduler.layers[{i}]", f"{quote(x)} is named twice")
                ok = False
            else:
                out.append(x)
        return tuple(out) if ok else None

    def parse_node(self, t: Mapping[str, Any]) -> Node:
        base = Node()
        self.unknown(t, "node.", ("gpus", "placement", "oversubscribe_memory", "uvm",
                                  "over_quota_action", "max_channels"))
        gpus: str | tuple[int | str, ...] = "all"
        v = t.get("gpus", "all")
        if v == "all":
            pass
        elif isinstance(v, list):
            items: list[int | str] = []
            ok = True
            if not v:
                self.err("node.gpus", '[] selects no GPU (write "all", or list indexes or UUIDs)')
                ok = False
            for i, g in enumerate(v):
                k = f"node.gpus[{i}]"
                try:
                    g = parse_gpu(g)
                except BadValue as e:
                    self.err(k, str(e))
                    ok = False
                    continue
                if g in items:
                    self.err(k, f"{quote(g)} is listed twice")
                    ok = False
                else:
                    items.append(g)
            if ok:
                gpus = tuple(items)
        else:
            self.err("node.gpus", f'{quote(v)} is not "all" or a list of GPU indexes or UUIDs')
        placement = self.choice(t, "placement", "node.placement", base.placement, PLACEMENTS)
        try:
            over = parse_bool(t.get("oversubscribe_memory", False))
        except BadValue as e:
            self.err("node.oversubscribe_memory", str(e))
            over = False
        uvm = self.choice(t, "uvm", "node.uvm", base.uvm, UVM_MODES)
        action = self.choice(t, "over_quota_action", "node.over_quota_action",
                             base.over_quota_action, OVER_QUOTA_ACTIONS)
        chans = t.get("max_channels", base.max_channels)
        if isinstance(chans, bool) or not isinstance(chans, int):
            self.err("node.max_channels", f"{quote(chans)} is {_typename(chans)}, not an "
                                          f"integer (channels per slice per GPU; 0: no cap)")
            chans = base.max_channels
        elif chans < 0:
            self.err("node.max_channels", f"{quote(chans)} is negative (0 means no cap)")
            chans = base.max_channels
        elif chans > MAX_CHANNELS_MAX:
            self.err("node.max_channels", f"{quote(chans)} is above {MAX_CHANNELS_MAX} "
                                          f"(0 means no cap)")
            chans = base.max_channels
        return Node(gpus=gpus, placement=placement, oversubscribe_memory=over, uvm=uvm,
                    over_quota_action=action, max_channels=chans)

    def parse_kubernetes(self, t: Mapping[str, Any], node: Node,
                         profiles: Mapping[str, SliceSpec], bad_profiles: set[str]) -> Kubernetes:
        base = Kubernetes()
        self.unknown(t, "kubernetes.", ("device_plugin", "kubelet_dir", "profile",
                                        "oversubscribe_factor", "runtime_guard",
                                        "pod_requests", "namespace_profiles", "dra_plugin",
                                        "dra_admin_access", "node_name", "api_server",
                                        "cdi_dir"))
        try:
            enabled = parse_bool(t.get("device_plugin", False))
        except BadValue as e:
            self.err("kubernetes.device_plugin", str(e))
            enabled = False
        try:
            guard = parse_bool(t.get("runtime_guard", True))
        except BadValue as e:
            self.err("kubernetes.runtime_guard", str(e))
            guard = True
        kdir = self.abspath(t, "kubelet_dir", "kubernetes.kubelet_dir", base.kubelet_dir)
        if len(str(kdir).rstrip("/").encode()) + K8S_SOCK_NAME_MAX > SUN_PATH_MAX:
            self.err("kubernetes.kubelet_dir", f"{quote(str(kdir))} is too long for the "
                     f"plugin's Unix sockets in it (at most "
                     f"{SUN_PATH_MAX - K8S_SOCK_NAME_MAX} bytes)")
            kdir = base.kubelet_dir
        profile = self.string(t, "profile", "kubernetes.profile", "") or ""
        if profile and profile not in profiles and profile not in bad_profiles:
            self.err("kubernetes.profile", f"{quote(profile)} is not a defined profile "
                     f"(profiles: {', '.join(sorted(profiles)) or 'none defined'})")
            profile = ""
        factor = t.get("oversubscribe_factor", base.oversubscribe_factor)
        if isinstance(factor, bool) or not isinstance(factor, (int, float)):
            self.err("kubernetes.oversubscribe_factor", f"{quote(factor)} is "
                     f"{_typename(factor)}, not a number (1 to {K8S_FACTOR_MAX:g})")
            factor = base.oversubscribe_factor
        elif not 1 <= factor <= K8S_FACTOR_MAX:
            self.err("kubernetes.oversubscribe_factor", f"{quote(factor)} is out of range "
                     f"(1 to {K8S_FACTOR_MAX:g})")
            factor = base.oversubscribe_factor
        elif "oversubscribe_factor" in t and not node.oversubscribe_memory:
            self.err("kubernetes.oversubscribe_factor", f"{quote(factor)} has no effect: "
                     f"node.oversubscribe_memory is false (set it, or leave the factor out)")
        pod_requests = self.choice(t, "pod_requests", "kubernetes.pod_requests",
                                   "allocated" if enabled else "any", K8S_POD_REQUESTS)
        nst = t.get("namespace_profiles", {})
        if not isinstance(nst, dict):
            self.err("kubernetes.namespace_profiles", f"{quote(nst)} is {_typename(nst)}, not "
                     f"a table (write [kubernetes.namespace_profiles])")
            nst = {}
        ns_profiles = self.parse_namespace_profiles(nst, profiles, bad_profiles)
        if ns_profiles and pod_requests != "allocated":
            self.err("kubernetes.namespace_profiles", "has no effect: kubernetes.pod_requests "
                     "is \"any\" (pods' annotations are not limited); set it to "
                     "\"allocated\", or leave the table out")
        try:
            dra_on = parse_bool(t.get("dra_plugin", False))
        except BadValue as e:
            self.err("kubernetes.dra_plugin", str(e))
            dra_on = False
        try:
            dra_admin = parse_bool(t.get("dra_admin_access", False))
        except BadValue as e:
            self.err("kubernetes.dra_admin_access", str(e))
            dra_admin = False
        if dra_admin and not dra_on:
            self.err("kubernetes.dra_admin_access", "has no effect without "
                     "kubernetes.dra_plugin = true")
        if dra_on and len(str(kdir.parent).rstrip("/").encode()) + K8S_DRA_SOCK_MAX > SUN_PATH_MAX:
            self.err("kubernetes.kubelet_dir", f"{quote(str(kdir))}'s parent is too long for "
                     f"the DRA plugin's Unix sockets in it (at most "
                     f"{SUN_PATH_MAX - K8S_DRA_SOCK_MAX} bytes)")
        node_name = self.string(t, "node_name", "kubernetes.node_name", "") or ""
        if node_name and (len(node_name) > 253 or not HOSTNAME_RE.match(node_name)
                          or node_name != node_name.lower()):
            self.err("kubernetes.node_name", f"{quote(node_name)} is not a Kubernetes node "
                     f"name (lower-case letters, digits, '-' and '.', at most 253)")
            node_name = ""
        api_server = self.string(t, "api_server", "kubernetes.api_server", "") or ""
        if api_server and not re.match(r"https?://[^\s/?#]+(:\d{1,5})?/?\Z", api_server):
            self.err("kubernetes.api_server", f"{quote(api_server)} is not an http(s) URL of "
                     f"a host (https://host:port)")
            api_server = ""
        return Kubernetes(device_plugin=enabled, kubelet_dir=kdir, profile=profile,
                          oversubscribe_factor=float(factor), runtime_guard=guard,
                          pod_requests=pod_requests, namespace_profiles=ns_profiles,
                          dra_plugin=dra_on, dra_admin_access=dra_admin,
                          node_name=node_name, api_server=api_server,
                          cdi_dir=self.abspath(t, "cdi_dir", "kubernetes.cdi_dir",
                                               base.cdi_dir))

    def parse_namespace_profiles(self, t: Mapping[str, Any], profiles: Mapping[str, SliceSpec],
                                 bad_profiles: set[str]) -> dict[str, tuple[str, ...]]:
        """[kubernetes.namespace_profiles]: namespace = ["profile", ...]."""
        out: dict[str, tuple[str, ...]] = {}
        for ns, v in t.items():
            key = f"kubernetes.namespace_profiles.{ns}"
            if ns != "*" and not K8S_NAMESPACE_RE.match(ns):
                self.err(key, f"{quote(ns)} is not a Kubernetes namespace name (lower-case "
                              f"letters, digits and '-', at most 63) nor \"*\" (every namespace)")
                continue
            if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                self.err(key, f"{quote(v)} is {_typename(v)}, not an array of profile names")
                continue
            unknown = [x for x in v if x not in profiles and x not in bad_profiles]
            if unknown:
                self.err(key, f"{quote(unknown[0])} is not a defined profile "
                              f"(profiles: {', '.join(sorted(profiles)) or 'none defined'})")
                continue
            out[ns] = tuple(dict.fromkeys(v))
        return out

    def parse_schedule(self, v: Any, profiles: Mapping[str, SliceSpec],
                       bad_profiles: set[str]) -> tuple[Window, ...]:
        if not isinstance(v, list):
            self.err("schedule", f"{quote(v)} is {_typename(v)}, not an array of tables "
                                 f"(write [[schedule]])")
            return ()
        out: list[Window] = []
        for i, w in enumerate(v):
            p = f"schedule[{i}]"
            if not isinstance(w, dict):
                self.err(p, f"{quote(w)} is {_typename(w)}, not a table (write [[schedule]])")
                continue
            n0 = len(self.errors)
            known = ("label", "profile", "from", "to", "days")
            self.unknown(w, p + ".", known)
            for k in ("label", "profile", "from", "to"):
                if k not in w:
                    self.err(f"{p}.{k}", "missing (a window needs label, profile, from and to)")
            label = w.get("label")
            if label is not None:
                if not isinstance(label, str):
                    self.err(f"{p}.label", f"{quote(label)} is {_typename(label)}, not a string")
                else:
                    key, eq, value = label.partition("=")
                    if not eq or not LABEL_KEY_RE.match(key) or not LABEL_VALUE_RE.match(value):
                        self.err(f"{p}.label", f"{quote(label)} is not a label selector "
                                               f"(write key=value, e.g. vgpu.io/class=inference)")
            profile = w.get("profile")
            if profile is not None:
                if not isinstance(profile, str):
                    self.err(f"{p}.profile", f"{quote(profile)} is {_typename(profile)}, "
                                             f"not a profile name")
                elif profile not in profiles and profile not in bad_profiles:
                    known_p = ", ".join(sorted(profiles)) or "none defined"
                    self.err(f"{p}.profile", f"{quote(profile)} is not a defined profile "
                                             f"(profiles: {known_p})")
            times: dict[str, datetime.time] = {}
            for k in ("from", "to"):
                if k in w:
                    tv = w[k]
                    if isinstance(tv, datetime.time):   # TOML local time 08:00:00
                        if tv.second or tv.microsecond:
                            self.err(f"{p}.{k}", f"{quote(tv.isoformat())} is not a time "
                                                 f"of day in whole minutes")
                        else:
                            times[k] = tv.replace(tzinfo=None)
                        continue
                    try:
                        times[k] = parse_clock(tv)
                    except BadValue as e:
                        self.err(f"{p}.{k}", str(e))
            if len(times) == 2 and times["from"] == times["to"]:
                self.err(f"{p}.to", f"{quote(w['to'] if isinstance(w['to'], str) else str(w['to']))} "
                                    f"equals from: the window would be empty "
                                    f"(for all day, leave the profile to the slice)")
            days = self.parse_days(w.get("days"), f"{p}.days")
            if len(self.errors) == n0:
                out.append(Window(label=label, profile=profile, start=times["from"],
                                  end=times["to"], days=days))
        return tuple(out)

    def parse_days(self, v: Any, dotted: str) -> frozenset[int]:
        every = frozenset(range(7))
        if v is None:
            return every
        if isinstance(v, str):
            v = [v]
        if not isinstance(v, list):
            self.err(dotted, f"{quote(v)} is {_typename(v)}, not a list of days "
                             f'(e.g. ["mon", "tue"] or ["mon-fri"])')
            return every
        if not v:
            self.err(dotted, "[] names no day (leave days out for every day)")
            return every
        out: set[int] = set()
        for i, d in enumerate(v):
            k = f"{dotted}[{i}]"
            if not isinstance(d, str):
                self.err(k, f"{quote(d)} is {_typename(d)}, not a day (mon ... sun)")
                continue
            lo, dash, hi = d.strip().lower().partition("-")
            a, b = _DAY_INDEX.get(lo.strip()), _DAY_INDEX.get(hi.strip()) if dash else None
            if a is None or (dash and b is None):
                self.err(k, f"{quote(d)} is not a day (mon, tue, wed, thu, fri, sat, sun, "
                            f"or a range such as mon-fri)")
                continue
            if b is None:
                b = a
            span = {(a + j) % 7 for j in range((b - a) % 7 + 1)}
            if span & out:
                self.err(k, f"{quote(d)} repeats a day")
            out |= span
        return frozenset(out) if out else every


_DAY_INDEX = {**{d: i for i, d in enumerate(DAYS)},
              **{d: i for i, d in enumerate(("monday", "tuesday", "wednesday", "thursday",
                                             "friday", "saturday", "sunday"))}}


def _check_listen(v: str) -> str | None:
    """None if `v` is host:port ("[v6]:port" for IPv6), else what is wrong."""
    host, sep, port = v.rpartition(":")
    if not sep or not host:
        return "is not host:port (e.g. 127.0.0.1:19400; \"\" disables metrics)"
    if not port.isdigit() or not (1 <= int(port) <= 65535):
        return f"has a bad port {quote(port)} (1 to 65535)"
    if host.startswith("[") and host.endswith("]"):
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            return "has a bad IPv6 address"
        return None
    if ":" in host:
        return "has an IPv6 address without brackets (write [::1]:19400)"
    try:
        ipaddress.IPv4Address(host)
        return None
    except ValueError:
        pass
    if host.replace(".", "").isdigit():
        return "has a bad IPv4 address"
    if not HOSTNAME_RE.match(host) or len(host) > 253:
        return "has a bad host name"
    return None
