"""vgpud's configuration file (TOML): parsing, validation, effective settings.

Owned here: the file's schema (docs/config.md, config/vgpud.example.toml),
every error message about it, the precedence of a slice's settings
(explicit > profile or schedule window > [defaults]) and the description of
what changed on reload.  Standard library only; no I/O besides reading the
file in load_config() and the allow-list files profiles name (vgpu.abi.allowlist,
read when the config is parsed, so that a bad one fails the load).

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
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Mapping

from vgpu.abi import allowlist
from vgpu.daemon.policy import PLACEMENTS
from vgpu.common.values import (LAYER_FLAGS, POLICIES, PRIORITIES, BadValue, format_duration,
                         format_percent, format_size, parse_bool, parse_clock, parse_duration,
                         parse_gpu, parse_percent, parse_policy, parse_priority, parse_profile,
                         parse_size, quote, read_utf8)

__all__ = [
    "DEFAULT_CONFIG_PATH",
    "ConfigError",
    "Config",
    "Paths",
    "Node",
    "SliceSpec",
    "Limits",
    "AuditSpec",
    "Window",
    "Kubernetes",
    "History",
    "ForecastSpec",
    "load_config",
    "parse_config",
    "describe_changes",
    "DAYS",
    "PRIORITIES",
    "POLICIES",
]

DEFAULT_CONFIG_PATH = "/etc/vgpu/vgpud.toml"

# PRIORITIES and POLICIES are vgpu.common.values' (the kernel's names), PLACEMENTS
# vgpu.daemon.policy's (what place() does)
UVM_MODES = ("count", "refuse")
OVER_QUOTA_ACTIONS = ("log", "event", "kill")
SCHED_LAYERS = tuple(LAYER_FLAGS)      # [scheduler] layers (vgpu.common.values.LAYER_FLAGS)
LOG_LEVELS = ("debug", "info", "warning", "error")
DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")

# sockaddr_un.sun_path holds 108 bytes with the terminating NUL.
_SUN_PATH_MAX = 107

# Bounds on the kernel's duty-cycle period and the collection interval.
PERIOD_MIN, PERIOD_MAX = 0.001, 10.0
GC_MIN, GC_MAX = 0.1, 86400.0
# [node] max_channels travels as a u32 (VGPU_A_SLICE_MAX_CHANNELS).
MAX_CHANNELS_MAX = 2**32 - 1

_GROUP_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}\$?\Z")
_LABEL_KEY_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_./-]{0,252}\Z")
_LABEL_VALUE_RE = re.compile(r"[A-Za-z0-9_.-]{0,63}\Z")
_HOSTNAME_RE = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                          r"(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\Z")


class ConfigError(Exception):
    """An invalid configuration.  `errors` holds one line per problem; str()
    joins them with newlines."""

    def __init__(self, errors: list[str] | str):
        if isinstance(errors, str):
            errors = [errors]
        self.errors = list(errors)
        super().__init__("\n".join(self.errors))

    def __str__(self) -> str:
        return "\n".join(self.errors)


# --------------------------------------------------------------------------
# the model

@dataclass(frozen=True)
class SliceSpec:
    """A slice's settings; None = not set at this level (see merged_over()).

    memory: bytes per GPU; compute: percent 0..100; priority: "high"|"low";
    policy: "share" (a weight: idle time goes to others) | "fixed" (a cap,
    never above) | "burst" (a guaranteed floor that may use idle time).
    """
    memory: int | None = None
    compute: float | None = None
    priority: str | None = None
    policy: str | None = None

    def merged_over(self, other: "SliceSpec") -> "SliceSpec":
        """This spec's set values over `other`'s."""
        return SliceSpec(*(getattr(self, f.name) if getattr(self, f.name) is not None
                           else getattr(other, f.name) for f in fields(self)))

    @classmethod
    def from_values(cls, memory: Any = None, compute: Any = None, priority: Any = None,
                    policy: Any = None) -> "SliceSpec":
        """Build a spec from user values (API arguments, CLI options): sizes
        as in parse_size, compute as in parse_percent.  Raises ValueError
        naming the key and quoting the value: 'memory: "4GB" is not a size ...'.
        None leaves a value unset."""
        errors: list[tuple[str, str]] = []
        spec = _parse_spec({k: v for k, v in (("memory", memory), ("compute", compute),
                                              ("priority", priority), ("policy", policy))
                            if v is not None},
                           lambda key, msg: errors.append((key, msg)), "")
        if errors:
            raise ValueError(f"{errors[0][0]}: {errors[0][1]}")
        return spec

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: {"memory": int|None, "compute": float|None, ...}."""
        return {"memory": self.memory, "compute": self.compute,
                "priority": self.priority, "policy": self.policy}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "SliceSpec":
        """Inverse of to_dict() (validating, as from_values)."""
        return cls.from_values(d.get("memory"), d.get("compute"), d.get("priority"),
                               d.get("policy"))

    def describe(self) -> str:
        parts = []
        if self.memory is not None:
            parts.append(f"memory {format_size(self.memory)}")
        if self.compute is not None:
            parts.append(f"compute {format_percent(self.compute)}")
        if self.priority is not None:
            parts.append(f"priority {self.priority}")
        if self.policy is not None:
            parts.append(f"policy {self.policy}")
        return ", ".join(parts) or "nothing set"


