"""vgpuctl audit: a slice's audit record, and with --allow-list the items
to forward written as an allow-list (vgpu.abi.allowlist).  A module of its
own so that only this command pays for allowlist's imports (dataclasses):
the table in vgpu.cli.ctl names ``cmd_audit`` by reference (``resolve`` in
vgpu.cli.ctlargv).  Standard library only."""
from __future__ import annotations

import sys

from vgpu.abi import allowlist
from vgpu.cli.ctlargv import EXIT_ERROR, EXIT_OK
from vgpu.cli.ctlrender import as_int, emit_json, err, print_audit


def cmd_audit(client, o):
    res = client.request("audit", container=o["container"])
    if o["json"]:
        emit_json(res)
    else:
        print_audit(res)
    path = o.get("allow_list")
    if path is None:
        return EXIT_OK
    items, skipped = audit_allow_items(res.get("entries") or [])
    try:
        n = allowlist.write(path, items)
    except OSError as e:
        err(f"audit: cannot write {path}: {e.strerror or e}")
        return EXIT_ERROR
    # stdout stays the JSON document with --json
    out = sys.stderr if o["json"] else sys.stdout
    note = f" ({skipped} of an unknown kind left out)" if skipped else ""
    out.write(f"wrote {n} item{'' if n == 1 else 's'} the policy refused or vgpu.ko does not "
              f"implement to {path}{note}\n")
    return EXIT_OK


#: the verdicts whose items an allow-list is for
ALLOW_VERDICTS = ("refuse", "not-implemented")


def audit_allow_items(entries: list) -> tuple[list, int]:
    """The items of an audit record's entries that an allow-list would
    forward: the policy refuses them or vgpu.ko does not implement them,
    and the slice called them (refused, or let through by audit mode or
    its allow-list).  -> (allowlist.AllowItem list, entries of a kind this
    vgpuctl does not know)."""
    items, skipped = [], 0
    for e in entries:
        if not isinstance(e, dict) or e.get("verdict") not in ALLOW_VERDICTS:
            continue
        if not (as_int(e.get("refused")) > 0 or as_int(e.get("let_through")) > 0):
            continue
        kind, number = e.get("kind"), e.get("number")
        if kind not in allowlist.KINDS or isinstance(number, bool) or \
                not isinstance(number, int) or not 0 <= number <= 0xFFFFFFFF:
            skipped += 1
            continue
        name = e.get("name") if isinstance(e.get("name"), str) else ""
        items.append(allowlist.AllowItem.of(kind, number, name))
    return items, skipped
