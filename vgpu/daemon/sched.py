"""vgpu.ko's GPU schedulers as vgpud controls them, owned by the slice
manager (``SliceManager.sched``): each sliced GPU's period and layers
(SCHED_SET, from [scheduler]), the last SCHED_GET dump, and whether the
module has the commands at all.

A vgpu.ko without the SCHED commands (an older module) is told apart from
a refused value once, logged once, and then left alone: ``supported`` is
False and the manager sends no compute attributes (``compute_enabled``),
which such a module would refuse.  The next module (vgpu.ko reloaded) is
probed again (``lost``).
"""

from __future__ import annotations

import errno
import logging
import time
from typing import Any, Awaitable, Callable

from vgpu.abi import uapi
from vgpu.daemon import compute
from vgpu.daemon.kport import KernelPort, KernelUnavailable

log = logging.getLogger("vgpud.slices")        # the manager's, whose part this is


class SchedControl:
    """The schedulers of the sliced GPUs.  ``config``: the config in force
    (it changes on a reload); ``sliced_gpus``: the GPUs the config slices,
    the inventory polled first when it has not been."""

    def __init__(self, kport: KernelPort, config: Callable[[], Any],
                 sliced_gpus: Callable[[], Awaitable[list]]):
        self.kport = kport
        self._config = config
        self._sliced_gpus = sliced_gpus
        self.scheds: dict[int, Any] = {}        # real minor -> kernel.SchedInfo, last read
        self.scheds_at = 0.0
        #: None until probed; False: vgpu.ko lacks SCHED_SET (and compute)
        self.supported: bool | None = None
        self._layers_sent: int | None = None

    @property
    def compute_enabled(self) -> bool:
        """Whether compute attributes are sent (False on a vgpu.ko without
        the SCHED commands, which would refuse them)."""
        return self.supported is not False

    def unsupported(self, ex: OSError) -> bool:
        """Whether a SCHED_* refusal means the module lacks the command: genl
        answers an unknown command EOPNOTSUPP (EINVAL on some kernels, with
        no extack; an EINVAL with a message is a refused value)."""
        if ex.errno == errno.EOPNOTSUPP or (ex.errno == errno.EINVAL
                                            and not getattr(ex, "extack", None)):
            if self.supported is not False:
                log.warning("vgpu.ko has no scheduler commands (SCHED_SET: %s): an older "
                            "module; compute quotas are not enforced", ex)
            self.supported = False
            return True
        return False

    async def apply(self, reason: str = "start") -> int:
        """SCHED_SET on every sliced GPU: [scheduler] period, and layers when
        configured (back to the kernel's default, all, when the key is
        removed).  Returns the GPUs set; a kernel without the command is
        logged once and left alone."""
        if self.kport.kernel is None and not await self.kport.connect():
            return 0
        gpus = await self._sliced_gpus()
        cfg = self._config()
        period_us = int(round(cfg.scheduler_period * 1e6))
        period_us = max(uapi.VGPU_SCHED_PERIOD_MIN_US, min(uapi.VGPU_SCHED_PERIOD_MAX_US, period_us))
        layers = compute.layers_flags(getattr(cfg, "scheduler_layers", None))
        send_layers = layers
        if layers is None and self._layers_sent not in (None, uapi.VGPU_SCHED_L_ALL):
            send_layers = uapi.VGPU_SCHED_L_ALL
        n = 0
        for g in gpus:
            try:
                info = await self.kport.call(
                    lambda k: k.sched_set(g.minor, period_us=period_us, layers=send_layers))
            except KernelUnavailable:
                return n
            except OSError as ex:
                if self.unsupported(ex):
                    return n
                log.error("scheduler of GPU %d (minor %d): %s", g.index, g.minor, ex)
                continue
            self.supported = True
            if info is not None:
                self.scheds[info.real_minor] = info
            n += 1
        if n:
            self._layers_sent = send_layers if send_layers is not None else self._layers_sent
            log.info("scheduler (%s): period %d us, layers %s on %d GPU(s)", reason, period_us,
                     "+".join(compute.layers_names(layers)) if layers is not None else "kernel default",
                     n)
        return n

    async def ensure(self) -> None:
        """Probe the module (``apply``) once it is there, if not yet."""
        if self.supported is None and self.kport.kernel is not None:
            await self.apply("probe")

    async def refresh(self, max_age: float = 0.0) -> dict[int, Any]:
        """The kernel's schedulers (a SCHED_GET dump), cached max_age seconds."""
        if self.supported is False or self.kport.kernel is None:
            return self.scheds
        if max_age and time.monotonic() - self.scheds_at < max_age:
            return self.scheds
        try:
            infos = await self.kport.call(lambda k: k.scheds())
        except KernelUnavailable:
            return self.scheds
        except OSError as ex:
            if not self.unsupported(ex):
                log.warning("scheduler dump: %s", ex)
            return self.scheds
        self.scheds = {i.real_minor: i for i in infos}
        self.scheds_at = time.monotonic()
        return self.scheds

    def view(self, minor: int | None) -> dict | None:
        """A GPU's scheduler as the API's ``gpus`` shows it (None: not read)."""
        info = self.scheds.get(minor) if minor is not None else None
        if info is None:
            return None
        return {"period_us": info.period_us, "layers": compute.layers_names(info.layers),
                "switches": info.switches, "cpu_s": info.cpu_ns / 1e9}

    def lost(self) -> None:
        """vgpu.ko went away: forget what was read, probe the next module."""
        self.scheds = {}
        self.scheds_at = 0.0
        self.supported = None
        self._layers_sent = None


__all__ = ["SchedControl"]
