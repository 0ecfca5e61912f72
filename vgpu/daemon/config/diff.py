"""What changed between two configurations, as the reload logs it, and which
changes wait for a restart (``describe_changes``, ``RESTART_KEYS``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vgpu.common.values import format_duration, format_percent, format_size, quote
from vgpu.daemon.config.schema import AuditSpec, Config, Limits, SliceSpec, days_text, items_text

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
        "kubernetes.runtime_guard": _show(c.kubernetes.runtime_guard),
        "kubernetes.pod_requests": _show(c.kubernetes.pod_requests),
        "kubernetes.dra_plugin": _show(c.kubernetes.dra_plugin),
        "kubernetes.dra_admin_access": _show(c.kubernetes.dra_admin_access),
        "kubernetes.node_name": _show(c.kubernetes.node_name),
        "kubernetes.api_server": _show(c.kubernetes.api_server),
        "kubernetes.cdi_dir": _show(c.kubernetes.cdi_dir),
        "kubernetes.namespace_profiles": "{" + ", ".join(
            f"{quote(ns)} = {_show(p)}" for ns, p in sorted(c.kubernetes.namespace_profiles.items()))
        + "}",
        "rdma.hca_handles": str(c.rdma.hca_handles),
        "rdma.hca_objects": str(c.rdma.hca_objects),
        "history.enabled": _show(c.history.enabled),
        "history.path": _show(c.history.path) if c.history.path is not None
        else "<state_dir>/history.db",
        "history.interval": format_duration(c.history.interval),
        "history.raw_retention": days_text(c.history.raw_retention),
        "history.step": format_duration(c.history.step),
        "history.retention": days_text(c.history.retention),
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
                f"{quote(x.allow_list)} ({items_text(len(x.allow))})"
        out.append(f"{prefix}allow_list: {show(a)} -> {show(b)}{AUDIT_NOTE}")
    elif a.allow != b.allow:
        out.append(f"{prefix}allow_list: {quote(b.allow_list)}: contents changed, "
                   f"{items_text(len(a.allow))} -> {items_text(len(b.allow))}{AUDIT_NOTE}")
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