#: the admission keys of a [profiles.X] table (beside SliceSpec's four)
LIMIT_KEYS = ("max_memory", "max_compute", "allow_priorities", "allow_policies",
              "allow_image_env")


@dataclass(frozen=True)
class Limits:
    """What a request that names a profile may take, checked when a slice is
    created (Config.admit): a pod's annotations (or an allowed image's
    environment) cannot ask past what the operator set.  None: no limit.
    ``allow_image_env``: the profile takes requests from a container image's
    own VGPU_* environment (off by default: the image is not the operator)."""
    max_memory: int | None = None
    max_compute: float | None = None
    allow_priorities: tuple[str, ...] | None = None
    allow_policies: tuple[str, ...] | None = None
    allow_image_env: bool = False

    def problems(self, spec: SliceSpec, name: str) -> list[str]:
        """What in ``spec`` (effective values) exceeds these limits, one
        phrase each quoting the value and the limit; [] when within."""
        out = []
        if self.max_memory is not None and spec.memory is not None \
                and spec.memory > self.max_memory:
            out.append(f"memory {format_size(spec.memory)} exceeds profile {quote(name)}'s "
                       f"max_memory {format_size(self.max_memory)}")
        if self.max_compute is not None and spec.compute is not None \
                and spec.compute > self.max_compute:
            out.append(f"compute {format_percent(spec.compute)} exceeds profile "
                       f"{quote(name)}'s max_compute {format_percent(self.max_compute)}")
        if self.allow_priorities is not None and spec.priority is not None \
                and spec.priority not in self.allow_priorities:
            out.append(f"priority {quote(spec.priority)} is not allowed by profile "
                       f"{quote(name)} (allow_priorities: {', '.join(self.allow_priorities)})")
        if self.allow_policies is not None and spec.policy is not None \
                and spec.policy not in self.allow_policies:
            out.append(f"policy {quote(spec.policy)} is not allowed by profile "
                       f"{quote(name)} (allow_policies: {', '.join(self.allow_policies)})")
        return out

    def describe(self) -> str:
        parts = []
        if self.max_memory is not None:
            parts.append(f"max_memory {format_size(self.max_memory)}")
        if self.max_compute is not None:
            parts.append(f"max_compute {format_percent(self.max_compute)}")
        if self.allow_priorities is not None:
            parts.append(f"allow_priorities {','.join(self.allow_priorities)}")
        if self.allow_policies is not None:
            parts.append(f"allow_policies {','.join(self.allow_policies)}")
        if self.allow_image_env:
            parts.append("allow_image_env")
        return ", ".join(parts) or "no limits"


