"""Compatibility name for vgpu-oci-hook (vgpu/cli/hook.py imports
``vgpu.cli.request``): the request rules are vgpu.common.request.  Drop this
module once hook.py imports from ``vgpu.common.request``."""
from vgpu.common.request import (ANNOTATION_PREFIX, ENV_PREFIX, POD_UID_KEYS, Scope, ScopeError,
                                 honoured_scope, is_pod_cgroup, vgpu_major)

__all__ = ["ANNOTATION_PREFIX", "ENV_PREFIX", "POD_UID_KEYS", "Scope", "ScopeError",
           "honoured_scope", "is_pod_cgroup", "vgpu_major"]
