"""vgpud's configuration, its schema: the typed, frozen shapes a parsed file
becomes (``Config`` and its tables, ``SliceSpec``, ``Limits``, ``Window``...),
their constants and bounds, ``ConfigError``, and the precedence of a
slice's settings (explicit > profile or schedule window > [defaults]).
Standard library only.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Mapping

from vgpu.abi import allowlist
from vgpu.common.request import ALLOCATED_BY, ALLOCATED_LABEL, FUSE_MOUNT, LABELS
from vgpu.common.values import (LAYER_FLAGS, BadValue, format_duration, format_percent, format_size,
                                parse_percent, parse_policy, parse_priority, parse_size, quote)


DEFAULT_CONFIG_PATH = "/etc/vgpu/vgpud.toml"

# PRIORITIES and POLICIES are vgpu.common.values' (the kernel's names), PLACEMENTS
# vgpu.daemon.policy's (what place() does)
UVM_MODES = ("count", "refuse")
OVER_QUOTA_ACTIONS = ("log", "event", "kill")
SCHED_LAYERS = tuple(LAYER_FLAGS)      # [scheduler] layers (vgpu.common.values.LAYER_FLAGS)
LOG_LEVELS = ("debug", "info", "warning", "error")
DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")

# sockaddr_un.sun_path holds 108 bytes with the terminating NUL.
SUN_PATH_MAX = 107

# Bounds on the kernel's duty-cycle period and the collection interval.
PERIOD_MIN, PERIOD_MAX = 0.001, 10.0
GC_MIN, GC_MAX = 0.1, 86400.0
# [node] max_channels travels as a u32 (VGPU_A_SLICE_MAX_CHANNELS).
MAX_CHANNELS_MAX = 2**32 - 1

GROUP_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}\$?\Z")
LABEL_KEY_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_./-]{0,252}\Z")
LABEL_VALUE_RE = re.compile(r"[A-Za-z0-9_.-]{0,63}\Z")
HOSTNAME_RE = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
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
        spec = parse_spec({k: v for k, v in (("memory", memory), ("compute", compute),
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
              "allow_image_env", "allow_rdma")


@dataclass(frozen=True)
class Limits:
    """What a request that names a profile may take, checked when a slice is
    created (Config.admit): a pod's annotations (or an allowed image's
    environment) cannot ask past what the operator set.  None: no limit.
    ``allow_image_env``: the profile takes requests from a container image's
    own VGPU_* environment (off by default: the image is not the operator).
    ``allow_rdma``: whether a request naming the profile may ask for an
    RDMA adapter (Config.admit_rdma); None: as the request's origin says."""
    max_memory: int | None = None
    max_compute: float | None = None
    allow_priorities: tuple[str, ...] | None = None
    allow_policies: tuple[str, ...] | None = None
    allow_image_env: bool = False
    allow_rdma: bool | None = None

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
        if self.allow_rdma is not None:
            parts.append(f"allow_rdma {'true' if self.allow_rdma else 'false'}")
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
            parts.append(f"allow_list {quote(self.allow_list)} ({items_text(len(self.allow))})")
        return ", ".join(parts) or "no audit mode, no allow-list"


def items_text(n: int) -> str:
    return f"{n} item{'' if n == 1 else 's'}"


