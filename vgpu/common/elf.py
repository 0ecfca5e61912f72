"""ELF facts the driver files need, read with struct only (the OCI hook
imports this: no subprocess, no dataclasses on its path): a shared
object's DT_SONAME, and whether an executable has a program interpreter."""
from __future__ import annotations

import struct

__all__ = ["LDCONFIG", "elf_is_static", "elf_soname"]

#: the host's ldconfig: a fixed path, never looked up on PATH
LDCONFIG = "/sbin/ldconfig"

_PT_LOAD, _PT_DYNAMIC, _PT_INTERP = 1, 2, 3
_DT_NULL, _DT_STRTAB, _DT_SONAME = 0, 5, 14


def _elf(f) -> tuple[str, list[tuple[int, int, int, int]]] | None:
    """(endianness, program headers (type, offset, vaddr, filesz)) of a
    64-bit ELF file; None for anything else."""
    hdr = f.read(64)
    if len(hdr) < 64 or hdr[:4] != b"\x7fELF" or hdr[4] != 2:
        return None
    e = "<" if hdr[5] == 1 else ">"
    phoff, = struct.unpack_from(e + "Q", hdr, 32)
    phentsize, phnum = struct.unpack_from(e + "HH", hdr, 54)
    if phentsize < 56 or phnum > 256:
        return None
    f.seek(phoff)
    raw = f.read(phentsize * phnum)
    if len(raw) < phentsize * phnum:
        return None
    phs = []
    for i in range(phnum):
        p_type, _flags, off, vaddr, _paddr, filesz = struct.unpack_from(e + "IIQQQQ", raw,
                                                                       i * phentsize)
        phs.append((p_type, off, vaddr, filesz))
    return e, phs


def elf_soname(path: str) -> str | None:
    """DT_SONAME of the 64-bit ELF shared object ``path``; None when it has
    none or is not one (read from the file's dynamic segment: the string
    table's address is mapped to a file offset through the PT_LOADs)."""
    try:
        with open(path, "rb") as f:
            got = _elf(f)
            if got is None:
                return None
            e, phs = got
            dyn = next((p for p in phs if p[0] == _PT_DYNAMIC), None)
            if dyn is None or dyn[3] > 1 << 20:
                return None
            f.seek(dyn[1])
            raw = f.read(dyn[3])
            strtab = soname = None
            for i in range(0, len(raw) - 15, 16):
                tag, val = struct.unpack_from(e + "qQ", raw, i)
                if tag == _DT_NULL:
                    break
                if tag == _DT_STRTAB:
                    strtab = val
                elif tag == _DT_SONAME:
                    soname = val
            if strtab is None or soname is None:
                return None
            off = next((o + strtab - v for t, o, v, sz in phs
                        if t == _PT_LOAD and v <= strtab < v + sz), None)
            if off is None:
                return None
            f.seek(off + soname)
            name = f.read(256).split(b"\0", 1)[0].decode("ascii", "replace")
    except (OSError, struct.error):
        return None
    return name if name and "/" not in name and name not in (".", "..") else None


def elf_is_static(path: str) -> bool:
    """Whether ``path`` is a 64-bit ELF executable with no program
    interpreter (static or static-pie: it loads no library of anyone's)."""
    try:
        with open(path, "rb") as f:
            got = _elf(f)
    except OSError:
        return False
    return got is not None and not any(p[0] == _PT_INTERP for p in got[1])
