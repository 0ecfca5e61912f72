"""vgpuctl's defaults for `runtime configure` and `cdi generate`, apart
from vgpu.cli.rtconfig and vgpu.common.cdi so that vgpuctl's usage texts name
them without importing those (tomllib, difflib, dataclasses; subprocess for
the driver's files) on every start.  Standard library only."""

DEFAULT_CONFIG = "/etc/containerd/config.toml"
DEFAULT_RUNTIME_PATH = "/usr/local/bin/vgpu-runtime"
DEFAULT_HANDLER = "vgpu"
DROP_IN_NAME = "conf.d/vgpu.toml"
#: NVIDIA Container Toolkit's config (nvidia-container-runtime and its hook)
TOOLKIT_CONFIG = "/etc/nvidia-container-runtime/config.toml"
#: the hook `vgpuctl cdi generate` wires in by default (make install's link)
CDI_HOOK = "/usr/local/bin/vgpu-oci-hook"   # = vgpu.common.cdi.CDI_HOOK (tests/host/test_dra_plugin.py)
