"""vgpu/uapi.py against kmod/include/uapi/vgpu.h, the netlink API's one source
of truth.

A C program generated from the Python names prints every value as the
compiler sees it (gcc against the header); the values must match.  The header
is also parsed for its `#define VGPU_*` names and the members of its enums:
each must exist in uapi.py, and uapi.py must name nothing the header lacks.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from vgpu import uapi  # noqa: E402

HEADER = ROOT / "kmod" / "include" / "uapi" / "vgpu.h"
HEADER_GUARD = "_UAPI_VGPU_H"


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def header_names() -> tuple[set[str], set[str]]:
    """(object-like #define names, enum member names) of the header that
    start with VGPU_ or __VGPU_."""
    text = _strip_comments(HEADER.read_text())
    defines = set()
    for m in re.finditer(r"^[ \t]*#[ \t]*define[ \t]+(\w+)(\(?)", text, re.M):
        if m.group(2) == "(" or m.group(1) == HEADER_GUARD:
            continue
        defines.add(m.group(1))
    members = set()
    for body in re.findall(r"\benum\b[^{;]*\{(.*?)\}", text, re.S):
        for item in body.split(","):
            item = item.strip()
            if not item:
                continue
            members.add(re.match(r"(\w+)", item).group(1))
    return defines, members


def test_header_parses():
    defines, members = header_names()
    assert "VGPU_GENL_NAME" in defines and "VGPU_CMD_SLICE_NEW" in members
    assert len(defines) >= 10 and len(members) >= 30


def test_every_header_name_is_mirrored_and_nothing_more():
    defines, members = header_names()
    in_header = {n for n in defines | members if n.lstrip("_").startswith("VGPU_")}
    others = sorted(n for n in defines | members if not n.lstrip("_").startswith("VGPU_"))
    assert not others, f"uapi/vgpu.h defines names outside the VGPU_ namespace: {others}"
    mirrored = set(uapi.uapi_constants())
    missing = sorted(in_header - mirrored)
    extra = sorted(mirrored - in_header)
    assert not missing, f"in uapi/vgpu.h but missing from vgpu/uapi.py: {missing}"
    assert not extra, f"in vgpu/uapi.py but not in uapi/vgpu.h: {extra}"


def _c_program() -> str:
    lines = ["#include <stdio.h>", '#include "vgpu.h"', "int main(void) {"]
    for name, val in sorted(uapi.uapi_constants().items()):
        if isinstance(val, str):
            lines.append(f'  printf("S %s %s\\n", "{name}", {name});')
        else:
            lines.append(f'  printf("I %s %lld\\n", "{name}", (long long)({name}));')
    lines.append("  return 0;\n}")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def c_values(tmp_path_factory):
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        pytest.skip("gcc not available: C value comparison skipped")
    d = tmp_path_factory.mktemp("uapi")
    src, exe = d / "uapi.c", d / "uapi"
    src.write_text(_c_program())
    r = subprocess.run([gcc, "-std=gnu11", "-Wall", "-Werror", "-o", str(exe), str(src),
                        "-I", str(HEADER.parent)], capture_output=True, text=True)
    assert r.returncode == 0, f"compiling against uapi/vgpu.h failed:\n{r.stderr[-6000:]}"
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    vals = {}
    for line in out.splitlines():
        kind, name, value = line.split(" ", 2)
        vals[name] = value if kind == "S" else int(value)
    return vals


def test_values_match_c(c_values):
    consts = uapi.uapi_constants()
    assert set(c_values) == set(consts)
    bad = [f"{n}: python {v!r} != C {c_values[n]!r}" for n, v in sorted(consts.items())
           if c_values[n] != v]
    assert not bad, "\n".join(bad)


def test_attribute_tables_follow_enums():
    assert [getattr(uapi, n) for n in uapi.SLICE_ATTRS] == list(range(uapi.VGPU_A_MAX + 1))
    assert [getattr(uapi, n) for n in uapi.GPU_ATTRS] == list(range(uapi.VGPU_GPU_A_MAX + 1))
    assert [getattr(uapi, n) for n in uapi.LIST_ATTRS] == list(range(uapi.VGPU_A_LIST_MAX + 1))
    assert [getattr(uapi, n) for n in uapi.AUDIT_ATTRS] == list(range(uapi.VGPU_AUDIT_A_MAX + 1))
    assert not set(uapi.SLICE_ATTRS) & set(uapi.LIST_ATTRS)


def test_audit_names_follow_enums():
    """The names the API and the allow-list files give kinds and verdicts
    follow enum vgpu_audit_kind / vgpu_audit_verdict."""
    assert [uapi.AUDIT_KINDS.index(k) for k in ("escape", "class", "control", "uvm")] == [
        uapi.VGPU_AUDIT_ESCAPE, uapi.VGPU_AUDIT_CLASS, uapi.VGPU_AUDIT_CONTROL,
        uapi.VGPU_AUDIT_UVM]
    assert len(uapi.AUDIT_KINDS) == uapi.__VGPU_AUDIT_KIND_MAX
    assert uapi.AUDIT_VERDICT_NAMES == {
        uapi.VGPU_AUDIT_FORWARD: "forward", uapi.VGPU_AUDIT_REWRITE: "rewrite",
        uapi.VGPU_AUDIT_VIRTUALISE: "virtualise", uapi.VGPU_AUDIT_REFUSE: "refuse",
        uapi.VGPU_AUDIT_NOT_IMPLEMENTED: "not-implemented"}
    assert len(uapi.AUDIT_VERDICT_NAMES) == uapi.__VGPU_AUDIT_VERDICT_MAX


def test_kernel_client_maps_every_attribute():
    """vgpu/kernel.py's pyroute2 nla_maps name every attribute of the header."""
    from vgpu import kernel
    assert [n for n, _t in kernel.vgpumsg.nla_map] == uapi.SLICE_ATTRS
    assert [n for n, _t in kernel.vgpumsg.slice_list.nla_map] == uapi.LIST_ATTRS
    assert [n for n, _t in kernel.vgpumsg.slice_list.gpu.nla_map] == uapi.GPU_ATTRS
    assert [n for n, _t in kernel.vgpumsg.slice_list.audit_entry.nla_map] == uapi.AUDIT_ATTRS
    # and gives each an explicit type (a new attribute would decode as hex)
    assert list(kernel.SLICE_ATTR_TYPES) == uapi.SLICE_ATTRS
    assert list(kernel.LIST_ATTR_TYPES) == uapi.LIST_ATTRS
    assert list(kernel.GPU_ATTR_TYPES) == uapi.GPU_ATTRS
    assert list(kernel.AUDIT_ATTR_TYPES) == uapi.AUDIT_ATTRS
