"""Compatibility name for vgpu-oci-hook (vgpu/cli/hook.py imports
``vgpu.values``): the value parsers are vgpu.common.values.  Drop this
module once hook.py imports from ``vgpu.common.values``."""
from vgpu.common.values import (BadValue, parse_compute, parse_container, parse_duration,
                                parse_gpus, parse_pid, parse_policy, parse_priority, parse_profile,
                                parse_size, quote)

__all__ = ["BadValue", "parse_compute", "parse_container", "parse_duration", "parse_gpus",
           "parse_pid", "parse_policy", "parse_priority", "parse_profile", "parse_size", "quote"]
