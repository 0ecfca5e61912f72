"""Compatibility name for vgpu-oci-hook (vgpu/cli/hook.py imports
``vgpu.cli.apiclient``): the API client is vgpu.common.apiclient.  Drop this
module once hook.py imports ``from vgpu.common import apiclient``."""
from vgpu.common.apiclient import ApiClient, ApiError, ClientError

__all__ = ["ApiClient", "ApiError", "ClientError"]
