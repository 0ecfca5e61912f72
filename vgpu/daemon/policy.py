"""Admission and placement of slices on GPUs: pure functions, no I/O.

Owned here: the rules that decide whether a GPU can grant a quota, and which
GPU a slice lands on when its request names none.  The daemon (vgpu.daemon.main,
vgpu.daemon.api) builds a GpuView per GPU from its desired state and calls place()
and admit(); nothing here talks to the kernel, NVML or the state file.

Rules (docs/api.md):
- memory: a slice's quota may not exceed its GPU's memory, and the quotas of
  all slices of a GPU may not sum past the GPU's memory, unless memory
  oversubscription is on (then both are allowed: managed memory counted at
  its mapped length may legitimately exceed the framebuffer);
- compute: the compute of slices whose policy *reserves* compute may not sum
  past 100% on a GPU.  "fixed" reserves (the issue's rule); so does "burst",
  whose percentage is a guaranteed floor, and floors past 100% cannot all be
  guaranteed.  "share" is a weight and never refused.  GpuView.compute_fixed
  is the sum over a GPU's slices whose policy is in RESERVING_POLICIES.
"""

from __future__ import annotations

from dataclasses import dataclass

from vgpu.abi import uapi
from vgpu.common.values import format_percent, format_size

__all__ = [
    "GpuView",
    "AdmissionError",
    "RESERVING_POLICIES",
    "reserves_compute",
    "place",
    "admit",
]

#: "fixed" and "burst", by the kernel's numbers (the names are vgpu.abi.uapi's)
RESERVING_POLICIES = frozenset(uapi.COMPUTE_POLICY_NAMES[c]
                               for c in (uapi.VGPU_COMPUTE_FIXED, uapi.VGPU_COMPUTE_BURST))
PLACEMENTS = ("spread", "binpack")
_EPS = 1e-9


def reserves_compute(policy: str | None) -> bool:
    """True when a slice with this policy holds its compute percentage
    against the GPU's 100% (sum it into GpuView.compute_fixed)."""
    return policy in RESERVING_POLICIES


@dataclass
class GpuView:
    """What admission needs to know about one GPU.

    memory_allocated: the sum of memory quotas of the slices on this GPU.
    compute_fixed: the sum of compute percentages of the slices on this GPU
    whose policy reserves compute (see reserves_compute()).
    """
    index: int
    uuid: str
    memory_total: int
    memory_allocated: int = 0
    compute_fixed: float = 0.0

    @property
    def memory_free(self) -> int:
        """Unallocated memory (negative when oversubscribed)."""
        return self.memory_total - self.memory_allocated


class AdmissionError(Exception):
    """A quota the node cannot grant; the message quotes the values and says
    which rule refused (API error code "admission")."""


def admit(gpu: GpuView, memory: int, compute: float | None, policy: str | None,
          oversubscribe: bool,
          replacing: tuple[int, float | None, str | None] | None = None) -> None:
    """Raise AdmissionError unless `gpu` can take a slice with this memory
    quota and compute.  `replacing` is (memory, compute, policy) of the
    slice's current quota on this GPU when its quota changes (set-quota): its
    share is taken out of the GPU's totals before the new one is checked, so
    a slice can always keep or shrink what it has."""
    if isinstance(memory, bool) or not isinstance(memory, int):
        raise TypeError(f"memory must be an int, got {memory!r}")
    if memory < 0:
        raise AdmissionError(f"memory {memory} is negative")
    allocated = gpu.memory_allocated
    reserved = gpu.compute_fixed
    old_mem, old_reserved = None, None
    if replacing is not None:
        old_mem, old_compute, old_policy = replacing
        old_mem = old_mem or 0
        allocated -= old_mem
        old_reserved = old_compute if reserves_compute(old_policy) and old_compute else 0.0
        reserved -= old_reserved
    if compute is not None and not (0 <= compute <= 100):
        raise AdmissionError(f"compute {format_percent(compute)} is out of range (0% to 100%)")

    # Keeping or shrinking what a slice has is never refused, even on a GPU
    # that is overcommitted (oversubscription turned off since, GPU lost).
    if not oversubscribe and not (old_mem is not None and memory <= old_mem):
        if memory > gpu.memory_total:
            raise AdmissionError(
                f"memory {format_size(memory)} exceeds GPU {gpu.index}'s "
                f"{format_size(gpu.memory_total)} (oversubscription is off)")
        if allocated + memory > gpu.memory_total:
            raise AdmissionError(
                f"memory {format_size(memory)} does not fit on GPU {gpu.index}: "
                f"{format_size(max(allocated, 0))} of its {format_size(gpu.memory_total)} "
                f"are already allocated to slices, {format_size(max(gpu.memory_total - allocated, 0))} "
                f"free (oversubscription is off)")

    new_reserved = compute if reserves_compute(policy) and compute else 0.0
    if old_reserved is not None and new_reserved <= old_reserved + _EPS:
        return
    if reserves_compute(policy) and compute is not None:
        if reserved + compute > 100 + _EPS:
            raise AdmissionError(
                f"{policy} compute {format_percent(compute)} does not fit on GPU {gpu.index}: "
                f"{format_percent(max(reserved, 0.0))} is already reserved by fixed and burst "
                f"slices, {format_percent(max(100 - reserved, 0.0))} free")


def place(gpus: list[GpuView], memory: int, count: int = 1, placement: str = "spread",
          oversubscribe: bool = False, *, compute: float | None = None,
          policy: str | None = None) -> list[int]:
    """Choose `count` distinct GPUs (their indexes) for a new slice that asks
    for `memory` on each, in order of preference.

    spread: the GPU with the most unallocated memory first;
    binpack: the fullest GPU (least unallocated memory) that still fits.
    Ties go to the lower index.  Only GPUs that admit() the slice are
    candidates (compute and policy, when given, are checked too).  Raises
    AdmissionError, naming each GPU's reason, when fewer than `count` fit.
    """
    if placement not in PLACEMENTS:
        raise ValueError(f'placement "{placement}" is not one of spread, binpack')
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"count {count!r} must be a positive integer")
    if not gpus:
        raise AdmissionError("no GPU to place the slice on (the node slices none)")
    if count > len(gpus):
        raise AdmissionError(f"{count} GPUs asked for, the node slices {len(gpus)}")
    fits: list[GpuView] = []
    reasons: list[str] = []
    for g in gpus:
        try:
            admit(g, memory, compute, policy, oversubscribe)
        except AdmissionError as e:
            reasons.append(str(e))
        else:
            fits.append(g)
    if placement == "spread":
        fits.sort(key=lambda g: (-g.memory_free, g.index))
    else:
        fits.sort(key=lambda g: (g.memory_free, g.index))
    if len(fits) < count:
        what = "no GPU" if not fits else f"only {len(fits)} of the {count} GPUs asked for"
        raise AdmissionError(f"{what} can take the slice: " + "; ".join(reasons))
    return [g.index for g in fits[:count]]