@dataclass(frozen=True)
class Paths:
    socket: Path = Path("/run/vgpu/vgpud.sock")
    state_dir: Path = Path("/var/lib/vgpu")
    fuse_mount: Path | None = Path(FUSE_MOUNT)   # None: no vgpufs; parent 0700


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
    of a GPU while node.oversubscribe_memory is on.  ``runtime_guard``:
    Allocate's guard mount, which fails a container started without
    vgpu-runtime (off where containers get their slice otherwise: OCI
    hooks.d under CRI-O, CDI)."""
    device_plugin: bool = False
    kubelet_dir: Path = Path("/var/lib/kubelet/device-plugins")
    profile: str = ""
    oversubscribe_factor: float = 2.0
    runtime_guard: bool = True
    #: what a Kubernetes container's slice may come from (Config.admit_pod):
    #: "allocated", only the device plugin's allocation (the default where
    #: vgpud runs the plugin); "any", a pod's own vgpu.io/* annotations too
    #: (the default otherwise: nothing on the node counts devices)
    pod_requests: str = "any"
    #: namespace (or "*", every namespace) -> the profiles a pod there may
    #: name with vgpu.io/profile; its allocation's memory and compute stay
    namespace_profiles: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: vgpud runs vgpu-dra-plugin (vgpu.k8s.draplugin): Dynamic Resource
    #: Allocation's kubelet plugin; ``node_name``: this node's (the pool of
    #: its ResourceSlice; "" for $NODE_NAME, else the host's name);
    #: ``api_server``: the API server's URL ("" for in-cluster); its
    #: sockets go under kubelet_dir's parent (plugins/, plugins_registry/),
    #: a prepared claim's CDI spec to ``cdi_dir``
    dra_plugin: bool = False
    #: the DRA plugin prepares admin-access results (monitoring claims)
    #: into the GPU's own nodes, unmediated; refused when False
    dra_admin_access: bool = False
    node_name: str = ""
    api_server: str = ""
    cdi_dir: Path = Path("/var/run/cdi")

    def profiles_for(self, namespace: str) -> tuple[str, ...]:
        """The profiles a pod in ``namespace`` may name, sorted."""
        return tuple(sorted(set(self.namespace_profiles.get(namespace, ()))
                            | set(self.namespace_profiles.get("*", ()))))


@dataclass(frozen=True)
class Rdma:
    """[rdma]: the rdma cgroup limits a slice with RDMA gets on its adapter
    unless its request says otherwise (docs/rdma.md): user contexts
    (hca_handle) and verbs objects (hca_object)."""
    hca_handles: int = 16
    hca_objects: int = 65536


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
#: the labels Config.admit_pod reads (the hook's, vgpu.common.request.LABELS)
POD_NAMESPACE_LABEL = LABELS["pod_namespace"]
POD_NAME_LABEL = LABELS["pod_name"]
#: [kubernetes] pod_requests' values
K8S_POD_REQUESTS = ("allocated", "any")
#: a Kubernetes namespace's name (an RFC 1123 label), or "*" in namespace_profiles
K8S_NAMESPACE_RE = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\Z")
K8S_SOCK_NAME_MAX = 26
#: the longest socket path the DRA plugin makes under kubelet_dir's parent
#: (vgpu.daemon.plugin_supervisor.dra_plugin_argv)
K8S_DRA_SOCK_MAX = len("/plugins_registry/gpu.vgpu.io-reg.sock")


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
    rdma: Rdma = field(default_factory=Rdma)

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

    def admit_rdma(self, profile: str | None, labels: Mapping[str, str],
                   from_image: bool = False) -> None:
        """A request for an RDMA adapter (docs/rdma.md, "Who may ask"):
        refused where its profile says ``allow_rdma = false``; where the
        request is not the operator's, a Kubernetes container's (its labels
        name the pod's namespace: the hook's, from the CRI annotations) or
        the image's environment's, only with a profile that says
        ``allow_rdma = true``.  The adapter's verbs reach the network past
        the pod's network namespace and its policies, so a pod's author
        does not get it by writing an annotation.  Raises ValueError."""
        allow = self.limits.get(profile, Limits()).allow_rdma if profile is not None else None
        if allow is False:
            raise ValueError(f"RDMA is not allowed by profile {quote(profile)} "
                             f"(allow_rdma = false)")
        if allow is True:
            return
        who = ("the container image's environment" if from_image else
               f"a pod in namespace {quote(labels[POD_NAMESPACE_LABEL])}"
               if POD_NAMESPACE_LABEL in labels else None)
        if who is not None:
            allowed = ", ".join(sorted(n for n, lim in self.limits.items()
                                       if lim.allow_rdma)) or "none"
            raise ValueError(f"RDMA for a request from {who} needs a profile with "
                             f"allow_rdma = true; "
                             f"{'none was named' if profile is None else 'profile ' + quote(profile) + ' does not have it'}"
                             f" (such profiles: {allowed})")

    def admit_pod(self, spec: SliceSpec, profile: str | None,
                  labels: Mapping[str, str]) -> None:
        """A Kubernetes container's request against [kubernetes]
        pod_requests = "allocated" (docs/kubernetes.md, "One count"): its
        memory and compute come only from the device plugin's allocation
        (the hook labels such a slice vgpu.io/allocated-by), and a profile
        other than the plugin's own ([kubernetes] profile) is one the pod's
        namespace may name that sets no memory or compute the allocation
        left unset.  ``spec``: the request's explicit values, memory
        included; ``labels``: the slice's (the hook's, from the CRI
        annotations containerd or CRI-O set, which a pod cannot).  A create
        without the pod namespace label is not a Kubernetes container's
        (vgpuctl create, ctr, podman) and is not held to this.  Raises
        ValueError saying what to do instead."""
        k = self.kubernetes
        ns = labels.get(POD_NAMESPACE_LABEL)
        if ns is None or k.pod_requests != "allocated":
            return
        pod = labels.get(POD_NAME_LABEL)
        who = f"pod {ns}/{pod}" if pod else f"a pod in namespace {ns}"
        if labels.get(ALLOCATED_LABEL) != ALLOCATED_BY:
            raise ValueError(
                f"{who}: on this node a Kubernetes container's GPU memory and compute come "
                f"only from what the kubelet allocated ([kubernetes] pod_requests = "
                f"\"allocated\"): request the vgpu.io/memory-gib and vgpu.io/compute-percent "
                f"resources (with runtimeClassName: vgpu); a pod's vgpu.io/* annotations may "
                f"only name a profile (vgpu.io/profile) for them")
        if profile is None or profile == k.profile:
            return
        allowed = k.profiles_for(ns)
        if profile not in allowed:
            raise ValueError(
                f"{who}: profile {quote(profile)} is not allowed in namespace {quote(ns)} "
                f"([kubernetes.namespace_profiles] allows it: {', '.join(allowed) or 'none'})")
        prof = self.profiles.get(profile, SliceSpec())
        if spec.memory is None and prof.memory is not None:
            raise ValueError(
                f"{who}: profile {quote(profile)} sets memory {format_size(prof.memory)}, but "
                f"the kubelet allocated this container no vgpu.io/memory-gib: request it, or "
                f"name a profile that sets no memory")
        if spec.compute is None and prof.compute is not None:
            raise ValueError(
                f"{who}: profile {quote(profile)} sets compute {format_percent(prof.compute)}, "
                f"but the kubelet allocated this container no vgpu.io/compute-percent: "
                f"request it, or name a profile that sets no compute")

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


def parse_spec(table: Mapping[str, Any], err: Callable[[str, str], None],
                prefix: str, also_known: tuple[str, ...] = ()) -> SliceSpec:
    """The four slice keys of a table ([defaults], [profiles.X], API args);
    err(dotted_key, message) for each problem, unknown keys included
    (``also_known``: other keys of the table, parsed by the caller)."""
    out: dict[str, Any] = {}
    for key, v in table.items():
        k = prefix + key
        parse = SPEC_PARSERS.get(key)
        if parse is not None:
            try:
                out[key] = parse(v)
            except BadValue as e:
                err(k + e.at, str(e))
        elif key not in also_known:
            err(k, f"unknown key (known: {', '.join(tuple(SPEC_PARSERS) + also_known)})")
    return SliceSpec(**out)


#: SliceSpec's four keys and their parsers (vgpu.common.values')
SPEC_PARSERS = {"memory": parse_size, "compute": parse_percent, "priority": parse_priority,
                 "policy": parse_policy}


def days_text(s: float) -> str:
    return f"{s / 86400:g}d" if s >= 86400 and not s % 86400 else format_duration(s)
