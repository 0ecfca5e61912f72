"""`vgpuctl runtime configure`'s defaults, apart from vgpu.cli.rtconfig so
that vgpuctl's usage texts name them without importing rtconfig (tomllib,
difflib, dataclasses) on every start.  Standard library only."""

DEFAULT_CONFIG = "/etc/containerd/config.toml"
DEFAULT_RUNTIME_PATH = "/usr/local/bin/vgpu-runtime"
DEFAULT_HANDLER = "vgpu"
DROP_IN_NAME = "conf.d/vgpu.toml"
#: NVIDIA Container Toolkit's config (nvidia-container-runtime and its hook)
TOOLKIT_CONFIG = "/etc/nvidia-container-runtime/config.toml"
