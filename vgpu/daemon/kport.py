"""The daemon's port to vgpu.ko: the netlink client (vgpu.vgpuko.client)
driven from trio, and the errors it raises.

It raises its own errors, never the API's: KernelUnavailable when vgpu.ko is
not loaded, KernelRefused (errno and the kernel's extack message) when
vgpu.ko refuses a command, trio.TooSlowError past a call's deadline.  vgpu.daemon.ops translates them into API errors, once.
"""

from __future__ import annotations

import errno
import logging
from typing import Callable, TypeVar

import trio

from vgpu.vgpuko.client import VgpuKernel
from vgpu.vgpuko.netlink import VgpuNotLoaded

log = logging.getLogger("vgpud.kernel")

KERNEL_TIMEOUT = 5.0
T = TypeVar("T")


class KernelUnavailable(Exception):
    """vgpu.ko is not loaded (or went away): nothing was asked."""


class KernelRefused(OSError):
    """vgpu.ko (or genl on its behalf) refused a command: the errno, and
    the kernel's extack message when it gave one.  An OSError, so that
    ``errno`` reads as anywhere; its own type, so that a refusal by the
    kernel is never confused with a failure of this host's files."""

    def __init__(self, cause: OSError):
        super().__init__(cause.errno, cause.strerror or str(cause))
        self.extack = getattr(cause, "extack", None)
        self.cause = cause

    def __str__(self) -> str:
        return str(self.cause)


class KernelPort:
    """vgpu.vgpuko.client.VgpuKernel driven from trio: every call runs in one worker
    thread (a limiter of 1), bounded by the client's socket timeout and a
    trio deadline.  ``kernel`` is None while vgpu.ko is not loaded.

    The daemon's kernel service (vgpu.daemon.main) owns the connection's life:
    it connects, watches the family with ``is_current`` and, when vgpu.ko
    went away, ``drop``s the client.  Any caller may still connect when
    ``kernel`` is None (an API request as the module comes back); ``wake``
    is set then, and when a call fails with ENOENT (what genl answers for a
    family that is gone), so that the service looks at once."""

    def __init__(self, factory=None, timeout: float = KERNEL_TIMEOUT):
        self.timeout = timeout
        self._factory = factory
        self.kernel = None
        self.limiter = trio.CapacityLimiter(1)
        self.wake = trio.Event()

    def _make(self):
        if self._factory is not None:
            return self._factory()
        return VgpuKernel(timeout=self.timeout)

    async def connect(self) -> bool:
        if self.kernel is not None:
            return True
        try:
            k = await trio.to_thread.run_sync(self._make, limiter=self.limiter)
        except (VgpuNotLoaded, FileNotFoundError):
            return False
        except OSError as e:
            log.warning("vgpu.ko: %s", e)
            return False
        if self.kernel is not None:         # another task connected meanwhile
            k.close()
            return True
        self.kernel = k
        self.wake.set()
        return True

    async def call(self, fn: Callable[[VgpuKernel], T]) -> T:
        """fn(the client) in the worker thread, e.g. ``call(lambda k:
        k.slice_get(sid))``: the kernel call is written where it is made, not
        named by a string.  Raises KernelUnavailable when vgpu.ko is not
        loaded, KernelRefused (errno, extack) when vgpu.ko refuses,
        trio.TooSlowError past the deadline."""
        if self.kernel is None and not await self.connect():
            raise KernelUnavailable("vgpu.ko is not loaded")
        k = self.kernel
        try:
            with trio.fail_after(self.timeout * 2 + 1):
                return await trio.to_thread.run_sync(fn, k, limiter=self.limiter)
        except OSError as e:
            if e.errno == errno.ENOENT:
                self.wake.set()             # a missing slice, or the whole family
            raise KernelRefused(e) from e

    async def is_current(self) -> bool:
        """Whether ``kernel`` still talks to the loaded vgpu.ko (False when
        there is none).  TooSlowError when nlctrl does not answer in time."""
        k = self.kernel
        if k is None:
            return False
        with trio.fail_after(self.timeout * 2 + 1):
            return await trio.to_thread.run_sync(k.is_current, limiter=self.limiter)

    async def drop(self, k=None) -> None:
        """Forget the client (k: only if it is still that one) and close it
        in the worker thread, after the calls already queued on it."""
        k = self.kernel if k is None else k
        if k is None:
            return
        if self.kernel is k:
            self.kernel = None
        with trio.CancelScope(shield=True), trio.move_on_after(self.timeout * 2 + 1):
            await trio.to_thread.run_sync(k.close, limiter=self.limiter)

    def close(self):
        if self.kernel is not None:
            try:
                self.kernel.close()
            except Exception:
                pass
            self.kernel = None
