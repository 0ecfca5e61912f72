"""vgpu/abi/nvabi.py against kmod/include/nvabi.h and NVIDIA 595.45.04's layouts.

One source of truth: the C header.  The first group of tests generates a C
program from the Python definitions (every struct's sizeof, every field's
offsetof and size, nested union members included, every constant's value and
the ioctl numbers), compiles it with gcc against nvabi.h, runs it and compares
with what ctypes says.  The second group parses
tests/data/nvidia-595-abi-offsets.txt (compiled from NVIDIA's own headers)
and checks every line that names a structure or field we mirror.
"""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

from vgpu.abi import nvabi

HEADER = ROOT / "kmod" / "include" / "nvabi.h"
DATA_595 = ROOT / "tests" / "data" / "nvidia-595-abi-offsets.txt"

# Structures that nvabi.h defines but Python deliberately does not mirror:
# kernel-only types of the exported RM entry point (pointers to functions and
# kernel objects; no user-space caller ever builds them).
HEADER_ONLY_STRUCTS = {
    "nv_gpu_info_t",
    "nvidia_modeset_system_info_t",
    "nvidia_modeset_callbacks_t",
    "nvidia_modeset_rm_ops_t",
}

# Object-like macros in nvabi.h that are not ABI constants.
HEADER_ONLY_MACROS = {"VGPU_NVABI_H", "NV_ALIGN8"}

# Lines of the 595 data that name structures which neither nvabi.h nor
# nvabi.py mirrors (UVM commands the project does not build yet).  Keep this
# explicit and short: a new unmirrored name in the data fails the test.
SKIPPED_595_STRUCTS = {
    "UVM_CREATE_RANGE_GROUP_PARAMS",
    "UVM_PAGEABLE_MEM_ACCESS_PARAMS",
    "UVM_ALLOC_SEMAPHORE_POOL_PARAMS",
    "UVM_SET_PREFERRED_LOCATION_PARAMS",
    "UVM_ALLOC_DEVICE_P2P_PARAMS",
}


# ---------------------------------------------------------------- helpers
def _field_type(cls, name):
    for f in cls._fields_:
        if f[0] == name:
            return f[1]
    raise KeyError(name)


def _is_aggregate(t) -> bool:
    return isinstance(t, type) and issubclass(t, (ctypes.Structure, ctypes.Union))


def walk_fields(cls, prefix="", base=0):
    """Yield (dotted path, offset, size) for every field, recursing into
    nested structures and unions (not into arrays)."""
    for f in cls._fields_:
        name, ftype = f[0], f[1]
        desc = getattr(cls, name)
        path = f"{prefix}{name}"
        off = base + desc.offset
        yield path, off, desc.size
        if _is_aggregate(ftype):
            yield from walk_fields(ftype, path + ".", off)


def resolve(cls, dotted: str):
    """(offset, size) of a dotted field path inside cls."""
    off = 0
    cur = cls
    size = None
    for comp in dotted.split("."):
        if not _is_aggregate(cur):
            raise KeyError(dotted)
        desc = getattr(cur, comp, None)
        if desc is None or not hasattr(desc, "offset"):
            raise KeyError(dotted)
        off += desc.offset
        size = desc.size
        cur = _field_type(cur, comp)
    return off, size


def header_text() -> str:
    return HEADER.read_text()


def header_macros(text: str) -> dict[str, str]:
    """Object-like #defines of the header: name -> replacement text."""
    out = {}
    for m in re.finditer(r"^[ \t]*#[ \t]*define[ \t]+(\w+)(\(?)(.*)$", text, re.M):
        if m.group(2) == "(":
            continue  # function-like
        out[m.group(1)] = m.group(3).strip()
    return out


def header_typedefs(text: str) -> set[str]:
    """Names of the header's struct/union typedefs and their aliases."""
    names = set(re.findall(r"^\}\s*(\w+)\s*;", text, re.M))
    for m in re.finditer(r"^typedef\s+(\w+)\s+(\w+)\s*;", text, re.M):
        if m.group(1) in names:
            names.add(m.group(2))
    return names


# ------------------------------------------------------- Python-side sanity
def test_python_registry_is_complete_against_header():
    text = header_text()
    py_structs = nvabi.abi_structs()
    c_structs = header_typedefs(text)
    problems = []
    for name in sorted(set(py_structs) - c_structs):
        problems.append(f"struct {name}: defined in nvabi.py but not in nvabi.h")
    for name in sorted(c_structs - set(py_structs) - HEADER_ONLY_STRUCTS):
        problems.append(f"struct {name}: defined in nvabi.h but not mirrored in nvabi.py "
                        f"(mirror it or add it to HEADER_ONLY_STRUCTS)")
    for name in sorted(HEADER_ONLY_STRUCTS - c_structs):
        problems.append(f"HEADER_ONLY_STRUCTS names {name}, which nvabi.h no longer has")

    macros = header_macros(text)
    py_consts = nvabi.abi_constants()
    for name in sorted(set(py_consts) - set(macros)):
        problems.append(f"constant {name}: in nvabi.py but not #defined in nvabi.h")
    for name in sorted(set(macros) - set(py_consts) - HEADER_ONLY_MACROS):
        problems.append(f"constant {name}: #defined in nvabi.h but missing from nvabi.py")
    assert not problems, "\n".join(problems)