#: the forecast keys of a [profiles.X] table (docs/forecast.md, "Acting on forecasts")
FORECAST_KEYS = ("forecast", "forecast_label", "forecast_lead")
FORECAST_MODES = ("off", "recommend", "act")
#: forecast_lead's range
LEAD_MIN, LEAD_MAX = 60.0, 86400.0


@dataclass(frozen=True)
class ForecastSpec:
    """A profile's use of the forecasts (docs/forecast.md): ``mode`` "off"
    (default), "recommend" (log and publish what would change, change
    nothing) or "act" (raise the compute of the profile's slices that carry
    ``label`` ahead of predicted demand, ``lead`` seconds early, and lower it
    back; never below the configured value, within admission)."""
    mode: str = "off"
    label: str | None = None
    lead: float = 1800.0

    def describe(self) -> str:
        if self.mode == "off":
            return "forecast off"
        return f"forecast {self.mode} for {self.label}, lead {format_duration(self.lead)}"


#: the audit keys of a [profiles.X] table (docs/config.md, "Audit mode and
#: allow-lists")
AUDIT_KEYS = ("audit", "allow_list")


@dataclass(frozen=True)
class AuditSpec:
    """A profile's exceptions to the driver release's policy, sent to
    vgpu.ko when a slice of that profile is created (VGPU_A_SLICE_AUDIT,
    VGPU_A_SLICE_ALLOW).  ``audit``: audit mode (every item the slice uses is
    recorded, and what the policy refuses or vgpu.ko does not implement is
    forwarded: a trusted workload on a trial node only).  ``allow_list``:
    the file (absolute path) whose items (``allow``) the slice forwards
    although the policy refuses them, without the rest of audit mode."""
    audit: bool = False
    allow_list: str | None = None
    allow: tuple[allowlist.AllowItem, ...] = ()

    @property
    def pairs(self) -> list[tuple[int, int]]:
        """The allow-list as vgpu.vgpuko.client takes it: [(kind, number), ...]."""
        return [it.pair for it in self.allow]

    def describe(self) -> str:
        parts = []
        if self.audit:
            parts.append("audit mode")
        if self.allow_list is not None:
            parts.append(f"allow_list {quote(self.allow_list)} ({_items(len(self.allow))})")
        return ", ".join(parts) or "no audit mode, no allow-list"


def _items(n: int) -> str:
    return f"{n} item{'' if n == 1 else 's'}"


@dataclass(frozen=True)
class Paths:
    socket: Path = Path("/run/vgpu/vgpud.sock")
    state_dir: Path = Path("/var/lib/vgpu")
    fuse_mount: Path | None = Path("/run/vgpu/private/fs")   # None: no vgpufs; parent 0700


@dataclass(frozen=True)
class Node:
    gpus: str | tuple[int | str, ...] = "all"   # "all" or indexes / UUIDs
    placement: str = "spread"
    oversubscribe_memory: bool = False
    uvm: str = "count"
    over_quota_action: str = "event"
    max_channels: int = 256                     # per slice per GPU; 0: no cap

    def selects(self, index: int, uuid: str) -> bool:
        """Whether this node slices the GPU with this index and UUID."""
        if self.gpus == "all":
            return True
        return index in self.gpus or uuid in self.gpus


@dataclass(frozen=True)
class Kubernetes:
    """[kubernetes]: the kubelet device plugin vgpud runs (vgpu.k8s,
    docs/kubernetes.md).  ``oversubscribe_factor``: memory devices per GiB
    of a GPU while node.oversubscribe_memory is on."""
    device_plugin: bool = False
    kubelet_dir: Path = Path("/var/lib/kubelet/device-plugins")
    profile: str = ""
    oversubscribe_factor: float = 2.0


@dataclass(frozen=True)
class History:
    """[history]: the usage history (vgpu.daemon.history, docs/history.md).
    ``path`` None: <paths.state_dir>/history.db.  Durations in seconds."""
    enabled: bool = True
    path: Path | None = None
    interval: float = 10.0
    raw_retention: float = 86400.0
    step: float = 300.0
    retention: float = 35 * 86400.0
    max_size: int = 256 << 20

    def db_path(self, state_dir: Path) -> Path:
        return self.path if self.path is not None else Path(state_dir) / "history.db"


