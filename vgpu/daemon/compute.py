"""Compute slicing on the daemon side: pure functions, no I/O.

Owned here:
- the mapping of a slice's effective settings (vgpu.daemon.config: compute percent,
  policy share|fixed|burst, priority high|low) to what vgpu.ko enforces per
  GPU (``vgpu.vgpuko.messages.Compute``: policy, basis points, priority), and back to
  names for display (``kernel_view``);
- the scheduler's layer names of ``[scheduler] layers`` ("tsg", "doorbell")
  and their VGPU_SCHED_L_* flags;
- the achieved share (``ShareMeter``): per slice and GPU, the GPU time the
  kernel granted (VGPU_GPU_A_GPU_TIME_NS, a counter) over a sliding window of
  wall time: delta gpu_time / delta wall.

docs/compute.md is the design; docs/config.md says what the settings mean.
Compute left unset is a share of weight 10000 (a full weight: alone, the
slice gets the whole GPU; with others, it is scheduled like any share slice,
so priorities still order it).

What it may call: vgpu.abi.uapi (constants), vgpu.common.values (the names of
policies, priorities and layers, and their parsers) and
vgpu.vgpuko.messages.Compute (a dataclass).
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any, Iterable

from vgpu.abi import uapi
from vgpu.vgpuko.messages import Compute
from vgpu.common.values import LAYER_FLAGS, POLICY_CODES, PRIORITY_CODES, parse_policy, parse_priority

__all__ = [
    "POLICY_CODES", "POLICY_NAMES", "PRIORITY_CODES", "PRIORITY_NAMES", "LAYER_FLAGS",
    "percent_to_bp", "kernel_compute", "slice_compute", "compute_differs", "layers_flags",
    "layers_names", "kernel_view", "ShareMeter", "DEFAULT_WINDOW",
]

# The names by number, for display: the kernel's own tables (vgpu.abi.uapi);
# POLICY_CODES, PRIORITY_CODES and LAYER_FLAGS (names -> numbers) are
# vgpu.common.values', whose parsers check the names.
POLICY_NAMES = uapi.COMPUTE_POLICY_NAMES          # VGPU_COMPUTE_NONE included: "none"
PRIORITY_NAMES = uapi.PRIORITY_NAMES

BP_MAX = uapi.VGPU_COMPUTE_BP_MAX
#: seconds of wall time the achieved share is measured over
DEFAULT_WINDOW = 5.0


def percent_to_bp(percent: float | None) -> int:
    """A compute percentage (0..100) as basis points, rounded and clamped to
    1..10000 (the kernel refuses 0: "0%" is the smallest weight/cap there
    is).  None (compute unset) is a full weight, 10000."""
    if percent is None:
        return BP_MAX
    bp = int(round(float(percent) * 100))
    return max(1, min(BP_MAX, bp))


def kernel_compute(eff):
    """Effective settings (a config.SliceSpec: compute pct|None, policy
    name|None, priority name|None) -> vgpu.vgpuko.messages.Compute(policy, bp,
    priority).

    policy share/fixed/burst -> VGPU_COMPUTE_SHARE/FIXED/BURST; compute unset
    -> SHARE with 10000 whatever the policy (there is no cap or floor to hold
    without a percentage); priority high/low -> VGPU_PRIORITY_HIGH/LOW (unset:
    low).  Raises vgpu.common.values.BadValue (a ValueError) quoting an unknown
    policy or priority."""
    pct = eff.compute
    pol = parse_policy(eff.policy or "share")
    pri = parse_priority(eff.priority or "low")
    if pct is None:
        return Compute(uapi.VGPU_COMPUTE_SHARE, BP_MAX, PRIORITY_CODES[pri])
    return Compute(POLICY_CODES[pol], percent_to_bp(pct), PRIORITY_CODES[pri])


def slice_compute(ngpus: int, eff) -> dict:
    """{container GPU index: Compute} for a slice of ngpus GPUs (the same
    setting on each of its GPUs)."""
    c = kernel_compute(eff)
    return {i: c for i in range(ngpus)}


def compute_differs(gpu, want) -> bool:
    """Whether the kernel's view of one GPU of a slice (kernel.GpuUsage)
    differs from the wanted Compute."""
    return (gpu.compute_policy, gpu.compute_bp, gpu.priority) != \
        (want.policy, want.bp, want.priority)


def layers_flags(names: Iterable[str] | None) -> int | None:
    """["tsg", "doorbell"] -> VGPU_SCHED_L_* flags; None stays None."""
    if names is None:
        return None
    out = 0
    for n in names:
        out |= LAYER_FLAGS[n]
    return out


def layers_names(flags: int) -> list[str]:
    """VGPU_SCHED_L_* flags -> names (unknown bits as "0x.."), for display."""
    out = [n for n, f in LAYER_FLAGS.items() if flags & f]
    rest = flags & ~uapi.VGPU_SCHED_L_ALL
    if rest:
        out.append(hex(rest))
    return out


def kernel_view(gpu, achieved: float | None) -> dict:
    """The per-GPU "compute" object of the API (docs/api.md) from the
    kernel's GpuUsage and the measured share (a ratio, or None)."""
    pol = POLICY_NAMES.get(gpu.compute_policy, f"policy-{gpu.compute_policy}")
    return {
        "policy": pol,
        "percent": None if gpu.compute_policy == uapi.VGPU_COMPUTE_NONE else gpu.compute_bp / 100,
        "priority": PRIORITY_NAMES.get(gpu.priority, f"priority-{gpu.priority}"),
        "gpu_time_s": gpu.gpu_time_ns / 1e9,
        "achieved_percent": None if achieved is None else round(100 * achieved, 2),
        "paused": bool(gpu.paused),
        "tsgs": gpu.tsgs,
        "channels": gpu.channels,
    }


