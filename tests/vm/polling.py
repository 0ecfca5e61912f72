"""The one poll loop of the VM tests: wait for a condition with a deadline."""
from __future__ import annotations

import time


def wait_until(pred, timeout: float = 5.0, interval: float = 0.05):
    """Poll pred() every interval seconds until it returns truthy or timeout
    seconds have passed; return its last value."""
    end = time.monotonic() + timeout
    while True:
        v = pred()
        if v or time.monotonic() >= end:
            return v
        time.sleep(interval)
