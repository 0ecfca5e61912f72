"""Kubernetes: the kubelet device plugin (vgpu-device-plugin)."""
