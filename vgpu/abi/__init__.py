"""The ABI side: vgpu.ko's netlink constants (uapi), NVIDIA's RM and UVM
layouts (nvabi, nvrel, nvnames), the ABI client (nvclient), allow-lists, and
the trace format and its replay.  Standard library only (ctypes).
"""
