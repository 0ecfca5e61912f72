"""vgpu: a GPU slicing runtime.

Several containers share one NVIDIA GPU; each gets a slice (a hard GPU-memory
quota and a compute quota) enforced by the vgpu.ko kernel module.  This package
holds the user-space parts: the daemon (vgpud), the admin CLI (vgpuctl), the
OCI hook, and the RM ABI client used as a test workload and diagnostic.
"""

__version__ = "0.1.0"