#: [history]'s bounds
HISTORY_INTERVAL = (1.0, 3600.0)
HISTORY_STEP = (60.0, 86400.0)
HISTORY_RETENTION_MAX = 3660 * 86400.0
HISTORY_SIZE_MIN = 1 << 20


#: [kubernetes] oversubscribe_factor's range; the longest socket name the
#: plugin makes in kubelet_dir ("/vgpu-compute-percent.sock")
K8S_FACTOR_MAX = 16.0
_K8S_SOCK_NAME_MAX = 26


@dataclass(frozen=True)
class Window:
    """A schedule entry: slices labelled `label` ("key=value") get `profile`
    from `start` to `end` (local time, [start, end), wrapping past midnight
    when end <= start) on `days` (0 = Monday; for a window that wraps, the
    day it starts on)."""
    label: str
    profile: str
    start: datetime.time
    end: datetime.time
    days: frozenset[int] = frozenset(range(7))

    @property
    def label_key(self) -> str:
        return self.label.partition("=")[0]

    @property
    def label_value(self) -> str:
        return self.label.partition("=")[2]

    def matches(self, labels: Mapping[str, str]) -> bool:
        return labels.get(self.label_key) == self.label_value

    def active(self, now: datetime.datetime) -> bool:
        """Whether the window is open at local time `now` (naive, or aware:
        its wall-clock reading is used either way)."""
        t = now.time().replace(tzinfo=None)
        wd = now.weekday()
        if self.start < self.end:
            return wd in self.days and self.start <= t < self.end
        # wraps past midnight: [start, 24:00) on a listed day, [00:00, end)
        # on the day after a listed day
        if t >= self.start:
            return wd in self.days
        if t < self.end:
            return (wd - 1) % 7 in self.days
        return False

    def describe(self) -> str:
        """'vgpu.io/class=inference gets inference-day 08:00-20:00 mon-fri'."""
        return (f"{self.label} gets {self.profile} "
                f"{self.start:%H:%M}-{self.end:%H:%M} {_describe_days(self.days)}")


def _describe_days(days: frozenset[int]) -> str:
    if days == frozenset(range(7)):
        return "every day"
    runs: list[list[int]] = []
    for d in sorted(days):
        if runs and runs[-1][-1] == d - 1:
            runs[-1].append(d)
        else:
            runs.append([d])
    return ",".join(f"{DAYS[r[0]]}-{DAYS[r[-1]]}" if len(r) >= 3
                    else ",".join(DAYS[d] for d in r) for r in runs)


