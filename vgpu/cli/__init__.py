"""The command-line side: vgpuctl, its API client, the OCI hook and vgpu-runtime.

Everything here imports the standard library only (and vgpu.common.values and the
ABI constants of vgpu.abi.uapi, which are themselves standard-library only),
so a CLI or a hook starts in milliseconds on a node without the daemon's
dependencies; tests/host/test_layers.py proves it for the whole subpackage.
"""