def wanted_view(want) -> dict:
    """The per-GPU "compute" object while the kernel has not answered (the
    daemon's wanted setting, nothing measured)."""
    return {"policy": POLICY_NAMES.get(want.policy, "none"), "percent": want.bp / 100,
            "priority": PRIORITY_NAMES.get(want.priority, "low"), "gpu_time_s": None,
            "achieved_percent": None, "paused": None, "tsgs": None, "channels": None}


class ShareMeter:
    """Achieved GPU share per (slice id, container GPU index).

    ``add(key, gpu_time_ns, now)`` records a sample of the kernel's counter;
    ``share(key)`` is (newest gpu_time - base gpu_time) / (newest wall - base
    wall) where base is the oldest sample not older than ``window`` seconds
    before the newest (or, when none is that old, the oldest kept), so a
    share covers at most the window.  None until two samples span at least
    ``min_span`` seconds.  A counter that goes backwards (the slice was
    recreated) restarts the series.  Ratios, 0.0 to about 1.0 (a share can
    pass 1.0 a little when a sample's wall time lags the kernel's count)."""

    def __init__(self, window: float = DEFAULT_WINDOW, min_span: float = 0.2, clock=time.monotonic):
        self.window = window
        self.min_span = min_span
        self.clock = clock
        self._s: dict[Any, deque] = {}

    def add(self, key, gpu_time_ns: int, now: float | None = None) -> None:
        now = self.clock() if now is None else now
        q = self._s.get(key)
        if q is None:
            q = self._s[key] = deque()
        if q and (gpu_time_ns < q[-1][1] or now < q[-1][0]):
            q.clear()
        if q and now == q[-1][0]:
            q[-1] = (now, gpu_time_ns)
        else:
            q.append((now, gpu_time_ns))
        # keep one sample at or before the window's start, drop older ones
        while len(q) > 2 and q[1][0] <= now - self.window:
            q.popleft()

    def share(self, key) -> float | None:
        q = self._s.get(key)
        if not q or len(q) < 2:
            return None
        t1, n1 = q[-1]
        for t0, n0 in q:
            if t0 >= t1 - self.window - 1e-9:
                break
        else:                                   # unreachable: q[-1] qualifies
            return None
        if t1 - t0 < self.min_span:
            # the oldest sample inside the window is too recent: use the one
            # just before the window if kept
            t0, n0 = q[0]
            if t1 - t0 < self.min_span:
                return None
        return max(0.0, (n1 - n0) / 1e9 / (t1 - t0))

    def forget(self, keep: Iterable) -> None:
        """Drop the series whose key is not in keep."""
        keep = set(keep)
        for k in [k for k in self._s if k not in keep]:
            del self._s[k]