@dataclass(frozen=True)
class Config:
    path: str = DEFAULT_CONFIG_PATH
    paths: Paths = field(default_factory=Paths)
    api_group: str = ""
    node: Node = field(default_factory=Node)
    defaults: SliceSpec = field(default_factory=lambda: SliceSpec(
        memory=None, compute=None, priority="low", policy="share"))
    scheduler_period: float = 0.1
    scheduler_layers: tuple[str, ...] | None = None    # None: the kernel's default (all)
    metrics_listen: str = "127.0.0.1:19400"
    log_level: str = "info"
    gc_interval: float = 10.0
    profiles: dict[str, SliceSpec] = field(default_factory=dict)
    limits: dict[str, Limits] = field(default_factory=dict)     # by profile name
    audit: dict[str, AuditSpec] = field(default_factory=dict)   # by profile name
    schedule: tuple[Window, ...] = ()
    kubernetes: Kubernetes = field(default_factory=Kubernetes)
    history: History = field(default_factory=History)
    forecasts: dict[str, ForecastSpec] = field(default_factory=dict)   # by profile name

    def forecast_of(self, profile: str | None) -> ForecastSpec:
        """A profile's forecast settings (off for no profile, or one that sets none)."""
        return self.forecasts.get(profile, ForecastSpec()) if profile is not None \
            else ForecastSpec()

    def audit_of(self, profile: str | None) -> AuditSpec:
        """A profile's audit mode and allow-list (none for no profile, or a
        profile that sets neither)."""
        return self.audit.get(profile, AuditSpec()) if profile is not None else AuditSpec()

    @property
    def image_env_profiles(self) -> list[str]:
        """The profiles that take requests from a container image's VGPU_*
        environment (allow_image_env = true), sorted."""
        return sorted(n for n, lim in self.limits.items() if lim.allow_image_env)

    def admit(self, spec: SliceSpec, profile: str | None, from_image: bool = False) -> None:
        """Check a new slice's request against its profile's limits: its
        explicit values (``spec``) over the profile over [defaults], the
        schedule left out (a window is the operator's own choice).  A
        request from the image's environment must name a profile with
        allow_image_env.  Raises ValueError quoting the value and the limit."""
        if from_image and (profile is None or
                           not self.limits.get(profile, Limits()).allow_image_env):
            allowed = ", ".join(self.image_env_profiles) or "none"
            raise ValueError(f"a request from the container image's environment needs a "
                             f"profile with allow_image_env = true; "
                             f"{'none was named' if profile is None else 'profile ' + quote(profile) + ' does not have it'} "
                             f"(such profiles: {allowed})")
        if profile is None or profile not in self.limits:
            return
        eff = spec.merged_over(self.profiles.get(profile, SliceSpec()).merged_over(self.defaults))
        problems = self.limits[profile].problems(eff, profile)
        if problems:
            raise ValueError("; ".join(problems))

    def window_profile(self, labels: Mapping[str, str],
                       now: datetime.datetime) -> str | None:
        """The profile of the first schedule window (in file order) that
        matches one of `labels` and is open at `now`; None if none."""
        for w in self.schedule:
            if w.matches(labels) and w.active(now):
                return w.profile
        return None

    def effective(self, spec: SliceSpec, profile: str | None,
                  labels: Mapping[str, str], now: datetime.datetime) -> SliceSpec:
        """A slice's effective settings at `now`: its explicit values (`spec`)
        over the profile an open schedule window selects for its labels, or
        else its own `profile`, over [defaults].  A window wins over the
        slice's own profile: the schedule is the operator's node-wide policy
        and the label is the container's opt-in to it; outside its windows
        the slice's own profile applies again.  Raises ValueError for a
        profile this config does not define."""
        chosen = self.window_profile(labels, now) or profile
        base = self.defaults
        if chosen is not None:
            try:
                base = self.profiles[chosen].merged_over(self.defaults)
            except KeyError:
                known = ", ".join(sorted(self.profiles)) or "none defined"
                raise ValueError(f"profile {quote(chosen)} is not defined "
                                 f"(profiles: {known})") from None
        return spec.merged_over(base)


# --------------------------------------------------------------------------
# parsing

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
             "history", "profiles", "schedule", "kubernetes")


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


def _parse_spec(table: Mapping[str, Any], err: Callable[[str, str], None],
                prefix: str, also_known: tuple[str, ...] = ()) -> SliceSpec:
    """The four slice keys of a table ([defaults], [profiles.X], API args);
    err(dotted_key, message) for each problem, unknown keys included
    (``also_known``: other keys of the table, parsed by the caller)."""
    out: dict[str, Any] = {}
    for key, v in table.items():
        k = prefix + key
        parse = _SPEC_PARSERS.get(key)
        if parse is not None:
            try:
                out[key] = parse(v)
            except BadValue as e:
                err(k + e.at, str(e))
        elif key not in also_known:
            err(k, f"unknown key (known: {', '.join(tuple(_SPEC_PARSERS) + also_known)})")
    return SliceSpec(**out)