def test_escape_table_sizes():
    """The escape table's sizes are the ones nv-abi.md lists (NUMA_INFO: nv-ioctl-numa.h)."""
    expected = {
        200: 72, 201: 4, 206: 16, 207: 16, 209: 12, 210: 72, 211: 16, 212: 4,
        214: 8, 215: 560, 217: 2608, 218: 8, 0x27: 56, 0x28: 20, 0x29: 16, 0x2A: 32,
        0x2B: 48, 0x34: 28, 0x35: 24, 0x41: 56, 0x4A: 184, 0x4E: 56, 0x4F: 32,
        0x54: 56, 0x57: 64, 0x58: 48, 0x5E: 40,
    }
    got = {nr: nvabi.escape_size(nr) for nr in nvabi.ESCAPES}
    assert got == expected


def test_ioctl_encoding_known_values():
    # _IOWR('F', 0x2B, 48) and _IOWR('F', 211, 16), computed by hand.
    assert nvabi.nv_ioctl(0x2B, 48) == 0xC030462B
    assert nvabi.nv_ioctl(211, 16) == 0xC01046D3
    cmd = nvabi.nv_ioctl(0x4A, 184)
    assert (nvabi.ioc_nr(cmd), nvabi.ioc_size(cmd), nvabi.ioc_type(cmd)) == (0x4A, 184, ord("F"))
    with pytest.raises(ValueError):
        nvabi.nv_ioctl(0x2A, 1 << 14)
    with pytest.raises(ValueError):
        nvabi.nv_ioctl(256, 8)


def test_status_names():
    assert nvabi.status_name(0x51) == "NV_ERR_NO_MEMORY"
    assert nvabi.status_name(0) == "NV_OK"
    assert nvabi.status_name(0x1234) == "NV_STATUS_0x1234"


# ------------------------------------------------------------- C vs Python
def _c_program() -> str:
    lines = [
        "#include <stdio.h>",
        "#include <stddef.h>",
        "#include <linux/ioctl.h>",
        '#include "nvabi.h"',
        "int main(void) {",
    ]
    for name, cls in sorted(nvabi.abi_structs().items()):
        lines.append(f'  printf("S %s %zu\\n", "{name}", sizeof({name}));')
        for path, _off, _size in walk_fields(cls):
            lines.append(
                f'  printf("F %s %s %zu %zu\\n", "{name}", "{path}", '
                f"offsetof({name}, {path}), sizeof((({name} *)0)->{path}));")
    for name in sorted(nvabi.abi_constants()):
        lines.append(f'  printf("C %s %lld\\n", "{name}", (long long)({name}));')
    for nr, (_n, t, _d) in sorted(nvabi.ESCAPES.items()):
        size = ctypes.sizeof(t)
        lines.append(f'  printf("I {nr} {size} %lu\\n", (unsigned long)_IOC(_IOC_READ | _IOC_WRITE, \'F\', {nr}, {size}));')
    lines.append("  return 0;\n}")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def c_facts(tmp_path_factory):
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        pytest.skip("gcc not available: C layout comparison skipped")
    d = tmp_path_factory.mktemp("abi")
    src = d / "abi.c"
    exe = d / "abi"
    src.write_text(_c_program())
    r = subprocess.run([gcc, "-std=gnu11", "-Wall", "-o", str(exe), str(src),
                        "-I", str(HEADER.parent)], capture_output=True, text=True)
    assert r.returncode == 0, f"compiling against nvabi.h failed:\n{r.stderr[-6000:]}"
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    facts = {"S": {}, "F": {}, "C": {}, "I": {}}
    for line in out.splitlines():
        kind, *rest = line.split()
        if kind == "S":
            facts["S"][rest[0]] = int(rest[1])
        elif kind == "F":
            facts["F"][(rest[0], rest[1])] = (int(rest[2]), int(rest[3]))
        elif kind == "C":
            facts["C"][rest[0]] = int(rest[1])
        elif kind == "I":
            facts["I"][(int(rest[0]), int(rest[1]))] = int(rest[2])
    return facts


