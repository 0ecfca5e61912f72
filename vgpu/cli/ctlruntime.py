"""vgpuctl runtime configure (vgpu.cli.rtconfig).  A module of its own so
that only this command pays for rtconfig's imports (tomllib, difflib,
dataclasses): the table in vgpu.cli.ctl names ``cmd_runtime`` and the
option converters by reference (``resolve`` in vgpu.cli.ctlargv), and its
help texts take the defaults from vgpu.cli.rtdefaults.  Standard library
only."""
from __future__ import annotations

from vgpu.cli import rtconfig
from vgpu.cli.ctlargv import EXIT_ERROR, UsageError
from vgpu.cli.ctlrender import err
from vgpu.common.values import quote


def cmd_runtime(client, o):
    if o["configure"] != "configure":
        raise UsageError(f'runtime: unknown action {quote(o["configure"])} (only "configure")')
    try:
        return rtconfig.run(o)
    except rtconfig.Refused as e:
        err(f"runtime configure: {e}")
        return EXIT_ERROR