#: SliceSpec's four keys and their parsers (vgpu.common.values')
_SPEC_PARSERS = {"memory": parse_size, "compute": parse_percent, "priority": parse_priority,
                 "policy": parse_policy}


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
        if len(str(sock).encode()) > _SUN_PATH_MAX:
            self.err("paths.socket", f"{quote(str(sock))} is too long for a Unix socket "
                                     f"(at most {_SUN_PATH_MAX} bytes)")
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
        if group and not (_GROUP_RE.match(group) or group.isdigit()):
            self.err("api.group", f"{quote(group)} is not a group name or number")
            group = ""
        group = group or ""

        node = self.parse_node(self.table(raw, "node"))

        t = self.table(raw, "defaults")
        d = _parse_spec(t, self.err, "defaults.")
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
            profiles[name] = _parse_spec(ptbl, self.err, f"profiles.{name}.",
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
                      forecasts=forecasts)

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
                             f"{_days_text(hi)})")
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
                                          f"raw_retention ({_days_text(raw_ret)})")
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
            if not eq or not _LABEL_KEY_RE.match(key) or not _LABEL_VALUE_RE.match(value):
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
                                        "oversubscribe_factor"))
        try:
            enabled = parse_bool(t.get("device_plugin", False))
        except BadValue as e:
            self.err("kubernetes.device_plugin", str(e))
            enabled = False
        kdir = self.abspath(t, "kubelet_dir", "kubernetes.kubelet_dir", base.kubelet_dir)
        if len(str(kdir).rstrip("/").encode()) + _K8S_SOCK_NAME_MAX > _SUN_PATH_MAX:
            self.err("kubernetes.kubelet_dir", f"{quote(str(kdir))} is too long for the "
                     f"plugin's Unix sockets in it (at most "
                     f"{_SUN_PATH_MAX - _K8S_SOCK_NAME_MAX} bytes)")
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
        return Kubernetes(device_plugin=enabled, kubelet_dir=kdir, profile=profile,
                          oversubscribe_factor=float(factor))

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
                    if not eq or not _LABEL_KEY_RE.match(key) or not _LABEL_VALUE_RE.match(value):
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


def _days_text(s: float) -> str:
    return f"{s / 86400:g}d" if s >= 86400 and not s % 86400 else format_duration(s)


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
    if not _HOSTNAME_RE.match(host) or len(host) > 253:
        return "has a bad host name"
    return None


# --------------------------------------------------------------------------
# reload

def _show(v: Any) -> str:
    if v is None:
        return "unset"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return quote(v)
    if isinstance(v, Path):
        return quote(str(v))
    if isinstance(v, tuple):
        return "[" + ", ".join(_show(x) for x in v) + "]"
    return str(v)


def _spec_items(prefix: str, s: SliceSpec) -> dict[str, str]:
    return {
        prefix + "memory": "unset" if s.memory is None else format_size(s.memory),
        prefix + "compute": "unset" if s.compute is None else format_percent(s.compute),
        prefix + "priority": _show(s.priority),
        prefix + "policy": _show(s.policy),
    }


def _flatten(c: Config) -> dict[str, str]:
    out = {
        "paths.socket": _show(c.paths.socket),
        "paths.state_dir": _show(c.paths.state_dir),
        "paths.fuse_mount": _show(c.paths.fuse_mount),
        "api.group": _show(c.api_group),
        "node.gpus": _show(c.node.gpus),
        "node.placement": _show(c.node.placement),
        "node.oversubscribe_memory": _show(c.node.oversubscribe_memory),
        "node.uvm": _show(c.node.uvm),
        "node.over_quota_action": _show(c.node.over_quota_action),
        "node.max_channels": "no cap" if c.node.max_channels == 0 else _show(c.node.max_channels),
        "scheduler.period": format_duration(c.scheduler_period),
        "scheduler.layers": "kernel default" if c.scheduler_layers is None
        else _show(c.scheduler_layers),
        "metrics.listen": _show(c.metrics_listen),
        "log.level": _show(c.log_level),
        "gc.interval": format_duration(c.gc_interval),
        "kubernetes.device_plugin": _show(c.kubernetes.device_plugin),
        "kubernetes.kubelet_dir": _show(c.kubernetes.kubelet_dir),
        "kubernetes.profile": _show(c.kubernetes.profile),
        "kubernetes.oversubscribe_factor": f"{c.kubernetes.oversubscribe_factor:g}",
        "history.enabled": _show(c.history.enabled),
        "history.path": _show(c.history.path) if c.history.path is not None
        else "<state_dir>/history.db",
        "history.interval": format_duration(c.history.interval),
        "history.raw_retention": _days_text(c.history.raw_retention),
        "history.step": format_duration(c.history.step),
        "history.retention": _days_text(c.history.retention),
        "history.max_size": format_size(c.history.max_size),
    }
    out.update(_spec_items("defaults.", c.defaults))
    return out