def test_struct_sizes_match_c(c_facts):
    bad = [f"sizeof({n}): python {ctypes.sizeof(c)} != C {c_facts['S'][n]}"
           for n, c in sorted(nvabi.abi_structs().items())
           if ctypes.sizeof(c) != c_facts["S"][n]]
    assert not bad, "\n".join(bad)


def test_field_offsets_and_sizes_match_c(c_facts):
    bad = []
    count = 0
    for name, cls in sorted(nvabi.abi_structs().items()):
        for path, off, size in walk_fields(cls):
            count += 1
            c_off, c_size = c_facts["F"][(name, path)]
            if off != c_off:
                bad.append(f"{name}.{path}: offset python {off} != C {c_off}")
            if size != c_size:
                bad.append(f"{name}.{path}: size python {size} != C {c_size}")
    assert count > 300
    assert not bad, "\n".join(bad)


def test_constants_match_c(c_facts):
    bad = [f"{n}: python {v:#x} != C {c_facts['C'][n]:#x}"
           for n, v in sorted(nvabi.abi_constants().items()) if v != c_facts["C"][n]]
    assert not bad, "\n".join(bad)


def test_ioctl_numbers_match_c(c_facts):
    bad = [f"escape {nr} size {size}: python {nvabi.nv_ioctl(nr, size):#x} != C {v:#x}"
           for (nr, size), v in sorted(c_facts["I"].items()) if nvabi.nv_ioctl(nr, size) != v]
    assert not bad, "\n".join(bad)


# ------------------------------------------------------------ NVIDIA 595
_SIZE_RE = re.compile(r"^sizeof\((\w+)\)\s*=\s*(\d+)\s*$")
_FIELD_RE = re.compile(r"^\s+(\w+)\.([\w.]+)\s*@\s*(\d+)\s*\(size\s+(\d+)\)\s*$")
_CONST_RE = re.compile(r"^(\w+)\s*=\s*(\w+)\s*$")


def parse_595():
    sizes, fields, consts = [], [], []
    for lineno, line in enumerate(DATA_595.read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if m := _SIZE_RE.match(line):
            sizes.append((lineno, m.group(1), int(m.group(2))))
        elif m := _FIELD_RE.match(line):
            fields.append((lineno, m.group(1), m.group(2), int(m.group(3)), int(m.group(4))))
        elif m := _CONST_RE.match(line):
            consts.append((lineno, m.group(1), int(m.group(2), 0)))
        else:
            raise AssertionError(f"{DATA_595.name}:{lineno}: unparsable line {line!r}")
    return sizes, fields, consts


def test_595_data_parses_and_is_substantial():
    sizes, fields, consts = parse_595()
    assert len(sizes) >= 55 and len(fields) >= 160 and consts


def test_595_skip_list_is_exact():
    sizes, fields, _ = parse_595()
    named = {s[1] for s in sizes} | {f[1] for f in fields}
    structs = nvabi.abi_structs()
    stale = sorted(n for n in SKIPPED_595_STRUCTS if n not in named or n in structs)
    assert not stale, f"SKIPPED_595_STRUCTS entries that are mirrored or absent from the data: {stale}"
    unknown = sorted(n for n in named if n not in structs and n not in SKIPPED_595_STRUCTS)
    assert not unknown, f"595 data names structures neither mirrored nor listed as skipped: {unknown}"


def test_595_sizes():
    sizes, _, _ = parse_595()
    structs = nvabi.abi_structs()
    bad = []
    checked = 0
    for lineno, name, n in sizes:
        if name in SKIPPED_595_STRUCTS:
            continue
        checked += 1
        got = ctypes.sizeof(structs[name])
        if got != n:
            bad.append(f"line {lineno}: sizeof({name}) NVIDIA 595 {n} != python {got}")
    assert checked >= 50
    assert not bad, "\n".join(bad)


def test_595_fields():
    _, fields, _ = parse_595()
    structs = nvabi.abi_structs()
    bad = []
    checked = 0
    for lineno, name, path, off, size in fields:
        if name in SKIPPED_595_STRUCTS:
            continue
        try:
            got_off, got_size = resolve(structs[name], path)
        except KeyError:
            bad.append(f"line {lineno}: {name}.{path} is not a field of the python mirror")
            continue
        checked += 1
        if got_off != off:
            bad.append(f"line {lineno}: {name}.{path} offset NVIDIA 595 {off} != python {got_off}")
        if got_size != size:
            bad.append(f"line {lineno}: {name}.{path} size NVIDIA 595 {size} != python {got_size}")
    assert checked >= 160
    assert not bad, "\n".join(bad)


def test_595_constants():
    _, _, consts = parse_595()
    bad = []
    for lineno, name, value in consts:
        got = getattr(nvabi, name, None)
        if got != value:
            bad.append(f"line {lineno}: {name} NVIDIA 595 {value} != python {got}")
    assert not bad, "\n".join(bad)
