"""vgpuctl cdi generate: the CDI spec of vgpud's slices with the host
driver's files (docs/containers.md, "Driver files").  A module of its own
so that only this command pays for vgpu.common.driverfiles' imports
(subprocess, platform): the table in vgpu.cli.ctl names ``cmd_cdi`` and its
converters by reference (``resolve`` in vgpu.cli.ctlargv).  Standard
library only."""
from __future__ import annotations

import json
import os
import sys

from vgpu.common.cdi import CDI_HOOK, cdi_spec
from vgpu.cli.ctlargv import EXIT_ERROR, EXIT_OK, UsageError
from vgpu.cli.ctlrender import err
from vgpu.common import apiclient as ac
from vgpu.common import driverfiles as df
from vgpu.common.files import atomic_write
from vgpu.common.request import FUSE_MOUNT
from vgpu.common.values import BadValue, quote


def c_driver_version(text: str) -> str:
    if not df.valid_version(text):
        raise BadValue(text, "is not a driver version (e.g. 535.261.03)")
    return text


def c_abs_dir(text: str) -> list[str]:
    if not text.startswith("/"):
        raise BadValue(text, "is not an absolute directory")
    return [os.path.normpath(text)]


def cmd_cdi(client, o):
    if o["generate"] != "generate":
        raise UsageError(f'cdi: unknown action {quote(o["generate"])} (only "generate")')
    slices = client.request("list").get("slices", [])
    fuse = o.get("fuse_mount") or os.environ.get("VGPU_FUSE_MOUNT") or FUSE_MOUNT
    sock = ac.socket_path(o.get("socket"))
    driver = None
    if not o.get("no_driver_files"):
        # the host driver's user space (vgpu.common.driverfiles): its
        # version from the kernel module, else vgpud's inventory
        version = o.get("driver_version") or df.driver_version()
        if version is None:
            try:
                version = client.request("status").get("driver_version")
            except ac.ApiError:
                version = None
        driver, warning = df.for_spec(version, o.get("driver_lib_dir"), o.get("driver_bin_dir"))
        if warning:
            sys.stderr.write(f"vgpuctl: cdi generate: warning: {warning}"
                             f"{' (--driver-version V brings them)' if driver is None else ''}\n")
    text = json.dumps(cdi_spec(slices, fuse, o.get("hook") or CDI_HOOK,
                               None if sock == ac.DEFAULT_SOCKET else sock, driver),
                      indent=2) + "\n"
    out = o.get("output")
    if not out or out == "-":
        sys.stdout.write(text)
        return EXIT_OK
    try:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        atomic_write(out, text)
    except OSError as e:
        err(f"cdi generate: cannot write {out}: {e.strerror or e}")
        return EXIT_ERROR
    return EXIT_OK