# Keys whose change takes effect only when vgpud restarts.
RESTART_KEYS = ("paths.socket", "paths.state_dir", "paths.fuse_mount", "history.enabled",
                "history.path", "history.interval", "history.raw_retention", "history.step",
                "history.retention", "history.max_size")


#: what a change of a profile's audit keys reaches (vgpud sends them with SLICE_NEW)
AUDIT_NOTE = " (slices created from now on)"


def _audit_changes(prefix: str, a: AuditSpec, b: AuditSpec) -> list[str]:
    out = []
    if a.audit != b.audit:
        out.append(f"{prefix}audit: {_show(a.audit)} -> {_show(b.audit)}{AUDIT_NOTE}")
    if a.allow_list != b.allow_list:
        def show(x: AuditSpec) -> str:
            return "unset" if x.allow_list is None else \
                f"{quote(x.allow_list)} ({_items(len(x.allow))})"
        out.append(f"{prefix}allow_list: {show(a)} -> {show(b)}{AUDIT_NOTE}")
    elif a.allow != b.allow:
        out.append(f"{prefix}allow_list: {quote(b.allow_list)}: contents changed, "
                   f"{_items(len(a.allow))} -> {_items(len(b.allow))}{AUDIT_NOTE}")
    return out


def describe_changes(old: Config, new: Config) -> list[str]:
    """Human-readable lines, one per changed setting, in file order:
    'profiles.small.memory: 4 GiB -> 6 GiB', 'profiles.big: added (memory
    16 GiB)', 'schedule[1]: removed (...)'.  Keys in RESTART_KEYS are marked
    '(takes effect on restart)'.  [] when nothing changed."""
    lines: list[str] = []
    a, b = _flatten(old), _flatten(new)
    for k in a:
        if a[k] != b[k]:
            note = " (takes effect on restart)" if k in RESTART_KEYS else ""
            lines.append(f"{k}: {a[k]} -> {b[k]}{note}")
    for name in old.profiles:
        if name not in new.profiles:
            lines.append(f"profiles.{name}: removed")
        elif old.profiles[name] != new.profiles[name]:
            pa = _spec_items(f"profiles.{name}.", old.profiles[name])
            pb = _spec_items(f"profiles.{name}.", new.profiles[name])
            lines.extend(f"{k}: {pa[k]} -> {pb[k]}" for k in pa if pa[k] != pb[k])
    for name in new.profiles:
        if name not in old.profiles:
            lines.append(f"profiles.{name}: added ({new.profiles[name].describe()})")
    for name in new.profiles:
        la, lb = old.limits.get(name, Limits()), new.limits.get(name, Limits())
        if name in old.profiles and la != lb:
            lines.append(f"profiles.{name} limits: {la.describe()} -> {lb.describe()}")
    for name in new.profiles:
        if name in old.profiles:
            lines.extend(_audit_changes(f"profiles.{name}.", old.audit_of(name),
                                        new.audit_of(name)))
    for name in new.profiles:
        fa, fb = old.forecast_of(name), new.forecast_of(name)
        if name in old.profiles and fa != fb:
            lines.append(f"profiles.{name}: {fa.describe()} -> {fb.describe()}")
    for i in range(max(len(old.schedule), len(new.schedule))):
        wa = old.schedule[i] if i < len(old.schedule) else None
        wb = new.schedule[i] if i < len(new.schedule) else None
        if wa == wb:
            continue
        if wa is None:
            lines.append(f"schedule[{i}]: added ({wb.describe()})")
        elif wb is None:
            lines.append(f"schedule[{i}]: removed ({wa.describe()})")
        else:
            lines.append(f"schedule[{i}]: {wa.describe()} -> {wb.describe()}")
    return lines
